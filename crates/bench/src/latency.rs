//! Latency: one publisher sends a fresh message every 1/rate seconds on an absolute schedule;
//! latency is the application's receive time minus the time the schedule said to send the
//! message (so a publisher that falls behind cannot hide a broker's stall: no coordinated
//! omission), over every delivery of every subscriber. Latency from the actual send time is
//! kept as a second figure, and the publish rate achieved is recorded. Same method as the
//! peer harness in `bench/peers/` (`-mode lat`). What has not arrived when the drain wait ends
//! counts as lost, by identity ([`crate::engine`]); a subscriber that did not receive
//! everything, or whose connection closed, is a "dropped subscriber" in the sense of seed 003.
//!
//! Built for many subscribers (10,000 connections in one process): each subscriber keeps only
//! its tally and hands its latencies in small batches to one of a few shared histograms.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_client::{now_us, Client, Delivery, Transport};
use tidings_wire::Message;

use crate::engine::{self, Accounting, Drain, Engine, Mark, Sink, Subscribers};
use crate::target::Target;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LatencySpec {
    /// Payload bytes (at least 16: the message's number and intended send time).
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
    /// Messages published.
    pub sent: u64,
    /// Publish rate achieved, msg/s (sent / time until the last send returned).
    pub achieved_rate: f64,
    /// Probe messages published before the run (brokers count them too).
    pub probes: u64,
    /// Probe deliveries received, all subscribers.
    pub probes_received: u64,
    /// Seconds to connect and subscribe every subscriber.
    pub setup_secs: f64,
    /// Deliveries received (first copies), all subscribers.
    pub received: u64,
    /// (subscriber, message) pairs that never arrived.
    pub lost: u64,
    /// Messages the broker reported dropping (the `missed` counts of deliveries).
    pub missed: u64,
    /// Subscribers no longer served at the end ([`engine::Tally::alive_at_end`]).
    pub dropped_subscribers: usize,
    /// Subscribers that lost anything.
    pub lossy_subscribers: usize,
    /// The most one subscriber lost.
    pub max_lost: u64,
    /// Losses no subscriber was told of (see [`Accounting::unattributed`]).
    pub unattributed: u64,
    /// Deliveries whose number was not above the previous one's.
    pub out_of_order: u64,
    /// Second copies.
    pub duplicates: u64,
    /// Mean latency from the intended send time.
    pub mean_us: f64,
    /// Standard deviation.
    pub stdev_us: f64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Maximum.
    pub max_us: u64,
    /// Mean latency from the actual send time (hides a late publisher; for comparison only).
    pub send_mean_us: f64,
    /// Median from the actual send time.
    pub send_p50_us: u64,
    /// 99th percentile from the actual send time.
    pub send_p99_us: u64,
    /// Maximum from the actual send time.
    pub send_max_us: u64,
}

const SHARDS: usize = 16;
const BATCH: usize = 128;

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// Histograms shared by the subscribers: from the intended and from the actual send time.
type Shards = Arc<Vec<Mutex<(Histogram<u64>, Histogram<u64>)>>>;

/// Batches one subscriber's latencies into its shard.
struct Latencies {
    shards: Shards,
    shard: usize,
    batch: Vec<(u64, u64)>,
}

impl Sink for Latencies {
    fn first(&mut self, mark: Mark, d: &Delivery, _: Instant) {
        let intended = d.received_us.saturating_sub(mark.intended_us).max(1);
        let actual = d.received_us.saturating_sub(d.sent_us).max(1);
        self.batch.push((intended, actual));
        if self.batch.len() == BATCH {
            self.finish();
        }
    }

    fn finish(&mut self) {
        if let Ok(mut h) = self.shards[self.shard].lock() {
            for &(intended, actual) in &self.batch {
                h.0.saturating_record(intended);
                h.1.saturating_record(actual);
            }
        }
        self.batch.clear();
    }
}

/// Subscribers connected and subscribed, ready to run.
pub struct Prepared {
    spec: LatencySpec,
    addr: String,
    engine: Engine<Latencies>,
    shards: Shards,
}

/// Connects and subscribes every subscriber (64 at a time).
pub async fn prepare(addr: &str, spec: &LatencySpec) -> anyhow::Result<Prepared> {
    anyhow::ensure!(spec.size >= engine::MARK_BYTES, "latency messages need at least {} bytes", engine::MARK_BYTES);
    let pairs = (0..SHARDS).map(|_| Ok((histogram()?, histogram()?)));
    let shards: Shards = Arc::new(pairs.map(|p| p.map(Mutex::new)).collect::<anyhow::Result<Vec<_>>>()?);
    let subscribers = Subscribers {
        transport: spec.transport,
        capacity: spec.subscription_capacity,
        name: "lat-sub".into(),
        ..Subscribers::at(addr, spec.subscribers, &spec.topic, count(spec))
    };
    let sink = |i: usize| Latencies { shards: shards.clone(), shard: i % SHARDS, batch: Vec::with_capacity(BATCH) };
    let engine = Engine::connect(&subscribers, sink).await?;
    Ok(Prepared { spec: spec.clone(), addr: addr.to_string(), engine, shards })
}

