//! The hand-driven network of the group tests (`group.rs`, `host.rs`): messages and syncs
//! move only when a test says so.
#![allow(clippy::expect_used, dead_code)] // helpers outside #[test] functions; each test file uses a part

use std::collections::{BTreeMap, BTreeSet};

use tidings_replica::{Action, Envelope, GroupSettings, Input, Outcome, ReplicaGroup, ReplicaId, Write};

pub(crate) struct Cluster {
    pub(crate) groups: BTreeMap<ReplicaId, ReplicaGroup>,
    /// Messages sent and not delivered: (from, to, msg).
    pub(crate) wire: Vec<(ReplicaId, ReplicaId, Envelope)>,
    /// Writes handed out and not synced, per replica, and the synced ones.
    pub(crate) unsynced: BTreeMap<ReplicaId, Vec<Write>>,
    pub(crate) synced: BTreeMap<ReplicaId, Vec<Write>>,
    /// Snapshots being saved apart ([`Action::SaveSnapshot`]), per replica: saved at its next sync.
    pub(crate) saving: BTreeMap<ReplicaId, Vec<u64>>,
    /// Replicas whose saves apart do not finish (a slow snapshots' disk) until taken out.
    pub(crate) slow_saves: BTreeSet<ReplicaId>,
    pub(crate) acks: Vec<(ReplicaId, u64, u64, u64)>,
    pub(crate) refused: Vec<(ReplicaId, u64)>,
    pub(crate) applied: BTreeMap<ReplicaId, Vec<Outcome>>,
    pub(crate) leaders: Vec<(ReplicaId, u64)>,
    /// Each lead confirmed (`Action::Confirmed`): the replica, the time its heartbeat left, and
    /// the test clock when the confirmation came.
    pub(crate) confirmed: Vec<(ReplicaId, u64, u64)>,
    /// At each election won, whether the winner already offered its state to serve from.
    pub(crate) serving_when_elected: Vec<bool>,
    pub(crate) cut: BTreeSet<ReplicaId>,
    pub(crate) now: u64,
    /// Snapshots still to corrupt on their way (one byte of their state flipped; of a chunked
    /// one, a byte of its second chunk).
    pub(crate) corrupt_snapshots: usize,
    /// Chunked snapshots still to lose their second chunk on the way.
    pub(crate) lose_chunks: usize,
    first_chunk_seen: bool,
    /// [`Action::TooLarge`]s given.
    pub(crate) too_large: usize,
    /// Replicas that reported their own removal ([`Action::Removed`]).
    pub(crate) removed: Vec<ReplicaId>,
}

impl Cluster {
    pub(crate) fn new(n: u64, ack_before_quorum: bool) -> Self {
        Self::with(n, |settings| GroupSettings { ack_before_quorum, ..settings })
    }

    /// A group of `n` whose settings `adjust` changes from the defaults.
    pub(crate) fn with(n: u64, adjust: impl Fn(GroupSettings) -> GroupSettings) -> Self {
        let voters: Vec<_> = (1..=n).collect();
        let groups = voters
            .iter()
            .map(|&id| {
                (id, ReplicaGroup::bootstrap(adjust(GroupSettings::new(id, voters.clone()))).expect("valid settings"))
            })
            .collect();
        Self {
            groups,
            wire: Vec::new(),
            unsynced: BTreeMap::new(),
            synced: BTreeMap::new(),
            saving: BTreeMap::new(),
            slow_saves: BTreeSet::new(),
            acks: Vec::new(),
            refused: Vec::new(),
            applied: BTreeMap::new(),
            leaders: Vec::new(),
            confirmed: Vec::new(),
            serving_when_elected: Vec::new(),
            cut: BTreeSet::new(),
            now: 0,
            corrupt_snapshots: 0,
            lose_chunks: 0,
            first_chunk_seen: false,
            too_large: 0,
            removed: Vec::new(),
        }
    }

    pub(crate) fn input(&mut self, id: ReplicaId, input: Input) {
        let Some(group) = self.groups.get_mut(&id) else { return };
        let actions = group.handle(self.now, input);
        if actions.iter().any(|a| matches!(a, Action::BecameLeader { .. })) {
            self.serving_when_elected.push(group.serving().is_some());
        }
        for action in actions {
            match action {
                Action::Send { to, msg } => self.wire.push((id, to, msg)),
                Action::Persist(write) => self.unsynced.entry(id).or_default().push(write),
                Action::SaveSnapshot { index, .. } => self.saving.entry(id).or_default().push(index),
                Action::Apply(applied) => {
                    self.applied.entry(id).or_default().extend(applied.into_iter().map(|a| a.outcome))
                }
                // 0 for a retry of a released record ("tick forgotten"): never a real tick.
                Action::Acked { publisher, seq, tick } => self.acks.push((id, publisher, seq, tick.unwrap_or(0))),
                Action::Refused { seq, .. } => self.refused.push((id, seq)),
                Action::BecameLeader { term } => self.leaders.push((id, term)),
                Action::Confirmed { at } => self.confirmed.push((id, at, self.now)),
                Action::LostLeadership { .. } => {}
                Action::Fault { reason } => panic!("replica {id} faulted: {reason}"),
                Action::TooLarge { .. } => self.too_large += 1,
                // Only stale messages (the receiver's log outgrew them) are refused here.
                Action::Dropped { .. } => {}
                Action::Members { .. } => {}
                Action::Removed => self.removed.push(id),
            }
        }
    }

