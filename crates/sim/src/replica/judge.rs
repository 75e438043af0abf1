//! The invariants of a replicated pubend, judged as the run goes and at its end:
//!
//! - one leader per term (Raft's election safety, and the epoch that fences a deposed host);
//! - every replica applies the same entry at the same index (a replica re-applying its log after
//!   a restart must apply it again identically);
//! - a publish acknowledged twice (a retry, perhaps after a takeover) gets the same tick, or
//!   none once its record is released ("logged earlier, tick forgotten");
//! - at the end, every acknowledged publish is logged exactly once in the applied log (every
//!   index as whoever applied it first, since a replica restarted from a snapshot applies only
//!   what follows it), at the tick it was acknowledged with; every replica ends with the same
//!   state, which holds every acknowledged publish not yet released.

use std::collections::BTreeMap;

use tidings_replica::{Applied, Outcome, PubendReplica, ReplicaId};

/// What the run has seen, checked as it comes in.
#[derive(Default)]
pub(crate) struct Judge {
    /// The leader of each term.
    leaders: BTreeMap<u64, ReplicaId>,
    /// What was applied at each index, by anyone.
    log: BTreeMap<u64, Applied>,
    /// Every acknowledgement: (publisher, seq) -> tick.
    pub(crate) acked: BTreeMap<(u64, u64), u64>,
    /// Which replica acknowledged each publish first.
    first_acker: BTreeMap<(u64, u64), ReplicaId>,
    /// Acknowledgements of a publish by another replica than the first (a retry after a
    /// takeover, answered from the replicated retry table).
    pub(crate) retries_after_takeover: usize,
    /// Acknowledgements received, retries included.
    pub(crate) acks: usize,
    /// Acknowledgements without a tick (the retry of a released record).
    pub(crate) forgotten: usize,
    /// Publishes acknowledged only without a tick so far.
    untimed: std::collections::BTreeSet<(u64, u64)>,
    /// Received messages the replicas' check refused (`ReplicaGroup::check`): stale ones only,
    /// since the simulated mates are honest; the run must still reach every invariant.
    pub(crate) dropped: usize,
    /// The first broken invariant.
    pub(crate) broken: Option<String>,
    /// With the delivery core: the publish delivered at each tick, at any replica...
    pub(crate) deliveries: BTreeMap<u64, (u64, u64)>,
    /// ...and the tick each publish was delivered at.
    pub(crate) delivered_at: BTreeMap<(u64, u64), u64>,
    /// Deliveries to the replicas' local subscribers, summed.
    pub(crate) delivered: usize,
}

impl Judge {
    pub(crate) fn fail(&mut self, message: String) {
        if self.broken.is_none() {
            self.broken = Some(message);
        }
    }

    /// Replica `node`'s local subscriber received publish `key` at `tick`, in the `opened`th
    /// open of the pubend there: one tick carries one publish, and one publish one tick, at
    /// every replica and over every open (a subscriber following the pubend from host to host
    /// dedupes by tick, so a second tick would be a duplicate, a second publish a loss).
    pub(crate) fn delivered(&mut self, node: ReplicaId, opened: u64, tick: u64, key: (u64, u64)) {
        self.delivered += 1;
        let at = *self.deliveries.entry(tick).or_insert(key);
        let first = *self.delivered_at.entry(key).or_insert(tick);
        if at != key || first != tick {
            self.fail(format!(
                "replica {node} (open {opened}) delivered publish {key:?} at tick {tick}: tick {tick} carried {at:?} before, and the publish was delivered at {first} before"
            ));
        }
    }

    /// Whether every acknowledged publish was delivered somewhere (the quiet phase waits).
    pub(crate) fn all_delivered(&self) -> bool {
        self.acked.keys().all(|key| self.delivered_at.contains_key(key))
    }

