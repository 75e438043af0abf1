//! The link tasks: the cluster listener, each connection's handshake and read loop (for the
//! listener and for the dial loops of [`super::dial`]), and the ticker that drives the
//! router's timers. They only carry bytes and call [`Cluster`](super::Cluster); every decision
//! is the router's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tidings_route::{BrokerName, Input};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use tidings_wire::peer::{peek_header, PeerFrame, PeerFrameType, Routed};
use tidings_wire::HEADER_LEN;

use super::convert;
use super::handshake::{handshake, Refused};
use super::queue::{write_link, LinkCounters, LinkQueue};
use super::{Cluster, Direction, Event, RouteScratch};
use crate::budget::QueueBudget;
use crate::config::Config;
use crate::dispatch::{DispatchScratch, Dispatcher};
use crate::metrics::Metrics;
use crate::metrics::WhyLabel;
use crate::queue_groups::GroupsHere;
use crate::read_buffer::{until, ReadBuffer};
use crate::tls::{Accepted, BoxRead, BoxWrite, Tls};

/// What the link tasks share, built by `server` and handed down, so the links import nothing
/// above them: messages from peers go to local subscribers through `dispatcher`, and what the
/// layer above must hear of goes out as the cluster's events.
pub struct LinkContext {
    /// The router and the table of links.
    pub cluster: Arc<Cluster>,
    /// The local subscription table, for messages peers route here.
    pub dispatcher: Arc<Dispatcher>,
    /// The broker's configuration (cluster settings, frame limits, the stall bound).
    pub config: Config,
    /// Metric handles.
    pub metrics: Metrics,
    /// The broker's budget, which frames being read are charged to.
    pub budget: Arc<QueueBudget>,
    /// Cancelled to shut everything down.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Where link tasks are spawned, so shutdown waits for them.
    pub tasks: tokio_util::task::TaskTracker,
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest frame read before a peer is verified: HELLO and AUTH are a few hundred bytes,
/// and an unknown peer must not make the broker buffer megabytes (it could, 8 MiB for 5 s per
/// connection, when the handshake read frames of a link's full size).
const HANDSHAKE_MAX_FRAME: usize = 4096;

/// The two halves of a plaintext link connection.
pub(super) fn plain(stream: TcpStream) -> (BoxRead, BoxWrite) {
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    (Box::new(reader), Box::new(writer))
}

/// The two halves of a TLS link connection.
pub(super) fn sealed<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static>(
    stream: S,
) -> (BoxRead, BoxWrite) {
    let (reader, writer) = tokio::io::split(stream);
    (Box::new(reader), Box::new(writer))
}

/// Accepts link connections from other brokers until shutdown; with `tls`, only over mutual
/// TLS with a certificate the cell's CA signed.
pub async fn accept_loop(listener: TcpListener, ctx: Arc<LinkContext>, tls: Option<Arc<Tls>>) {
    loop {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    debug!(%remote, "link connection accepted");
                    let local = stream.local_addr().ok();
                    let ctx2 = Arc::clone(&ctx);
                    let tls = tls.clone();
                    ctx.tasks.spawn(async move {
                        let (reader, writer) = match tls {
                            None => plain(stream),
                            Some(tls) => {
                                let _ = stream.set_nodelay(true);
                                match tls.accept_link(stream, HANDSHAKE_TIMEOUT).await {
                                    Accepted::Tls(stream) => sealed(*stream),
                                    Accepted::Plaintext(_) | Accepted::Failed => {
                                        warn!(%remote, "link refused: no TLS handshake with a certificate of the cell's CA");
                                        ctx2.metrics.link_closed("refused");
                                        return;
                                    }
                                }
                            }
                        };
                        connection((reader, writer), Direction::Inbound, (Some(remote), local), ctx2).await;
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

/// Calls the router's timer input at its next deadline, until shutdown.
pub async fn ticker(ctx: Arc<LinkContext>) {
    let cluster = &ctx.cluster;
    loop {
        let wait = match cluster.next_deadline() {
            Some(deadline) => deadline.0.saturating_sub(cluster.now().0),
            None => 1000,
        };
        if wait > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = cluster.timer.notified() => continue,
                _ = ctx.shutdown.cancelled() => return,
            }
        } else if ctx.shutdown.is_cancelled() {
            return;
        } else {
            // Due at once: a link's first summary is streaming a slice per tick (route's
            // `router/stream.rs`). The lock was let go after the last slice; this lets the
            // runtime's other tasks (heartbeats, clients) take their turn before the next.
            tokio::task::yield_now().await;
        }
        cluster.handle(Input::Tick);
    }
}

/// How a link connection ended, for its dial loop.
#[derive(Default)]
pub(super) struct Outcome {
    /// The peer's name, once its HELLO told it.
    pub(super) peer: Option<BrokerName>,
    /// Whether the link came up.
    pub(super) established: bool,
    /// The peer refused this broker: its cell forgot it.
    pub(super) forgotten_here: bool,
}

/// The two ends of a link connection: the peer's address and ours.
pub(super) type Ends = (Option<SocketAddr>, Option<SocketAddr>);

/// Runs one link connection: the handshake, then the link until it ends.
pub(super) async fn connection(
    (mut reader, mut writer): (BoxRead, BoxWrite),
    direction: Direction,
    (remote, local): Ends,
    ctx: Arc<LinkContext>,
) -> Outcome {
    let began = Instant::now();
    let mut buf = BytesMut::with_capacity(HANDSHAKE_MAX_FRAME);
    let cluster = &ctx.cluster;
    let shaking = handshake(&mut reader, &mut writer, &mut buf, direction, cluster, HANDSHAKE_MAX_FRAME);
    let verified = match tokio::time::timeout(HANDSHAKE_TIMEOUT, shaking).await {
        Ok(Ok(verified)) => verified,
        Ok(Err(refused)) => return refuse(&ctx, writer, remote, &refused).await,
        Err(_) => return refuse(&ctx, writer, remote, &Refused::timeout()).await,
    };
    let hello = &verified.hello;
    let peer = BrokerName::new(&hello.name);
    let counters = LinkCounters::of_peer(&ctx.metrics, &hello.name);
    let queue = Arc::new(LinkQueue::new(ctx.cluster.limits, counters));
    let id = match ctx.cluster.establish((hello, verified.version), direction, remote, Arc::clone(&queue)) {
        Ok(id) => id,
        Err(reason) => {
            let refused = Refused::plain(reason);
            let outcome = refuse(&ctx, writer, remote, &refused).await;
            return Outcome { peer: Some(peer), ..outcome };
        }
    };
    let handshake_us = began.elapsed().as_micros() as u64;
    info!(%peer, cell = %hello.cell, ?direction, version = verified.version, handshake_us, "link up");
    tell_servers(&ctx, (hello, verified.version), local, &queue);
    ctx.tasks.spawn(write_link(writer, Arc::clone(&queue)));
    let why = read_loop(&mut reader, buf, (&peer, verified.version), id, &queue, &ctx).await;
    queue.abort_after_close();
    ctx.cluster.closed(&peer, id, why);
    let forgotten_here = why == "peer_closed" && ctx.cluster.forgotten_here().is_some();
    Outcome { peer: Some(peer), established: true, forgotten_here }
}

/// Tells a cell mate where this broker's clients connect (peer frame SERVERS, version 7), so
/// that the mate tells its clients (`servers.rs`); `local` is this end of the link.
fn tell_servers(
    ctx: &LinkContext,
    (hello, version): (&tidings_wire::peer::Hello, u16),
    local: Option<SocketAddr>,
    queue: &LinkQueue,
) {
    if version < tidings_wire::peer::SERVERS_PEER_VERSION || hello.cell != ctx.cluster.cell().as_str() {
        return;
    }
    let addresses = ctx.cluster.own_servers(local.map(|l| l.ip()));
    if addresses.is_empty() {
        return;
    }
    match PeerFrame::Servers(tidings_wire::peer::Servers { addresses }).to_bytes() {
        Ok(bytes) => queue.push_control(bytes),
        Err(e) => warn!(error = %e, "cannot encode this broker's client addresses (cluster.client_advertise)"),
    }
}

async fn refuse(ctx: &LinkContext, mut writer: BoxWrite, remote: Option<SocketAddr>, refused: &Refused) -> Outcome {
    let reason = refused.reason.as_str();
    match &refused.forgotten_here {
        // Said at error level once (`told_forgotten`), then at each slow redial here.
        Some(why) => {
            ctx.cluster.refused_as_forgotten(why);
            info!(?remote, reason, "link refused: this broker's cell forgot it");
        }
        None => warn!(?remote, reason, "link refused"),
    }
    ctx.metrics.link_closed("refused");
    if let Some(why) = refused.auth_failure {
        ctx.metrics.link_auth_failures.get_or_create(&WhyLabel { why }).inc();
    }
    let close = async {
        writer.write_all(&convert::close_bytes(reason)).await?;
        writer.flush().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), close).await;
    let _ = writer.shutdown().await;
    Outcome {
        peer: refused.forgotten_peer.as_deref().map(BrokerName::new),
        established: false,
        forgotten_here: refused.forgotten_here.is_some(),
    }
}

fn max_peer_frame(ctx: &LinkContext) -> usize {
    // A ROUTED or DATA frame is a client message section plus a header.
    ctx.config.limits.max_frame + 64 * 1024
}

/// Reads frames until the connection ends; returns why, as a metric label.
async fn read_loop(
    reader: &mut BoxRead,
    handshake_rest: BytesMut,
    (peer, version): (&BrokerName, u16),
    id: u64,
    queue: &LinkQueue,
    ctx: &LinkContext,
) -> &'static str {
    let cluster = &ctx.cluster;
    let max_frame = max_peer_frame(ctx);
    let mut dispatch = DispatchScratch::default();
    let mut route = RouteScratch::default();
    // Data proves the link alive too: under a flood, heartbeats may queue behind it.
    let liveness_every = Duration::from_millis((cluster.liveness.heartbeat_interval_ms / 2).max(1));
    let mut last_fed = Instant::now();
    let hold_back = ctx.config.slow_consumer.max_stall.min(ctx.config.cluster.heartbeat_interval);
    let mut read = ReadBuffer::new(Arc::clone(&ctx.budget), ctx.config.limits.frame_timeout);
    read.buf = handshake_rest;
    loop {
        let mut decoded = 0;
        let mut slice = crate::slice::Slice::new();
        loop {
            if decoded > 0 && slice.spent() {
                // A read's worth of summary deltas (thousands) is applied a slice at a time.
                dispatch.wake_writers();
                ctx.dispatcher.settle(&mut dispatch);
                tokio::task::yield_now().await;
            }
            let (ty, len) = match peek_header(&read.buf, max_frame) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(e) => return protocol_error(ctx, queue, peer, &format!("malformed frame: {e}")),
            };
            let bytes = read.buf.split_to(4 + len).freeze(); // the length prefix, then `len` bytes from the type on
            decoded += 1;
            if ty == PeerFrameType::Group && version < tidings_wire::peer::GROUP_VERSION {
                // Version 5's GROUP, without its ends: not ours to read (a version 5 broker
                // joins no remote group through a version 6 one).
                debug!(%peer, version, "a GROUP frame of an older peer protocol; not read");
                continue;
            }
            let frame = match PeerFrame::decode_body(ty, bytes.slice(HEADER_LEN..)) {
                Ok(frame) => frame,
                Err(e) if ty.is_repeated_by_protocol() => {
                    refuse_frame(ctx, peer, &e, &bytes);
                    continue;
                }
                Err(e) => {
                    let reason = format!("malformed frame: {e} ({})", hex_prefix(&bytes));
                    return protocol_error(ctx, queue, peer, &reason);
                }
            };
            match frame {
                PeerFrame::Routed(Routed { header, message }) => {
                    let counters = queue.counters();
                    counters.messages_in.inc();
                    counters.bytes_in.inc_by(message.encoded_len() as u64);
                    let header = convert::data_header(header);
                    // Groups this copy serves: the members here take them first, if they can.
                    dispatch.served.clear();
                    if !header.groups.is_empty() {
                        ctx.dispatcher.groups_ready(&message, &header.groups, &mut dispatch);
                    }
                    let mut here = std::mem::take(&mut dispatch.served);
                    if cluster.forward_received((peer, &header), &message, &here, &mut route) {
                        // Groups routing passed on nowhere are this broker's to serve, by a
                        // busy member if none is ready (see `queue_groups`).
                        let left = header.groups.iter().filter(|g| !here.contains(g) && !route.routed_group(g));
                        let left: Vec<String> = left.cloned().collect();
                        here.extend(left);
                        ctx.dispatcher.deliver(&message, GroupsHere::Only(&here), &mut dispatch);
                    }
                    if last_fed.elapsed() >= liveness_every {
                        cluster.heard(peer, id);
                        last_fed = Instant::now();
                    }
                }
                PeerFrame::Close(close) => {
                    if close.reason.starts_with(super::FORGOTTEN) {
                        // An insecure link: the peer refused it after both HELLOs, ours done.
                        cluster.closed_as_forgotten(peer, &close.reason);
                    } else {
                        info!(%peer, reason = close.reason, "peer closed the link");
                    }
                    return "peer_closed";
                }
                PeerFrame::LinkStats(stats) => cluster.link_stats_received(peer, stats),
                PeerFrame::Servers(servers) => cluster.servers_received(peer, id, servers.addresses),
                PeerFrame::Sideways(frame) => {
                    cluster.tell(Event::Sideways { carrier: peer.clone(), frame });
                    if last_fed.elapsed() >= liveness_every {
                        cluster.heard(peer, id);
                        last_fed = Instant::now();
                    }
                }
                PeerFrame::Group(frame) => {
                    cluster.tell(Event::Group { from: peer.clone(), frame });
                    if last_fed.elapsed() >= liveness_every {
                        cluster.heard(peer, id);
                        last_fed = Instant::now();
                    }
                }
                PeerFrame::Replica(frame) => {
                    cluster.tell(Event::Replica { from: peer.clone(), frame });
                    if last_fed.elapsed() >= liveness_every {
                        cluster.heard(peer, id);
                        last_fed = Instant::now();
                    }
                }
                PeerFrame::Hello(_) | PeerFrame::Auth(_) => {
                    return protocol_error(ctx, queue, peer, "unexpected handshake frame after the handshake")
                }
                other => {
                    if super::is_guaranteed(&other) {
                        // Guaranteed-delivery traffic goes to the layer above, in arrival order.
                        cluster.tell(Event::Guaranteed { from: peer.clone(), frame: other });
                        if last_fed.elapsed() >= liveness_every {
                            cluster.heard(peer, id);
                            last_fed = Instant::now();
                        }
                        continue;
                    }
                    match convert::control_message(other) {
                        Ok(Some(message)) => {
                            let mut pieces = cluster.pieces(peer, message).into_iter().peekable();
                            while let Some(piece) = pieces.next() {
                                cluster.received(peer, id, piece);
                                if pieces.peek().is_some() {
                                    // The peer's heartbeats and our ticker's wait for no summary.
                                    tokio::task::yield_now().await;
                                }
                            }
                            last_fed = Instant::now();
                        }
                        Ok(None) => return protocol_error(ctx, queue, peer, "unexpected frame on a link"),
                        Err(e) => return protocol_error(ctx, queue, peer, &format!("malformed frame: {e}")),
                    }
                }
            }
        }
        dispatch.wake_writers();
        ctx.dispatcher.settle(&mut dispatch);
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
        // A link's buffer is not given back when quiet: links are few and busy.
        read.settle(decoded);
        let Ok(room) = read.prepare() else {
            return protocol_error(ctx, queue, peer, "the broker's memory for frames being read is spent");
        };
        tokio::select! {
            biased;
            _ = queue.done.cancelled() => return "closed",
            _ = ctx.shutdown.cancelled() => {
                queue.close("broker shutting down");
                return "shutdown";
            }
            () = until(read.frame_deadline()) => {
                return protocol_error(ctx, queue, peer, "a frame did not arrive whole within limits.frame_timeout");
            }
            got = reader.read_buf(&mut read.buf) => match got {
                Ok(0) | Err(_) => return "connection_lost",
                Ok(n) => read.after_read(n, room),
            }
        }
    }
}

