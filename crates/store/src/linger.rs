//! When the group writer waits for more appends before a sync (`Options::linger`, under
//! `always` only). At a steady 2,000 publishes a second each sync otherwise carries one publish,
//! and the sync with its wake-ups is most of the CPU a guaranteed publisher costs its broker.
//! But a wait is pure loss for a publisher that sends its next message only after the ack of
//! the last (Nagle's problem), and needless when the group is already large. So the writer
//! waits only while all of these hold:
//! - the group it took is small (fewer than [`SMALL_GROUP`] operations): at high rates the
//!   sync itself gathers the next group;
//! - appends come steadily: the previous group was committed less than the linger ago;
//! - the previous group was small too: a publisher keeping many publishes in flight has a
//!   large group taken after each sync, and a small one in between (the few publishes its
//!   acknowledgements released while the writer was busy) gains nothing from a wait, which
//!   held it to one window per linger (`bench acked`, 256 in flight: 115 k acknowledged
//!   publishes/s with a 2 ms linger against 244 k without, before this rule);
//! - waiting has been worth it: [`FRUITLESS`] waits in a row that gathered nothing (every
//!   publisher was waiting for its ack) turn waiting off for [`BACKOFF`], after which it is
//!   tried again. One is not enough: a steady stream has hiccups, and one fruitless wait
//!   turning waiting off for a second cost a third of the syncs it saved at 2,000 msg/s.
//!
//! Pure: the writer passes the time in.

use std::time::{Duration, Instant};

/// Groups at least this large are written at once.
pub(crate) const SMALL_GROUP: usize = 16;

/// How long waiting stays off after [`FRUITLESS`] waits in a row gathered nothing.
pub(crate) const BACKOFF: Duration = Duration::from_secs(1);

/// Waits in a row that gathered nothing before waiting is turned off.
pub(crate) const FRUITLESS: u32 = 2;

/// The writer's linger state.
#[derive(Debug)]
pub(crate) struct Linger {
    /// How long to wait (zero: never).
    pub(crate) wait: Duration,
    last_commit: Option<Instant>,
    /// Operations in the group committed last.
    last_group: usize,
    off_until: Option<Instant>,
    /// Fruitless waits in a row.
    fruitless: u32,
}

impl Linger {
    /// Waits of `wait` (zero turns lingering off).
    pub(crate) fn new(wait: Duration) -> Linger {
        Linger { wait, last_commit: None, last_group: 0, off_until: None, fruitless: 0 }
    }

    /// Whether to wait before committing a group of `group` operations just taken at `now`.
    pub(crate) fn should(&self, group: usize, now: Instant) -> bool {
        !self.wait.is_zero()
            && group < SMALL_GROUP
            && self.last_group < SMALL_GROUP
            && self.last_commit.is_some_and(|at| now.saturating_duration_since(at) < self.wait)
            && self.off_until.is_none_or(|until| now >= until)
    }

    /// A wait ended at `now`; `gathered` tells whether more operations came meanwhile.
    pub(crate) fn waited(&mut self, gathered: bool, now: Instant) {
        self.fruitless = if gathered { 0 } else { self.fruitless + 1 };
        if self.fruitless >= FRUITLESS {
            self.fruitless = 0;
            self.off_until = Some(now + BACKOFF);
        }
    }

    /// A group of `group` operations was committed at `now`.
    pub(crate) fn committed(&mut self, group: usize, now: Instant) {
        self.last_commit = Some(now);
        self.last_group = group;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_steady_stream_of_small_groups_waits_and_a_quiet_spell_does_not() {
        let t0 = Instant::now();
        let mut linger = Linger::new(3 * MS);
        assert!(!linger.should(1, t0), "nothing committed yet: no stream to wait for");
        linger.committed(1, t0);
        assert!(linger.should(1, t0 + MS), "a group right after the last commit waits");
        assert!(!linger.should(SMALL_GROUP, t0 + MS), "a large group is written at once");
        assert!(!linger.should(1, t0 + 10 * MS), "after a quiet spell it is written at once");
        assert!(!Linger::new(Duration::ZERO).should(1, t0), "zero never waits");
        linger.committed(SMALL_GROUP, t0 + MS);
        assert!(!linger.should(1, t0 + 2 * MS), "after a large group (many in flight) a small one is written at once");
    }

    #[test]
    fn waits_that_gather_nothing_twice_in_a_row_turn_waiting_off_for_a_while() {
        // A publisher that waits for each ack: the wait gathers nothing, so the next groups
        // are written at once until the backoff has passed.
        let t0 = Instant::now();
        let mut linger = Linger::new(3 * MS);
        linger.committed(1, t0);
        assert!(linger.should(1, t0 + MS));
        linger.waited(false, t0 + 4 * MS);
        linger.committed(1, t0 + 5 * MS);
        assert!(linger.should(1, t0 + 6 * MS), "one fruitless wait is a hiccup");
        linger.waited(false, t0 + 9 * MS);
        linger.committed(1, t0 + 10 * MS);
        assert!(!linger.should(1, t0 + 11 * MS), "waiting is off after two in a row");
        let later = t0 + 9 * MS + BACKOFF;
        linger.committed(1, later);
        assert!(linger.should(1, later + MS), "and tried again after the backoff");
        linger.waited(true, later + 4 * MS);
        linger.committed(1, later + 5 * MS);
        assert!(linger.should(1, later + 6 * MS), "a wait that gathered more keeps waiting on");
    }
}
