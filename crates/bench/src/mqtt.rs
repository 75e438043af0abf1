//! The MQTT load generator behind `tidings bench mqtt`: one code path drives tidings, mosquitto
//! and nats-server's MQTT front door alike, over MQTT 3.1.1 (the version all three serve).
//!
//! Why the workspace's own codec (`tidings_wire::mqtt`) and not rumqttc: rumqttc's event loop
//! flushes its socket after every request it takes from its channel (`EventLoop::select`, 0.25),
//! one `write` per publish, and hands each message through a channel and an event. On two cores
//! shared with the broker under test, that client would be what the QoS 0 points measure, and
//! every broker would come out at the client's rate. Here a publisher copies one encoded PUBLISH
//! per message into a 64 KiB batch (its sequence number patched in) and writes the batch; a
//! subscriber reads whatever arrived and decodes every packet in it with the same codec. The
//! codec is differentially tested against `mqtt-proto` (docs/mqtt.md), and it is the same bytes
//! for every broker, so the comparison stays fair; the load is a few hundred lines, no client.
//!
//! Clock points, as the native throughput measurement's: received msg/s = all deliveries /
//! (the latest last receive - publish start); acknowledged publishes/s = PUBACKs / (last PUBACK
//! - first send).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_wire::mqtt::{
    Connect, Packet, PacketId, Properties, ProtocolVersion, Publish, QoS, Subscribe, SubscriptionOptions,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const V311: ProtocolVersion = ProtocolVersion::V311;
/// The topic every point publishes on.
pub const TOPIC: &str = "bench/t";
/// The largest packet a bench client accepts.
const MAX_PACKET: usize = 1 << 20;
/// Bytes of publishes written at once.
const BATCH: usize = 64 * 1024;

/// One MQTT 3.1.1 connection: its socket and what was read but not yet decoded.
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    /// Connects to `addr` as `client_id` (clean session, keep alive 10 minutes: no pings within
    /// a run) and waits for a successful CONNACK.
    pub async fn connect(addr: &str, client_id: &str) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let mut conn = Conn { stream, buf: BytesMut::with_capacity(256) };
        let connect = Connect {
            version: V311,
            clean_start: true,
            keep_alive: 600,
            properties: Properties::default(),
            client_id: client_id.into(),
            will: None,
            username: None,
            password: None,
        };
        conn.send(&Packet::Connect(Box::new(connect))).await?;
        match conn.next().await? {
            Packet::Connack(c) if !c.reason.is_error() => Ok(conn),
            other => anyhow::bail!("{addr} answered CONNECT with {other:?}"),
        }
    }

    async fn send(&mut self, packet: &Packet) -> anyhow::Result<()> {
        let mut out = BytesMut::new();
        packet.encode(V311, &mut out)?;
        Ok(self.stream.write_all(&out).await?)
    }

    /// The next packet, reading as needed; an error at the end of the stream.
    async fn next(&mut self) -> anyhow::Result<Packet> {
        loop {
            if let Some(packet) = Packet::decode(&mut self.buf, V311, MAX_PACKET)? {
                return Ok(packet);
            }
            self.fill().await?;
        }
    }

    /// Reads what arrived (at least one byte); an error at the end of the stream.
    async fn fill(&mut self) -> anyhow::Result<()> {
        self.buf.reserve(BATCH);
        anyhow::ensure!(self.stream.read_buf(&mut self.buf).await? > 0, "the broker closed the connection");
        Ok(())
    }

    /// Subscribes to `filter` at `qos` and waits for a SUBACK that grants it.
    pub async fn subscribe(&mut self, filter: &str, qos: QoS) -> anyhow::Result<()> {
        let packet_id = PacketId::new(1).ok_or_else(|| anyhow::anyhow!("packet id 0"))?;
        let filters = vec![(filter.to_string(), SubscriptionOptions::qos(qos))];
        self.send(&Packet::Subscribe(Subscribe { packet_id, properties: Properties::default(), filters })).await?;
        match self.next().await? {
            Packet::Suback(s) if s.reasons.iter().all(|r| !r.is_error()) => Ok(()),
            other => anyhow::bail!("SUBSCRIBE {filter} was answered with {other:?}"),
        }
    }
}

