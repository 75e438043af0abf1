//! What the gate (`super::gate`) remembers between a publish's two acknowledgements, the
//! engine's (the host's log synced it) and the group's (a quorum synced it), and the pure
//! decisions it takes on them, apart from the driver so they are tested alone.
//!
//! The rule these decisions keep: every publish the gate took gets an answer, an
//! acknowledgement or a refusal, while its publisher stays connected. A publisher that is
//! answered neither waits for good; the relay of a durable subscription stored in its cell is
//! such a publisher, and once its window holds only unanswered republishes it pauses its
//! origin's stream for good (nemesis seed 625 on `gryphon-fig3-double`: 1,641 acknowledged
//! messages never delivered to a durable subscriber, its relay group having lost its quorum).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tidings_delivery::{PubendId, PublisherId, Tick};
use tidings_node::publishes::Ack;
use tidings_wire::GuaranteedPublish;

use crate::guaranteed::driver::Waiter;
use crate::outbox::Outbox;

/// A publish's identity at this broker: its pubend, publisher and sequence number.
pub(super) type Key = (PubendId, PublisherId, u64);

/// A publish the group has not acknowledged yet.
pub(super) struct Proposal {
    /// The engine's tick (`None` until the engine appends it).
    pub(super) tick: Option<Tick>,
    pub(super) payload: Vec<u8>,
    /// The group refused it while this broker led: nothing proposes it again in this term, so
    /// the next acknowledgement of the engine (its own, or a retry's) proposes it again at once
    /// and the group's answer, either way, reaches the publisher ([`Quorum::engine_acked`]).
    pub(super) refused: bool,
}

/// Acknowledgements waiting for the other half of the rule; `W` is whoever waits (the
/// driver's [`Waiter`]).
pub(crate) struct Quorum<W = Waiter> {
    /// The engine acknowledged; the group has not yet.
    pub(super) parked: BTreeMap<Key, Ack<W>>,
    /// The group acknowledged; the engine has not yet.
    pub(super) acked: BTreeSet<Key>,
    /// Taken by the gate and not yet acknowledged by the group: proposed again when this
    /// broker leads in a new term (in tick order), since the core forgets what an earlier term
    /// proposed and a publisher that waits (rather than retries) would wait forever.
    pub(super) proposed: BTreeMap<Key, Proposal>,
    /// Publishes waiting for this broker to lead their group.
    pub(super) waiting: VecDeque<(GuaranteedPublish, Arc<Outbox>, Instant)>,
    /// Per replicated pubend, how far its log is synced here and committed in its group.
    pub(super) frontier: BTreeMap<PubendId, Frontier>,
    /// Publishes to propose at the end of this turn of the driver, per pubend in the order
    /// they were appended (tick order): all of a turn's publishes go to the group as one
    /// proposal ([`tidings_replica::Input::PublishAllAt`]), so its per-message costs (a
    /// `Ready`, a journal write, an append and its answer per follower) are paid once per
    /// turn, not per publish.
    pub(super) batch: BTreeMap<PubendId, Vec<Key>>,
}

impl<W> Default for Quorum<W> {
    fn default() -> Self {
        Quorum {
            parked: BTreeMap::new(),
            acked: BTreeSet::new(),
            proposed: BTreeMap::new(),
            waiting: VecDeque::new(),
            frontier: BTreeMap::new(),
            batch: BTreeMap::new(),
        }
    }
}

/// What becomes of the engine's acknowledgement of a publish ([`Quorum::engine_acked`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum EngineAck<W> {
    /// The group acknowledged it already: the PUBLISH_ACK goes now.
    Answer(Ack<W>),
    /// The gate never took it (the engine acknowledged a repeat it found in its own log after a
    /// restart): refused, and the publisher's retry goes through the gate.
    NotTaken(Ack<W>),
    /// Kept until the group answers (proposed this turn if [`Quorum::batch`] got it).
    Parked,
}

impl<W> Quorum<W> {
    /// The engine acknowledged `key` (its append synced here, or a retry it answered from its
    /// table); the group's half decides.
    pub(super) fn engine_acked(&mut self, key: Key, ack: Ack<W>) -> EngineAck<W> {
        if self.acked.remove(&key) {
            return EngineAck::Answer(ack);
        }
        let Some(proposal) = self.proposed.get_mut(&key) else { return EngineAck::NotTaken(ack) };
        let again = match proposal.tick {
            // Proposed at its append: the group answers it, here or after a new term; once
            // refused while this broker led, nothing would, so it goes again now.
            Some(_) => std::mem::take(&mut proposal.refused),
            // A retry the engine answered from its table never reached its append here: the
            // tick is the one the table remembers (0, "after every record", when forgotten).
            None => {
                proposal.tick = Some(ack.tick.unwrap_or_default());
                true
            }
        };
        self.parked.insert(key, ack);
        if again {
            self.batch.entry(key.0).or_default().push(key);
        }
        EngineAck::Parked
    }

