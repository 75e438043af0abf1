//! A token bucket over password verifications: each costs tens of milliseconds of a core, so a
//! flood of logins must wait its turn instead of taking the broker's CPU.

use std::time::{Duration, Instant};

/// Allows `per_second` verifications a second, in bursts of up to a second's worth.
#[derive(Debug)]
pub struct VerifyBudget {
    every: Duration,
    /// When the next verification is due at the earliest (a theoretical arrival time).
    next: Instant,
    burst: Duration,
}

impl VerifyBudget {
    /// A budget of `per_second` (at least 1) verifications a second.
    pub fn new(per_second: u32, now: Instant) -> VerifyBudget {
        let every = Duration::from_secs(1) / per_second.max(1);
        VerifyBudget { every, next: now, burst: Duration::from_secs(1) }
    }

    /// Takes a place: `Ok` to verify now, or `Err(wait)` to try again after `wait`.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let earliest = now.checked_sub(self.burst).unwrap_or(now);
        self.next = self.next.max(earliest);
        if self.next <= now {
            self.next += self.every;
            Ok(())
        } else {
            Err(self.next - now)
        }
    }

    /// Reserves the next place in line: `Some(wait)` to verify once `wait` has passed (places
    /// are taken in order, one per interval), or `None` if that would be more than `max_wait`
    /// away: the line is full, and the caller refuses without verifying. Waiters are then
    /// bounded by `max_wait` times the rate, whatever comes in.
    pub fn reserve(&mut self, now: Instant, max_wait: Duration) -> Option<Duration> {
        let earliest = now.checked_sub(self.burst).unwrap_or(now);
        self.next = self.next.max(earliest);
        let wait = self.next.saturating_duration_since(now);
        if wait > max_wait {
            return None;
        }
        self.next += self.every;
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut budget = VerifyBudget::new(10, start);
        let burst = (0..100).filter(|_| budget.take(start).is_ok()).count();
        assert_eq!(burst, 1, "a fresh budget has no banked burst");
        let later = start + Duration::from_secs(5);
        let banked = (0..100).filter(|_| budget.take(later).is_ok()).count();
        assert_eq!(banked, 11, "a second's worth banked, and the one due now");
        assert!(budget.take(later).is_err());
    }

    #[test]
    fn reserved_places_come_one_interval_apart_until_the_line_is_full() {
        let start = Instant::now();
        let mut budget = VerifyBudget::new(10, start);
        let waits: Vec<Option<Duration>> = (0..13).map(|_| budget.reserve(start, Duration::from_secs(1))).collect();
        assert_eq!(waits[0], Some(Duration::ZERO));
        assert_eq!(waits[1], Some(Duration::from_millis(100)));
        assert_eq!(waits[10], Some(Duration::from_secs(1)), "a second's worth of places");
        assert_eq!(waits[11], None, "the line is full: refused without a place");
        assert_eq!(waits[12], None);
        // Time passing frees places again.
        assert_eq!(
            budget.reserve(start + Duration::from_millis(150), Duration::from_secs(1)),
            Some(Duration::from_millis(950))
        );
    }
}
