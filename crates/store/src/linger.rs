//! When the group writer paces its syncs (`Options::linger`, under `always` only). At a steady
//! 2,000 publishes a second each sync otherwise carries one or two publishes, and the sync
//! with its wake-ups is most of the CPU a guaranteed publisher costs its broker.
//!
//! Pacing, not waiting from the first arrival: after committing a small group the writer
//! sleeps until one period after that commit began, then takes whatever came meanwhile. The
//! earlier rule (on the first arrival of a group, wait the linger, then commit) lost twice:
//! publishers send in bursts (a rate-limited client wakes on the timer's millisecond), so each
//! burst that opened a group waited the whole linger while the next burst just missed the
//! commit and opened the next group (2 ms linger, bursts every 1 ms: 1.9 ms added median
//! latency, each group two bursts); and the writer was woken by that first arrival (a futex
//! call on the driver's side and a context switch on the writer's per group). Paced, every
//! publish waits at most one period and on average half of one, whatever the burst pattern,
//! and in a steady stream nobody wakes the writer.
//!
//! The writer paces only while all of these hold:
//! - the group it committed is small (fewer than [`SMALL_GROUP`] operations): at high rates
//!   the sync itself gathers the next group;
//! - the group before it was small too: a publisher keeping many publishes in flight has a
//!   large group taken after each sync, and a small one in between (the few publishes its
//!   acknowledgements released while the writer was busy) gains nothing from a wait, which
//!   held it to one window per period (`bench acked`, 256 in flight: 115 k acknowledged
//!   publishes/s with a 2 ms wait against 244 k without, before this rule);
//! - pacing has been worth it: a paced sleep saved a sync only if it gathered at least two
//!   operations whose arrivals were spread over at least a quarter of the period. A slow
//!   stream sends none or one per sleep; publishers that each wait for their acks send their
//!   next publishes in one burst right after the acks went out, which the writer would have
//!   taken as one group anyway (a window of 8 was held to one window per period, 3,900
//!   against 19,700 publishes/s, before the spread was asked for). The writer keeps a moving
//!   average of how many sleeps were fruitful (each sleep weighs [`WEIGHT`]); when it falls
//!   below [`OFF_BELOW`], pacing is off for [`BACKOFF`], after which it is tried again with a
//!   clean slate. A rate-limited publisher's bursts sometimes reach the broker merged, so a
//!   sleep of a steady stream catches one merged burst (saving nothing) now and then: one
//!   time in eight on one machine, one in five to one in three on another where syncs took
//!   0.3 ms instead of 0.2 (2,000 msg/s, `tidings pub --rate`). "Three fruitless in a row"
//!   turned pacing off for a third of each second on the first; an average of weight 1/8
//!   under one half kept it off more than half the time on the second (5,000 to 8,000 syncs
//!   per 10 s where pacing gives 5,000, 20 to 35 points of a core). Weight 1/16 and one
//!   third of a chance: off under 1 % of the time for a steady stream with one fruitless
//!   sleep in three (a simulation of random fruitless sleeps), while a publisher waiting for
//!   its acks turns it off after 19 sleeps (38 ms of each second at one window per period).
//!
//! A publish after a quiet spell is committed at once (the writer waits on the queue, and the
//! group it takes is written without delay); pacing starts with the commit after it.
//!
//! Pure: the writer passes the time in.

use std::time::{Duration, Instant};

/// Groups at least this large end pacing: the next group is taken at once.
pub(crate) const SMALL_GROUP: usize = 16;

/// How long pacing stays off once fewer than half of the recent sleeps were fruitful.
pub(crate) const BACKOFF: Duration = Duration::from_secs(1);

/// The weight of the newest sleep in the moving average of fruitful sleeps.
pub(crate) const WEIGHT: f64 = 1.0 / 16.0;

/// Pacing turns off when the moving average of fruitful sleeps falls below this.
pub(crate) const OFF_BELOW: f64 = 0.3;

/// A paced sleep saved a sync when it gathered at least this many operations, with their
/// arrivals spread over at least the period divided by [`SPREAD`].
const FRUITFUL: usize = 2;
const SPREAD: u32 = 4;

/// The writer's pacing state.
#[derive(Debug)]
pub(crate) struct Linger {
    /// The period (zero: never pace).
    pub(crate) wait: Duration,
    /// When the next group is taken, while pacing.
    next: Option<Instant>,
    /// Operations in the group committed last.
    last_group: usize,
    off_until: Option<Instant>,
    /// Moving average of fruitful paced sleeps (1: all were), since pacing was last turned on.
    fruitful: f64,
}

impl Linger {
    /// Pacing with a period of `wait` (zero turns it off).
    pub(crate) fn new(wait: Duration) -> Linger {
        Linger { wait, next: None, last_group: 0, off_until: None, fruitful: 1.0 }
    }

    /// Until when the writer sleeps before taking the next group; `None`: it takes the next
    /// group as soon as there is one.
    pub(crate) fn pace(&self) -> Option<Instant> {
        self.next
    }

    /// A paced sleep ended at `now` and took `gathered` operations, pushed over `spread`
    /// (from the first push to the last); returns whether it saved a sync.
    pub(crate) fn waited(&mut self, gathered: usize, spread: Duration, now: Instant) -> bool {
        self.next = None;
        let fruitful = gathered >= FRUITFUL && spread >= self.wait / SPREAD;
        self.fruitful += WEIGHT * (f64::from(u8::from(fruitful)) - self.fruitful);
        if self.fruitful < OFF_BELOW {
            self.fruitful = 1.0;
            self.off_until = Some(now + BACKOFF);
        }
        fruitful
    }