/// One PUBLISH encoded once, copied per message with its number patched in.
struct Template {
    bytes: Bytes,
    /// Where the payload's first 8 bytes (the message's number) are.
    seq_at: usize,
    /// Where the packet identifier is (QoS 1 and 2).
    id_at: Option<usize>,
}

impl Template {
    fn new(qos: QoS, size: usize) -> anyhow::Result<Template> {
        anyhow::ensure!(size >= 8, "the payload carries an 8-byte number: at least 8 bytes, not {size}");
        let mut publish = Publish::at_most_once(TOPIC, vec![0u8; size]);
        if qos != QoS::AtMostOnce {
            publish.qos = qos;
            publish.packet_id = PacketId::new(1);
        }
        let bytes = Packet::Publish(publish).to_bytes(V311)?;
        // 3.1.1 PUBLISH: fixed header, topic, packet identifier (QoS above 0), payload.
        let seq_at = bytes.len() - size;
        let id_at = (qos != QoS::AtMostOnce).then(|| seq_at - 2);
        Ok(Template { seq_at, id_at, bytes })
    }

    fn put(&self, out: &mut BytesMut, seq: u64, id: u16) {
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        out[start + self.seq_at..start + self.seq_at + 8].copy_from_slice(&seq.to_le_bytes());
        if let Some(at) = self.id_at {
            out[start + at..start + at + 2].copy_from_slice(&id.to_be_bytes());
        }
    }
}

/// A QoS 0 fan-out point: one publisher, `subscribers` subscribers of the topic.
#[derive(Debug, Clone)]
pub struct FanSpec {
    /// Payload bytes (at least 8).
    pub size: usize,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Publishing stops after this long...
    pub duration: Duration,
    /// ...or after this many messages.
    pub max_messages: u64,
    /// Longest wait for the subscribers after publishing (they are also given up on after 3 s
    /// without progress).
    pub drain: Duration,
}

/// What a fan-out point measured.
#[derive(Debug, Clone, Serialize)]
pub struct FanResult {
    /// Messages published.
    pub sent: u64,
    /// Published msg/s.
    pub publish_msg_s: f64,
    /// Deliveries at all subscribers together.
    pub received: u64,
    /// Deliveries per second, all subscribers together.
    pub received_msg_s: f64,
    /// Deliveries missing (sent x subscribers - received).
    pub lost: u64,
    /// Deliveries that repeated or went back on an earlier number.
    pub out_of_order: u64,
    /// Subscribers whose connection ended before the end.
    pub dropped_subscribers: u64,
}

/// One subscriber's counts, shared with the measuring task.
#[derive(Default)]
struct Tally {
    received: AtomicU64,
    out_of_order: AtomicU64,
    /// µs after the publish start of the last delivery.
    last_us: AtomicU64,
    dropped: AtomicBool,
}

