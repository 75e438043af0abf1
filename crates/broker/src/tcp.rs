//! Client TCP: the accept loop and each connection's read loop.

use std::sync::Arc;

use tidings_wire::{Frame, Notice, ReasonCode};
use tokio::io::AsyncWrite;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::admission::{Admission, Refusal};
use crate::context::Context;
use crate::outbox::{write_stream, Outbox};
use crate::read_buffer::{until, ReadBuffer, KEEP_EMPTY_BUFFER};
use crate::session::{wire_error_notice, Next, Session, Transport};
use crate::tls::{Accepted, ReadSide, Tls, TlsRead};

/// The largest frame read before HELLO: a HELLO is a few bytes, and an unknown peer must not
/// make the broker buffer megabytes.
const PRE_HELLO_MAX_FRAME: usize = 4096;

/// Accepts connections until shutdown, within the connection limits.
/// With `tls`, every connection must open with a TLS handshake (see [`crate::tls`]).
pub async fn accept_loop(listener: TcpListener, shared: Arc<Context>, tls: Option<Arc<Tls>>) {
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
    if admission.per_address() >= admission.max() {
        warn!(
            max_connections = admission.max(),
            max_connections_per_address = admission.per_address(),
            "limits.max_connections_per_address is not below the connections in force: one address can take every place"
        );
    }
    let mut pace = Pace::new(limits.max_connection_rate);
    loop {
        let ready = pace.ready();
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            () = tokio::time::sleep_until(pace.next), if !ready => continue,
            accepted = listener.accept(), if ready => match accepted {
                Ok((stream, peer)) => {
                    pace.taken();
                    match admission.admit(peer.ip()) {
                        Ok(place) => {
                            debug!(%peer, "client connected");
                            let shared2 = Arc::clone(&shared);
                            let tls = tls.clone();
                            shared.tasks.spawn(async move {
                                open(stream, shared2, tls).await;
                                drop(place);
                            });
                            // Let the sessions already running have their turn: otherwise a burst
                            // of connections is accepted and set up for tokio's whole cooperative
                            // budget (128 accepts, 10-15 ms) before anything else on this thread
                            // runs, and a neighbour's round trip waits that long (4,000 idle
                            // connections opened at once put its p99 at 9-16 ms against 0.2 ms).
                            tokio::task::yield_now().await;
                        }
                        Err(refusal) => {
                            shared.metrics.protocol_error(ReasonCode::LimitExceeded);
                            shared.tasks.spawn(refuse(stream, refusal));
                        }
                    }
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

/// Paces accepts to `[limits] max_connection_rate` (the generic cell rate algorithm: each
/// accept moves a theoretical arrival time on by one interval; a burst of a twentieth of a
/// second is allowed). Hand-written: a dozen lines, where a rate-limiting crate would bring a
/// clock abstraction and a keyed store the accept loop does not need.
struct Pace {
    /// Time per connection (zero: no bound).
    every: std::time::Duration,
    burst: std::time::Duration,
    /// When the next accept is due at the earliest, less the burst.
    next: tokio::time::Instant,
}

impl Pace {
    fn new(rate: u32) -> Pace {
        let every = if rate == 0 { std::time::Duration::ZERO } else { std::time::Duration::from_secs(1) / rate };
        let (burst, now) = (every * (rate / 20).max(1), tokio::time::Instant::now());
        Pace { every, burst, next: now.checked_sub(burst).unwrap_or(now) }
    }

    /// Whether an accept may happen now (else not before `next`).
    fn ready(&mut self) -> bool {
        if self.every.is_zero() {
            return true;
        }
        let now = tokio::time::Instant::now();
        let earliest = now.checked_sub(self.burst).unwrap_or(now);
        self.next = self.next.max(earliest);
        self.next <= now
    }

    /// An accept happened.
    fn taken(&mut self) {
        self.next += self.every;
    }
}

/// Names a client whose frame was refused (its connection closes), at most once a second for
/// the whole broker: a flood of bad clients is counted in `tidings_protocol_errors_total`, not
/// written to the log line by line.
fn refused(outbox: &Outbox, notice: &Notice) {
    static LAST: parking_lot::Mutex<Option<std::time::Instant>> = parking_lot::Mutex::new(None);
    let mut last = LAST.lock();
    if last.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(1)) {
        *last = Some(std::time::Instant::now());
        drop(last);
        let client = outbox.client.lock().clone();
        warn!(%client, reason = notice.reason().map_or("?", |r| r.name()), text = %notice.text, "refused a frame; closing the connection");
    }
}

/// Closes a connection that passed one of the broker's limits, with ERROR `limit_exceeded`.
fn limit_exceeded(shared: &Context, outbox: &Outbox, text: &str) {
    let notice = Notice::new(ReasonCode::LimitExceeded, text);
    shared.metrics.protocol_error(ReasonCode::LimitExceeded);
    refused(outbox, &notice);
    outbox.close_with(&Frame::Error(notice));
}

/// Says why in an ERROR frame and closes; a client that does not read it is not waited for.
async fn refuse(mut stream: TcpStream, refusal: Refusal) {
    use tokio::io::AsyncWriteExt;
    let frame = Frame::Error(Notice::new(ReasonCode::LimitExceeded, refusal.to_string()));
    if let Ok(bytes) = frame.to_bytes() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.write_all(&bytes)).await;
    }
}

/// Serves a connection: plaintext, or TLS once its handshake passed. A plaintext client on a
/// TLS listener is told so in a tidings ERROR (it is waiting for WELCOME) and closed.
async fn open(stream: TcpStream, shared: Arc<Context>, tls: Option<Arc<Tls>>) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().ok();
    let Some(tls) = tls else {
        let (reader, writer) = stream.into_split();
        return connection(reader, writer, peer, shared, None).await;
    };
    match tls.accept(stream, shared.config.limits.handshake_timeout).await {
        Accepted::Tls(stream) => {
            let certificate = crate::tls::client_names(&stream);
            let (reader, writer) = tokio::io::split(*stream);
            connection(TlsRead::new(reader), writer, peer, shared, certificate).await;
        }
        Accepted::Plaintext(stream) => {
            shared.metrics.protocol_error(ReasonCode::HandshakeRequired);
            let text = "this listener requires TLS: connect with tls://HOST:PORT and the broker's CA (--tls-ca FILE)";
            say_and_close(stream, &Frame::Error(Notice::new(ReasonCode::HandshakeRequired, text))).await;
        }
        Accepted::Failed => {}
    }
}

