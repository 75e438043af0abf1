//! One point of `overhead`: `n` subscribers at the subscribers' broker and a few at the
//! publisher's, each on its own connection, and one publisher at a fixed rate, best effort or
//! guaranteed. Message `m` goes to topic `overhead.{m mod groups}`; subscriber `i` takes group
//! `i mod groups`, so each message matches a known set of subscribers and each subscriber
//! gets `rate / groups` msg/s. Within a group the messages are numbered from 0, so the
//! measurement engine ([`crate::engine`]) counts each subscriber's share by identity.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use tidings_client::{now_us, Client, Delivery, DeliveryMode, Message, PendingAck, SubscribeOptions};
use tokio::sync::mpsc;

use crate::cpu::{CpuSample, Process, Spent};
use crate::engine::{self, Accounting, Drain, Engine, Mark, Sink, Subscribers};
use crate::latency;
use crate::metrics::{self, Snapshot};

/// The log writer thread's name as the kernel keeps it (its first 15 bytes).
const LOG_WRITER: &str = match tidings_store::WRITER_THREAD.split_at_checked(15) {
    Some((kept, _)) => kept,
    None => tidings_store::WRITER_THREAD,
};

/// Where the two brokers are.
pub(super) struct Brokers {
    /// Client address of the publisher's broker.
    pub phb: String,
    /// Client address of the subscribers' broker.
    pub shb: String,
    /// Their process ids, for their CPU time.
    pub pids: (u32, u32),
    /// Admin address of the publisher's broker, for its account of its acknowledgements.
    pub phb_admin: String,
}

/// What one point sends.
#[derive(Debug, Clone)]
pub(super) struct Load {
    /// Subscribers at the subscribers' broker.
    pub remote: usize,
    /// Subscribers at the publisher's broker (groups 0..local).
    pub local: usize,
    /// Topics the messages are spread over; each subscriber takes one.
    pub groups: usize,
    /// Messages per second.
    pub rate: f64,
    /// Payload bytes.
    pub size: usize,
    /// Publishing time (rounded up to a whole number of rounds over the groups).
    pub duration: Duration,
    /// Guaranteed subscriptions and publishes, or best effort.
    pub guaranteed: bool,
    /// Longest wait for stragglers.
    pub drain: Drain,
}

/// What one point measured.
pub(super) struct Measured {
    /// Messages published.
    pub sent: u64,
    /// Guaranteed publishes acknowledged, and those that failed.
    pub acked: (u64, u64),
    /// The publish rate achieved, msg/s.
    pub achieved_rate: f64,
    /// CPU seconds of `phb`, `shb` and `clients` over the publishing.
    pub cpu: Spent,
    /// Latency from the scheduled send time, µs: local and remote.
    pub latency: [Histogram<u64>; 2],
    /// Every subscriber's share, by identity: local and remote.
    pub accounting: [Accounting; 2],
    /// Seconds to connect and subscribe everyone.
    pub setup_secs: f64,
    /// Guaranteed: the publisher's broker's account of the acknowledgements it sent.
    pub acks: Option<AckEvidence>,
}

/// What the publisher's broker says of the acknowledgements it sent over one guaranteed point
/// (the growth of its counters from before the first publish to after the last ack).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct AckEvidence {
    /// PUBLISH_ACKs sent.
    pub sent: u64,
    /// Of those, sent when the pubend log had reported their tick synced.
    pub after_sync: u64,
    /// fdatasync calls of its pubend log.
    pub syncs: u64,
}

impl AckEvidence {
    /// The counters' growth between two scrapes; a counter the broker does not export is an
    /// error, never a 0.
    fn between(before: &Snapshot, after: &Snapshot) -> anyhow::Result<AckEvidence> {
        let grown = |name: &str| {
            anyhow::ensure!(after.has(name), "the publisher's broker exports no {name}");
            Ok(after.delta(before, name).max(0.0) as u64)
        };
        Ok(AckEvidence {
            sent: grown(metrics::GD_PUBLISHES_ACKED)?,
            after_sync: grown(metrics::GD_PUBLISHES_ACKED_SYNCED)?,
            syncs: grown(metrics::GD_FSYNCS)?,
        })
    }
}

/// Scrapes the publisher's broker, for guaranteed points only.
async fn scrape_phb(b: &Brokers, load: &Load) -> anyhow::Result<Option<Snapshot>> {
    if !load.guaranteed {
        return Ok(None);
    }
    Ok(metrics::scrape_all(vec![b.phb_admin.clone()]).await?.pop())
}

impl Load {
    /// Messages per group (every group gets the same number).
    pub(super) fn per_group(&self) -> u64 {
        ((self.rate * self.duration.as_secs_f64()) / self.groups as f64).ceil().max(1.0) as u64
    }
}

/// Files each first copy's latency under local or remote.
struct Latencies {
    histogram: Arc<Mutex<Histogram<u64>>>,
}

