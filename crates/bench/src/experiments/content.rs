//! Seed 004's workload on a broker network: events of six tag=value properties, subscribers
//! whose selectors match on the fourth, a matching rate set by the publisher, latency at
//! measuring subscribers. Shared by `matching` and `hops`.
//!
//! Every subscriber (the five per broker and the measuring ones) has the same selector, so at
//! a matching rate of r % each receives exactly r % of the events and no broker has interest in
//! the others: a non-matching event that leaves the publisher's broker went where no one wanted
//! it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use tidings_client::{now_us, Client, SubscribeOptions, Subscription};
use tidings_wire::{Message, Property, Value};

/// The selector of every subscriber: the first three tags equal the events', the fourth decides.
pub const SELECTOR: &str = "t1 = 'v1' AND t2 = 'v2' AND t3 = 'v3' AND t4 = 'match'";
const TOPIC: &str = "narada.events";
const PROBE_POINT: u64 = u64::MAX;

/// Whether event `i` matches at `percent` %: spread evenly, exactly ⌊count × percent / 100⌋
/// of the first `count` events.
pub fn matches(i: u64, percent: u32) -> bool {
    let p = u64::from(percent.min(100));
    (i + 1) * p / 100 > i * p / 100
}

/// The six properties of event `i`.
pub fn properties(i: u64, matching: bool) -> Vec<Property> {
    vec![
        Property::new("t1", "v1"),
        Property::new("t2", "v2"),
        Property::new("t3", "v3"),
        Property::new("t4", if matching { "match".to_string() } else { format!("other{}", i % 7) }),
        Property::new("t5", "v5"),
        Property::new("t6", Value::Int(i as i64)),
    ]
}

/// Whether a delivery satisfies [`SELECTOR`] (the subscriber's own check on the broker).
fn satisfies(properties: &[Property]) -> bool {
    let is = |k: &str, v: &str| matches!(tidings_wire::lookup(properties, k), Some(Value::Str(s)) if s == v);
    is("t1", "v1") && is("t2", "v2") && is("t3", "v3") && is("t4", "match")
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    wrong: AtomicU64,
    probes: AtomicU64,
}

/// What one measuring subscriber saw during one point.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Latencies (µs) of this point's deliveries.
    pub latencies_us: Vec<u64>,
    /// Time of the last receipt, µs since the epoch.
    pub last_us: u64,
}

struct Subscriber {
    counters: Arc<Counters>,
    sample: Option<Arc<Mutex<(u64, Sample)>>>,
}

/// The subscribers of a run, connected and heard from.
pub struct Population {
    publisher: Client,
    clients: Vec<Client>,
    subscribers: Vec<Subscriber>,
    measuring: usize,
}

/// One point of the workload.
#[derive(Debug, Clone, Copy)]
pub struct PointSpec {
    /// Point number (carried in each payload).
    pub id: u64,
    /// Matching rate, percent.
    pub matching: u32,
    /// Publish rate, msg/s.
    pub rate: f64,
    /// Payload bytes (at least 16).
    pub size: usize,
    /// Events to publish.
    pub count: u64,
}

/// What one point produced.
#[derive(Debug, Clone)]
pub struct PointResult {
    /// Events published.
    pub published: u64,
    /// Of which matching.
    pub matched: u64,
    /// Publish rate achieved, msg/s.
    pub achieved_rate: f64,
    /// When publishing started, µs since the epoch.
    pub start_us: u64,
    /// Per measuring subscriber, in the order given.
    pub measuring: Vec<Sample>,
    /// Deliveries to every subscriber in this point.
    pub delivered: Vec<u64>,
    /// Deliveries that did not satisfy the selector, all subscribers.
    pub wrong: u64,
}

impl Population {
    /// Connects the publisher, the measuring subscribers (first) and the others, then sends
    /// probe events until every subscriber has heard one (interest has crossed the network).
    pub async fn connect(publisher: &str, measuring: &[String], others: &[String]) -> anyhow::Result<Population> {
        let publisher = Client::builder(publisher).name("narada-pub").no_reconnect().connect().await?;
        let mut population =
            Population { publisher, clients: Vec::new(), subscribers: Vec::new(), measuring: measuring.len() };
        for (i, addr) in measuring.iter().chain(others).enumerate() {
            let client = Client::builder(addr).name(format!("narada-sub-{i}")).no_reconnect().connect().await?;
            let options = SubscribeOptions::new(TOPIC).selector(SELECTOR);
            let subscription = client
                .subscribe_with(options)
                .await
                .map_err(|e| anyhow::anyhow!("the broker refused the selector subscription `{SELECTOR}`: {e}"))?;
            let counters = Arc::new(Counters::default());
            let sample = (i < measuring.len()).then(|| Arc::new(Mutex::new((0, Sample::default()))));
            tokio::spawn(receive(subscription, counters.clone(), sample.clone()));
            population.subscribers.push(Subscriber { counters, sample });
            population.clients.push(client);
        }
        population.probe(Duration::from_secs(60)).await?;
        Ok(population)
    }

