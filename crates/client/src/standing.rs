//! Where a guaranteed subscription stands in each pubend's stream, as its deliveries arrive,
//! so that a confirmation after a reconnect can be checked against it.
//!
//! Why: when a connection is lost, the broker forgets the subscription and the client sets it
//! up again. The new SUBSCRIBED says from which tick of each pubend it is in force. If that is
//! past the next tick this subscription expected, the ticks between were possibly missed, and
//! the application is told so with a gap notice in stream order, never silently. Pure: no I/O.
//!
//! A pubend the subscription had reached that the new SUBSCRIBED does not list (the broker,
//! restarted behind a cut link, did not know it yet) is *unsure*: its stream here starts
//! wherever the broker later starts it. The first delivery or gap of it that does not repeat
//! what the subscription had tells where: past the next expected tick, the ticks between were
//! possibly missed and are reported as a gap before it (the nemesis found subscribers missing
//! thousands of such ticks silently).

use std::collections::{BTreeMap, BTreeSet};

use tidings_wire::{PubendId, SubId, Tick};

use crate::delivery::GapNotice;

/// Per pubend, the next tick the subscription expects. Invariant: only increases.
#[derive(Debug, Default)]
pub(crate) struct Standing {
    expected: BTreeMap<PubendId, Tick>,
    confirmed: bool,
    /// Pubends reached before a reconnect that its SUBSCRIBED did not list (see the module
    /// doc), until their first delivery or gap.
    unsure: BTreeSet<PubendId>,
}

impl Standing {
    /// A SUBSCRIBED arrived with the start ticks of every pubend the broker knows. The first
    /// sets where the subscription starts; a later one (after a reconnect) returns the gaps
    /// it opens.
    pub(crate) fn confirmed(&mut self, id: SubId, starts: &[(PubendId, Tick)]) -> Vec<GapNotice> {
        let again = std::mem::replace(&mut self.confirmed, true);
        let mut gaps = Vec::new();
        if again {
            let listed: BTreeSet<PubendId> = starts.iter().map(|(pubend, _)| *pubend).collect();
            self.unsure.extend(self.expected.keys().filter(|pubend| !listed.contains(pubend)));
        }
        for &(pubend, start) in starts {
            self.unsure.remove(&pubend);
            let expected = self.expected.entry(pubend).or_insert(start);
            if again && start > *expected {
                gaps.push(GapNotice { subscription: id, pubend, from: *expected, to: Tick(start.0 - 1) });
            }
            *expected = (*expected).max(start);
        }
        gaps
    }

    /// Ticks `from..=through` of `pubend` arrived (a delivery: `from == through`; a gap notice
    /// from the broker: its range). If `pubend` is unsure (see the module doc) and this starts
    /// past the next expected tick, returns the gap before it.
    pub(crate) fn arrived(&mut self, id: SubId, pubend: PubendId, from: Tick) -> Option<GapNotice> {
        if !self.unsure.remove(&pubend) {
            return None;
        }
        let expected = *self.expected.get(&pubend)?;
        (from > expected).then(|| GapNotice { subscription: id, pubend, from: expected, to: Tick(from.0 - 1) })
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
    fn a_pubend_the_new_confirmation_does_not_list_opens_a_gap_up_to_where_it_resumes() {
        let mut s = Standing::default();
        s.confirmed(SubId(1), &[(P, Tick(100)), (Q, Tick(5))]);
        s.reached(P, Tick(150));
        s.reached(Q, Tick(9));
        assert!(s.confirmed(SubId(1), &[(Q, Tick(10))]).is_empty(), "P is not listed: nothing known yet");
        assert_eq!(s.arrived(SubId(1), Q, Tick(12)), None, "Q was listed");
        let gap = s.arrived(SubId(1), P, Tick(180));
        assert_eq!(gap, Some(GapNotice { subscription: SubId(1), pubend: P, from: Tick(151), to: Tick(179) }));
        assert!(s.reached(P, Tick(180)));
        assert_eq!(s.arrived(SubId(1), P, Tick(190)), None, "only the first arrival after the reconnect");
    }

    #[test]
    fn an_unlisted_pubend_resuming_at_or_below_the_expected_tick_opens_no_gap() {
        let mut s = Standing::default();
        s.confirmed(SubId(1), &[(P, Tick(100))]);
        s.reached(P, Tick(150));
        s.confirmed(SubId(1), &[]);
        assert_eq!(s.arrived(SubId(1), P, Tick(140)), None, "a repeat: the stream resumed below");
        let mut s = Standing::default();
        s.confirmed(SubId(1), &[(P, Tick(100))]);
        s.reached(P, Tick(150));
        s.confirmed(SubId(1), &[]);
        assert_eq!(s.arrived(SubId(1), P, Tick(151)), None, "exactly where it stood");
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