    /// With the delivery core, at the end: every acknowledged publish was delivered, at its
    /// acknowledged tick.
    pub(crate) fn finish_core(&mut self) {
        for (&(publisher, seq), &tick) in &self.acked.clone() {
            if self.delivered_at.get(&(publisher, seq)) != Some(&tick) {
                let at = self.delivered_at.get(&(publisher, seq));
                return self
                    .fail(format!("acknowledged publish ({publisher}, {seq}) at tick {tick}: delivered at {at:?}"));
            }
        }
    }

    /// A replica reports that it leads `term`.
    pub(crate) fn leader(&mut self, node: ReplicaId, term: u64) {
        let first = *self.leaders.entry(term).or_insert(node);
        if first != node {
            self.fail(format!("two leaders in term {term}: replicas {first} and {node}"));
        }
    }

    /// Terms that had a leader.
    pub(crate) fn terms(&self) -> usize {
        self.leaders.len()
    }

    /// A replica applied these entries.
    pub(crate) fn applied(&mut self, node: ReplicaId, applied: &[Applied]) {
        for entry in applied {
            let first = self.log.entry(entry.index).or_insert_with(|| entry.clone()).clone();
            if first != *entry {
                self.fail(format!("replica {node} applied {entry:?} where another applied {first:?}"));
            }
        }
    }

    /// A publisher received an acknowledgement.
    pub(crate) fn acked(&mut self, from: ReplicaId, publisher: u64, seq: u64, tick: Option<u64>) {
        self.acks += 1;
        if *self.first_acker.entry((publisher, seq)).or_insert(from) != from {
            self.retries_after_takeover += 1;
        }
        let Some(tick) = tick else {
            self.forgotten += 1;
            if !self.acked.contains_key(&(publisher, seq)) {
                self.untimed.insert((publisher, seq));
            }
            return;
        };
        self.untimed.remove(&(publisher, seq));
        let first = *self.acked.entry((publisher, seq)).or_insert(tick);
        if first != tick {
            self.fail(format!("publish ({publisher}, {seq}) acknowledged at tick {first}, then at {tick}"));
        }
    }

    /// The end of a run: every acknowledged publish is logged exactly once in the applied log,
    /// at its tick (one acknowledged only without a tick: logged once, anywhere), and every
    /// replica ends with the same state, which holds each one above the release point.
    pub(crate) fn finish(&mut self, states: &BTreeMap<ReplicaId, PubendReplica>) {
        let mut logged: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
        for entry in self.log.values() {
            if let Outcome::Logged { publisher, seq, tick } = entry.outcome {
                logged.entry((publisher, seq)).or_default().push(tick);
            }
        }
        let acked = self.acked.iter().map(|(&key, &tick)| (key, Some(tick)));
        let expected: Vec<((u64, u64), Option<u64>)> = acked.chain(self.untimed.iter().map(|&k| (k, None))).collect();
        for ((publisher, seq), tick) in expected {
            match (logged.get(&(publisher, seq)).map(Vec::as_slice), tick) {
                (Some([at]), Some(tick)) if *at == tick => {}
                (Some([_]), None) => {}
                (found, _) => {
                    return self.fail(format!(
                    "acknowledged publish ({publisher}, {seq}) at tick {tick:?}: the applied log has it at {found:?}"
                ))
                }
            }
        }
        let mut reference: Option<(ReplicaId, &PubendReplica)> = None;
        for (&node, state) in states {
            match reference {
                Some((other, first)) if state != first => {
                    let count = |s: &PubendReplica| (s.records().count(), s.last_tick(), s.released_up_to());
                    return self.fail(format!(
                        "replicas {node} and {other} ended with different states (records, last tick, released: {:?} and {:?})",
                        count(state),
                        count(first)
                    ));
                }
                Some(_) => {}
                None => reference = Some((node, state)),
            }
            for (&(publisher, seq), &tick) in &self.acked.clone() {
                let held = state.records().any(|r| (r.tick, r.publisher, r.seq) == (tick, publisher, seq));
                if tick > state.released_up_to() && !held {
                    return self.fail(format!(
                        "acknowledged publish ({publisher}, {seq}) at tick {tick}: replica {node}'s state does not hold it"
                    ));
                }
            }
        }
    }
}