    async fn probe(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let message = Message::new(TOPIC, &properties(0, true), payload(PROBE_POINT, 0, 16), now_us())?;
            self.publisher.publish_message(message).await?;
            self.publisher.flush().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.subscribers.iter().all(|s| s.counters.probes.load(Ordering::Relaxed) > 0) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(());
            }
        }
        let heard = self.subscribers.iter().filter(|s| s.counters.probes.load(Ordering::Relaxed) > 0).count();
        anyhow::bail!("only {heard} of {} subscribers heard the publisher within {timeout:?}", self.subscribers.len())
    }

    /// Publishes one point on an absolute schedule and waits until every subscriber has every
    /// matching event, or `idle` passes without progress.
    pub async fn point(&self, spec: PointSpec, idle: Duration) -> anyhow::Result<PointResult> {
        for s in self.subscribers.iter().filter_map(|s| s.sample.as_ref()) {
            if let Ok(mut g) = s.lock() {
                *g = (spec.id, Sample::default());
            }
        }
        let before: Vec<(u64, u64)> = self
            .subscribers
            .iter()
            .map(|s| (s.counters.delivered.load(Ordering::Relaxed), s.counters.wrong.load(Ordering::Relaxed)))
            .collect();
        let interval = Duration::from_secs_f64(1.0 / spec.rate);
        let (start, start_us) = (Instant::now(), now_us());
        let mut matched = 0;
        for i in 0..spec.count {
            tokio::time::sleep_until((start + interval.mul_f64(i as f64)).into()).await;
            let m = matches(i, spec.matching);
            matched += u64::from(m);
            let message = Message::new(TOPIC, &properties(i, m), payload(spec.id, i, spec.size), now_us())?;
            self.publisher.publish_message(message).await?;
        }
        self.publisher.flush().await?;
        let achieved_rate = spec.count as f64 / start.elapsed().as_secs_f64().max(1e-9);
        let delivered = |s: &Subscriber, b: &(u64, u64)| s.counters.delivered.load(Ordering::Relaxed) - b.0;
        let (mut last, mut progress) = (u64::MAX, Instant::now());
        loop {
            let counts: Vec<u64> = self.subscribers.iter().zip(&before).map(|(s, b)| delivered(s, b)).collect();
            let total: u64 = counts.iter().sum();
            if counts.iter().all(|&c| c >= matched) || progress.elapsed() >= idle {
                break;
            }
            if total != last {
                (last, progress) = (total, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let measuring = self.subscribers[..self.measuring]
            .iter()
            .filter_map(|s| s.sample.as_ref().and_then(|m| m.lock().ok().map(|g| g.1.clone())))
            .collect();
        Ok(PointResult {
            published: spec.count,
            matched,
            achieved_rate,
            start_us,
            measuring,
            delivered: self.subscribers.iter().zip(&before).map(|(s, b)| delivered(s, b)).collect(),
            wrong: self
                .subscribers
                .iter()
                .zip(&before)
                .map(|(s, b)| s.counters.wrong.load(Ordering::Relaxed) - b.1)
                .sum(),
        })
    }

    /// Closes every client.
    pub async fn close(self) {
        for c in self.clients.iter().chain([&self.publisher]) {
            let _ = c.close().await;
        }
    }
}

fn payload(point: u64, i: u64, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(16));
    b.put_u64_le(i);
    b.put_u64_le(point);
    b.resize(size.max(16), 0);
    b.freeze()
}

async fn receive(mut subscription: Subscription, counters: Arc<Counters>, sample: Option<Arc<Mutex<(u64, Sample)>>>) {
    while let Some(d) = subscription.next().await {
        let point = d.payload.get(8..16).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        if point == Some(PROBE_POINT) {
            counters.probes.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        counters.delivered.fetch_add(1, Ordering::Relaxed);
        if !satisfies(&d.properties) {
            counters.wrong.fetch_add(1, Ordering::Relaxed);
        }
        if let (Some(sample), Some(point)) = (&sample, point) {
            if let Ok(mut g) = sample.lock() {
                if g.0 == point {
                    g.1.latencies_us.push(d.received_us.saturating_sub(d.sent_us));
                    g.1.last_us = g.1.last_us.max(d.received_us);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_rates_are_exact_and_spread() {
        for percent in [100, 50, 25, 10] {
            let hits = (0..1000).filter(|&i| matches(i, percent)).count();
            assert_eq!(hits, percent as usize * 10, "{percent}");
        }
        let first: Vec<bool> = (0..4).map(|i| matches(i, 50)).collect();
        assert_eq!(first, [false, true, false, true]);
        assert!((0..100).all(|i| !matches(i, 0)));
    }

    #[test]
    fn events_satisfy_the_selector_exactly_when_they_match() {
        let selector = tidings_matching::Selector::parse(SELECTOR).unwrap();
        for (i, m) in [(3, true), (4, false)] {
            assert_eq!(satisfies(&properties(i, m)), m);
            assert_eq!(selector.matches(&properties(i, m)), m);
        }
        assert_eq!(properties(3, false).len(), 6);
    }

    #[test]
    fn payloads_carry_point_and_number() {
        let p = payload(7, 3, 30);
        assert_eq!(p.len(), 30);
        assert_eq!(&p[..8], &3u64.to_le_bytes());
        assert_eq!(&p[8..16], &7u64.to_le_bytes());
    }
}
