//! A durable subscriber's catch-up (issue 14's figure): how fast a durable subscription that
//! was away replays a backlog, and what that does to live guaranteed subscribers.
//!
//! One repetition, on a fresh broker with its pubend log on the disk measured:
//! 1. a durable subscription `catchup` on `backlog.>` is made and its client leaves;
//! 2. `backlog` guaranteed messages of `size` bytes are published and acknowledged (the
//!    durable subscription holds them in the log);
//! 3. a live guaranteed subscriber on `live.>` and a live guaranteed publisher at `live_rate`
//!    start; for `baseline` the live latency is recorded alone;
//! 4. the durable client comes back: the catch-up runs from its SUBSCRIBE to its last backlog
//!    message, and the live latency is recorded over exactly that time.
//!
//! Clock points: the catch-up rate is backlog messages over the time from just before the
//! durable SUBSCRIBE is sent to the moment the application takes the last one; live latency
//! runs from the message's send timestamp (set just before the client is asked to publish it)
//! to the moment the live subscriber's application takes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_client::{now_us, Client, DeliveryMode, Message, SubscribeOptions};
use tokio::sync::Mutex;

use crate::target::Target;

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
    tokio::time::sleep(spec.baseline).await;
    let alone = live.take().await;
    // 4. The catch-up, with live traffic measured over exactly its time.
    let back = Client::connect(&target.tcp).await?;
    let started = Instant::now();
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
    let during = live.take().await;
    live.stop().await;
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
    })
}

/// A live guaranteed publisher at a fixed rate and a live guaranteed subscriber recording
/// latencies.
struct Live {
    latencies: Arc<Mutex<Histogram<u64>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Live {
    async fn start(target: &Target, spec: &CatchUpSpec) -> anyhow::Result<Live> {
        let latencies = Arc::new(Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?));
        let stop = Arc::new(AtomicBool::new(false));
        let subscriber = Client::connect(&target.tcp).await?;
        let mut sub = subscriber.subscribe_with(SubscribeOptions::new("live.>").mode(DeliveryMode::Guaranteed)).await?;
        let (h, s) = (Arc::clone(&latencies), Arc::clone(&stop));
        let receive = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                let Ok(Some(delivery)) = tokio::time::timeout(Duration::from_millis(200), sub.recv()).await else {
                    continue;
                };
                let latency = now_us().saturating_sub(delivery.sent_us);
                h.lock().await.saturating_record(latency);
            }
            drop(subscriber);
            Ok(())
        });
        let publisher = Client::connect(&target.tcp).await?;
        let (s, rate, size) = (Arc::clone(&stop), spec.live_rate.max(1), spec.size);
        let publish = tokio::spawn(async move {
            let payload = Bytes::from(vec![0x11; size]);
            let every = Duration::from_secs_f64(1.0 / rate as f64);
            let mut next = tokio::time::Instant::now();
            while !s.load(Ordering::Relaxed) {
                next += every;
                tokio::time::sleep_until(next).await;
                let message = Message::new("live.t", &[], payload.clone(), now_us())?;
                // The acknowledgement is not waited for: the window bounds what is in flight.
                drop(publisher.send_guaranteed(message).await?);
            }
            publisher.close().await?;
            Ok(())
        });
        Ok(Live { latencies, stop, tasks: vec![receive, publish] })
    }

    /// The latencies recorded since the last call.
    async fn take(&self) -> Histogram<u64> {
        let mut h = self.latencies.lock().await;
        let taken = h.clone();
        h.reset();
        taken
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
