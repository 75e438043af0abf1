//! Throughput: one publisher sends one buffer as fast as the client accepts it; every
//! subscriber counts what arrives. Same method as the peer harness (`-mode tput`): stop at the
//! time limit or the message cap, flush, then wait until every subscriber has everything, or
//! 3 s pass without progress, or the drain limit. Received msg/s = received / (last receive -
//! publish start); aggregate = all deliveries / (latest last receive - publish start).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use parking::Last;
use serde::Serialize;
use tidings_client::{now_us, Client, SubscribeOptions};
use tidings_wire::{Message, Property};

use crate::target::Target;

/// What to measure.
#[derive(Debug, Clone)]
pub struct ThroughputSpec {
    /// Payload bytes per message.
    pub size: usize,
    /// Subscriber connections, each with one subscription to the topic.
    pub subscribers: usize,
    /// Publishing stops after this long...
    pub duration: Duration,
    /// ...or after this many messages.
    pub max_messages: u64,
    /// Longest wait for the subscribers to catch up after publishing.
    pub drain: Duration,
    /// Topic.
    pub topic: String,
    /// Subscriptions that never match, held by one more connection: the cost of an index that
    /// cost of an index that is large but irrelevant to this message.
    pub background: Background,
    /// Properties every published message carries.
    pub properties: Vec<Property>,
    /// Where the subscribers connect, when not to the publisher's broker: a second broker of a
    /// network, to measure what the hop between them costs.
    pub subscribe_at: Option<String>,
}

impl Default for ThroughputSpec {
    fn default() -> ThroughputSpec {
        ThroughputSpec {
            size: 256,
            subscribers: 1,
            duration: Duration::from_secs(5),
            max_messages: 1_000_000,
            drain: Duration::from_secs(20),
            topic: "bench.t".into(),
            background: Background::None,
            properties: Vec::new(),
            subscribe_at: None,
        }
    }
}

/// Subscriptions that never match the benchmark's messages: what a large but irrelevant index
/// costs the publish path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Background {
    /// None.
    None,
    /// This many subscriptions on other topics (`other.N.>`): the topic trie must skip them.
    Topics(usize),
    /// This many subscriptions on the benchmark's own topic with seed 004 selectors
    /// (`t1 = 'a' AND t2 = 'b' AND t3 = 'c' AND t4 = N`) that the messages' `t4 = -1` never
    /// satisfies: the content index must skip them without evaluating each.
    Selectors(usize),
}