/// A guaranteed frame (or a LINK_STATS) whose body does not decode: refused alone, said at
/// WARN with its bytes (at most once a second, with a count of those held back) and counted;
/// the link stays up. The protocol asks again for what it carried (a link report comes again
/// a second later); closing the link made the sender redial and send the same frame again,
/// about ten times a second, for minutes (issue 38, failure B).
fn refuse_frame(ctx: &LinkContext, peer: &BrokerName, error: &tidings_wire::WireError, bytes: &[u8]) {
    static HUSH: crate::hush::Hush = crate::hush::Hush::new();
    ctx.metrics.peer_frames_refused.inc();
    if let Some(held) = HUSH.pass() {
        warn!(%peer, %error, frame = hex_prefix(bytes), held, "refused a malformed frame from a peer; the link stays up");
    }
}

/// The first bytes of a frame in hex, for a log line: enough to see its header and fields.
fn hex_prefix(bytes: &[u8]) -> String {
    const SHOWN: usize = 96;
    let mut text: String = bytes.iter().take(SHOWN).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > SHOWN {
        text.push_str(&format!("... ({} bytes)", bytes.len()));
    }
    text
}

fn protocol_error(ctx: &LinkContext, queue: &LinkQueue, peer: &BrokerName, reason: &str) -> &'static str {
    warn!(%peer, reason, "closing link: protocol error");
    ctx.metrics.peer_protocol_errors.inc();
    queue.close(reason);
    "protocol_error"
}
