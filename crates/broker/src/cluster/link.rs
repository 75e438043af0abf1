//! The link tasks: the cluster listener, one dialler per configured peer, each connection's
//! handshake and read loop, and the ticker that drives the router's timers. They only carry
//! bytes and call [`Cluster`](super::Cluster); every decision is the router's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tidings_route::{BrokerName, Input, ReconnectBackoff};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use super::frame::{self, Handshake, PeerFrame};
use super::queue::{write_link, LinkQueue};
use super::{Direction, RouteScratch};
use crate::dispatch::DispatchScratch;
use crate::server::Shared;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 64 * 1024;

/// Accepts link connections from other brokers until shutdown.
pub async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    debug!(%remote, "link connection accepted");
                    let shared2 = Arc::clone(&shared);
                    shared.tasks.spawn(async move {
                        connection(stream, Direction::Inbound, Some(remote), shared2).await;
                    });
                }
                Err(e) => {
                    warn!(error = %e, "link accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Keeps a link to the broker at `address`: dials, runs the connection, and redials with
/// backoff after it ends. While the peer is linked through another connection (it dialled
/// us), it waits instead of opening a duplicate.
pub async fn dial_loop(address: String, shared: Arc<Shared>) {
    let settings = &shared.config.cluster;
    let seed = shared.cluster.incarnation().0 ^ address.bytes().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let min_ms = settings.reconnect_min.as_millis() as u64;
    let mut backoff = ReconnectBackoff::new(min_ms, settings.reconnect_max.as_millis() as u64, seed);
    let mut peer: Option<BrokerName> = None;
    loop {
        if shared.shutdown.is_cancelled() {
            return;
        }
        let delay = if peer.as_ref().is_some_and(|p| shared.cluster.is_linked(p)) {
            min_ms
        } else {
            match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(address.as_str())).await {
                Ok(Ok(stream)) => {
                    let remote = stream.peer_addr().ok();
                    let outcome = connection(stream, Direction::Outbound, remote, Arc::clone(&shared)).await;
                    if outcome.established {
                        backoff.reset();
                    }
                    peer = outcome.peer.or(peer);
                }
                Ok(Err(e)) => debug!(%address, error = %e, "dial failed"),
                Err(_) => debug!(%address, "dial timed out"),
            }
            backoff.next_delay_ms()
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
            _ = shared.shutdown.cancelled() => return,
        }
    }
}

/// Calls the router's timer input at its next deadline, until shutdown.
pub async fn ticker(shared: Arc<Shared>) {
    let cluster = &shared.cluster;
    loop {
        let wait = match cluster.next_deadline() {
            Some(deadline) => deadline.0.saturating_sub(cluster.now().0),
            None => 1000,
        };
        if wait > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = cluster.timer.notified() => continue,
                _ = shared.shutdown.cancelled() => return,
            }
        }
        cluster.handle(Input::Tick);
    }
}

#[derive(Default)]
struct Outcome {
    peer: Option<BrokerName>,
    established: bool,
}

async fn connection(
    stream: TcpStream,
    direction: Direction,
    remote: Option<SocketAddr>,
    shared: Arc<Shared>,
) -> Outcome {
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    if writer.write_all(&frame::hello(&shared.cluster.handshake())).await.is_err() {
        return Outcome::default();
    }
    let max_frame = max_peer_frame(&shared);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let hello = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_hello(&mut reader, &mut buf, max_frame)).await {
        Ok(Ok(hello)) => hello,
        Ok(Err(reason)) => return refuse(&shared, writer, remote, None, &reason).await,
        Err(_) => return refuse(&shared, writer, remote, None, "no HELLO within 5 s").await,
    };
    let peer = BrokerName::new(&hello.name);
    let counters = shared.metrics.link_counters(&hello.name);
    let queue = Arc::new(LinkQueue::new(shared.cluster.limits, counters));
    let id = match shared.cluster.establish(&hello, direction, remote, Arc::clone(&queue)) {
        Ok(id) => id,
        Err(reason) => return refuse(&shared, writer, remote, Some(peer), &reason).await,
    };
    shared.tasks.spawn(write_link(writer, Arc::clone(&queue)));
    let why = read_loop(&mut reader, buf, &peer, id, &queue, &shared).await;
    queue.abort_after_close();
    shared.cluster.closed(&peer, id, why);
    Outcome { peer: Some(peer), established: true }
}

