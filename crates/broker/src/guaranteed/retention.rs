//! Retention limits on a pubend's log (`[retention]`): how many bytes and how old a record the
//! log may keep for subscribers that are behind, and what a limit does (see
//! [`RetentionPolicy`]).
//!
//! The accounting is the driver's, from the store actions it carries out: every append adds
//! its record's bytes to a bucket of one second of ticks, every release drops the buckets it
//! covers. A bucket per second bounds the memory (one entry per second of log, whatever the
//! rate) at the cost of precision: a limit is enforced to the second. Records found in the log
//! at start are counted at the log's average record size (the store keeps no per-record size
//! index).

use std::collections::BTreeMap;
use std::time::Duration;

use tidings_delivery::Tick;

use crate::config::{Retention, RetentionPolicy};

/// Ticks per bucket: one second of the pubend's clock (ticks are microseconds).
const BUCKET: u64 = 1_000_000;

/// What one pubend's log holds, by second of ticks.
#[derive(Debug, Default, Clone)]
pub(super) struct Retained {
    buckets: BTreeMap<u64, u64>,
    bytes: u64,
}

impl Retained {
    /// An appended record.
    pub(super) fn add(&mut self, tick: Tick, bytes: u64) {
        *self.buckets.entry(tick.0 / BUCKET).or_default() += bytes;
        self.bytes += bytes;
    }

    /// The log released everything up to `through`: buckets wholly covered go.
    pub(super) fn release(&mut self, through: Tick) {
        while let Some((&second, &bytes)) = self.buckets.first_key_value() {
            if (second + 1) * BUCKET - 1 > through.0 {
                break;
            }
            self.buckets.remove(&second);
            self.bytes -= bytes;
        }
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the log is past a limit at `now` (ticks).
    pub(super) fn over(&self, limits: &Retention, now: Tick) -> bool {
        let bytes = limits.max_bytes > 0 && self.bytes > limits.max_bytes;
        let oldest = self.buckets.first_key_value().map(|(&second, _)| second * BUCKET);
        let age = !limits.max_age.is_zero() && oldest.is_some_and(|t| t < cutoff(limits.max_age, now));
        bytes || age
    }

    /// Under the release policy, where the log must be released to so it fits again.
    pub(super) fn release_point(&self, limits: &Retention, now: Tick) -> Option<Tick> {
        let mut up_to = None;
        if !limits.max_age.is_zero() {
            let cutoff = cutoff(limits.max_age, now);
            if self.buckets.first_key_value().is_some_and(|(&second, _)| second * BUCKET < cutoff) {
                up_to = Some(Tick(cutoff.saturating_sub(1)));
            }
        }
        if limits.max_bytes > 0 && self.bytes > limits.max_bytes {
            let mut left = self.bytes;
            for (&second, &bytes) in &self.buckets {
                if left <= limits.max_bytes {
                    break;
                }
                left -= bytes;
                let end = Tick((second + 1) * BUCKET - 1);
                up_to = Some(up_to.map_or(end, |t: Tick| t.max(end)));
            }
        }
        up_to.filter(|_| limits.policy == RetentionPolicy::Release)
    }
}

/// The oldest tick a log may keep under `max_age` at `now`.
fn cutoff(max_age: Duration, now: Tick) -> u64 {
    now.0.saturating_sub(max_age.as_micros() as u64)
}

impl super::driver::Driver {
    /// A GPUBLISH, held back if its pubend's log is at a retention limit under the backpressure
    /// policy (a retry of a publish already logged is answered as usual).
    pub(super) fn admit(
        &mut self,
        publish: tidings_wire::GuaranteedPublish,
        reply: std::sync::Arc<crate::outbox::Outbox>,
    ) {
        let pubend = self.publish_pubend(&publish);
        let known = self.publishes.tick(pubend, (tidings_delivery::PublisherId(publish.publisher.0), publish.seq));
        if known.is_none() && (self.must_hold(pubend) || !self.held.is_empty()) {
            self.metrics.publishes_held.inc();
            self.held.push_back((publish, reply, std::time::Instant::now()));
            return;
        }
        self.publish(publish, reply);
    }

    fn must_hold(&self, pubend: tidings_delivery::PubendId) -> bool {
        self.retention.policy == RetentionPolicy::Backpressure
            && self.retained.get(&pubend).is_some_and(|r| r.over(&self.retention, self.now_tick()))
    }

    fn now_tick(&self) -> Tick {
        Tick(self.engine.settings().ticks(super::driver::now().0))
    }