/// The seed 004 event: six tag=value pairs, with `t4 = -1` so no background selector matches.
pub fn seed004_properties() -> Vec<Property> {
    vec![
        Property::new("t1", "a"),
        Property::new("t2", "b"),
        Property::new("t3", "c"),
        Property::new("t4", -1i64),
        Property::new("t5", "e"),
        Property::new("t6", "f"),
    ]
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputResult {
    /// Payload size.
    pub size: usize,
    /// Subscribers.
    pub subscribers: usize,
    /// Messages published.
    pub sent: u64,
    /// Publish rate, msg/s (sent / time until flush returned).
    pub publish_rate: f64,
    /// Median over subscribers of each one's received msg/s.
    pub received_rate: f64,
    /// All deliveries / (latest last receive - publish start).
    pub aggregate_rate: f64,
    /// Payload MB/s (10^6 bytes) at the median subscriber.
    pub received_mb_s: f64,
    /// sent × subscribers - received.
    pub lost: u64,
}

mod parking {
    use std::sync::Mutex;
    use std::time::Instant;

    /// The last time something happened, shared with a reporting task.
    #[derive(Default)]
    pub(crate) struct Last(Mutex<Option<Instant>>);

    impl Last {
        pub(crate) fn set(&self, t: Instant) {
            if let Ok(mut g) = self.0.lock() {
                *g = Some(t);
            }
        }
        pub(crate) fn get(&self) -> Option<Instant> {
            self.0.lock().ok().and_then(|g| *g)
        }
    }
}

struct Counter {
    received: AtomicU64,
    last: Last,
}

/// Through a network, subscriptions reach the publisher's broker a little after they were
/// acknowledged: probes go out until every subscriber has seen one (as the peer harness does),
/// then the counters restart from zero.
async fn await_route(publisher: &Client, probe: &Message, counters: &[Arc<Counter>]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters.iter().any(|c| c.received.load(Ordering::Relaxed) == 0) {
        anyhow::ensure!(Instant::now() < deadline, "no route to the subscribers' broker after 10 s");
        publisher.publish_message(probe.clone()).await?;
        publisher.flush().await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the last probes arrive before counting starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for c in counters {
        c.received.store(0, Ordering::Relaxed);
    }
    Ok(())
}

/// Runs one throughput measurement against `target`.
pub async fn run(target: &Target, spec: &ThroughputSpec) -> anyhow::Result<ThroughputResult> {
    let mut clients = Vec::new();
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    let subscribe_at = spec.subscribe_at.as_deref().unwrap_or(target.tcp.as_str());
    for i in 0..spec.subscribers {
        let client = Client::builder(subscribe_at).name(format!("bench-sub-{i}")).no_reconnect().connect().await?;
        let mut subscription = client.subscribe(&spec.topic).await?;
        let counter = Arc::new(Counter { received: AtomicU64::new(0), last: Last::default() });
        let c = Arc::clone(&counter);
        tasks.push(tokio::spawn(async move {
            while subscription.next().await.is_some() {
                c.received.fetch_add(1, Ordering::Relaxed);
                c.last.set(Instant::now());
            }
        }));
        counters.push(counter);
        clients.push(client);
    }
    // Spread over connections of at most 50,000 subscriptions, under the broker's per-session limit.
    let background = match spec.background {
        Background::None => Vec::new(),
        Background::Topics(n) | Background::Selectors(n) => {
            let mut held = Vec::new();
            for chunk in (0..n).collect::<Vec<_>>().chunks(50_000) {
                let client = Client::builder(target.tcp.as_str()).name("bench-other").no_reconnect().connect().await?;
                let mut subs = Vec::with_capacity(chunk.len());
                for i in chunk {
                    let options = match spec.background {
                        Background::Topics(_) => SubscribeOptions::new(format!("other.{i}.>")),
                        _ => SubscribeOptions::new(spec.topic.clone())
                            .selector(format!("t1 = 'a' AND t2 = 'b' AND t3 = 'c' AND t4 = {i}")),
                    };
                    subs.push(client.subscribe_with(options).await?);
                }
                held.push((client, subs));
            }
            held
        }
    };
    let publisher = Client::builder(target.tcp.as_str()).name("bench-pub").no_reconnect().connect().await?;
    let message = Message::new(&spec.topic, &spec.properties, Bytes::from(vec![0u8; spec.size]), now_us())?;
    if spec.subscribe_at.is_some() {
        await_route(&publisher, &message, &counters).await?;
    }
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < spec.max_messages {
        publisher.publish_message(message.clone()).await?;
        sent += 1;
        if sent.is_multiple_of(1024) && start.elapsed() >= spec.duration {
            break;
        }
    }
    publisher.flush().await?;
    let publish_secs = start.elapsed().as_secs_f64();
    let expected = sent * spec.subscribers as u64;
    let deadline = start + spec.duration + spec.drain;
    let (mut last_total, mut last_progress) = (0u64, Instant::now());
    loop {
        let total: u64 = counters.iter().map(|c| c.received.load(Ordering::Relaxed)).sum();
        if total >= expected || Instant::now() >= deadline {
            break;
        }
        if total != last_total {
            last_total = total;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= Duration::from_secs(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut rates = Vec::new();
    let mut total = 0u64;
    let mut latest = start;
    for c in &counters {
        let n = c.received.load(Ordering::Relaxed);
        total += n;
        if let Some(last) = c.last.get() {
            latest = latest.max(last);
            rates.push(n as f64 / last.duration_since(start).as_secs_f64().max(1e-9));
        } else {
            rates.push(0.0);
        }
    }
    for c in &clients {
        let _ = c.close().await;
    }
    let _ = publisher.close().await;
    for (client, _subs) in background {
        let _ = client.close().await;
    }
    for t in tasks {
        t.abort();
    }
    let received_rate = crate::stats::median(&rates);
    Ok(ThroughputResult {
        size: spec.size,
        subscribers: spec.subscribers,
        sent,
        publish_rate: sent as f64 / publish_secs.max(1e-9),
        received_rate,
        aggregate_rate: total as f64 / latest.duration_since(start).as_secs_f64().max(1e-9),
        received_mb_s: received_rate * spec.size as f64 / 1e6,
        lost: expected.saturating_sub(total),
    })
}