/// Writes `frame` and closes orderly. What the client sent is read first and after: closing
/// with unread bytes resets the connection, and a reset can discard the ERROR before the
/// client reads it. Bounded to a second.
async fn say_and_close(mut stream: TcpStream, frame: &Frame) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut scrap = [0u8; 4096];
    let _ = stream.try_read(&mut scrap);
    let Ok(bytes) = frame.to_bytes() else { return };
    let exchange = async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await?;
        while stream.read(&mut scrap).await? > 0 {}
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), exchange).await;
}

/// Reads and serves one client's frames; `certificate` holds the names of its verified TLS
/// client certificate, its login when HELLO carries no credentials.
async fn connection<R, W>(
    mut reader: R,
    writer: W,
    stream_peer: Option<std::net::SocketAddr>,
    shared: Arc<Context>,
    certificate: Option<Vec<String>>,
) where
    R: ReadSide,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let outbox = Outbox::new(shared.live.get().slow_consumer, shared.metrics.clone(), &shared.budget);
    shared.tasks.spawn(write_stream(writer, Arc::clone(&outbox)));
    if let Some(peer) = stream_peer {
        *outbox.client.lock() = peer.to_string();
    }
    let mut session = Session::new(Transport::Tcp, Arc::clone(&outbox), Arc::clone(&shared));
    session.certificate = certificate;
    let max_frame = shared.config.limits.max_frame;
    let limits = &shared.config.limits;
    let mut read = ReadBuffer::new(Arc::clone(&shared.budget), limits.frame_timeout);
    let handshake = tokio::time::sleep(shared.config.limits.handshake_timeout);
    tokio::pin!(handshake);
    let release = tokio::time::sleep(KEEP_EMPTY_BUFFER);
    tokio::pin!(release);
    let mut decoded = 0;
    // What the client is told of the cell: sent again when it changes (see `Session::hello`).
    let mut servers = shared.core.cluster.servers();
    let mut watching = true;
    'read: loop {
        if read.settle(decoded) {
            release.as_mut().reset(tokio::time::Instant::now() + KEEP_EMPTY_BUFFER);
        }
        decoded = 0;
        tokio::select! {
            biased;
            _ = outbox.done.cancelled() => break 'read,
            _ = shared.shutdown.cancelled() => {
                outbox.close_with(&Frame::Disconnect(Notice::new(ReasonCode::ShuttingDown, "broker shutting down")));
                break 'read;
            }
            () = crate::login::revoked(&mut session) => {
                let notice = Notice::new(ReasonCode::NotAuthenticated, "the user was removed or changed by a reload; log in again");
                outbox.close_with(&Frame::Disconnect(notice));
                break 'read;
            }
            () = &mut handshake, if !session.is_greeted() => {
                let notice = Notice::new(ReasonCode::HandshakeRequired, "no HELLO within the handshake timeout");
                shared.metrics.protocol_error(ReasonCode::HandshakeRequired);
                outbox.close_with(&Frame::Error(notice));
                break 'read;
            }
            changed = servers.changed(), if watching && session.hears_servers() => {
                match changed {
                    Ok(()) => {
                        let told = servers.borrow_and_update().clone(); // the watch's lock let go first
                        session.tell_servers(&told);
                    }
                    Err(_) => watching = false,
                }
                continue 'read;
            }
            () = &mut release, if read.releasing => {
                read.release();
                continue 'read;
            }
            () = until(read.frame_deadline()) => {
                // Half a frame held memory for as long as the client liked (see `read_buffer`).
                limit_exceeded(&shared, &outbox, "a frame did not arrive whole within limits.frame_timeout");
                break 'read;
            }
            ready = reader.ready() => {
                if ready.is_err() {
                    outbox.abort();
                    break 'read;
                }
                let Ok(room) = read.prepare() else {
                    limit_exceeded(&shared, &outbox, "the broker's memory for frames being read (limits.max_queued_bytes) is spent");
                    break 'read;
                };
                match reader.try_read_buf(&mut read.buf) {
                    Ok(0) => {
                        outbox.abort();
                        break 'read;
                    }
                    Ok(n) => read.after_read(n, room),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue 'read,
                    Err(_) => {
                        outbox.abort();
                        break 'read;
                    }
                }
            }
        }
        let read_at = std::time::Instant::now();
        let mut slice = crate::slice::Slice::new();
        loop {
            let limit = if session.is_greeted() { max_frame } else { PRE_HELLO_MAX_FRAME };
            match Frame::decode(&mut read.buf, limit) {
                Ok(Some(frame)) => {
                    decoded += 1;
                    if let Frame::Hello(hello) = &frame {
                        // Off the event loop and within the login budget (see `security`).
                        if let Err(failure) = session.login(crate::security::credentials(&hello.auth)).await {
                            let notice = Notice::new(ReasonCode::NotAuthenticated, crate::security::refusal(failure));
                            shared.metrics.protocol_error(ReasonCode::NotAuthenticated);
                            outbox.close_with(&Frame::Error(notice));
                            break 'read;
                        }
                    }
                    match session.handle(frame) {
                        Next::Continue if slice.spent() => {
                            // What this slice queued goes out before others take their turn.
                            session.finish_batch(read_at);
                            tokio::task::yield_now().await;
                        }
                        Next::Continue => {}
                        Next::Close => {
                            session.finish_batch(read_at);
                            outbox.close_with(&Frame::Disconnect(Notice::new(ReasonCode::Normal, "goodbye")));
                            break 'read;
                        }
                        Next::Refuse(notice) => {
                            session.finish_batch(read_at);
                            refused(&outbox, &notice);
                            outbox.close_with(&Frame::Error(notice));
                            break 'read;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    session.finish_batch(read_at);
                    let notice = wire_error_notice(&e);
                    refused(&outbox, &notice);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn accepts_are_paced_to_the_rate_after_a_burst_of_a_twentieth_of_a_second() {
        let mut pace = Pace::new(1000);
        let start = tokio::time::Instant::now();
        let mut accepted = 0;
        while start.elapsed() < std::time::Duration::from_secs(1) {
            if pace.ready() {
                pace.taken();
                accepted += 1;
            } else {
                tokio::time::sleep_until(pace.next).await;
            }
        }
        // 50 at once, then one a millisecond.
        assert!((1040..=1060).contains(&accepted), "{accepted} accepted in a second at 1,000/s");
        tokio::time::advance(std::time::Duration::from_secs(10)).await;
        let burst = std::iter::from_fn(|| pace.ready().then(|| pace.taken())).take(1000).count();
        assert_eq!(burst, 51, "after a quiet spell: the one due now and the burst, not ten seconds' worth");
        let mut unbounded = Pace::new(0);
        assert!((0..100_000).all(|_| {
            let ready = unbounded.ready();
            unbounded.taken();
            ready
        }));
    }
}
