//! The MQTT listeners (`[mqtt] listen`, and `[mqtt] websocket` for MQTT over WebSocket; issue
//! 42): MQTT 3.1.1 and 5.0 clients at QoS 0, 1 and 2, through the broker core native clients
//! use. Off by default: parts of 5.0 are not served yet (see `docs/mqtt.md`), so a broker should
//! not offer them on port 1883 unless asked to.
//!
//! Each connection is a reader (this module: MQTT packets in, translated by [`session`] onto a
//! native session) and a delivery task ([`delivery`]: the native session's outbox drained
//! straight into MQTT packets), so queue limits, the slow-consumer policy and the metrics apply
//! as to a native client. An idle connection holds no buffer and no delivery task: the read
//! buffer is given back when the connection goes quiet, the delivery task starts when the
//! outbox first has something for the client, and it builds each batch's packets in a buffer
//! of that batch (issue 42: an idle connection at most 5 KB).
//!
//! MQTT over WebSocket (`[mqtt] websocket`, [`websocket`]) reaches the same connection code:
//! after the HTTP upgrade, the WebSocket is read and written as a byte stream ([`ws_bytes`]).

mod admit;
mod aliases;
mod connect;
mod delivery;
mod ends;
mod enhanced;
mod inflight;
mod link;
mod redirect;
mod registry;
mod session;
mod subscribe;
mod websocket;
mod wills;
mod ws_bytes;

