//! Latency: one publisher sends a fresh message every 1/rate seconds on an absolute schedule;
//! latency is receive time minus the message's `sent_us`, over every delivery of every
//! subscriber. Same method as the peer harness (`-mode lat`). What has not arrived when the
//! drain wait ends counts as lost; a subscriber that did not receive everything, or whose
//! connection closed, is a "dropped subscriber" in the sense of seed 003.
//!
//! Built for many subscribers (10,000 connections in one process): each subscriber keeps only
//! counters and a bitmap of the numbers it saw, and hands its latencies in small batches to one
//! of a few shared histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_client::{now_us, Client, Subscription, Transport};
use tidings_wire::Message;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::flood::{number, payload};
use crate::stats::Moments;
use crate::target::Target;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LatencySpec {
    /// Payload bytes (at least 8: the message number).
    pub size: usize,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Messages per second.
    pub rate: f64,
    /// How long to publish.
    pub duration: Duration,
    /// Longest wait for stragglers afterwards...
    pub drain: Duration,
    /// ...and the longest wait without any progress.
    pub idle: Duration,
    /// Topic.
    pub topic: String,
    /// TCP or UDP for every client.
    pub transport: Transport,
    /// Deliveries each subscriber's client may hold for the application (the client's
    /// default when `None`).
    pub subscription_capacity: Option<usize>,
}

impl Default for LatencySpec {
    fn default() -> LatencySpec {
        LatencySpec {
            size: 200,
            subscribers: 10,
            rate: 1000.0,
            duration: Duration::from_secs(5),
            drain: Duration::from_secs(60),
            idle: Duration::from_secs(5),
            topic: "bench.lat".into(),
            transport: Transport::Tcp,
            subscription_capacity: None,
        }
    }
}

/// One run's figures; latencies in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyResult {
    /// Subscribers.
    pub subscribers: usize,
    /// Messages published.
    pub sent: u64,
    /// Publish rate achieved, msg/s.
    pub achieved_rate: f64,
    /// Seconds to connect and subscribe every subscriber.
    pub setup_secs: f64,
    /// Deliveries received (first copies), all subscribers.
    pub received: u64,
    /// sent × subscribers - received.
    pub lost: u64,
    /// Messages the broker reported dropping (the `missed` counts of deliveries).
    pub missed: u64,
    /// Subscribers that did not receive every message, or whose stream ended.
    pub dropped_subscribers: usize,
    /// Subscribers whose stream ended before the run did.
    pub ended: usize,
    /// Deliveries whose number was not above the previous one's.
    pub out_of_order: u64,
    /// Second copies.
    pub duplicates: u64,
    /// Latency moments (µs).
    pub moments: Moments,
    /// Mean latency.
    pub mean_us: f64,
    /// Standard deviation.
    pub stdev_us: f64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Maximum.
    pub max_us: u64,
}

const SHARDS: usize = 16;
const BATCH: usize = 128;

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

#[derive(Default)]
struct SubStats {
    count: u64,
    missed: u64,
    out_of_order: u64,
    duplicates: u64,
    ended: bool,
}

/// Subscribers connected and subscribed, ready to run.
pub struct Prepared {
    spec: LatencySpec,
    addr: String,
    clients: Vec<Client>,
    tasks: Vec<JoinHandle<SubStats>>,
    shards: Arc<Vec<Mutex<Histogram<u64>>>>,
    progress: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    setup_secs: f64,
}

/// Connects and subscribes every subscriber (64 at a time).
pub async fn prepare(addr: &str, spec: &LatencySpec) -> anyhow::Result<Prepared> {
    let shards = Arc::new((0..SHARDS).map(|_| histogram().map(Mutex::new)).collect::<anyhow::Result<Vec<_>>>()?);
    let progress = Arc::new(AtomicU64::new(0));
    let (stop, _) = watch::channel(false);
    let expected = (spec.rate * spec.duration.as_secs_f64()).round() as u64;
    let started = Instant::now();
    let connected: Vec<(Client, Subscription)> = stream::iter(0..spec.subscribers)
        .map(|i| async move {
            let mut builder =
                Client::builder(addr).name(format!("lat-sub-{i}")).transport(spec.transport).no_reconnect();
            if let Some(capacity) = spec.subscription_capacity {
                builder = builder.subscription_capacity(capacity);
            }
            let client = builder.connect().await?;
            let subscription = client.subscribe(&spec.topic).await?;
            anyhow::Ok((client, subscription))
        })
        .buffer_unordered(64)
        .try_collect()
        .await?;
    let mut prepared = Prepared {
        spec: spec.clone(),
        addr: addr.to_string(),
        clients: Vec::new(),
        tasks: Vec::new(),
        shards,
        progress,
        stop,
        setup_secs: started.elapsed().as_secs_f64(),
    };
    for (i, (client, subscription)) in connected.into_iter().enumerate() {
        let shard = prepared.shards.clone();
        let task =
            receive(subscription, expected, shard, i % SHARDS, prepared.progress.clone(), prepared.stop.subscribe());
        prepared.tasks.push(tokio::spawn(task));
        prepared.clients.push(client);
    }
    Ok(prepared)
}