async fn refuse(
    shared: &Shared,
    mut writer: OwnedWriteHalf,
    remote: Option<SocketAddr>,
    peer: Option<BrokerName>,
    reason: &str,
) -> Outcome {
    warn!(?remote, ?peer, reason, "link refused");
    shared.metrics.link_closed("refused");
    let _ = tokio::time::timeout(Duration::from_secs(1), writer.write_all(&frame::close(reason))).await;
    let _ = writer.shutdown().await;
    Outcome { peer, established: false }
}

fn max_peer_frame(shared: &Shared) -> usize {
    // A DATA frame is a client message section plus a routing header.
    shared.config.limits.max_frame + 64 * 1024
}

async fn read_hello(reader: &mut OwnedReadHalf, buf: &mut BytesMut, max_frame: usize) -> Result<Handshake, String> {
    loop {
        match PeerFrame::decode(buf, max_frame) {
            Ok(Some(PeerFrame::Hello(hello))) => return Ok(hello),
            Ok(Some(PeerFrame::Close(reason))) => return Err(format!("peer closed during the handshake: {reason}")),
            Ok(Some(_)) => return Err("the first frame on a link must be HELLO".to_string()),
            Ok(None) => {}
            Err(e) => return Err(format!("malformed handshake: {e}")),
        }
        match reader.read_buf(buf).await {
            Ok(0) | Err(_) => return Err("connection closed during the handshake".to_string()),
            Ok(_) => {}
        }
    }
}

/// Reads frames until the connection ends; returns why, as a metric label.
async fn read_loop(
    reader: &mut OwnedReadHalf,
    mut buf: BytesMut,
    peer: &BrokerName,
    id: u64,
    queue: &LinkQueue,
    shared: &Shared,
) -> &'static str {
    let cluster = &shared.cluster;
    let max_frame = max_peer_frame(shared);
    let mut dispatch = DispatchScratch::default();
    let mut route = RouteScratch::default();
    // Data proves the link alive too: under a flood, heartbeats may queue behind it.
    let liveness_every = Duration::from_millis((cluster.liveness.heartbeat_interval_ms / 2).max(1));
    let mut last_fed = Instant::now();
    let hold_back = shared.config.slow_consumer.max_stall.min(shared.config.cluster.heartbeat_interval);
    loop {
        loop {
            let frame = match PeerFrame::decode(&mut buf, max_frame) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return protocol_error(shared, queue, peer, &format!("malformed frame: {e}")),
            };
            match frame {
                PeerFrame::Control(message) => {
                    cluster.received(peer, id, message);
                    last_fed = Instant::now();
                }
                PeerFrame::Data { header, message } => {
                    let counters = queue.counters();
                    counters.messages_in.inc();
                    counters.bytes_in.inc_by(message.encoded_len() as u64);
                    if cluster.forward_received(peer, &header, &message, &mut route) {
                        shared.dispatcher.deliver(&message, &mut dispatch);
                    }
                    if last_fed.elapsed() >= liveness_every {
                        cluster.heard(peer, id);
                        last_fed = Instant::now();
                    }
                }
                PeerFrame::Close(reason) => {
                    info!(%peer, reason, "peer closed the link");
                    return "peer_closed";
                }
                PeerFrame::Hello(_) => {
                    return protocol_error(shared, queue, peer, "unexpected HELLO after the handshake")
                }
            }
        }
        dispatch.wake_writers();
        // Congested subscribers or onward links hold this link back, briefly: not reading lets
        // TCP push back on the sending broker, whose publishers then slow down. The bound is
        // one heartbeat interval, far inside the liveness verdict.
        if !dispatch.congested.is_empty() || !route.congested.is_empty() {
            let deadline = tokio::time::Instant::now() + hold_back;
            for outbox in dispatch.congested.drain(..) {
                outbox.wait_drained(deadline).await;
            }
            route.hold_back(deadline).await;
            if last_fed.elapsed() >= liveness_every {
                cluster.heard(peer, id);
                last_fed = Instant::now();
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            _ = queue.done.cancelled() => return "closed",
            _ = shared.shutdown.cancelled() => {
                queue.close("broker shutting down");
                return "shutdown";
            }
            read = reader.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => return "connection_lost",
                Ok(_) => {}
            }
        }
    }
}

fn protocol_error(shared: &Shared, queue: &LinkQueue, peer: &BrokerName, reason: &str) -> &'static str {
    warn!(%peer, reason, "closing link: protocol error");
    shared.metrics.peer_protocol_errors.inc();
    queue.close(reason);
    "protocol_error"
}
