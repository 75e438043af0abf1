//! Link liveness without a clock: when heartbeats are due, when a silent link counts as down,
//! and how long to wait before redialling. The shell only carries bytes and calls back at
//! [`crate::Router::next_deadline`].

use serde::{Deserialize, Serialize};

use crate::names::Millis;
use crate::rendezvous::mix;

/// How links prove they are alive. The shell builds this from its config; the core never reads
/// configuration itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct LivenessSettings {
    /// Time between heartbeats sent on every up link.
    pub heartbeat_interval_ms: u64,
    /// A link from which nothing arrived for this many intervals is declared down.
    pub missed_heartbeats: u32,
}

impl Default for LivenessSettings {
    /// One heartbeat per 250 ms and three missed ones: a dead link is noticed within about
    /// 750 ms, long enough not to flap on a busy machine (Gryphon's experiments stalled 2-3 s).
    fn default() -> Self {
        Self { heartbeat_interval_ms: 250, missed_heartbeats: 3 }
    }
}

impl LivenessSettings {
    fn silence_limit_ms(&self) -> u64 {
        self.heartbeat_interval_ms.saturating_mul(u64::from(self.missed_heartbeats.max(1)))
    }
}

/// The timers of one up link.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub(crate) struct LinkClock {
    pub(crate) last_heard: Millis,
    pub(crate) next_heartbeat: Millis,
}

/// What a tick found on one link.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Due {
    Nothing,
    Heartbeat,
    Dead,
}

impl LinkClock {
    /// A link that just came up counts as heard now, and gets its first heartbeat at once so the
    /// peer's timer starts from a fresh frame.
    pub(crate) fn new(now: Millis) -> Self {
        Self { last_heard: now, next_heartbeat: now }
    }

    pub(crate) fn heard(&mut self, now: Millis) {
        self.last_heard = self.last_heard.max(now);
    }

    pub(crate) fn dead_at(&self, settings: &LivenessSettings) -> Millis {
        self.last_heard.after(settings.silence_limit_ms())
    }

    pub(crate) fn next_deadline(&self, settings: &LivenessSettings) -> Millis {
        self.next_heartbeat.min(self.dead_at(settings))
    }

    /// Checks the link at `now`; a heartbeat that is due is counted as sent.
    pub(crate) fn poll(&mut self, now: Millis, settings: &LivenessSettings) -> Due {
        if now >= self.dead_at(settings) {
            return Due::Dead;
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now.after(settings.heartbeat_interval_ms.max(1));
            return Due::Heartbeat;
        }
        Due::Nothing
    }
}

/// Exponential backoff with jitter for redialling a lost peer. The jitter comes from a seed the
/// shell passes in (for example derived from the broker name and incarnation), so that brokers
/// that lost each other do not redial in lockstep, and a simulated run still replays.
#[derive(Clone, Debug)]
pub struct ReconnectBackoff {
    base_ms: u64,
    max_ms: u64,
    failures: u32,
    state: u64,
}

impl ReconnectBackoff {
    /// Delays start near `base_ms` and double per failure up to `max_ms`.
    pub fn new(base_ms: u64, max_ms: u64, seed: u64) -> Self {
        Self { base_ms: base_ms.max(1), max_ms: max_ms.max(base_ms.max(1)), failures: 0, state: seed }
    }

    /// The delay before the next attempt, after one more failed attempt: a random point in the
    /// upper half of the current window, so it never drops to zero.
    pub fn next_delay_ms(&mut self) -> u64 {
        let window = self.base_ms.saturating_mul(1u64 << self.failures.min(32)).min(self.max_ms);
        self.failures = self.failures.saturating_add(1);
        self.state = mix(self.state);
        let half = window / 2;
        half + self.state % (window - half + 1)
    }

    /// Forgets past failures once a connection succeeded.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: LivenessSettings = LivenessSettings { heartbeat_interval_ms: 100, missed_heartbeats: 3 };

    #[test]
    fn a_link_is_dead_after_the_configured_number_of_silent_intervals() {
        let mut clock = LinkClock::new(Millis(1000));
        assert_eq!(clock.poll(Millis(1000), &SETTINGS), Due::Heartbeat);
        assert_eq!(clock.poll(Millis(1050), &SETTINGS), Due::Nothing);
        assert_eq!(clock.poll(Millis(1100), &SETTINGS), Due::Heartbeat);
        assert_eq!(clock.poll(Millis(1299), &SETTINGS), Due::Heartbeat);
        assert_eq!(clock.poll(Millis(1300), &SETTINGS), Due::Dead);
    }

    #[test]
    fn hearing_from_the_peer_postpones_the_verdict() {
        let mut clock = LinkClock::new(Millis(0));
        clock.heard(Millis(250));
        assert_eq!(clock.dead_at(&SETTINGS), Millis(550));
        clock.heard(Millis(100));
        assert_eq!(clock.dead_at(&SETTINGS), Millis(550), "an old frame must not move time back");
    }

    #[test]
    fn the_next_deadline_is_the_earlier_of_heartbeat_and_verdict() {
        let mut clock = LinkClock::new(Millis(0));
        clock.poll(Millis(0), &SETTINGS);
        assert_eq!(clock.next_deadline(&SETTINGS), Millis(100));
    }

    #[test]
    fn backoff_grows_to_its_cap_and_replays_from_its_seed() {
        let mut one = ReconnectBackoff::new(100, 1000, 7);
        let mut two = ReconnectBackoff::new(100, 1000, 7);
        let delays: Vec<u64> = (0..8).map(|_| one.next_delay_ms()).collect();
        assert_eq!(delays, (0..8).map(|_| two.next_delay_ms()).collect::<Vec<_>>());
        assert!((50..=100).contains(&delays[0]));
        assert!(delays.iter().all(|d| *d <= 1000));
        assert!(delays[7] >= 500);
        one.reset();
        assert!(one.next_delay_ms() <= 100);
    }
}
