//! Throughput: one publisher sends numbered messages as fast as the client accepts them; every
//! subscriber counts what arrives by number ([`crate::engine`]: probes until the route is up,
//! then data; duplicates and late probes cannot pass for data). Same method as the peer
//! harness (`-mode tput`): stop at the time limit or the message cap, flush, then wait until
//! every subscriber has everything, or 3 s pass without progress, or the drain limit. Received msg/s = received / (last receive -
//! publish start); aggregate = all deliveries / (latest last receive - publish start).

use std::time::{Duration, Instant};

use serde::Serialize;
use tidings_client::{Client, SubscribeOptions, Subscription};
use tidings_wire::Property;

use crate::engine::{self, Access, Accounting, Drain, Engine, Subscribers, Tally, MARK_BYTES};

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
    /// TLS and login of every client (publisher and subscribers): what security costs.
    pub access: Access,
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
            access: Access::default(),
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
    /// (subscriber, message) pairs that never arrived, by identity.
    pub lost: u64,
    /// Every subscriber's losses, duplicates and reordering, by identity.
    pub accounting: Accounting,
}

/// Runs one throughput measurement against `target`.
pub async fn run(target: &Target, spec: &ThroughputSpec) -> anyhow::Result<ThroughputResult> {
    anyhow::ensure!(spec.size >= MARK_BYTES, "throughput messages need at least {MARK_BYTES} bytes");
    let subscribe_at = spec.subscribe_at.as_deref().unwrap_or(target.tcp.as_str());
    let subscribers = Subscribers {
        access: spec.access.clone(),
        ..Subscribers::at(subscribe_at, spec.subscribers, &spec.topic, spec.max_messages)
    };
    let engine = Engine::connect(&subscribers, |_| ()).await?;
    let background = background(target, spec).await?;
    let publisher =
        spec.access.apply(Client::builder(target.tcp.as_str()).name("bench-pub").no_reconnect()).connect().await?;
    engine.probe(&publisher, &spec.topic, &[], spec.size, Duration::from_secs(30)).await?;
    let start = Instant::now();
    let sent = engine::publish_flat_out(
        &publisher,
        &spec.topic,
        &spec.properties,
        spec.size,
        spec.max_messages,
        spec.duration,
    )
    .await?;
    let publish_secs = start.elapsed().as_secs_f64();
    engine.drain(sent, Drain { idle: Duration::from_secs(3), max: spec.duration + spec.drain }).await;
    let tallies: Vec<Tally> = engine.finish().await?.into_iter().map(|(t, ())| t).collect();
    let _ = publisher.close().await;
    for (client, _subs) in background {
        let _ = client.close().await;
    }
    Ok(summarize(spec, sent, publish_secs, start, &tallies))
}

/// Subscriptions that never match, spread over connections of at most 50,000 subscriptions
/// (under the broker's per-session limit).
async fn background(target: &Target, spec: &ThroughputSpec) -> anyhow::Result<Vec<(Client, Vec<Subscription>)>> {
    let n = match spec.background {
        Background::None => return Ok(Vec::new()),
        Background::Topics(n) | Background::Selectors(n) => n,
    };
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
    Ok(held)
}

fn summarize(
    spec: &ThroughputSpec,
    sent: u64,
    publish_secs: f64,
    start: Instant,
    tallies: &[Tally],
) -> ThroughputResult {
    let mut rates = Vec::new();
    let mut latest = start;
    for t in tallies {
        match t.last {
            Some(last) => {
                latest = latest.max(last);
                rates.push(t.count as f64 / last.duration_since(start).as_secs_f64().max(1e-9));
            }
            None => rates.push(0.0),
        }
    }
    let accounting = Accounting::of(sent, tallies);
    let received_rate = crate::stats::median(&rates);
    ThroughputResult {
        sent,
        publish_rate: sent as f64 / publish_secs.max(1e-9),
        received_rate,
        aggregate_rate: accounting.received as f64 / latest.duration_since(start).as_secs_f64().max(1e-9),
        received_mb_s: received_rate * spec.size as f64 / 1e6,
        lost: accounting.lost,
        accounting,
    }
}
