//! A durable subscriber's catch-up (issue 14's figure): how fast a durable subscription that
//! was away replays a backlog, and what that does to live guaranteed subscribers.
//!
//! One repetition, on a fresh broker with its pubend log on the disk measured:
//! 1. a durable subscription `catchup` on `backlog.>` is made and its client leaves;
//! 2. `backlog` guaranteed messages of `size` bytes are published and acknowledged (the
//!    durable subscription holds them in the log);
//! 3. a live guaranteed subscriber on `live.>` and a live guaranteed publisher at `live_rate`
//!    start, each a `tidings` process of its own; for `baseline` the live latency is recorded
//!    alone;
//! 4. the durable client comes back: the catch-up runs from its SUBSCRIBE to its last backlog
//!    message, and the live latency is recorded over exactly that time.
//!
//! Clock points: the catch-up rate is backlog messages over the time from just before the
//! durable SUBSCRIBE is sent to the moment the application takes the last one; live latency
//! runs from the message's send timestamp (set by `tidings pub` just before its client is asked
//! to publish it) to the moment `tidings sub`'s application takes it (its `latency_us`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_client::{now_us, Client, Message, SubscribeOptions};

use crate::acked::ScratchDir;
use crate::target::Target;
use crate::tools::Tool;

/// One point of the measurement.
#[derive(Debug, Clone)]
pub struct CatchUpSpec {
    /// Backlog messages.
    pub backlog: u64,
    /// Payload bytes.
    pub size: usize,
    /// Guaranteed publishes in flight while the backlog is made.
    pub window: usize,
    /// Live messages per second.
    pub live_rate: u64,
    /// How long live latency is measured alone before the catch-up.
    pub baseline: Duration,
}

/// What one repetition measured.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpResult {
    /// Backlog messages the durable subscriber received.
    pub replayed: u64,
    /// Seconds from its SUBSCRIBE to its last backlog message.
    pub secs: f64,
    /// Backlog messages per second.
    pub catchup_rate: f64,
    /// Live messages received alone / during the catch-up.
    pub live_alone: u64,
    /// Live messages received during the catch-up.
    pub live_during: u64,
    /// Live latency alone: median and 99th percentile, µs.
    pub alone_p50_us: u64,
    /// See `alone_p50_us`.
    pub alone_p99_us: u64,
    /// Live latency during the catch-up, µs.
    pub during_p50_us: u64,
    /// See `during_p50_us`.
    pub during_p99_us: u64,
    /// How long the live publisher's and subscriber's threads waited for a CPU while runnable,
    /// ms per second of the baseline: the share of their latency the machine's load makes.
    pub alone_cpu_wait_ms_s: f64,
    /// The same over the catch-up.
    pub during_cpu_wait_ms_s: f64,
}

const DURABLE: &str = "catchup";

