//! Seed 004's workload on a broker network: events of six tag=value properties, subscribers
//! whose selectors match on the fourth, a matching rate set by the publisher, latency at
//! measuring subscribers. Shared by `matching` and `hops`.
//!
//! Every subscriber (the five per broker and the measuring ones) has the same selector, so at
//! a matching rate of r % each receives exactly r % of the events and no broker has interest in
//! the others: a non-matching event that leaves the publisher's broker went where no one wanted
//! it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidings_client::{now_us, Client, Delivery, DeliveryMode, PendingAck, SubscribeOptions};
use tidings_wire::{Message, Property, Value};
use tokio::sync::mpsc;

use crate::engine::{self, Engine, Mark, Sink, Subscribers};

/// The selector of every subscriber: the first three tags equal the events', the fourth decides.
pub const SELECTOR: &str = "t1 = 'v1' AND t2 = 'v2' AND t3 = 'v3' AND t4 = 'match'";

/// How a population subscribes and its publisher publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Best-effort subscriptions and publishes: seed 004's transient clients.
    BestEffort,
    /// Durable subscriptions, one name per subscriber, and guaranteed publishes acknowledged
    /// once the publisher's broker has them on disk: seed 004's persistent clients.
    Durable,
    /// [`Kind::Durable`] on a topic and durable names of its own, so that a second durable
    /// population (whose publisher's pubend log is replicated, say) can stay connected beside
    /// the first and a point of one sends nothing to the other.
    Replicated,
}

impl Kind {
    /// The topic of the population's events: each kind its own, so two populations can stay
    /// connected to one network and a point of one sends nothing to the other.
    pub fn topic(self) -> &'static str {
        match self {
            Kind::BestEffort => "narada.events",
            Kind::Durable => "narada.persistent",
            Kind::Replicated => "narada.replicated",
        }
    }

    /// How the reports name it.
    pub fn label(self) -> &'static str {
        match self {
            Kind::BestEffort => "best effort",
            Kind::Durable => "durable",
            Kind::Replicated => "durable, replicated",
        }
    }

    /// Whether its subscriptions are durable and its publishes guaranteed.
    pub fn durable(self) -> bool {
        self != Kind::BestEffort
    }
}

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

/// What one subscriber's sink shares with the run: the numbers it received in the current
/// point, and for a measuring subscriber each delivery's latency.
#[derive(Default)]
struct Shared {
    /// Data messages received since the point started, by number.
    numbers: Vec<u64>,
    /// Deliveries that did not satisfy the selector.
    wrong: u64,
    /// Latencies (µs from the intended send time) and the last receipt (measuring only).
    sample: Sample,
}

/// Records each first copy into the subscriber's [`Shared`].
struct Content {
    shared: Arc<Mutex<Shared>>,
    measuring: bool,
}

impl Sink for Content {
    fn first(&mut self, mark: Mark, d: &Delivery, _: Instant) {
        let Ok(mut g) = self.shared.lock() else { return };
        g.numbers.push(mark.number);
        g.wrong += u64::from(!satisfies(&d.properties));
        if self.measuring {
            g.sample.latencies_us.push(d.received_us.saturating_sub(mark.intended_us));
            g.sample.last_us = g.sample.last_us.max(d.received_us);
        }
    }
}

/// What one measuring subscriber saw during one point.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Latencies (µs, from the intended send time) of this point's deliveries.
    pub latencies_us: Vec<u64>,
    /// Time of the last receipt, µs since the epoch.
    pub last_us: u64,
}

/// The subscribers of a run, connected and heard from.
pub struct Population {
    publisher: Client,
    engine: Engine<Content>,
    shared: Vec<Arc<Mutex<Shared>>>,
    measuring: usize,
    /// The number of the next event (events are numbered across points).
    next: u64,
    kind: Kind,
    /// Each subscriber's duplicates when the current point started.
    duplicates: Vec<u64>,
}

/// One point of the workload.
#[derive(Debug, Clone, Copy)]
pub struct PointSpec {
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
#[derive(Debug, Clone, Default)]
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
    /// Subscribers whose deliveries were not exactly this point's matching events, by number.
    pub inexact: Vec<String>,
    /// Deliveries that did not satisfy the selector, all subscribers.
    pub wrong: u64,
    /// Guaranteed publishes acknowledged and failed (durable kinds only).
    pub acked: Option<(u64, u64)>,
}