    /// The group refused `key` (`leads`: while this broker leads it). Returns the engine's
    /// acknowledgement parked for it, to turn into a refusal. The proposal is kept: proposed
    /// again when this broker leads in a new term; refused while it leads, again at the
    /// engine's next acknowledgement of it (see [`Proposal::refused`]).
    pub(super) fn group_refused(&mut self, key: Key, leads: bool) -> Option<Ack<W>> {
        if leads {
            if let Some(proposal) = self.proposed.get_mut(&key) {
                proposal.refused = true;
            }
        }
        self.parked.remove(&key)
    }

    /// Forgets everything of `pubend` (its log closed here, `depose`): the acknowledgements
    /// parked for the group's half, and the keys the group acknowledged before the engine did.
    pub(super) fn forget_pubend(&mut self, pubend: PubendId) -> (Vec<(Key, Ack<W>)>, Vec<Key>) {
        let of = |key: &Key| key.0 == pubend;
        self.proposed.retain(|key, _| !of(key));
        self.batch.remove(&pubend);
        self.frontier.remove(&pubend);
        let parked = self.parked.extract_if(.., |key, _| of(key)).collect();
        let acked = self.acked.extract_if(.., of).collect();
        (parked, acked)
    }
}

/// The engine sends a record to subscribers only once its append is synced (`AppendDone`). For a
/// replicated pubend it is told so only once the group committed the record too: then every
/// record a subscriber ever received is in the group, and a successor serves it at its tick. A
/// record sent before its commit could be lost with its host, and a retry of its publish logged
/// again by the successor at another tick: a duplicate (docs/replication.md, "Takeover").
#[derive(Default)]
pub(super) struct Frontier {
    /// The store's last `AppendDone`.
    pub(super) store: Tick,
    /// The tick of the last publish the group acknowledged (raft commits in order).
    pub(super) group: Tick,
    /// The last `AppendDone` fed to the engine: the lower of the two.
    pub(super) fed: Tick,
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: Key = (PubendId(7), PublisherId(3), 41);

    fn ack(waiter: &'static str) -> Ack<&'static str> {
        Ack { waiter, tick: Some(Tick(1_000)), synced: true }
    }

    /// A quorum whose gate took `KEY` and whose engine appended it at tick 1,000 (proposed).
    fn proposed() -> Quorum<&'static str> {
        let mut quorum = Quorum::default();
        quorum.proposed.insert(KEY, Proposal { tick: Some(Tick(1_000)), payload: vec![1], refused: false });
        quorum
    }

    #[test]
    fn a_refusal_while_leading_before_the_engines_ack_is_proposed_again_at_that_ack() {
        let mut quorum = proposed();
        assert_eq!(quorum.group_refused(KEY, true), None, "nothing parked yet");
        // Before the change the engine's acknowledgement was parked for a group answer that
        // never came in this term: the publisher waited for good.
        assert_eq!(quorum.engine_acked(KEY, ack("publisher")), EngineAck::Parked);
        assert_eq!(quorum.batch.get(&KEY.0), Some(&vec![KEY]), "proposed again this turn");
        // The group refuses it again: the parked acknowledgement becomes the refusal.
        assert_eq!(quorum.group_refused(KEY, true).map(|a| a.waiter), Some("publisher"));
    }

    #[test]
    fn a_retry_after_a_refusal_while_leading_is_proposed_again() {
        let mut quorum = proposed();
        quorum.engine_acked(KEY, ack("first"));
        assert!(quorum.batch.is_empty(), "proposed at its append: waits for the group");
        assert_eq!(quorum.group_refused(KEY, true).map(|a| a.waiter), Some("first"));
        assert_eq!(quorum.engine_acked(KEY, ack("retry")), EngineAck::Parked);
        assert_eq!(quorum.batch.get(&KEY.0), Some(&vec![KEY]));
        assert_eq!(quorum.parked.get(&KEY).map(|a| a.waiter), Some("retry"));
    }

    #[test]
    fn a_refusal_while_not_leading_waits_for_a_new_term() {
        let mut quorum = proposed();
        assert_eq!(quorum.group_refused(KEY, false), None);
        assert_eq!(quorum.engine_acked(KEY, ack("publisher")), EngineAck::Parked);
        assert!(quorum.batch.is_empty(), "proposed again only when this broker leads (`propose_again`)");
    }

    #[test]
    fn the_engines_ack_after_the_groups_is_answered_and_one_never_taken_is_refused() {
        let mut quorum = proposed();
        quorum.proposed.remove(&KEY);
        quorum.acked.insert(KEY);
        assert_eq!(quorum.engine_acked(KEY, ack("publisher")), EngineAck::Answer(ack("publisher")));
        assert_eq!(quorum.engine_acked(KEY, ack("repeat")), EngineAck::NotTaken(ack("repeat")));
    }

    #[test]
    fn a_retry_answered_from_the_engines_table_is_proposed_at_the_remembered_tick() {
        let mut quorum: Quorum<&'static str> = Quorum::default();
        quorum.proposed.insert(KEY, Proposal { tick: None, payload: vec![1], refused: false });
        assert_eq!(quorum.engine_acked(KEY, ack("retry")), EngineAck::Parked);
        assert_eq!(quorum.proposed[&KEY].tick, Some(Tick(1_000)));
        assert_eq!(quorum.batch.get(&KEY.0), Some(&vec![KEY]));
    }
}