    /// Syncs every write of `id` and reports the last one.
    pub(crate) fn sync(&mut self, id: ReplicaId) {
        let writes = std::mem::take(self.unsynced.entry(id).or_default());
        if let Some(number) = writes.last().map(|w| w.number) {
            self.synced.entry(id).or_default().extend(writes);
            self.input(id, Input::Persisted { number });
        }
        if self.slow_saves.contains(&id) {
            return;
        }
        for index in std::mem::take(self.saving.entry(id).or_default()) {
            self.input(id, Input::SnapshotSaved { index });
        }
    }

    /// Delivers, syncs and ticks until nothing moves or `rounds` ticks passed; `syncing` are
    /// the replicas whose disks complete writes.
    pub(crate) fn run(&mut self, rounds: usize, syncing: &[ReplicaId]) {
        let all: Vec<_> = self.groups.keys().copied().collect();
        self.run_ticking(rounds, syncing, &all);
    }

    /// As [`Cluster::run`], with only `ticking` feeling time pass (a replica whose clock or
    /// event loop lags).
    pub(crate) fn run_ticking(&mut self, rounds: usize, syncing: &[ReplicaId], ticking: &[ReplicaId]) {
        for _ in 0..rounds {
            self.now += 10;
            for _ in 0..50 {
                let wire = std::mem::take(&mut self.wire);
                let quiet = wire.is_empty()
                    && syncing.iter().all(|id| {
                        self.unsynced.get(id).is_none_or(Vec::is_empty)
                            && (self.slow_saves.contains(id) || self.saving.get(id).is_none_or(Vec::is_empty))
                    });
                for (from, to, msg) in wire {
                    if !self.cut.contains(&from) && !self.cut.contains(&to) {
                        if let Some(msg) = self.tamper(msg) {
                            self.input(to, Input::Message { from, msg });
                        }
                    }
                }
                for &id in syncing {
                    self.sync(id);
                }
                if quiet {
                    break;
                }
            }
            for &id in ticking {
                self.input(id, Input::Tick);
            }
        }
    }

    /// The writes of `id` its journal still holds: from its last checkpoint (a write with a
    /// snapshot, after which the journal releases every earlier record) on.
    pub(crate) fn live_journal(&self, id: ReplicaId) -> &[Write] {
        let synced = self.synced.get(&id).map(Vec::as_slice).unwrap_or_default();
        let from = synced.iter().rposition(|w| w.snapshot.is_some()).unwrap_or(0);
        &synced[from..]
    }

    /// Corrupts `msg` if it is a snapshot (or a chunk's) and [`Cluster::corrupt_snapshots`] says
    /// so, or loses it if it is a second chunk and [`Cluster::lose_chunks`] says so.
    fn tamper(&mut self, msg: Envelope) -> Option<Envelope> {
        if let Envelope::Chunk { header, offset, total, data } = msg {
            // The second chunk: the first past offset 0 after a first one.
            let second = offset > 0 && self.first_chunk_seen;
            self.first_chunk_seen = offset == 0;
            if second && self.lose_chunks > 0 {
                self.lose_chunks -= 1;
                return None;
            }
            if second && self.corrupt_snapshots > 0 {
                self.corrupt_snapshots -= 1;
                let mut data = data.to_vec();
                data[0] ^= 0x40;
                return Some(Envelope::Chunk { header, offset, total, data: data.into() });
            }
            return Some(Envelope::Chunk { header, offset, total, data });
        }
        let Envelope::Raft(mut m) = msg else { return Some(msg) };
        if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot && self.corrupt_snapshots > 0 {
            self.corrupt_snapshots -= 1;
            let mut data = m.get_snapshot().data.to_vec();
            let middle = data.len() / 2;
            data[middle] ^= 0x40;
            m.mut_snapshot().data = data.into();
        }
        Some(Envelope::Raft(m))
    }

    /// Delivers what is on the wire now, once, without syncing anything.
    pub(crate) fn deliver_once(&mut self) {
        for (from, to, msg) in std::mem::take(&mut self.wire) {
            if !self.cut.contains(&from) && !self.cut.contains(&to) {
                self.input(to, Input::Message { from, msg });
            }
        }
    }

    pub(crate) fn leader(&self) -> Option<ReplicaId> {
        self.groups.iter().find(|(id, g)| g.leading().is_some() && !self.cut.contains(id)).map(|(id, _)| *id)
    }

    pub(crate) fn publish(&mut self, to: ReplicaId, publisher: u64, seq: u64) {
        self.input(to, Input::Publish { publisher, seq, payload: vec![seq as u8] });
    }

    pub(crate) fn logged(&self, id: ReplicaId) -> Vec<(u64, u64, u64)> {
        let outcomes = self.applied.get(&id).map(Vec::as_slice).unwrap_or_default();
        outcomes
            .iter()
            .filter_map(|o| match *o {
                Outcome::Logged { publisher, seq, tick } => Some((publisher, seq, tick)),
                _ => None,
            })
            .collect()
    }
}