use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::mqtt::{MqttError, MqttReason, Packet, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::admission::{fd_limit, Admission};
use crate::context::Context;
use crate::outbox::Outbox;
use crate::read_buffer::{until, ReadBuffer, KEEP_EMPTY_BUFFER, MIN_READ_CHUNK};
use crate::session::{Session, Transport};
use crate::tls::{Accepted, BoxRead, BoxWrite, Tls};
use admit::Admitted;
use delivery::Delivery;
use registry::Registry;
use session::{MqttSession, Step};

/// The largest packet read before CONNECT: a CONNECT with a will is small, and an unknown peer
/// must not make the broker buffer megabytes.
const PRE_CONNECT_MAX_PACKET: usize = 64 * 1024;

/// How long a closed connection's remaining input is read and dropped (see [`linger`]).
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// The client's half of the connection (TCP or TLS), shared by the reader (replies) and the
/// delivery task (messages), each writing whole packets under the lock.
type Writer = Arc<tokio::sync::Mutex<BoxWrite>>;

/// Writes `bytes` and flushes them (TLS holds its last record until flushed).
async fn write_flushed(writer: &Writer, bytes: &[u8]) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// Which MQTT listener a connection came in on.
#[derive(Clone, Copy, Debug)]
enum Door {
    /// MQTT over TCP (or TLS), `[mqtt] listen`.
    Tcp,
    /// MQTT over WebSocket (or wss), `[mqtt] websocket`.
    WebSocket,
}

/// Starts the MQTT listeners that are bound. Both share one session registry (a client may
/// come back over the other one and take its session over) and one connection limit
/// (`[limits] max_connections` and `max_connections_per_address`, counted apart from native
/// clients'). With `tls`, both speak TLS only (port 8883 style, and `wss://`).
pub fn start(shared: &Arc<Context>, tcp: Option<TcpListener>, websocket: Option<TcpListener>, tls: Option<Arc<Tls>>) {
    if tcp.is_none() && websocket.is_none() {
        return;
    }
    let registry = Arc::new(Registry::new(shared.config.data_dir()));
    ends::expire_stored(shared, &registry);
    ends::rearm_wills(shared, &registry);
    let limits = &shared.config.limits;
    let admission = Admission::new(limits.max_connections, limits.max_connections_per_address, fd_limit());
    for (listener, door) in [(tcp, Door::Tcp), (websocket, Door::WebSocket)] {
        if let Some(listener) = listener {
            let doors = (Arc::clone(&registry), Arc::clone(&admission), tls.clone());
            shared.tasks.spawn(accept_loop(listener, door, Arc::clone(shared), doors));
        }
    }
}

/// Accepts connections on one MQTT listener until shutdown, within the connection limits.
async fn accept_loop(
    listener: TcpListener,
    door: Door,
    shared: Arc<Context>,
    (registry, admission, tls): (Arc<Registry>, Arc<Admission>, Option<Arc<Tls>>),
) {
    let redirecting = Arc::new(tokio::sync::Semaphore::new(redirect::MAX_REDIRECTING));
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (place, redirect) = match admission.admit(peer.ip()) {
                        Ok(place) => (Place::Admitted(place), None),
                        Err(refusal) => {
                            shared.metrics.protocol_error(tidings_wire::ReasonCode::LimitExceeded);
                            // With a server reference, a few are read for their CONNECT and
                            // told where to go; the rest are closed: MQTT has no way to say
                            // why before CONNECT names a version.
                            let referred = (!shared.config.mqtt.server_reference.is_empty())
                                .then(|| Arc::clone(&redirecting).try_acquire_owned().ok())
                                .flatten();
                            tracing::info!(%peer, %refusal, redirected = referred.is_some(), "MQTT connection refused");
                            match referred {
                                Some(permit) => (Place::Redirecting(permit), Some(redirect::Redirect::Full)),
                                None => continue,
                            }
                        }
                    };
                    debug!(%peer, ?door, "MQTT client connected");
                    let (shared2, registry, tls) = (Arc::clone(&shared), Arc::clone(&registry), tls.clone());
                    // Each door's future is the task itself, holding its place: a wrapper
                    // future around them was a second task-sized allocation per connection
                    // (768 B of an idle connection's 5.1 KB, issue 42).
                    // A plaintext connection's task is the connection alone: a future around
                    // it would keep room for the handshake's parts all along (issue 42).
                    match (door, tls) {
                        (Door::Tcp, None) => {
                            shared.tasks.spawn(connection(plaintext(stream, redirect, place), shared2, registry))
                        }
                        (Door::Tcp, Some(tls)) => shared.tasks.spawn(open_tls(stream, shared2, ((registry, redirect), (tls, place)))),
                        (Door::WebSocket, tls) => {
                            shared.tasks.spawn(websocket::open(stream, shared2, ((registry, redirect), (tls, place))))
                        }
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "MQTT accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// What a door's task is given beside its stream and the broker: the session registry, where
/// a connection past the limit is to be told to go, the TLS acceptor, and its place.
type Doors = ((Arc<Registry>, Option<redirect::Redirect>), (Option<Arc<Tls>>, Place));

/// [`Doors`] of a TLS listener.
type TlsDoors = ((Arc<Registry>, Option<redirect::Redirect>), (Arc<Tls>, Place));

/// What a connection holds while it is served: a place within the limits, or (past them, with
/// a server reference) one of the few places for being told where to go.
enum Place {
    Admitted(#[allow(dead_code, reason = "held for its drop")] crate::admission::Admitted),
    Redirecting(#[allow(dead_code, reason = "held for its drop")] tokio::sync::OwnedSemaphorePermit),
}

/// Writes `packets` for `version` as one write.
async fn send(writer: &Writer, packets: &[Packet], version: ProtocolVersion) -> bool {
    let mut out = BytesMut::new();
    for packet in packets {
        if packet.encode(version, &mut out).is_err() {
            return false;
        }
    }
    // Boxed: a connection's task would otherwise hold room for this write all its life.
    out.is_empty() || Box::pin(write_flushed(writer, &out)).await.is_ok()
}

/// A plaintext connection's parts.
fn plaintext(stream: TcpStream, redirect: Option<redirect::Redirect>, place: Place) -> Stream {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let (reader, writer) = stream.into_split();
    Stream {
        reader: Box::new(reader),
        writer: Box::new(writer),
        peer,
        certificate: None,
        websocket: false,
        redirect,
        place,
    }
}

/// Serves a connection once its TLS handshake passed. A client speaking plaintext to a TLS
/// listener is closed: MQTT has no way to say why before CONNACK, and a CONNACK in clear would
/// be read as the answer to its CONNECT.
async fn open_tls(stream: TcpStream, shared: Arc<Context>, ((registry, redirect), (tls, place)): TlsDoors) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    // Boxed, as every step a connection takes once: its task keeps no room for them.
    let (reader, writer, certificate): (BoxRead, BoxWrite, _) =
        match Box::pin(tls.accept(stream, shared.config.limits.handshake_timeout)).await {
            Accepted::Tls(stream) => {
                let certificate = crate::tls::client_names(&stream);
                let (reader, writer) = tokio::io::split(*stream);
                (Box::new(reader), Box::new(writer), certificate)
            }
            Accepted::Plaintext(_) => {
                tracing::info!(%peer, "plaintext MQTT on a TLS listener; closed");
                return;
            }
            Accepted::Failed => return,
        };
    // Not boxed: the handshake's steps are, so the task holds little beside the connection,
    // and a box would be one more allocation per connection.
    let stream = Stream { reader, writer, peer, certificate, websocket: false, redirect, place };
    connection(stream, shared, registry).await;
}

/// One MQTT client's connection: its halves, who it is on the network, and the names of its
/// verified TLS client certificate (its login when CONNECT carries no credentials).
struct Stream {
    reader: BoxRead,
    writer: BoxWrite,
    peer: String,
    certificate: Option<Vec<String>>,
    /// MQTT over WebSocket: `/connz` and the metrics say so.
    websocket: bool,
    /// Past the connection limit: its CONNECT is answered with the server reference.
    redirect: Option<redirect::Redirect>,
    /// Its place within the connection limits, held for its drop.
    #[allow(dead_code, reason = "held for its drop")]
    place: Place,
}

async fn connection(stream: Stream, shared: Arc<Context>, registry: Arc<Registry>) {
    // Each local below is room in every connection's task for its whole life (issue 42): what
    // is moved on is moved inside a block, so no moved-from local keeps its room.
    // Every part moved out, `place` too (held until the connection ends): a part left in
    // `stream` would keep a second copy of the whole struct in the task.
    let Stream { mut reader, writer, peer, certificate, websocket, redirect, place: _place } = stream;
    let writer: Writer = Arc::new(tokio::sync::Mutex::new(writer));
    let outbox = Outbox::new(shared.live.get().slow_consumer, shared.metrics.clone(), &shared.budget);
    {
        let mut client_name = peer;
        client_name.push_str(" mqtt");
        *outbox.client.lock() = client_name;
    }
    let link = Arc::new(link::Link::default());
    let mut session = MqttSession::new(
        Session::new(Transport::Tcp, Arc::clone(&outbox), Arc::clone(&shared)),
        Arc::clone(&link),
        Arc::clone(&registry),
    );
    session.native().certificate = certificate;
    let limits = &shared.config.limits;
    let mut read = ReadBuffer::of(tidings_wire::mqtt::needed, Arc::clone(&shared.budget), limits.frame_timeout);
    let mut release_at = None;
    let mut delivering = false;
    let mut kept = connect::Kept { keep_alive: Some(limits.handshake_timeout), ..Default::default() };
    let mut gate = enhanced::Gate::default();
    'read: loop {
        let max = if session.version().is_some() { limits.max_frame } else { PRE_CONNECT_MAX_PACKET };
        let mut decoded = 0;
        // The loop's value, an undecodable packet's error, lives in this statement only.
        if let Some(error) = loop {
            // The packet lives in this block and across one wait only (`prepare`'s), so the
            // task lays it over its other waits instead of beside them.
            let (mut step, proven) = {
                let version = session.version().unwrap_or(ProtocolVersion::V5);
                let mut packet = match Packet::decode(&mut read.buf, version, max) {
                    Ok(Some(packet)) => packet,
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                };
                decoded += 1;
                let mut proven = None;
                if admit::needed(&packet, &gate, &session) {
                    let parts = connect::Parts {
                        gate: &mut gate,
                        session: &mut session,
                        kept: &mut kept,
                        shared: &shared,
                        registry: &registry,
                        writer: &writer,
                        link: &link,
                        redirect,
                        websocket,
                    };
                    // Boxed as it is made: see `connect`.
                    match Box::pin(connect::prepare(&mut packet, parts)).await {
                        Admitted::Handle(user) => proven = user,
                        Admitted::Answered => continue,
                        Admitted::Close => break 'read,
                    }
                }
                (session.handle(packet), proven)
            };
            if let (Some((_, data)), Step::Reply(packets)) = (proven.as_deref(), &mut step) {
                enhanced::sign(packets, data);
            }
            let version = session.version().unwrap_or(ProtocolVersion::V5);
            let close = match step {
                // A PUBREL goes once the table of deliveries in flight knows PUBREC came.
                Step::Reply(packets) if packets.iter().any(|p| matches!(p, Packet::Pubrel(_))) => {
                    let persisted = Box::pin(link.persist(&registry.inflight)).await;
                    if let Err(error) = &persisted {
                        tracing::warn!(%error, "MQTT deliveries in flight not written: closing");
                    }
                    persisted.is_err() || !send(&writer, &packets, version).await
                }
                Step::Reply(packets) => !send(&writer, &packets, version).await,
                Step::Close(last) => {
                    send(&writer, &last, version).await;
                    true
                }
            };
            if close {
                break 'read;
            }
        } {
            Box::pin(refuse_malformed(&session, &writer, &error)).await;
            break 'read;
        }
        if read.settle(decoded) {
            release_at = Some(tokio::time::Instant::now() + KEEP_EMPTY_BUFFER);
        }
        // An idle connection holds no read buffer: its next read takes a few bytes by itself,
        // and a connection that is sending is given a chunk that grows with its packets.
        let room = match read.buf.capacity() {
            0 => None,
            // Emptied and never grown (the few bytes `read_buf` took by itself for CONNECT):
            // not grown before more comes. Grown, every new connection held a read chunk until
            // its release, half a second, and the allocator kept what those chunks took while
            // connections were opening as the broker's resident memory (issue 42).
            capacity if read.buf.is_empty() && capacity < MIN_READ_CHUNK => None,
            _ => match read.prepare() {
                Ok(room) => Some(room),
                Err(_) => {
                    if let (Step::Close(last), Some(version)) =
                        (session.refuse(MqttReason::QuotaExceeded), session.version())
                    {
                        send(&writer, &last, version).await;
                    }
                    break 'read;
                }
            },
        };
        session.native().finish_batch(std::time::Instant::now());
        // The publisher is held back while a subscriber it congested drains, within
        // `slow_consumer.max_stall`, as a native publisher is: TCP then paces the client, and a
        // subscriber that keeps up loses nothing (issue 42: without this, an MQTT publisher
        // read at full speed overran its subscribers' queues). Boxed: rarely needed.
        if session.native().congested() {
            Box::pin(session.native().hold_back_for_congestion()).await;
        }
        let releasing = release_at.filter(|_| read.releasing);
        let silent_at = kept.keep_alive.map(|limit| tokio::time::Instant::now() + limit);
        // An authentication exchange not done in time ends the connection too.
        let silent_at = earliest(silent_at, gate.deadline().map(tokio::time::Instant::from_std));
        tokio::select! {
            _ = outbox.done.cancelled() => break 'read,
            _ = shared.shutdown.cancelled() => {
                if let Some(version) = session.version() {
                    let last: Vec<Packet> = redirect::at_shutdown(&shared.config.mqtt, version).into_iter().collect();
                    send(&writer, &last, version).await;
                }
                break 'read;
            }
            // The delivery task starts when the outbox first has something for the client (a
            // delivery, a PUBACK, a close), never before CONNACK was written: an idle
            // connection holds no task for it (issue 42).
            () = outbox.writer_wanted(), if !delivering && session.version().is_some() => {
                delivering = true;
                let delivery = Delivery::new(
                    (Arc::clone(&writer), Arc::clone(&link), Arc::clone(&outbox)),
                    session.version().unwrap_or(ProtocolVersion::V5),
                    session.client_max_packet,
                    session.client_aliases,
                    registry::client_hash(&session.client_id),
                    Arc::clone(&registry),
                );
                shared.tasks.spawn(delivery.run());
            }
            // Acknowledgements from the delivery task, or a newer connection's takeover.
            () = link.acks.notified() => {
                for ack in link.take_acks() {
                    session.native().handle(tidings_wire::Frame::DeliveryAck(ack));
                }
                if link.state.lock().kicked {
                    if let (Step::Close(last), Some(version)) = (session.refuse(MqttReason::SessionTakenOver), session.version()) {
                        send(&writer, &last, version).await;
                    }
                    break 'read;
                }
            }
            // One timer for both deadlines (each costs every idle connection its room): the
            // read buffer's release, and the silence that ends the connection.
            () = until(earliest(releasing, silent_at)) => {
                if releasing.is_none_or(|at| at > tokio::time::Instant::now()) {
                    break 'read;
                }
                read.release();
                release_at = None;
            }
            () = revoked(&mut kept.revocation) => break 'read,
            got = reader.read_buf(&mut read.buf) => match got {
                Ok(n) if n > 0 => read.after_read(n, room.unwrap_or(read.buf.capacity())),
                _ => break 'read,
            }
        }
    }
    if !delivering {
        // No delivery task took the outbox: what it queued goes with the connection.
        outbox.writer_gone();
    }
    outbox.abort();
    let _ = writer.lock().await.shutdown().await;
    shared.tasks.spawn(linger(reader));
    let Some(generation) = kept.hold else { return };
    // Its own future, boxed: the session, the will and the rest held across its awaits would
    // otherwise widen every connection's future, idle ones included (mqtt_idle_heap).
    Box::pin(finish(session, link, generation, shared, registry)).await;
}

/// The end of a connection that held a session: what was in flight is kept for next time, a
/// delayed will is kept durably, the session is released, and its will and expiry are armed.
async fn finish(
    mut session: MqttSession,
    link: Arc<link::Link>,
    generation: u64,
    shared: Arc<Context>,
    registry: Arc<Registry>,
) {
    // Before its subscriptions go: what was in flight is sent again, as it was, next time.
    link.state.lock().carry();
    // How far the client got, before a session that ends forgets its table entries.
    if let Err(error) = link.persist(&registry.inflight).await {
        tracing::warn!(%error, "MQTT deliveries in flight not written");
    }
    session.end();
    let client_id = session.client_id.clone();
    let (will, expiry) = (session.will.take(), session.expiry);
    let user = session.native().login.as_ref().map(|login| login.user.name.clone());
    // The will is sent at the earlier of its delay and the session's end; one that waits is
    // kept durably before the connection lets go (and before it leaves `/connz`), so a
    // broker restart does not lose it and a new connection, which waits for the release,
    // finds it to cancel.
    let will = will.map(|will| {
        let (will, delay) = *will;
        wills::Pending::new(client_id.clone(), user, will, delay.min(expiry), session::now_us())
    });
    if let Some(pending) = will.as_ref().filter(|pending| pending.delayed) {
        Box::pin(registry.wills.keep(&registry.inflight, pending)).await;
    }
    drop(session);
    let inbound = std::mem::take(&mut link.state.lock().inbound);
    registry.release(&client_id, generation, inbound, expiry > 0);
    if let Some(pending) = will {
        shared.tasks.spawn(ends::publish_will(Arc::clone(&shared), Arc::clone(&registry), pending, Some(generation)));
    }
    if expiry > 0 {
        let task = ends::expire(Arc::clone(&shared), registry, (client_id, generation), expiry);
        shared.tasks.spawn(task);
    }
}

/// Reads and drops what the client still sends, for at most [`LINGER`], after the broker closed
/// its side: closing a socket with unread bytes resets it, and a client still writing (a PUBREL
/// for a PUBREC that crossed our DISCONNECT) would lose the DISCONNECT saying why.
async fn linger(mut reader: BoxRead) {
    let mut scratch = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async { while matches!(reader.read(&mut scratch).await, Ok(n) if n > 0) {} })
        .await;
}

/// How long the connection may be silent: one and a half times the client's keep alive
/// (MQTT-3.1.2-24), or for ever when the client turned it off (0).
fn keep_alive_of(seconds: u16) -> Option<std::time::Duration> {
    (seconds > 0).then(|| std::time::Duration::from_millis(u64::from(seconds) * 1500))
}

/// Resolves once the session's user was revoked (see `crate::login::revocation`), never
/// without a login.
async fn revoked(revocation: &mut Option<crate::login::Revocation>) {
    match revocation {
        Some(revocation) => revocation.as_mut().await,
        None => std::future::pending().await,
    }
}

/// The earlier of two deadlines, either of which may be absent.
fn earliest(a: Option<tokio::time::Instant>, b: Option<tokio::time::Instant>) -> Option<tokio::time::Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Answers a packet that could not be decoded: CONNACK 0x01 / 0x84 for an unsupported protocol
/// level (MQTT-3.1.2-2), else a 5.0 DISCONNECT with the error's reason; then the caller closes.
async fn refuse_malformed(session: &MqttSession, writer: &Writer, error: &MqttError) {
    debug!(%error, "MQTT packet refused");
    let reason = error.reason();
    let (packet, version) = match (error, session.version()) {
        (MqttError::UnsupportedProtocolLevel(level), None) => {
            let version = if *level >= 5 { ProtocolVersion::V5 } else { ProtocolVersion::V311 };
            let connack =
                tidings_wire::mqtt::Connack { session_present: false, reason, properties: Default::default() };
            (vec![Packet::Connack(connack)], version)
        }
        (_, Some(version)) => match session.refuse(reason) {
            Step::Close(packet) => (packet, version),
            Step::Reply(_) => (Vec::new(), version),
        },
        (_, None) => (Vec::new(), ProtocolVersion::V5),
    };
    send(writer, &packet, version).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_listener_is_off_by_default_and_a_bad_address_is_named() {
        assert_eq!(Config::default().mqtt.listen, "");
        let err = Config::from_toml("[mqtt]\nlisten = \"port 1883\"\n").unwrap_err().to_string();
        assert!(err.contains("mqtt.listen"), "{err}");
        assert!(Config::from_toml("[mqtt]\nlisten = \"127.0.0.1:1883\"\n").is_ok());
        assert_eq!(Config::default().mqtt.websocket, "");
        let err = Config::from_toml("[mqtt]\nwebsocket = \"/mqtt\"\n").unwrap_err().to_string();
        assert!(err.contains("mqtt.websocket"), "{err}");
        assert!(Config::from_toml("[mqtt]\nwebsocket = \"127.0.0.1:8083\"\n").is_ok());
    }

    #[test]
    fn a_keep_alive_past_the_longest_or_none_is_told_the_longest() {
        assert_eq!(session::server_keep_alive(120, 60), Some(60));
        assert_eq!(session::server_keep_alive(0, 60), Some(60));
        assert_eq!(session::server_keep_alive(60, 60), None);
        assert_eq!(session::server_keep_alive(30, 60), None);
        assert_eq!(session::server_keep_alive(0, 0), None);
        assert_eq!(session::server_keep_alive(65535, 0), None);
    }

    #[test]
    fn the_one_timer_waits_for_the_earlier_deadline_or_for_ever_without_one() {
        let now = tokio::time::Instant::now();
        let later = now + std::time::Duration::from_secs(1);
        assert_eq!(earliest(Some(later), Some(now)), Some(now));
        assert_eq!(earliest(Some(now), Some(later)), Some(now));
        assert_eq!(earliest(None, Some(later)), Some(later));
        assert_eq!(earliest(Some(later), None), Some(later));
        assert_eq!(earliest(None, None), None);
    }

    #[test]
    fn silence_is_allowed_for_one_and_a_half_keep_alives_or_for_ever_at_zero() {
        assert_eq!(keep_alive_of(10), Some(std::time::Duration::from_secs(15)));
        assert_eq!(keep_alive_of(0), None);
    }
}
