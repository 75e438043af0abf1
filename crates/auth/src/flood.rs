//! Whether logins are under attack: failed logins counted over the last second or two.
//!
//! A few password checks a second run at normal priority, so a user logs in quickly even when
//! the broker is busy with data. A brute-force flood turns that around: its checks would take
//! CPU the data path needs. While failures come faster than a person mistypes, every check
//! runs on threads that get only CPU nobody else wants (the broker's verifier), until the
//! failures stop.

use std::time::{Duration, Instant};

/// Failed logins a second from which logins count as under attack.
pub const FLOOD_FAILURES_PER_SECOND: u32 = 10;

/// Counts failures in one-second windows: the current one and the one before.
#[derive(Debug)]
pub struct FloodWatch {
    window: Instant,
    current: u32,
    previous: u32,
}

impl FloodWatch {
    /// No failures yet.
    pub fn new(now: Instant) -> FloodWatch {
        FloodWatch { window: now, current: 0, previous: 0 }
    }

    /// Notes a failed login at `now`.
    pub fn failed(&mut self, now: Instant) {
        self.roll(now);
        self.current = self.current.saturating_add(1);
    }

    /// Whether the current or the last full window saw [`FLOOD_FAILURES_PER_SECOND`] failures.
    pub fn under_attack(&mut self, now: Instant) -> bool {
        self.roll(now);
        self.current.max(self.previous) >= FLOOD_FAILURES_PER_SECOND
    }

    fn roll(&mut self, now: Instant) {
        let second = Duration::from_secs(1);
        let elapsed = now.saturating_duration_since(self.window);
        if elapsed >= 2 * second {
            (self.previous, self.current, self.window) = (0, 0, now);
        } else if elapsed >= second {
            (self.previous, self.current, self.window) = (self.current, 0, self.window + second);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_mistakes_are_not_an_attack_but_a_burst_is_until_it_has_been_quiet_a_while() {
        let start = Instant::now();
        let mut watch = FloodWatch::new(start);
        let ms = |n| start + Duration::from_millis(n);
        for n in 0..FLOOD_FAILURES_PER_SECOND - 1 {
            watch.failed(ms(u64::from(n) * 50));
        }
        assert!(!watch.under_attack(ms(500)), "nine failures in a second are a person");
        watch.failed(ms(600));
        assert!(watch.under_attack(ms(600)), "the tenth in the same second is a flood");
        assert!(watch.under_attack(ms(1_500)), "the last full second still counts");
        assert!(!watch.under_attack(ms(2_100)), "a quiet second later, it is over");
        assert!(!watch.under_attack(ms(10_000)));
    }

    #[test]
    fn failures_spread_over_windows_count_per_window() {
        let start = Instant::now();
        let mut watch = FloodWatch::new(start);
        for n in 0..20u64 {
            watch.failed(start + Duration::from_millis(n * 200)); // five a second
        }
        assert!(!watch.under_attack(start + Duration::from_millis(4_000)));
    }
}