impl Prepared {
    /// Publishes on schedule, waits for the subscribers, closes every client.
    pub async fn run(self) -> anyhow::Result<LatencyResult> {
        let spec = &self.spec;
        let publisher =
            Client::builder(&self.addr).name("lat-pub").transport(spec.transport).no_reconnect().connect().await?;
        let count = (spec.rate * spec.duration.as_secs_f64()).round() as u64;
        let interval = Duration::from_secs_f64(1.0 / spec.rate);
        let start = Instant::now();
        for n in 0..count {
            tokio::time::sleep_until((start + interval.mul_f64(n as f64)).into()).await;
            publisher.publish_message(Message::new(&spec.topic, &[], payload(n, spec.size), now_us())?).await?;
        }
        publisher.flush().await?;
        let achieved_rate = count as f64 / start.elapsed().as_secs_f64().max(1e-9);
        self.drain(count * spec.subscribers as u64).await;
        self.stop.send_replace(true);
        let mut stats = Vec::new();
        for task in self.tasks {
            stats.push(task.await?);
        }
        let mut total = histogram()?;
        for shard in self.shards.iter() {
            let h = shard.lock().map_err(|_| anyhow::anyhow!("a latency shard was poisoned"))?;
            total.add(&*h)?;
        }
        stream::iter(self.clients.iter().chain([&publisher]))
            .for_each_concurrent(256, |c| async move {
                let _ = c.close().await;
            })
            .await;
        Ok(summarize(spec, count, achieved_rate, self.setup_secs, &stats, &total))
    }

    async fn drain(&self, expected: u64) {
        let deadline = Instant::now() + self.spec.drain;
        let (mut last, mut last_progress) = (u64::MAX, Instant::now());
        while Instant::now() < deadline {
            let now = self.progress.load(Ordering::Relaxed);
            if now >= expected {
                return;
            }
            if now != last {
                (last, last_progress) = (now, Instant::now());
            } else if last_progress.elapsed() >= self.spec.idle {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn summarize(
    spec: &LatencySpec,
    sent: u64,
    achieved_rate: f64,
    setup_secs: f64,
    stats: &[SubStats],
    h: &Histogram<u64>,
) -> LatencyResult {
    let received: u64 = stats.iter().map(|s| s.count).sum();
    let moments = Moments::of(h);
    LatencyResult {
        subscribers: spec.subscribers,
        sent,
        achieved_rate,
        setup_secs,
        received,
        lost: (sent * spec.subscribers as u64).saturating_sub(received),
        missed: stats.iter().map(|s| s.missed).sum(),
        dropped_subscribers: stats.iter().filter(|s| s.count < sent || s.ended).count(),
        ended: stats.iter().filter(|s| s.ended).count(),
        out_of_order: stats.iter().map(|s| s.out_of_order).sum(),
        duplicates: stats.iter().map(|s| s.duplicates).sum(),
        moments,
        mean_us: moments.mean,
        stdev_us: moments.stdev(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    }
}

async fn receive(
    mut subscription: Subscription,
    expected: u64,
    shards: Arc<Vec<Mutex<Histogram<u64>>>>,
    shard: usize,
    progress: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> SubStats {
    let mut stats = SubStats::default();
    let mut seen = vec![0u64; (expected as usize).div_ceil(64)];
    let mut previous: Option<u64> = None;
    let mut batch = Vec::with_capacity(BATCH);
    let flush = |batch: &mut Vec<u64>| {
        if let Ok(mut h) = shards[shard].lock() {
            for &v in batch.iter() {
                h.saturating_record(v);
            }
        }
        batch.clear();
    };
    while stats.count < expected {
        let delivery = tokio::select! {
            d = subscription.next() => d,
            _ = stop.changed() => break,
        };
        let Some(d) = delivery else {
            stats.ended = true;
            break;
        };
        stats.missed += u64::from(d.missed);
        let Some(n) = number(&d.payload).filter(|&n| n < expected) else { continue };
        if previous.is_some_and(|p| n <= p) {
            stats.out_of_order += 1;
        }
        previous = Some(n);
        let (word, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        if seen[word] & bit != 0 {
            stats.duplicates += 1;
            continue;
        }
        seen[word] |= bit;
        stats.count += 1;
        progress.fetch_add(1, Ordering::Relaxed);
        batch.push(d.received_us.saturating_sub(d.sent_us).max(1));
        if batch.len() == BATCH {
            flush(&mut batch);
        }
    }
    flush(&mut batch);
    stats
}

/// Runs one latency measurement against `target`.
pub async fn run(target: &Target, spec: &LatencySpec) -> anyhow::Result<LatencyResult> {
    prepare(target.addr(spec.transport)?, spec).await?.run().await
}