/// Runs one repetition against a fresh broker at `target`.
pub async fn run(target: &Target, spec: &CatchUpSpec) -> anyhow::Result<CatchUpResult> {
    // 1. The durable subscription exists, then its client leaves.
    let away = Client::connect(&target.tcp).await?;
    let sub = away.subscribe_with(SubscribeOptions::new("backlog.>").durable(DURABLE)).await?;
    drop(sub);
    away.close().await?;
    // 2. The backlog, acknowledged.
    let publisher = Client::builder(&target.tcp).guaranteed_window(spec.window).connect().await?;
    let payload = Bytes::from(vec![0x5a; spec.size]);
    let mut pending = std::collections::VecDeque::new();
    for _ in 0..spec.backlog {
        let message = Message::new("backlog.t", &[], payload.clone(), now_us())?;
        pending.push_back(publisher.send_guaranteed(message).await?);
        while pending.len() > spec.window * 2 {
            if let Some(ack) = pending.pop_front() {
                ack.await?;
            }
        }
    }
    for ack in pending {
        ack.await?;
    }
    publisher.close().await?;
    // 3. Live traffic, measured alone.
    let live = Live::start(target, spec).await?;
    let (alone_from, alone_waits) = (now_us(), live.waiting());
    tokio::time::sleep(spec.baseline).await;
    let alone = live.between(alone_from, now_us())?;
    let alone_cpu_wait_ms_s = alone_waits.per_second();
    // 4. The catch-up, with live traffic measured over exactly its time.
    let back = Client::connect(&target.tcp).await?;
    let (started, during_from, during_waits) = (Instant::now(), now_us(), live.waiting());
    let mut sub = back.subscribe_with(SubscribeOptions::new("backlog.>").durable(DURABLE)).await?;
    let mut replayed = 0u64;
    while replayed < spec.backlog {
        match tokio::time::timeout(Duration::from_secs(60), sub.recv()).await {
            Ok(Some(_)) => replayed += 1,
            Ok(None) => anyhow::bail!("the durable subscription ended after {replayed} messages"),
            Err(_) => anyhow::bail!("the catch-up stalled after {replayed} messages"),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let during_to = now_us();
    let during_cpu_wait_ms_s = during_waits.per_second();
    // Deliveries received during the catch-up are in the subscriber's output a little later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = live.between(during_from, during_to)?;
    drop(live);
    sub.unsubscribe().await?;
    back.close().await?;
    let q = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    Ok(CatchUpResult {
        replayed,
        secs,
        catchup_rate: replayed as f64 / secs,
        live_alone: alone.len(),
        live_during: during.len(),
        alone_p50_us: q(&alone, 0.5),
        alone_p99_us: q(&alone, 0.99),
        during_p50_us: q(&during, 0.5),
        during_p99_us: q(&during, 0.99),
        alone_cpu_wait_ms_s,
        during_cpu_wait_ms_s,
    })
}

/// The live processes' time waiting for a CPU from some moment on.
struct Waiting<'a> {
    live: &'a Live,
    since: (Instant, Duration),
}

impl Waiting<'_> {
    /// Milliseconds of waiting per second since then (a thread that ended took its count
    /// with it: an undercount, never a negative).
    fn per_second(&self) -> f64 {
        let (at, waited) = self.since;
        let wall = at.elapsed().as_secs_f64();
        self.live.waited().saturating_sub(waited).as_secs_f64() * 1e3 / wall.max(1e-9)
    }
}

/// Live traffic in processes of their own (`tidings pub --guaranteed --rate` and `tidings sub
/// --guaranteed --json`), as a live subscriber is in practice: the catch-up's own client then
/// competes with it for the machine, as another application would, but not for its runtime.
/// Each delivery's latency is the subscriber's `latency_us` (its application's receipt less
/// the publisher's stamp), filed by its `received_us`; their lines are kept in a scratch
/// directory of their own.
struct Live {
    /// The subscriber, then the publisher.
    tools: [Tool; 2],
    _dir: ScratchDir,
}

impl Live {
    async fn start(target: &Target, spec: &CatchUpSpec) -> anyhow::Result<Live> {
        let (exe, dir) = (std::env::current_exe()?, ScratchDir::new(&std::env::temp_dir(), "catchup-live")?);
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let sub = Tool::spawn(
            &exe,
            &dir.0,
            "sub",
            &args(&["sub", "--server", &target.tcp, "live.>", "--guaranteed", "--json"]),
        )?;
        // The subscription is confirmed before the first live message is published.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (rate, size) = (spec.live_rate.to_string(), spec.size.to_string());
        let publish = ["pub", "--server", &target.tcp, "live.t", "x", "--guaranteed", "--rate", &rate, "--size", &size];
        let publisher = Tool::spawn(&exe, &dir.0, "pub", &args(&[&publish[..], &["--count", "1000000000"]].concat()))?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(Live { tools: [sub, publisher], _dir: dir })
    }

    /// How long the live processes have waited for a CPU while runnable, in all.
    fn waited(&self) -> Duration {
        self.tools.iter().map(|tool| crate::cpu::waited_for_cpu(tool.id())).sum()
    }

    /// Starts counting the live processes' waits for a CPU.
    fn waiting(&self) -> Waiting<'_> {
        Waiting { live: self, since: (Instant::now(), self.waited()) }
    }

    /// The latencies of deliveries received in `[from, to]` (µs since the epoch).
    fn between(&self, from: u64, to: u64) -> anyhow::Result<Histogram<u64>> {
        let mut h = Histogram::new_with_bounds(1, 60_000_000, 3)?;
        for v in self.tools[0].lines()? {
            if let (Some(at), Some(latency)) = (v["received_us"].as_u64(), v["latency_us"].as_u64()) {
                if (from..=to).contains(&at) {
                    h.saturating_record(latency);
                }
            }
        }
        Ok(h)
    }
}