    /// A group of `group` operations was committed, its commit begun at `started`.
    pub(crate) fn committed(&mut self, group: usize, started: Instant) {
        let pacing = !self.wait.is_zero()
            && group < SMALL_GROUP
            && self.last_group < SMALL_GROUP
            && self.off_until.is_none_or(|until| started >= until);
        self.next = pacing.then(|| started + self.wait);
        self.last_group = group;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn after_a_small_group_the_next_is_taken_one_period_after_its_commit_began() {
        let t0 = Instant::now();
        let mut linger = Linger::new(2 * MS);
        assert_eq!(linger.pace(), None, "nothing committed yet: the first publish is written at once");
        linger.committed(1, t0);
        assert_eq!(linger.pace(), Some(t0 + 2 * MS));
        linger.waited(4, MS, t0 + 2 * MS);
        assert_eq!(linger.pace(), None, "a sleep is used once");
        linger.committed(4, t0 + 2 * MS);
        assert_eq!(linger.pace(), Some(t0 + 4 * MS), "a steady stream is paced on");
        let mut off = Linger::new(Duration::ZERO);
        off.committed(1, t0);
        assert_eq!(off.pace(), None, "zero never paces");
    }

    #[test]
    fn a_large_group_or_one_right_after_a_large_group_is_not_paced() {
        let t0 = Instant::now();
        let mut linger = Linger::new(2 * MS);
        linger.committed(SMALL_GROUP, t0);
        assert_eq!(linger.pace(), None, "a large group: the sync gathers the next one");
        linger.committed(3, t0 + MS);
        assert_eq!(linger.pace(), None, "the few its acks released (many in flight) go at once");
        linger.committed(3, t0 + 2 * MS);
        assert_eq!(linger.pace(), Some(t0 + 4 * MS), "two small groups in a row: paced");
    }

    #[test]
    fn mostly_fruitless_sleeps_turn_pacing_off_for_a_while() {
        // A publisher that waits for each ack sends one publish per sleep: no sync saved.
        let t0 = Instant::now();
        let spread = Duration::ZERO;
        let mut linger = Linger::new(2 * MS);
        linger.committed(1, t0);
        let mut i = 1;
        while linger.pace().is_some() {
            assert!(!linger.waited(1, spread, t0 + 2 * i * MS));
            linger.committed(1, t0 + 2 * i * MS);
            i += 1;
            assert!(i < 24, "pacing is off within a few tens of fruitless sleeps");
        }
        assert!(i > 10, "a few fruitless sleeps are hiccups");
        let end = t0 + 2 * i * MS;
        let later = end + BACKOFF;
        linger.committed(1, later);
        assert!(linger.pace().is_some(), "and tried again after the backoff");
    }

    /// Runs `sleeps` paced sleeps 2 ms apart from `t0`, sleep `i` gathering `each(i)`
    /// (operations, spread), each followed by a commit of what it gathered; returns how many
    /// of those commits left pacing on.
    fn paced(linger: &mut Linger, t0: Instant, sleeps: u32, mut each: impl FnMut(u32) -> (usize, Duration)) -> u32 {
        let mut on = 0;
        for i in 1..=sleeps {
            let (gathered, spread) = each(i);
            linger.waited(gathered, spread, t0 + 2 * i * MS);
            linger.committed(gathered, t0 + 2 * i * MS);
            on += u32::from(linger.pace().is_some());
        }
        on
    }

    #[test]
    fn a_steady_stream_with_a_fruitless_sleep_one_time_in_four_keeps_pacing() {
        let t0 = Instant::now();
        let mut linger = Linger::new(2 * MS);
        linger.committed(2, t0);
        let on = paced(&mut linger, t0, 100, |i| if i % 4 == 0 { (4, Duration::ZERO) } else { (4, MS) });
        assert_eq!(on, 100);
    }

    #[test]
    fn a_steady_stream_with_random_fruitless_sleeps_one_time_in_three_keeps_pacing() {
        // Merged bursts at random, as a rate-limited publisher's reach a busy broker: pacing
        // still saves most syncs, so it must stay on (5,000 sleeps is 10 s at 2 ms).
        let t0 = Instant::now();
        let mut linger = Linger::new(2 * MS);
        linger.committed(2, t0);
        let mut rng = fastrand::Rng::with_seed(7);
        let on = paced(&mut linger, t0, 5_000, |_| if rng.u32(0..3) == 0 { (4, Duration::ZERO) } else { (4, MS) });
        assert!(on >= 4_950, "pacing was off after {} of 5,000 sleeps", 5_000 - on);
    }

    #[test]
    fn a_burst_gathered_by_a_sleep_saved_no_sync() {
        // Publishers that wait for their acks send the next window in one burst after the acks:
        // taken at once it would have been one group all the same.
        let t0 = Instant::now();
        let mut linger = Linger::new(2 * MS);
        linger.committed(8, t0);
        paced(&mut linger, t0, 24, |_| (8, Duration::from_micros(30)));
        assert_eq!(linger.pace(), None, "bursts only: pacing is off");
    }
}