fn count(spec: &LatencySpec) -> u64 {
    (spec.rate * spec.duration.as_secs_f64()).round() as u64
}

impl Prepared {
    /// Probes, publishes on schedule, waits for the subscribers, closes every client.
    pub async fn run(self) -> anyhow::Result<LatencyResult> {
        let spec = &self.spec;
        let count = count(spec);
        let publisher = Publisher::start(&self.addr, spec, count).await?;
        // A failed probe drops the publisher: its thread closes the client and ends.
        let probes = self.engine.probe(&publisher.client, &spec.topic, &[], spec.size, Duration::from_secs(60)).await?;
        let achieved_rate = publisher.publish().await?;
        self.engine.drain(count, Drain { idle: spec.idle, max: spec.drain }).await;
        let setup_secs = self.engine.setup_secs;
        let tallies: Vec<_> = self.engine.finish().await?.into_iter().map(|(t, _)| t).collect();
        let (mut intended, mut actual) = (histogram()?, histogram()?);
        for shard in self.shards.iter() {
            let h = shard.lock().map_err(|_| anyhow::anyhow!("a latency shard was poisoned"))?;
            intended.add(&h.0)?;
            actual.add(&h.1)?;
        }
        let accounting = Accounting::of(count, &tallies);
        let run = Run { achieved_rate, probes, setup_secs, accounting };
        Ok(summarize(&run, &intended, &actual))
    }
}

/// The scheduled publisher, on an OS thread of its own with a one-thread runtime: its timer,
/// its sends and its client's writer task all run there, so a send waits for one wake-up of
/// one thread. On the shared runtime a send took three hand-offs (a worker's timer, a
/// blocking thread's `nanosleep`, a worker again, then the client's writer task on whichever
/// worker was free), each a wait for a CPU on a loaded machine: at 10 subscribers the
/// publisher's own lateness was most of tidings' p99 from the schedule (2.5 ms of 3.0 ms,
/// against 1.2 ms for the Go peer harness's goroutine in the same run).
struct Publisher {
    /// The connected client (the subscribers' probes go through it).
    client: Client,
    /// Starts the scheduled sends.
    go: tokio::sync::oneshot::Sender<()>,
    /// The publish rate achieved, once every send is flushed (the client is closed then).
    done: tokio::sync::oneshot::Receiver<anyhow::Result<f64>>,
}

impl Publisher {
    /// Connects the publisher on its thread and waits for it to be ready.
    async fn start(addr: &str, spec: &LatencySpec, count: u64) -> anyhow::Result<Publisher> {
        use tokio::sync::oneshot;
        let (ready_tx, ready_rx) = oneshot::channel::<anyhow::Result<Client>>();
        let (go, go_rx) = oneshot::channel::<()>();
        let (done_tx, done) = oneshot::channel();
        let (addr, spec) = (addr.to_string(), spec.clone());
        std::thread::Builder::new().name("lat-pub".into()).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            runtime.block_on(async move {
                let connect = Client::builder(&addr).name("lat-pub").transport(spec.transport).no_reconnect().connect();
                let client = match connect.await {
                    Ok(client) => client,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(client.clone()));
                // While the probes run the client's tasks run here; a dropped `go` is a failed probe.
                if go_rx.await.is_ok() {
                    let _ = done_tx.send(send_on_schedule(&client, &spec, count).await);
                }
                let _ = client.close().await;
            });
        })?;
        let client = ready_rx.await.map_err(|_| anyhow::anyhow!("the publisher's thread ended"))??;
        Ok(Publisher { client, go, done })
    }

    /// Runs the scheduled sends and returns the publish rate achieved.
    async fn publish(self) -> anyhow::Result<f64> {
        let _ = self.go.send(());
        self.done.await.map_err(|_| anyhow::anyhow!("the publisher's thread ended"))?
    }
}

/// Sends `count` messages on schedule from the publisher's own thread and flushes them; the
/// publish rate achieved (sent / time until the last send returned).
async fn send_on_schedule(publisher: &Client, spec: &LatencySpec, count: u64) -> anyhow::Result<f64> {
    let interval = Duration::from_secs_f64(1.0 / spec.rate);
    let (start, start_us) = (Instant::now(), now_us());
    for n in 0..count {
        let offset = interval.mul_f64(n as f64);
        let due = start + offset;
        if let Some(early) = due.checked_sub(COARSE_TIMER_SLACK).filter(|early| *early > Instant::now()) {
            tokio::time::sleep_until(early.into()).await;
        }
        // The client's writer sends the previous message now, not after this sleep.
        tokio::task::yield_now().await;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let intended_us = start_us + offset.as_micros() as u64;
        let message = Message::new(&spec.topic, &[], engine::payload(n, intended_us, spec.size), now_us())?;
        publisher.publish_message(message).await?;
    }
    let achieved_rate = count as f64 / start.elapsed().as_secs_f64().max(1e-9);
    publisher.flush().await?;
    Ok(achieved_rate)
}

