//! Client TCP: the accept loop and each connection's read loop.

use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::{Frame, Notice, ReasonCode};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::admission::{Admission, Refusal};
use crate::outbox::{write_stream, Outbox};
use crate::server::Shared;
use crate::session::{wire_error_notice, Next, Session, Transport};

const READ_CHUNK: usize = 64 * 1024;

/// The largest frame read before HELLO: a HELLO is a few bytes, and an unknown peer must not
/// make the broker buffer megabytes.
const PRE_HELLO_MAX_FRAME: usize = 4096;

/// Accepts connections until shutdown, within the connection limits.
pub async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let limits = &shared.config.limits;
    let fds = crate::admission::fd_limit();
    let admission = Admission::new(limits.max_connections, limits.max_connections_per_address, fds);
    if admission.max() < limits.max_connections {
        info!(
            max_connections = admission.max(),
            open_file_limit = fds.unwrap_or(0),
            "limits.max_connections capped below the open-file limit (raise it with ulimit -n)"
        );
    }
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match admission.admit(peer.ip()) {
                    Ok(place) => {
                        debug!(%peer, "client connected");
                        let shared2 = Arc::clone(&shared);
                        shared.tasks.spawn(async move {
                            connection(stream, shared2).await;
                            drop(place);
                        });
                    }
                    Err(refusal) => {
                        shared.metrics.protocol_error(ReasonCode::LimitExceeded);
                        shared.tasks.spawn(refuse(stream, refusal));
                    }
                },
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Says why in an ERROR frame and closes; a client that does not read it is not waited for.
async fn refuse(mut stream: TcpStream, refusal: Refusal) {
    use tokio::io::AsyncWriteExt;
    let frame = Frame::Error(Notice::new(ReasonCode::LimitExceeded, refusal.to_string()));
    if let Ok(bytes) = frame.to_bytes() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.write_all(&bytes)).await;
    }
}

async fn connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let outbox = Outbox::new(shared.live.get().slow_consumer, shared.metrics.clone());
    shared.tasks.spawn(write_stream(writer, Arc::clone(&outbox)));
    let mut session = Session::new(Transport::Tcp, Arc::clone(&outbox), Arc::clone(&shared));
    let max_frame = shared.config.limits.max_frame;
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let handshake = tokio::time::sleep(shared.config.limits.handshake_timeout);
    tokio::pin!(handshake);
    'read: loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            _ = outbox.done.cancelled() => break 'read,
            _ = shared.shutdown.cancelled() => {
                outbox.close_with(&Frame::Disconnect(Notice::new(ReasonCode::ShuttingDown, "broker shutting down")));
                break 'read;
            }
            () = &mut handshake, if !session.is_greeted() => {
                let notice = Notice::new(ReasonCode::HandshakeRequired, "no HELLO within the handshake timeout");
                shared.metrics.protocol_error(ReasonCode::HandshakeRequired);
                outbox.close_with(&Frame::Error(notice));
                break 'read;
            }
            read = reader.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    outbox.abort();
                    break 'read;
                }
                Ok(_) => {}
            }
        }
        let read_at = std::time::Instant::now();
        loop {
            let limit = if session.is_greeted() { max_frame } else { PRE_HELLO_MAX_FRAME };
            match Frame::decode(&mut buf, limit) {
                Ok(Some(frame)) => match session.handle(frame) {
                    Next::Continue => {}
                    Next::Close => {
                        session.finish_batch(read_at);
                        outbox.close_with(&Frame::Disconnect(Notice::new(ReasonCode::Normal, "goodbye")));
                        break 'read;
                    }
                    Next::Refuse(notice) => {
                        session.finish_batch(read_at);
                        outbox.close_with(&Frame::Error(notice));
                        break 'read;
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    session.finish_batch(read_at);
                    let notice = wire_error_notice(&e);
                    if let Some(reason) = notice.reason() {
                        shared.metrics.protocol_error(reason);
                    }
                    outbox.close_with(&Frame::Error(notice));
                    break 'read;
                }
            }
        }
        session.finish_batch(read_at);
        session.hold_back_for_congestion().await;
        // A client that asks (PING) without reading the answers waits here, on TCP.
        tokio::select! {
            () = outbox.wait_control_room() => {}
            () = shared.shutdown.cancelled() => {}
            () = outbox.done.cancelled() => {}
        }
    }
    // Subscriptions go with the session, before the writer has finished flushing.
    drop(session);
}
