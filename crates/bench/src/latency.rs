//! Latency: one publisher sends a fresh message every 1/rate seconds on an absolute schedule;
//! latency is receive time minus the message's `sent_us`, over every delivery of every
//! subscriber. Same method as the peer harness (`-mode lat`). What has not arrived when the
//! drain wait ends counts as lost; a subscriber that did not receive everything, or whose
//! connection closed, is a "dropped subscriber" in the sense of seed 003.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_client::{now_us, Client, Transport};
use tidings_wire::Message;
use tokio::sync::Mutex;

use crate::target::Target;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LatencySpec {
    /// Payload bytes.
    pub size: usize,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Messages per second.
    pub rate: f64,
    /// How long to publish.
    pub duration: Duration,
    /// Longest wait for stragglers afterwards.
    pub drain: Duration,
    /// Topic.
    pub topic: String,
    /// TCP or UDP for every client.
    pub transport: Transport,
}

impl Default for LatencySpec {
    fn default() -> LatencySpec {
        LatencySpec {
            size: 200,
            subscribers: 10,
            rate: 1000.0,
            duration: Duration::from_secs(5),
            drain: Duration::from_secs(60),
            topic: "bench.lat".into(),
            transport: Transport::Tcp,
        }
    }
}

/// One run's figures, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyResult {
    /// Subscribers.
    pub subscribers: usize,
    /// Messages published.
    pub sent: u64,
    /// Deliveries received, all subscribers.
    pub received: u64,
    /// sent × subscribers - received.
    pub lost: u64,
    /// Subscribers that did not receive every message.
    pub dropped_subscribers: usize,
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

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// Runs one latency measurement against `target`.
pub async fn run(target: &Target, spec: &LatencySpec) -> anyhow::Result<LatencyResult> {
    let total = Arc::new(Mutex::new(histogram()?));
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    let expected_per_sub = (spec.rate * spec.duration.as_secs_f64()).round() as u64;
    for i in 0..spec.subscribers {
        let client = Client::builder(target.tcp.as_str())
            .name(format!("lat-sub-{i}"))
            .transport(spec.transport)
            .no_reconnect()
            .connect()
            .await?;
        let mut subscription = client.subscribe(&spec.topic).await?;
        let total = Arc::clone(&total);
        tasks.push(tokio::spawn(async move {
            let mut h = histogram()?;
            let mut n = 0u64;
            while let Some(d) = subscription.next().await {
                h.saturating_record(d.received_us.saturating_sub(d.sent_us).max(1));
                n += 1;
                if n >= expected_per_sub {
                    break;
                }
            }
            total.lock().await.add(&h)?;
            anyhow::Ok(n)
        }));
        clients.push(client);
    }
    let publisher =
        Client::builder(target.tcp.as_str()).name("lat-pub").transport(spec.transport).no_reconnect().connect().await?;
    let payload = Bytes::from(vec![0u8; spec.size]);
    let interval = Duration::from_secs_f64(1.0 / spec.rate);
    let start = Instant::now();
    for i in 0..expected_per_sub {
        tokio::time::sleep_until((start + interval.mul_f64(i as f64)).into()).await;
        publisher.publish_message(Message::new(&spec.topic, &[], payload.clone(), now_us())?).await?;
    }
    publisher.flush().await?;
    // Wait for every subscriber to have everything, up to the drain limit; then close the
    // stragglers' connections so their tasks end and their partial histograms count too.
    let deadline = tokio::time::Instant::now() + spec.drain;
    for task in &mut tasks {
        let _ = tokio::time::timeout_at(deadline, async {
            while !task.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
        })
        .await;
    }
    for c in &clients {
        let _ = c.close().await;
    }
    let _ = publisher.close().await;
    let mut received = 0u64;
    let mut dropped = 0usize;
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(10), task).await {
            Ok(Ok(Ok(n))) => {
                received += n;
                if n < expected_per_sub {
                    dropped += 1;
                }
            }
            _ => dropped += 1,
        }
    }
    let h = total.lock().await;
    Ok(LatencyResult {
        subscribers: spec.subscribers,
        sent: expected_per_sub,
        received,
        lost: (expected_per_sub * spec.subscribers as u64).saturating_sub(received),
        dropped_subscribers: dropped,
        mean_us: h.mean(),
        stdev_us: h.stdev(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    })
}