/// Waits for message `n`'s place on an absolute schedule, one every `interval` from `start`
/// (an instant and the same moment in Unix µs), and returns that place in Unix µs: its
/// intended send time, so that a publisher falling behind cannot move the schedule.
pub async fn scheduled(start: (Instant, u64), interval: Duration, n: u64) -> u64 {
    let offset = interval.mul_f64(n as f64);
    sleep_precisely_until(start.0 + offset).await;
    start.1 + offset.as_micros() as u64
}

/// How far ahead of a send the coarse timer hands over to the precise one (two of tokio's
/// millisecond ticks).
const COARSE_TIMER_SLACK: Duration = Duration::from_millis(2);

/// Sleeps until `due` to within tens of microseconds. Tokio's timer counts whole milliseconds and
/// rounds a deadline up to the next one, so a send scheduled with it left 1 to 2 ms late: at
/// 1,000 msg/s that lateness (intended minus actual send time, mean 1.6 ms, against 0.6 ms for
/// the Go peer harness's `time.Sleep` in the same run) was most of the p50 counted against the
/// broker. The last stretch is slept on a blocking thread (`nanosleep`), as Go does it.
async fn sleep_precisely_until(due: Instant) {
    if let Some(early) = due.checked_sub(COARSE_TIMER_SLACK) {
        if early > Instant::now() {
            tokio::time::sleep_until(early.into()).await;
        }
    }
    let rest = due.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        // Only a panic in `sleep` could fail it; the send is then as late as it is.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

struct Run {
    achieved_rate: f64,
    probes: u64,
    setup_secs: f64,
    accounting: Accounting,
}

fn summarize(run: &Run, h: &Histogram<u64>, send: &Histogram<u64>) -> LatencyResult {
    let a = &run.accounting;
    LatencyResult {
        sent: a.sent,
        achieved_rate: run.achieved_rate,
        probes: run.probes,
        probes_received: a.probes,
        setup_secs: run.setup_secs,
        received: a.received,
        lost: a.lost,
        missed: a.missed,
        dropped_subscribers: a.dropped_subscribers,
        lossy_subscribers: a.lossy_subscribers,
        max_lost: a.max_lost,
        unattributed: a.unattributed,
        out_of_order: a.out_of_order,
        duplicates: a.duplicates,
        mean_us: h.mean(),
        stdev_us: h.stdev(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
        send_mean_us: send.mean(),
        send_p50_us: send.value_at_quantile(0.5),
        send_p99_us: send.value_at_quantile(0.99),
        send_max_us: send.max(),
    }
}

/// Runs one latency measurement against `target`.
pub async fn run(target: &Target, spec: &LatencySpec) -> anyhow::Result<LatencyResult> {
    prepare(target.addr(spec.transport)?, spec).await?.run().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_and_deviation_are_the_histogram_s() {
        let mut h = histogram().unwrap();
        for v in [10, 20, 30] {
            h.record(v).unwrap();
        }
        let run = Run { achieved_rate: 0.0, probes: 0, setup_secs: 0.0, accounting: Accounting::default() };
        let r = summarize(&run, &h, &h);
        assert_eq!((h.len(), h.min(), r.max_us), (3, 10, 30));
        assert!((r.mean_us - 20.0).abs() < 0.1 && (r.send_mean_us - 20.0).abs() < 0.1);
        assert!((r.stdev_us - 8.165).abs() < 0.1);
    }

    /// How late each of 21 sends scheduled 1.3 ms apart was; sorted.
    async fn lateness() -> Vec<Duration> {
        let start = (Instant::now(), now_us());
        let mut late = Vec::new();
        for n in 1..=21 {
            let due = start.0 + Duration::from_micros(1_300 * n);
            let intended_us = scheduled(start, Duration::from_micros(1_300), n).await;
            let now = Instant::now();
            assert!(now >= due, "send {n} left {:?} early", due - now);
            assert_eq!(intended_us, start.1 + 1_300 * n);
            late.push(now - due);
        }
        late.sort();
        late
    }

    #[tokio::test]
    async fn a_scheduled_send_is_never_early_and_late_by_well_under_a_timer_tick() {
        // The blocking thread is started first, as the publisher's probes do before a run.
        scheduled((Instant::now(), now_us()), Duration::from_micros(500), 1).await;
        // The best of three rounds: this machine's other work can stall any one of them. Tokio's
        // millisecond timer alone left sends 1-2 ms late (mean 1.6 ms in a latency run).
        let mut medians = Vec::new();
        for _ in 0..3 {
            medians.push(lateness().await[10]);
        }
        let best = medians.iter().min().copied().unwrap_or_default();
        assert!(best < Duration::from_micros(600), "median lateness of each round: {medians:?}");
    }
}
