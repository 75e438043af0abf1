//! The reconnect schedule: exponential backoff with jitter. Pure: the random source is a
//! seeded generator handed in, so a schedule is a function of its seed.

use std::time::Duration;

use tidings_wire::hash::SplitMix64;

/// How a TCP client waits between reconnect attempts.
///
/// Attempt `n` (counting from 0) waits a random delay in `[ceiling/2, ceiling]`, where
/// `ceiling = min(initial × 2ⁿ, max)` ("equal jitter": never hammers the broker in lock step
/// with other clients, never waits less than half the ceiling).
///
/// ```
/// use std::time::Duration;
/// use tidings_client::Backoff;
///
/// let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(2), max_attempts: Some(10) };
/// assert_eq!(b.ceiling(0), Duration::from_millis(100));
/// assert_eq!(b.ceiling(3), Duration::from_millis(800));
/// assert_eq!(b.ceiling(9), Duration::from_secs(2));
/// assert_eq!(b.delay(3, 0.0), Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first attempt's delay.
    pub initial: Duration,
    /// The largest ceiling.
    pub max: Duration,
    /// Attempts before giving up; `None` retries forever.
    pub max_attempts: Option<u32>,
}

impl Default for Backoff {
    /// 100 ms doubling up to 800 ms, forever: a long-running subscriber outlives broker
    /// restarts and is back within 0.8 s of its broker (each attempt waits 0.4-0.8 s once the
    /// ceiling is reached).
    fn default() -> Backoff {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(800), max_attempts: None }
    }
}

impl Backoff {
    /// The largest delay before attempt `attempt` (0-based): `min(initial × 2^attempt, max)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The delay before attempt `attempt` for a jitter fraction in `[0, 1]` (clamped):
    /// half the ceiling plus `jitter` times the other half.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let ceiling = self.ceiling(attempt);
        let half = ceiling / 2;
        half + (ceiling - half).mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// One run of reconnect attempts: hands out delays until the attempts are used up.
#[derive(Debug)]
pub(crate) struct Schedule {
    backoff: Backoff,
    attempt: u32,
    rng: SplitMix64,
}

impl Schedule {
    pub(crate) fn new(backoff: Backoff, seed: u64) -> Schedule {
        Schedule { backoff, attempt: 0, rng: SplitMix64::new(seed) }
    }

    /// The delay before the next attempt, or `None` when the attempts are used up.
    pub(crate) fn next_delay(&mut self) -> Option<Duration> {
        if self.backoff.max_attempts.is_some_and(|max| self.attempt >= max) {
            return None;
        }
        let delay = self.backoff.delay(self.attempt, self.rng.next_fraction());
        self.attempt += 1;
        Some(delay)
    }

    /// Attempts handed out so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(max_attempts: Option<u32>) -> Backoff {
        Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100), max_attempts }
    }

    #[test]
    fn ceiling_doubles_then_stays_at_the_maximum() {
        let b = backoff(None);
        let ceilings: Vec<u64> = (0..6).map(|n| b.ceiling(n).as_millis() as u64).collect();
        assert_eq!(ceilings, [10, 20, 40, 80, 100, 100]);
        assert_eq!(b.ceiling(200), Duration::from_millis(100));
    }

    #[test]
    fn every_delay_lies_between_half_the_ceiling_and_the_ceiling() {
        let mut s = Schedule::new(backoff(Some(50)), 7);
        let mut n = 0;
        while let Some(d) = s.next_delay() {
            let ceiling = backoff(None).ceiling(n);
            assert!(d >= ceiling / 2 && d <= ceiling, "attempt {n}: {d:?} outside [{:?}, {ceiling:?}]", ceiling / 2);
            n += 1;
        }
        assert_eq!(n, 50);
        assert_eq!(s.attempts(), 50);
    }

    #[test]
    fn schedule_stops_after_max_attempts() {
        let mut s = Schedule::new(backoff(Some(2)), 1);
        assert!(s.next_delay().is_some());
        assert!(s.next_delay().is_some());
        assert_eq!(s.next_delay(), None);
    }

    #[test]
    fn unlimited_schedule_keeps_going() {
        let mut s = Schedule::new(backoff(None), 1);
        assert!((0..10_000).all(|_| s.next_delay().is_some()));
    }

    #[test]
    fn same_seed_gives_the_same_schedule_and_seeds_differ() {
        let run = |seed| {
            let mut s = Schedule::new(backoff(Some(8)), seed);
            std::iter::from_fn(|| s.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn jitter_is_clamped() {
        let b = backoff(None);
        assert_eq!(b.delay(0, -1.0), Duration::from_millis(5));
        assert_eq!(b.delay(0, 2.0), Duration::from_millis(10));
    }

    #[test]
    fn the_jitter_sequence_is_splitmix64_pinned_to_known_values() {
        let mut rng = SplitMix64::new(7);
        assert_eq!(rng.next_u64(), 0x63cb_e1e4_5932_0dd7);
        assert_eq!(rng.next_fraction(), 0.016_788_294_528_156_11);
        assert_eq!(rng.next_u64(), 0xe698_4080_bab1_2a02);
    }
}
