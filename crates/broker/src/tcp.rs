//! Client TCP: the accept loop and each connection's read loop.

use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::{Frame, Notice, ReasonCode};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::outbox::{write_stream, Outbox};
use crate::server::Shared;
use crate::session::{wire_error_notice, Next, Session, Transport};

const READ_CHUNK: usize = 64 * 1024;

/// Accepts connections until shutdown.
pub async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    debug!(%peer, "client connected");
                    let shared2 = Arc::clone(&shared);
                    shared.tasks.spawn(connection(stream, shared2));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
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
            match Frame::decode(&mut buf, max_frame) {
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