async fn count(mut conn: Conn, tally: Arc<Tally>, start: Arc<std::sync::OnceLock<Instant>>) {
    let mut next = 0u64;
    loop {
        loop {
            match Packet::decode(&mut conn.buf, V311, MAX_PACKET) {
                Ok(Some(Packet::Publish(p))) if p.payload.len() >= 8 => {
                    let seq = u64::from_le_bytes(p.payload[..8].try_into().unwrap_or_default());
                    if seq < next {
                        tally.out_of_order.fetch_add(1, Ordering::Relaxed);
                    }
                    next = seq + 1;
                    tally.received.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return tally.dropped.store(true, Ordering::Relaxed),
            }
        }
        if let Some(start) = start.get() {
            tally.last_us.store(start.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        if conn.fill().await.is_err() {
            return tally.dropped.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs a QoS 0 fan-out point against the broker at `addr`.
pub async fn fan(addr: &str, spec: &FanSpec) -> anyhow::Result<FanResult> {
    let start = Arc::new(std::sync::OnceLock::new());
    let mut tallies = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..spec.subscribers {
        let mut conn = Conn::connect(addr, &format!("bench-sub-{i}")).await?;
        conn.subscribe(TOPIC, QoS::AtMostOnce).await?;
        let tally = Arc::new(Tally::default());
        tallies.push(tally.clone());
        tasks.push(tokio::spawn(count(conn, tally, start.clone())));
    }
    let mut publisher = Conn::connect(addr, "bench-pub").await?;
    let template = Template::new(QoS::AtMostOnce, spec.size)?;
    let begun = Instant::now();
    let _ = start.set(begun);
    let mut sent = 0u64;
    let mut batch = BytesMut::with_capacity(BATCH + template.bytes.len());
    while sent < spec.max_messages && begun.elapsed() < spec.duration {
        batch.clear();
        while batch.len() < BATCH && sent < spec.max_messages {
            template.put(&mut batch, sent, 0);
            sent += 1;
        }
        publisher.stream.write_all(&batch).await?;
    }
    publisher.stream.flush().await?;
    let published = begun.elapsed().as_secs_f64();
    let total = |t: &[Arc<Tally>]| t.iter().map(|t| t.received.load(Ordering::Relaxed)).sum::<u64>();
    let expected = sent * spec.subscribers as u64;
    let (mut seen, mut progress) = (total(&tallies), Instant::now());
    while seen < expected && progress.elapsed() < Duration::from_secs(3) && begun.elapsed() < spec.duration + spec.drain
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = total(&tallies);
        if now > seen {
            (seen, progress) = (now, Instant::now());
        }
    }
    drop(publisher);
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    let last = tallies.iter().map(|t| t.last_us.load(Ordering::Relaxed)).max().unwrap_or(0) as f64 / 1e6;
    let received = total(&tallies);
    Ok(FanResult {
        sent,
        publish_msg_s: sent as f64 / published,
        received,
        received_msg_s: if last > 0.0 { received as f64 / last } else { 0.0 },
        lost: expected.saturating_sub(received),
        out_of_order: tallies.iter().map(|t| t.out_of_order.load(Ordering::Relaxed)).sum(),
        dropped_subscribers: tallies.iter().filter(|t| t.dropped.load(Ordering::Relaxed)).count() as u64,
    })
}

/// A QoS 1 point: one publisher keeping `window` publishes unacknowledged.
#[derive(Debug, Clone)]
pub struct AckedSpec {
    /// Payload bytes (at least 8).
    pub size: usize,
    /// Publishes in flight.
    pub window: usize,
    /// Publishing time (the last PUBACKs are still waited for, up to 30 s).
    pub duration: Duration,
}

/// What a QoS 1 point measured.
#[derive(Debug, Clone, Serialize)]
pub struct AckedResult {
    /// Publishes sent.
    pub published: u64,
    /// PUBACKs received.
    pub acked: u64,
    /// PUBACKs per second, first send to last PUBACK.
    pub acked_msg_s: f64,
    /// Median publish-to-PUBACK time, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
}

/// Runs a QoS 1 point against the broker at `addr`.
pub async fn acked(addr: &str, spec: &AckedSpec) -> anyhow::Result<AckedResult> {
    anyhow::ensure!((1..=60_000).contains(&spec.window), "a window of 1 to 60,000, not {}", spec.window);
    let mut conn = Conn::connect(addr, "bench-qos1").await?;
    let template = Template::new(QoS::AtLeastOnce, spec.size)?;
    let mut sent_at: Vec<Option<Instant>> = vec![None; 65_536];
    let mut hist = Histogram::<u64>::new(3)?;
    let (mut published, mut acked, mut in_flight) = (0u64, 0u64, 0usize);
    let mut batch = BytesMut::new();
    let begun = Instant::now();
    let mut last_ack = begun;
    loop {
        let sending = begun.elapsed() < spec.duration;
        if !sending && in_flight == 0 {
            break;
        }
        batch.clear();
        while sending && in_flight < spec.window {
            let id = (published % 65_535 + 1) as u16;
            anyhow::ensure!(sent_at[usize::from(id)].is_none(), "packet id {id} still in flight after 65,535 more");
            template.put(&mut batch, published, id);
            sent_at[usize::from(id)] = Some(Instant::now());
            (published, in_flight) = (published + 1, in_flight + 1);
        }
        if !batch.is_empty() {
            conn.stream.write_all(&batch).await?;
        }
        let wait = if sending { spec.duration } else { Duration::from_secs(30) };
        tokio::time::timeout(wait, conn.fill())
            .await
            .map_err(|_| anyhow::anyhow!("{in_flight} publishes not acknowledged within {wait:?}"))??;
        while let Some(packet) = Packet::decode(&mut conn.buf, V311, MAX_PACKET)? {
            if let Packet::Puback(ack) = packet {
                let at = sent_at[usize::from(ack.packet_id.0.get())].take();
                let at = at.ok_or_else(|| anyhow::anyhow!("PUBACK for packet id {} not in flight", ack.packet_id.0))?;
                last_ack = Instant::now();
                hist.record(last_ack.duration_since(at).as_micros() as u64)?;
                (acked, in_flight) = (acked + 1, in_flight - 1);
            }
        }
    }
    let secs = last_ack.duration_since(begun).as_secs_f64();
    Ok(AckedResult {
        published,
        acked,
        acked_msg_s: if secs > 0.0 { acked as f64 / secs } else { 0.0 },
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
    })
}

/// What holding idle connections cost the broker.
#[derive(Debug, Clone, Serialize)]
pub struct IdleResult {
    /// Idle connections held (past one warm-up connection).
    pub connections: u64,
    /// Broker RSS with the warm-up connection alone, bytes.
    pub rss_before_bytes: f64,
    /// Broker RSS with every connection, bytes.
    pub rss_after_bytes: f64,
    /// (after - before) / connections.
    pub bytes_per_connection: f64,
}

/// Opens one warm-up connection, lets the broker settle, reads `rss`, opens `n` more (100 at a
/// time; each waits for its CONNACK), lets it settle again and reads `rss` again. The
/// connections stay silent: keep alive is 10 minutes.
pub async fn idle(
    addr: &str,
    n: usize,
    settle: Duration,
    rss: impl Fn() -> anyhow::Result<f64>,
) -> anyhow::Result<IdleResult> {
    let _warm = Conn::connect(addr, "bench-idle-warm").await?;
    tokio::time::sleep(settle).await;
    let rss_before = rss()?;
    let held: Vec<Conn> = futures::stream::iter(0..n)
        .map(|i| async move { Conn::connect(addr, &format!("bench-idle-{i}")).await })
        .buffer_unordered(100)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    tokio::time::sleep(settle).await;
    let rss_after = rss()?;
    drop(held);
    Ok(IdleResult {
        connections: n as u64,
        rss_before_bytes: rss_before,
        rss_after_bytes: rss_after,
        bytes_per_connection: (rss_after - rss_before) / n.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_templated_publish_decodes_with_its_number_and_packet_id() {
        let template = Template::new(QoS::AtLeastOnce, 256).unwrap();
        let mut out = BytesMut::new();
        template.put(&mut out, 7, 42);
        template.put(&mut out, 8, 43);
        for (seq, id) in [(7u64, 42u16), (8, 43)] {
            let Some(Packet::Publish(p)) = Packet::decode(&mut out, V311, MAX_PACKET).unwrap() else { panic!() };
            assert_eq!((p.topic.as_str(), p.qos, p.payload.len()), (TOPIC, QoS::AtLeastOnce, 256));
            assert_eq!(p.packet_id.map(|i| i.0.get()), Some(id));
            assert_eq!(u64::from_le_bytes(p.payload[..8].try_into().unwrap()), seq);
        }
        assert!(out.is_empty());
    }

    #[test]
    fn a_qos0_template_has_no_packet_id_to_patch() {
        let template = Template::new(QoS::AtMostOnce, 8).unwrap();
        let mut out = BytesMut::new();
        template.put(&mut out, u64::MAX, 0);
        let Some(Packet::Publish(p)) = Packet::decode(&mut out, V311, MAX_PACKET).unwrap() else { panic!() };
        assert_eq!((p.packet_id, p.payload.as_ref()), (None, &u64::MAX.to_le_bytes()[..]));
        assert!(Template::new(QoS::AtMostOnce, 7).is_err());
    }
}
