//! When a silent UDP client is let go: after `[udp] session_ttl` of the broker's own awake time
//! without a datagram from it. A client's keepalive can only be read while the broker runs:
//! a broker stopped or descheduled for longer than the TTL woke up with every client's
//! keepalive still in its socket buffer and, judging by the wall clock, expired them all. Time
//! the broker's receive loop did not run (its sweep came late) does not count as silence.

use std::time::{Duration, Instant};

/// The broker's count of the time its receive loop did not run, from the lateness of its
/// sweeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AwakeClock {
    period: Duration,
    last_sweep: Instant,
    asleep: Duration,
}

/// When a client was last heard: the instant, and the broker's asleep time then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heard {
    at: Instant,
    asleep: Duration,
}

impl AwakeClock {
    /// A clock whose sweeps are due every `period` from `now`.
    pub(crate) fn new(period: Duration, now: Instant) -> AwakeClock {
        AwakeClock { period, last_sweep: now, asleep: Duration::ZERO }
    }

    /// A sweep runs at `now`: whatever it came later than `period` after the previous one, the
    /// loop was not running, and that time is nobody's silence.
    pub(crate) fn sweep(&mut self, now: Instant) {
        self.asleep += now.saturating_duration_since(self.last_sweep).saturating_sub(self.period);
        self.last_sweep = now;
    }

    /// A datagram from a client read at `now`.
    pub(crate) fn heard(&self, now: Instant) -> Heard {
        Heard { at: now, asleep: self.asleep }
    }

    /// Whether a client last `heard` has been silent for `ttl` of awake time at `now`.
    pub(crate) fn silent_for(&self, heard: Heard, ttl: Duration, now: Instant) -> bool {
        let asleep_since = self.asleep.saturating_sub(heard.asleep);
        now.saturating_duration_since(heard.at).saturating_sub(asleep_since) >= ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(2);
    const PERIOD: Duration = Duration::from_millis(500);

    #[test]
    fn a_client_silent_for_the_ttl_while_the_broker_ran_expires() {
        let start = Instant::now();
        let mut clock = AwakeClock::new(PERIOD, start);
        let heard = clock.heard(start);
        let mut now = start;
        for _ in 0..3 {
            now += PERIOD;
            clock.sweep(now);
            assert!(!clock.silent_for(heard, TTL, now));
        }
        now += PERIOD;
        clock.sweep(now);
        assert!(clock.silent_for(heard, TTL, now), "2 s of awake silence");
    }

    #[test]
    fn time_the_broker_was_stopped_is_nobody_s_silence() {
        let start = Instant::now();
        let mut clock = AwakeClock::new(PERIOD, start);
        let heard = clock.heard(start);
        // Stopped for 5 s: the sweep comes 4.5 s late.
        let now = start + Duration::from_secs(5);
        clock.sweep(now);
        assert!(!clock.silent_for(heard, TTL, now), "its keepalive may be waiting in the socket");
        let after = clock.heard(now);
        let mut later = now;
        for _ in 0..3 {
            later += PERIOD;
            clock.sweep(later);
        }
        assert!(clock.silent_for(heard, TTL, later), "0.5 s before the stop and 1.5 s after it");
        assert!(!clock.silent_for(after, TTL, later), "heard after the stop: 1.5 s");
    }
}