impl Sink for Latencies {
    fn first(&mut self, mark: Mark, d: &Delivery, _: Instant) {
        if let Ok(mut h) = self.histogram.lock() {
            h.saturating_record(d.received_us.saturating_sub(mark.intended_us).max(1));
        }
    }
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// A group's subscribers: its local one first (if any), then its remote ones.
struct Group {
    topic: String,
    local: bool,
    engine: Engine<Latencies>,
}

/// Connects every group's subscribers, 16 groups at a time.
async fn connect(b: &Brokers, load: &Load, shared: &[Arc<Mutex<Histogram<u64>>>; 2]) -> anyhow::Result<Vec<Group>> {
    let mode = if load.guaranteed { DeliveryMode::Guaranteed } else { DeliveryMode::BestEffort };
    let groups = (0..load.groups).filter(|&k| k < load.local || k < load.remote);
    stream::iter(groups)
        .map(|k| async move {
            let topic = format!("overhead.{k}");
            let local = k < load.local;
            let remote = (k..load.remote).step_by(load.groups).count();
            let mut addrs = vec![b.phb.clone(); usize::from(local)];
            addrs.extend(std::iter::repeat_n(b.shb.clone(), remote));
            let spec = Subscribers {
                addrs,
                options: SubscribeOptions::new(&topic).mode(mode),
                name: format!("ovh-{k}"),
                ..Subscribers::at("", 0, &topic, load.per_group())
            };
            let sink = |i: usize| Latencies { histogram: shared[usize::from(!(local && i == 0))].clone() };
            let engine = Engine::connect(&spec, sink).await?;
            anyhow::Ok(Group { topic, local, engine })
        })
        .buffered(16)
        .try_collect()
        .await
}

/// Runs one point.
pub(super) async fn run(b: &Brokers, load: &Load) -> anyhow::Result<Measured> {
    let shared = [Arc::new(Mutex::new(histogram()?)), Arc::new(Mutex::new(histogram()?))];
    let started = Instant::now();
    let groups = connect(b, load, &shared).await?;
    let setup_secs = started.elapsed().as_secs_f64();
    let publisher = Client::builder(b.phb.as_str()).name("ovh-pub").no_reconnect().connect().await?;
    if !load.guaranteed {
        // Best-effort routes are up once every subscriber heard a probe; a guaranteed
        // subscription is confirmed only after the network's barrier, so it needs none.
        let probes: Vec<_> = groups
            .iter()
            .map(|g| g.engine.probe(&publisher, &g.topic, &[], load.size, Duration::from_secs(60)))
            .collect();
        stream::iter(probes).buffer_unordered(32).try_collect::<Vec<_>>().await?;
    }
    let (tx, rx) = mpsc::unbounded_channel::<PendingAck>();
    let acks = tokio::spawn(engine::count_acks(rx));
    let processes = [
        ("phb", Process::Pid(b.pids.0)),
        ("phb_log_writer", Process::Threads(b.pids.0, LOG_WRITER)),
        ("shb", Process::Pid(b.pids.1)),
        ("clients", Process::This),
    ];
    let scraped = scrape_phb(b, load).await?;
    let before = CpuSample::take(&processes);
    let sent = load.per_group() * load.groups as u64;
    let interval = Duration::from_secs_f64(1.0 / load.rate);
    let (start, start_us) = (Instant::now(), now_us());
    for m in 0..sent {
        let intended_us = latency::scheduled((start, start_us), interval, m).await;
        let (group, number) = (m % load.groups as u64, m / load.groups as u64);
        let payload = engine::payload(number, intended_us, load.size);
        let message = Message::new(&format!("overhead.{group}"), &[], payload, now_us())?;
        if load.guaranteed {
            let _ = tx.send(publisher.send_guaranteed(message).await?);
        } else {
            publisher.publish_message(message).await?;
        }
    }
    publisher.flush().await?;
    let achieved_rate = sent as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let cpu = CpuSample::take(&processes).since(&before);
    drop(tx);
    let acked = acks.await?;
    let acks = match (scraped, scrape_phb(b, load).await?) {
        (Some(before), Some(after)) => Some(AckEvidence::between(&before, &after)?),
        _ => None,
    };
    futures::future::join_all(groups.iter().map(|g| g.engine.drain(load.per_group(), load.drain))).await;
    let mut tallies = [Vec::new(), Vec::new()];
    for g in groups {
        for (i, (tally, _)) in g.engine.finish().await?.into_iter().enumerate() {
            tallies[usize::from(!(g.local && i == 0))].push(tally);
        }
    }
    let _ = publisher.close().await;
    let accounting = tallies.map(|t| Accounting::of(load.per_group(), &t));
    let latency = shared.map(|h| h.lock().map(|h| h.clone()).unwrap_or_else(|p| p.into_inner().clone()));
    Ok(Measured { sent, acked, achieved_rate, cpu, latency, accounting, setup_secs, acks })
}