    /// Applies the limits: under `release`, logs past a limit are released early (whoever was
    /// behind gets a gap notice); under `backpressure`, held publishes go on once there is room
    /// and are refused once they waited `max_wait`.
    pub(super) fn enforce_retention(&mut self) {
        if self.retention.max_bytes == 0 && self.retention.max_age.is_zero() {
            return;
        }
        let now = self.now_tick();
        let releases: Vec<(tidings_delivery::PubendId, Tick)> = self
            .retained
            .iter()
            .filter_map(|(&pubend, r)| Some((pubend, r.release_point(&self.retention, now)?)))
            .collect();
        for (pubend, up_to) in releases {
            if self.hosted.contains(&pubend) {
                tracing::warn!(
                    pubend = pubend.0,
                    up_to = up_to.0,
                    "a pubend's log is past its retention limit: released early"
                );
                self.metrics.early_releases.inc();
                self.feed(tidings_delivery::Input::EarlyRelease { pubend, up_to });
            }
        }
        while let Some((publish, _, since)) = self.held.front() {
            let pubend = self.publish_pubend(publish);
            if !self.must_hold(pubend) {
                if let Some((publish, reply, since)) = self.held.pop_front() {
                    self.publish_since(publish, reply, since);
                }
            } else if since.elapsed() >= self.retention.max_wait {
                if let Some((publish, reply, _)) = self.held.pop_front() {
                    self.refuse_held(&publish, &reply);
                }
            } else {
                break;
            }
        }
    }

    fn refuse_held(&mut self, publish: &tidings_wire::GuaranteedPublish, reply: &crate::outbox::Outbox) {
        let text = format!(
            "the pubend's log is at its retention limit ({}) because a subscriber is behind; not logged, retry later",
            describe(&self.retention)
        );
        let reason = tidings_wire::Notice::new(tidings_wire::ReasonCode::LimitExceeded, text);
        let refused = tidings_wire::PublishRefused { publisher: publish.publisher, seq: publish.seq, reason };
        reply.push_frame(&tidings_wire::Frame::PublishRefused(refused));
        self.metrics.publishes_refused.inc();
    }
}

fn describe(r: &Retention) -> String {
    match (r.max_bytes, r.max_age.is_zero()) {
        (0, _) => format!("max_age {}", humantime::format_duration(r.max_age)),
        (bytes, true) => format!("max_bytes {bytes}"),
        (bytes, false) => format!("max_bytes {bytes}, max_age {}", humantime::format_duration(r.max_age)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: u64, max_age: Duration, policy: RetentionPolicy) -> Retention {
        Retention { max_bytes, max_age, policy, max_wait: Duration::from_secs(1) }
    }

    #[test]
    fn bytes_over_the_limit_release_whole_oldest_seconds_until_it_fits() {
        let mut r = Retained::default();
        for second in 0..5 {
            r.add(Tick(second * BUCKET + 10), 100);
            r.add(Tick(second * BUCKET + 20), 100);
        }
        let l = limits(500, Duration::ZERO, RetentionPolicy::Release);
        assert!(r.over(&l, Tick(5 * BUCKET)));
        assert_eq!(r.release_point(&l, Tick(5 * BUCKET)), Some(Tick(3 * BUCKET - 1)), "three seconds go: 400 left");
        r.release(Tick(3 * BUCKET - 1));
        assert_eq!(r.bytes(), 400);
        assert!(!r.over(&l, Tick(5 * BUCKET)));
        let backpressure = limits(300, Duration::ZERO, RetentionPolicy::Backpressure);
        assert!(r.over(&backpressure, Tick(5 * BUCKET)));
        assert_eq!(r.release_point(&backpressure, Tick(5 * BUCKET)), None, "backpressure releases nothing");
    }

    #[test]
    fn age_over_the_limit_releases_everything_older() {
        let mut r = Retained::default();
        r.add(Tick(BUCKET), 1);
        r.add(Tick(9 * BUCKET), 1);
        let l = limits(0, Duration::from_secs(5), RetentionPolicy::Release);
        let now = Tick(10 * BUCKET);
        assert!(r.over(&l, now));
        assert_eq!(r.release_point(&l, now), Some(Tick(5 * BUCKET - 1)));
        r.release(Tick(5 * BUCKET - 1));
        assert!(!r.over(&l, now));
        assert!(!r.over(&limits(0, Duration::ZERO, RetentionPolicy::Release), now), "no limits, never over");
    }
}