impl Population {
    /// Connects the publisher, the measuring subscribers (first) and the others through the
    /// measurement engine, then sends probe events until every subscriber has heard one
    /// (interest has crossed the network). `events`: how many events all points will publish.
    /// Durable subscriptions need no probe: each is in force once its broker confirmed it,
    /// which it does only after the network's barrier.
    pub async fn connect(
        publisher: &str,
        measuring: &[String],
        others: &[String],
        events: u64,
        kind: Kind,
    ) -> anyhow::Result<Population> {
        let publisher = Client::builder(publisher).name("narada-pub").no_reconnect().connect().await?;
        let topic = kind.topic();
        let (mode, durable) = match kind {
            Kind::BestEffort => (DeliveryMode::BestEffort, None),
            Kind::Durable => (DeliveryMode::Guaranteed, Some("narada-persistent".to_string())),
            Kind::Replicated => (DeliveryMode::Guaranteed, Some("narada-replicated".to_string())),
        };
        let subscribers = Subscribers {
            addrs: measuring.iter().chain(others).cloned().collect(),
            options: SubscribeOptions::new(topic).selector(SELECTOR).mode(mode),
            name: "narada-sub".into(),
            durable,
            ..Subscribers::at("", 0, topic, events)
        };
        let shared: Vec<Arc<Mutex<Shared>>> = (0..subscribers.addrs.len()).map(|_| Arc::default()).collect();
        let sink = |i: usize| Content { shared: shared[i].clone(), measuring: i < measuring.len() };
        let engine = Engine::connect(&subscribers, sink)
            .await
            .map_err(|e| anyhow::anyhow!("subscribing with the selector `{SELECTOR}` failed: {e:#}"))?;
        if kind == Kind::BestEffort {
            engine.probe(&publisher, topic, &properties(0, true), 16, Duration::from_secs(60)).await?;
        }
        let duplicates = engine.duplicates();
        Ok(Population { publisher, engine, shared, measuring: measuring.len(), next: 0, kind, duplicates })
    }

    /// Publishes one point on an absolute schedule and waits until every subscriber has every
    /// matching event, or `idle` passes without progress.
    pub async fn point(&mut self, spec: PointSpec, idle: Duration) -> anyhow::Result<PointResult> {
        for s in &self.shared {
            if let Ok(mut g) = s.lock() {
                *g = Shared::default();
            }
        }
        self.duplicates = self.engine.duplicates();
        let first = self.next;
        let interval = Duration::from_secs_f64(1.0 / spec.rate);
        let (tx, rx) = mpsc::unbounded_channel::<PendingAck>();
        let acks = tokio::spawn(engine::count_acks(rx));
        let (start, start_us) = (Instant::now(), now_us());
        for i in 0..spec.count {
            let offset = interval.mul_f64(i as f64);
            tokio::time::sleep_until((start + offset).into()).await;
            let intended_us = start_us + offset.as_micros() as u64;
            let payload = engine::payload(first + i, intended_us, spec.size);
            let properties = properties(i, matches(i, spec.matching));
            let message = Message::new(self.kind.topic(), &properties, payload, now_us())?;
            match self.kind {
                Kind::BestEffort => self.publisher.publish_message(message).await?,
                Kind::Durable | Kind::Replicated => {
                    let _ = tx.send(self.publisher.send_guaranteed(message).await?);
                }
            }
        }
        let achieved_rate = spec.count as f64 / start.elapsed().as_secs_f64().max(1e-9);
        self.publisher.flush().await?;
        drop(tx);
        let acked = acks.await?;
        self.next += spec.count;
        let want: Vec<u64> = (0..spec.count).filter(|&i| matches(i, spec.matching)).map(|i| first + i).collect();
        self.wait(want.len(), idle).await;
        let mut r = self.result(&spec, &want, achieved_rate, start_us);
        r.acked = self.kind.durable().then_some(acked);
        Ok(r)
    }

    /// Waits until every subscriber has `matched` events of this point, or `idle` passes
    /// without progress.
    async fn wait(&self, matched: usize, idle: Duration) {
        let (mut last, mut progress) = (usize::MAX, Instant::now());
        loop {
            let counts: Vec<usize> =
                self.shared.iter().map(|s| s.lock().map(|g| g.numbers.len()).unwrap_or(0)).collect();
            if counts.iter().all(|&c| c >= matched) || progress.elapsed() >= idle {
                return;
            }
            let total = counts.iter().sum();
            if total != last {
                (last, progress) = (total, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn result(&self, spec: &PointSpec, want: &[u64], achieved_rate: f64, start_us: u64) -> PointResult {
        let matched = want.len() as u64;
        let mut r = PointResult { published: spec.count, matched, achieved_rate, start_us, ..PointResult::default() };
        let duplicates = self.engine.duplicates();
        for (i, s) in self.shared.iter().enumerate() {
            let Ok(g) = s.lock() else { continue };
            let mut got = g.numbers.clone();
            got.sort_unstable();
            let twice = duplicates.get(i).copied().unwrap_or(0) - self.duplicates.get(i).copied().unwrap_or(0);
            if got != want || twice > 0 {
                let extra = got.iter().filter(|n| want.binary_search(n).is_err()).count();
                let missing = want.iter().filter(|n| got.binary_search(n).is_err()).count();
                r.inexact
                    .push(format!("subscriber {i}: {missing} matching events missing, {extra} others, {twice} twice"));
            }
            r.wrong += g.wrong;
            if i < self.measuring {
                r.measuring.push(g.sample.clone());
            }
        }
        r
    }

    /// How this population subscribes and publishes.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Closes every client.
    pub async fn close(self) {
        let _ = self.engine.finish().await;
        let _ = self.publisher.close().await;
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
}
