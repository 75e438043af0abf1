//! The invariants of a replicated pubend, judged as the run goes and at its end:
//!
//! - one leader per term (Raft's election safety, and the epoch that fences a deposed host);
//! - every replica applies the same entry at the same index (a replica re-applying its log after
//!   a restart must apply it again identically);
//! - a publish acknowledged twice (a retry, perhaps after a takeover) gets the same tick;
//! - at the end, every acknowledged publish is logged exactly once in every replica's applied
//!   log, at the tick it was acknowledged with; all replicas applied the same log.

use std::collections::BTreeMap;

use tidings_replica::{Applied, Outcome, ReplicaId};

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
    /// Received messages the replicas' check refused (`ReplicaGroup::check`): stale ones only,
    /// since the simulated mates are honest; the run must still reach every invariant.
    pub(crate) dropped: usize,
    /// The first broken invariant.
    pub(crate) broken: Option<String>,
}

impl Judge {
    fn fail(&mut self, message: String) {
        if self.broken.is_none() {
            self.broken = Some(message);
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
    pub(crate) fn acked(&mut self, from: ReplicaId, publisher: u64, seq: u64, tick: u64) {
        self.acks += 1;
        if *self.first_acker.entry((publisher, seq)).or_insert(from) != from {
            self.retries_after_takeover += 1;
        }
        let first = *self.acked.entry((publisher, seq)).or_insert(tick);
        if first != tick {
            self.fail(format!("publish ({publisher}, {seq}) acknowledged at tick {first}, then at {tick}"));
        }
    }

    /// The end of a run: every replica's applied log holds every acknowledged publish exactly
    /// once, at its tick, and all logs are the same.
    pub(crate) fn finish(&mut self, logs: &BTreeMap<ReplicaId, Vec<Applied>>) {
        let mut reference: Option<(ReplicaId, &Vec<Applied>)> = None;
        for (&node, log) in logs {
            if let Some((other, first)) = reference {
                if log != first {
                    let (a, b) = (log.last().map(|a| a.index), first.last().map(|a| a.index));
                    self.fail(format!("replicas {node} and {other} applied different logs (up to {a:?} and {b:?})"));
                    return;
                }
            } else {
                reference = Some((node, log));
            }
            let mut logged: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
            for entry in log {
                if let Outcome::Logged { publisher, seq, tick } = entry.outcome {
                    logged.entry((publisher, seq)).or_default().push(tick);
                }
            }
            for (&(publisher, seq), &tick) in &self.acked.clone() {
                match logged.get(&(publisher, seq)).map(Vec::as_slice) {
                    Some([at]) if *at == tick => {}
                    found => self.fail(format!(
                        "acknowledged publish ({publisher}, {seq}) at tick {tick}: replica {node} logged it at {found:?}"
                    )),
                }
            }
        }
    }
}
