//! Where a guaranteed subscription stands in each pubend's stream, as its deliveries arrive,
//! so that a confirmation after a reconnect can be checked against it.
//!
//! Why: when a connection is lost, the broker forgets the subscription and the client sets it
//! up again. The new SUBSCRIBED says from which tick of each pubend it is in force. If that is
//! past the next tick this subscription expected, the ticks between were possibly missed, and
//! the application is told so with a gap notice in stream order, never silently. Pure: no I/O.

use std::collections::BTreeMap;

use tidings_wire::{PubendId, SubId, Tick};

use crate::delivery::GapNotice;

/// Per pubend, the next tick the subscription expects. Invariant: only increases.
#[derive(Debug, Default)]
pub(crate) struct Standing {
    expected: BTreeMap<PubendId, Tick>,
    confirmed: bool,
}

impl Standing {
    /// A SUBSCRIBED arrived with the start ticks of every pubend the broker knows. The first
    /// sets where the subscription starts; a later one (after a reconnect) returns the gaps
    /// it opens.
    pub(crate) fn confirmed(&mut self, id: SubId, starts: &[(PubendId, Tick)]) -> Vec<GapNotice> {
        let again = std::mem::replace(&mut self.confirmed, true);
        let mut gaps = Vec::new();
        for &(pubend, start) in starts {
            let expected = self.expected.entry(pubend).or_insert(start);
            if again && start > *expected {
                gaps.push(GapNotice { subscription: id, pubend, from: *expected, to: Tick(start.0 - 1) });
            }
            *expected = (*expected).max(start);
        }
        gaps
    }

    /// The subscription has everything of `pubend` up to `through`. False if `through` was
    /// behind what it expected (it had that tick already: a durable subscription resumes from
    /// its last acknowledgement, which may be behind what this client received).
    pub(crate) fn reached(&mut self, pubend: PubendId, through: Tick) -> bool {
        let next = Tick(through.0.saturating_add(1));
        let expected = self.expected.entry(pubend).or_insert(through);
        let new = through >= *expected;
        *expected = (*expected).max(next);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PubendId = PubendId(1);
    const Q: PubendId = PubendId(2);

    #[test]
    fn the_first_confirmation_sets_the_start_and_opens_no_gap() {
        let mut s = Standing::default();
        assert!(s.confirmed(SubId(1), &[(P, Tick(100))]).is_empty());
        s.reached(P, Tick(99));
        assert!(s.confirmed(SubId(1), &[(P, Tick(100))]).is_empty());
    }

    #[test]
    fn a_later_start_after_a_reconnect_is_a_gap_from_the_next_expected_tick() {
        let mut s = Standing::default();
        s.confirmed(SubId(1), &[(P, Tick(100)), (Q, Tick(5))]);
        s.reached(P, Tick(150));
        let gaps = s.confirmed(SubId(1), &[(P, Tick(200)), (Q, Tick(5))]);
        assert_eq!(gaps, [GapNotice { subscription: SubId(1), pubend: P, from: Tick(151), to: Tick(199) }]);
        assert!(s.confirmed(SubId(1), &[(P, Tick(200))]).is_empty(), "a confirmation at the same place opens none");
    }

    #[test]
    fn a_tick_below_the_expected_one_is_a_repeat() {
        let mut s = Standing::default();
        s.confirmed(SubId(1), &[(P, Tick(100))]);
        assert!(s.reached(P, Tick(100)));
        assert!(s.reached(P, Tick(150)));
        s.confirmed(SubId(1), &[(P, Tick(120))]);
        assert!(!s.reached(P, Tick(120)), "resumed below what was received");
        assert!(!s.reached(P, Tick(150)));
        assert!(s.reached(P, Tick(151)));
    }

    #[test]
    fn a_pubend_first_seen_in_deliveries_counts_from_its_last_tick() {
        let mut s = Standing::default();
        s.confirmed(SubId(1), &[]);
        s.reached(Q, Tick(9));
        let gaps = s.confirmed(SubId(1), &[(Q, Tick(10)), (P, Tick(7))]);
        assert!(gaps.is_empty(), "Q continues where it was; P is new and starts where the broker says");
    }
}
