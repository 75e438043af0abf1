//! A queue group's throughput (issue 41's measure): one publisher as fast as the client
//! accepts, `members` subscribers of one queue group on the same broker, each on its own
//! connection. What counts is the group's total: delivered msg/s, and that each message went
//! to exactly one member, checked by identity across members (a message two members got is a
//! duplicate, one nobody got is lost), as the peer harness's `queue` mode checks NATS's.

use std::time::{Duration, Instant};

use serde::Serialize;
use tidings_client::{Client, SubscribeOptions};

use crate::engine::{self, Drain, Engine, Subscribers, Tally, MARK_BYTES};

/// What to measure.
#[derive(Debug, Clone)]
pub struct QueueSpec {
    /// Payload bytes per message.
    pub size: usize,
    /// Members of the group, one connection each.
    pub members: usize,
    /// Publishing stops after this long...
    pub duration: Duration,
    /// ...or after this many messages.
    pub max_messages: u64,
    /// Longest wait for the members to catch up once publishing ended.
    pub drain: Duration,
    /// Topic.
    pub topic: String,
    /// The group's name.
    pub group: String,
}

impl Default for QueueSpec {
    fn default() -> QueueSpec {
        QueueSpec {
            size: 256,
            members: 10,
            duration: Duration::from_secs(5),
            max_messages: 5_000_000,
            drain: Duration::from_secs(20),
            topic: "bench.q".into(),
            group: "workers".into(),
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct QueueResult {
    /// Messages published.
    pub sent: u64,
    /// Publish rate, msg/s (sent / time until flush returned).
    pub publish_rate: f64,
    /// Deliveries to all members together.
    pub delivered: u64,
    /// Deliveries per second, all members (delivered / (latest last receive - publish start)).
    pub delivered_rate: f64,
    /// Messages no member got.
    pub lost: u64,
    /// Deliveries beyond the first of a message, within a member or across members.
    pub duplicates: u64,
    /// Deliveries to the member that got fewest.
    pub member_min: u64,
    /// Deliveries to the member that got most.
    pub member_max: u64,
    /// Messages the broker said it dropped (`missed` of deliveries).
    pub missed: u64,
}

/// Runs one queue-group measurement against the broker at `addr`.
pub async fn run(addr: &str, spec: &QueueSpec) -> anyhow::Result<QueueResult> {
    anyhow::ensure!(spec.size >= MARK_BYTES, "queue messages need at least {MARK_BYTES} bytes");
    let mut members = Subscribers::at(addr, spec.members, &spec.topic, spec.max_messages);
    members.options = SubscribeOptions::new(spec.topic.clone()).queue(spec.group.clone());
    members.name = "bench-member".into();
    let engine = Engine::connect(&members, |_| ()).await?;
    let publisher = Client::builder(addr).name("bench-pub").no_reconnect().connect().await?;
    // Round robin hands probes to each member in turn: every member hears one within a few.
    engine.probe(&publisher, &spec.topic, &[], spec.size, Duration::from_secs(30)).await?;
    let start = Instant::now();
    let sent =
        engine::publish_flat_out(&publisher, &spec.topic, &[], spec.size, spec.max_messages, spec.duration).await?;
    let publish_secs = start.elapsed().as_secs_f64();
    let drain = Drain { idle: Duration::from_secs(3), max: spec.duration + spec.drain };
    engine.drain_until(|e| e.received() >= sent, drain).await;
    let tallies: Vec<Tally> = engine.finish().await?.into_iter().map(|(t, ())| t).collect();
    let _ = publisher.close().await;
    let mut result = account(sent, &tallies, start);
    result.publish_rate = sent as f64 / publish_secs.max(1e-9);
    Ok(result)
}

/// The group's account of messages `0..sent`: each message's copies over all members.
fn account(sent: u64, tallies: &[Tally], start: Instant) -> QueueResult {
    let mut r = QueueResult { sent, member_min: u64::MAX, ..QueueResult::default() };
    let mut latest = start;
    for t in tallies {
        r.delivered += t.count + t.duplicates;
        r.duplicates += t.duplicates;
        r.missed += t.missed;
        r.member_min = r.member_min.min(t.count + t.duplicates);
        r.member_max = r.member_max.max(t.count + t.duplicates);
        latest = latest.max(t.last.unwrap_or(start));
    }
    for n in 0..sent {
        match tallies.iter().filter(|t| t.has(n)).count() {
            0 => r.lost += 1,
            copies => r.duplicates += copies as u64 - 1,
        }
    }
    if tallies.is_empty() {
        r.member_min = 0;
    }
    r.delivered_rate = r.delivered as f64 / latest.duration_since(start).as_secs_f64().max(1e-9);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_two_members_got_is_a_duplicate_and_one_nobody_got_is_lost() {
        let start = Instant::now();
        let at = start + Duration::from_secs(2);
        let (mut a, mut b) = (Tally::new(4), Tally::new(4));
        for n in [0, 1] {
            a.record(Some(n), 0, at);
        }
        for n in [1, 2, 2] {
            b.record(Some(n), 0, at);
        }
        let r = account(4, &[a, b], start);
        // 1 went to both members, 2 twice to b, 3 to nobody.
        assert_eq!((r.delivered, r.lost, r.duplicates), (5, 1, 2));
        assert_eq!((r.member_min, r.member_max), (2, 3));
        assert_eq!(r.delivered_rate, 2.5);
    }
}
