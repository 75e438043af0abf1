//! The world of one replica run: the replicas with their disks, the network between them, and
//! the publishers with theirs. Time is virtual milliseconds; every delay comes from the run's
//! [`Rng`], so a run is a function of its seed.
//!
//! Each replica's disk is the real store (`disk`); writes sync as group commits at seeded
//! delays, and only then is the replica told ([`Input::Persisted`]).

use std::collections::{BTreeMap, BTreeSet};

use tidings_replica::{Action, Applied, Envelope, GroupSettings, Input, Membership, Record, ReplicaGroup, ReplicaId};

use crate::replica::{Mutation, COMPACT_BYTES, COMPACT_SLICE, SNAPSHOT_CHUNK, SNAPSHOT_WINDOW};

use crate::replica::core::Core;
use crate::replica::disk::{Crash, Disk};
use crate::replica::judge::Judge;
use crate::rng::Rng;

/// Fault rates and delays of the network between replicas and toward publishers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weather {
    pub(crate) loss: u64,
    pub(crate) duplication: u64,
    pub(crate) max_delay: u64,
}

/// One replica: its group (`None` while down), disk and applied log since it last started.
pub(crate) struct Node {
    pub(crate) group: Option<ReplicaGroup>,
    pub(crate) disk: Disk,
    pub(crate) applied: Vec<Applied>,
    /// Wiped and not yet caught up (kept across its crashes).
    pub(crate) rejoining: bool,
    /// When a down replica comes back.
    pub(crate) restart_at: Option<u64>,
    /// Stalled (a SIGSTOPped process) until then: it hears nothing, ticks not, syncs nothing;
    /// what is sent to it waits, as in its socket buffers.
    pub(crate) stalled_until: Option<u64>,
    /// Its delivery core while it runs, in [`crate::replica::Mode::core`] (`core`)...
    pub(crate) core: Option<Core>,
    /// ...and the core's pubend log, which outlives it.
    pub(super) log: crate::gd::disk::Disk,
}

/// What travels: between replicas, or between a publisher and a replica.
#[derive(Clone, Debug)]
pub(crate) enum Packet {
    Peer { from: ReplicaId, to: ReplicaId, msg: Envelope },
    Publish { to: ReplicaId, publisher: u64, seq: u64 },
    Reply { from: ReplicaId, publisher: u64, action: Action },
}

/// A publisher: one publish in flight at a time, retried until acknowledged.
pub(crate) struct Publisher {
    pub(crate) next_seq: u64,
    pub(crate) outstanding: Option<u64>,
    pub(crate) target: ReplicaId,
    pub(crate) last_sent: u64,
    /// Sends of the outstanding publish since the last answer: every third moves on to the
    /// next replica (a publisher failing over).
    pub(crate) tries: u64,
}

/// The whole world of a run.
pub(crate) struct World {
    pub(crate) now: u64,
    pub(crate) rng: Rng,
    /// The creation voters (every replica's `GroupSettings::voters`).
    pub(crate) voters: Vec<ReplicaId>,
    /// The replicas taking part: the creation voters, less one forgotten, plus the one added
    /// in its place (see [`World::replace`]).
    pub(crate) ids: Vec<ReplicaId>,
    /// A replace under way or done: (the voter forgotten, the replica added).
    pub(crate) replace: Option<(ReplicaId, ReplicaId)>,
    /// Membership changes applied ([`Action::Members`]), summed over the replicas.
    pub(crate) member_changes: usize,
    pub(crate) nodes: BTreeMap<ReplicaId, Node>,
    pub(crate) publishers: Vec<Publisher>,
    /// In flight: (due, order, packet).
    wire: Vec<(u64, u64, Packet)>,
    sent: u64,
    /// Cut pairs of replicas (both directions).
    pub(crate) cut: BTreeSet<(ReplicaId, ReplicaId)>,
    pub(crate) weather: Weather,
    pub(crate) judge: Judge,
    pub(super) mutation: Mutation,
    /// Snapshots taken and installed, summed over the replicas' lives (each start counts anew).
    pub(crate) snapshots: (u64, u64, u64, u64),
    /// Publishes delivered in a batch of two or more (see `advance`).
    pub(crate) batched: usize,
    /// Ticks after which a replica still had snapshot chunks queued.
    pub(crate) paced: usize,
    /// Each replica runs the delivery core around its group (`core`).
    pub(crate) core: bool,
    /// What the group last decided for publishers, for the core (in `core` mode).
    pub(super) decided: Vec<tidings_replica::Action>,
    /// Pubends opened from the group's state into an empty log and into a log found there, and
    /// logs closed by a deposed host, summed over the replicas (in `core` mode).
    pub(crate) core_counts: (usize, usize, usize),
}

impl World {
    pub(crate) fn new(
        seed: u64,
        (replicas, core): (u64, bool),
        publishers: u64,
        weather: Weather,
        mutation: Mutation,
    ) -> Self {
        let voters: Vec<ReplicaId> = (1..=replicas).collect();
        let mut world = Self {
            now: 0,
            rng: Rng::new(seed),
            voters: voters.clone(),
            ids: voters.clone(),
            replace: None,
            member_changes: 0,
            nodes: BTreeMap::new(),
            publishers: (0..publishers)
                .map(|p| Publisher { next_seq: 1, outstanding: None, target: 1 + p % replicas, last_sent: 0, tries: 0 })
                .collect(),
            wire: Vec::new(),
            sent: 0,
            cut: BTreeSet::new(),
            weather,
            judge: Judge::default(),
            mutation,
            snapshots: (0, 0, 0, 0),
            batched: 0,
            paced: 0,
            core,
            decided: Vec::new(),
            core_counts: (0, 0, 0),
        };
        for id in voters {
            world.create(id);
            world.start(id);
        }
        world
    }

    /// A new replica's node with an empty journal, not started.
    fn create(&mut self, id: ReplicaId) {
        let mut disk = Disk::default();
        if let Err(e) = disk.open().and_then(|_| disk.create()) {
            self.judge.broken = Some(format!("replica {id} cannot create its journal: {e}"));
        }
        let node = Node {
            group: None,
            disk,
            applied: Vec::new(),
            rejoining: false,
            restart_at: None,
            stalled_until: None,
            core: None,
            log: Default::default(),
        };
        self.nodes.insert(id, node);
    }

    /// An operator replaces `gone` for good (`tidings cell forget`): it is stopped and never
    /// comes back, and a new replica joins, added by the leader as a learner once it is told
    /// ([`World::wanted`]); it starts in the highest term a running replica knows (the term of
    /// the leader's first message, as in a broker).
    pub(crate) fn replace(&mut self, gone: ReplicaId) {
        let added = self.voters.len() as u64 + 1;
        if let Some(node) = self.nodes.get_mut(&gone) {
            self.snapshots = add_snapshots(self.snapshots, node.group.as_ref());
            node.group = None;
            node.restart_at = None;
        }
        self.ids.retain(|&id| id != gone);
        self.ids.push(added);
        self.replace = Some((gone, added));
        self.create(added);
        let term = self.highest_term();
        match ReplicaGroup::added(self.settings(added), term) {
            Ok(group) => {
                if let Some(node) = self.nodes.get_mut(&added) {
                    node.group = Some(group);
                }
                self.start_core(added);
            }
            Err(e) => self.judge.broken = Some(format!("replica {added} cannot be added: {e}")),
        }
    }

    /// What the replicas are told to want of the membership, once a replace began.
    pub(crate) fn wanted(&self) -> Option<Membership> {
        let (gone, added) = self.replace?;
        Some(Membership { target: self.voters.len(), candidates: vec![added], forgotten: vec![gone] })
    }

    /// Whether no replace is under way: none began, or the leader's members are the
    /// replicas taking part (the forgotten one removed, the new one a voter).
    pub(crate) fn replaced(&self) -> bool {
        let mut ids = self.ids.clone();
        ids.sort_unstable();
        self.replace.is_none()
            || self.leader().and_then(|l| self.nodes[&l].group.as_ref()).is_some_and(|g| g.members() == (ids, vec![]))
    }

    /// The highest term among the running replicas.
    fn highest_term(&self) -> u64 {
        self.nodes.values().filter_map(|n| Some(n.group.as_ref()?.status().term)).max().unwrap_or(0)
    }

    fn settings(&self, id: ReplicaId) -> GroupSettings {
        GroupSettings {
            ack_before_quorum: self.mutation == Mutation::AckBeforeQuorum,
            snapshot_drops_record: self.mutation == Mutation::SnapshotDropsRecord,
            compact_bytes: COMPACT_BYTES,
            compact_slice: COMPACT_SLICE,
            snapshot_chunk: SNAPSHOT_CHUNK,
            snapshot_window: SNAPSHOT_WINDOW,
            // With the delivery core, the broker's settings (`replicas::Replicas::start`): a
            // successor keeps the pubend, followers learn commits from the next append,
            // silence waits for a quorum's confirmation, a record is logged at the engine's
            // tick or refused.
            hand_back: !self.core,
            broadcast_commit: !self.core,
            confirm_lead: self.core,
            exact_ticks: self.core,
            ..GroupSettings::new(id, self.voters.clone())
        }
    }

    /// Starts a down replica from its disk: a restart, or a rejoin if the journal is empty.
    pub(crate) fn start(&mut self, id: ReplicaId) {
        let settings = self.settings(id);
        let creation = self.voters.contains(&id);
        let term = self.highest_term();
        let Some(node) = self.nodes.get_mut(&id) else { return };
        let group = match node.disk.open() {
            Ok(Some(recovered)) => ReplicaGroup::restart(settings, recovered).map_err(|e| e.to_string()),
            Ok(None) if creation => ReplicaGroup::rejoin(settings).map_err(|e| e.to_string()),
            // The added replica before it wrote anything: never voted, never acknowledged.
            Ok(None) => ReplicaGroup::added(settings, term).map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match group {
            Ok(group) => node.group = Some(group),
            Err(e) => self.judge.broken = Some(format!("replica {id} cannot restart: {e}")),
        }
        node.applied.clear();
        node.restart_at = None;
        self.start_core(id);
    }

    /// Stops a replica, its disk left as `crash` leaves it; it comes back at `restart_at`.
    pub(crate) fn crash(&mut self, id: ReplicaId, crash: Crash, restart_at: u64) {
        let Some(node) = self.nodes.get_mut(&id) else { return };
        self.snapshots = add_snapshots(self.snapshots, node.group.as_ref());
        node.disk.crash(crash, &mut self.rng);
        node.group = None;
        node.core = None;
        node.log.next_crash = match crash {
            Crash::Process => crate::gd::disk::Crash::Process,
            Crash::PowerLoss => crate::gd::disk::Crash::PowerLoss,
            Crash::Wipe => crate::gd::disk::Crash::Empty,
        };
        node.log.crash(self.rng.next_u64());
        node.restart_at = Some(restart_at);
        node.rejoining |= crash == Crash::Wipe;
    }

    /// Feeds one input to a running replica and carries out what it asks.
    pub(crate) fn input(&mut self, id: ReplicaId, input: Input) {
        let now = self.now;
        if self.stalled(id) {
            return;
        }
        let Some(group) = self.nodes.get_mut(&id).and_then(|n| n.group.as_mut()) else { return };
        let tick = input == Input::Tick;
        let actions = group.handle(now, input);
        let withholding = group.withholding_vote();
        if tick && group.status().snapshots.chunks_queued > 0 {
            self.paced += 1;
        }
        for action in actions {
            self.act(id, action);
        }
        if let Some(node) = self.nodes.get_mut(&id) {
            node.rejoining &= withholding;
        }
        self.decide(id);
    }

    fn act(&mut self, id: ReplicaId, action: Action) {
        match action {
            Action::Send { to, msg } => self.send(Packet::Peer { from: id, to, msg }),
            Action::Persist(write) => {
                let due = self.now + 1 + self.rng.below(6) as u64;
                let Some(node) = self.nodes.get_mut(&id) else { return };
                if let Err(e) = node.disk.submit(&write, due) {
                    self.judge.broken = Some(format!("replica {id}: {e}"));
                }
            }
            Action::SaveSnapshot { index, data, .. } => {
                let due = self.now + 1 + self.rng.below(6) as u64;
                let Some(node) = self.nodes.get_mut(&id) else { return };
                if let Err(e) = node.disk.save(index, &data, due) {
                    self.judge.broken = Some(format!("replica {id}: {e}"));
                }
            }
            Action::Apply(applied) => {
                self.judge.applied(id, &applied);
                if let Some(node) = self.nodes.get_mut(&id) {
                    node.applied.extend(applied);
                }
            }
            Action::BecameLeader { term } => {
                self.judge.leader(id, term);
                if self.core {
                    self.decided.push(action);
                }
            }
            Action::Confirmed { .. } if self.core => self.decided.push(action),
            Action::LostLeadership { .. } | Action::Confirmed { .. } => {}
            Action::Acked { .. } | Action::Refused { .. } if self.core => self.decided.push(action),
            Action::Acked { publisher, .. } | Action::Refused { publisher, .. } => {
                self.send(Packet::Reply { from: id, publisher, action })
            }
            Action::TooLarge { bytes, max } => {
                self.judge.broken = Some(format!("replica {id}: a {bytes}-byte state over the {max}-byte maximum"))
            }
            Action::Fault { reason } => self.judge.broken = Some(format!("replica {id} faulted: {reason}")),
            // Honest replicas never send what the check refuses, except a stale message the
            // receiver's log has since outgrown, which raft-rs would have ignored as well.
            Action::Dropped { .. } => self.judge.dropped += 1,
            Action::Members { .. } => self.member_changes += 1,
            // Only the forgotten replica is ever removed, and it is down for good.
            Action::Removed => self.judge.broken = Some(format!("replica {id}, not forgotten, was removed")),
        }
    }

    /// Puts a packet on the wire: maybe lost, maybe twice, each copy with its own delay.
    pub(crate) fn send(&mut self, packet: Packet) {
        if self.rng.chance(self.weather.loss) {
            return;
        }
        let copies = if self.rng.chance(self.weather.duplication) { 2 } else { 1 };
        for _ in 0..copies {
            let due = self.now + 1 + self.rng.below(self.weather.max_delay as usize) as u64;
            self.sent += 1;
            self.wire.push((due, self.sent, packet.clone()));
        }
    }

    /// Whether replica `id` is stalled now.
    pub(crate) fn stalled(&self, id: ReplicaId) -> bool {
        self.nodes.get(&id).and_then(|n| n.stalled_until).is_some_and(|until| until > self.now)
    }

    /// Stalls replica `id` until `until` (a SIGSTOP and its SIGCONT).
    pub(crate) fn stall(&mut self, id: ReplicaId, until: u64) {
        if let Some(node) = self.nodes.get_mut(&id).filter(|n| n.group.is_some()) {
            node.stalled_until = Some(until);
        }
    }

    fn is_cut(&self, a: ReplicaId, b: ReplicaId) -> bool {
        self.cut.contains(&(a, b)) || self.cut.contains(&(b, a))
    }

    /// Advances to `now`: syncs due writes, delivers due packets, restarts due replicas.
    pub(crate) fn advance(&mut self, now: u64) {
        self.now = now;
        let ids: Vec<ReplicaId> = self.nodes.keys().copied().collect();
        for &id in &ids {
            let node = &self.nodes[&id];
            if node.restart_at.is_some_and(|at| at <= now) {
                self.start(id);
            }
            if !self.stalled(id) {
                self.sync_due(id);
            }
        }
        let (due, mut later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.wire).into_iter().partition(|p| p.0 <= now);
        // What reaches a stalled replica waits for it to run again, in order.
        let (due, held): (Vec<_>, Vec<_>) = due.into_iter().partition(|(_, _, packet)| {
            let to = match packet {
                Packet::Peer { to, .. } | Packet::Publish { to, .. } => Some(*to),
                Packet::Reply { .. } => None,
            };
            !to.is_some_and(|to| self.stalled(to))
        });
        for (_, order, packet) in held {
            let to = match &packet {
                Packet::Peer { to, .. } | Packet::Publish { to, .. } => *to,
                Packet::Reply { from, .. } => *from,
            };
            let until = self.nodes[&to].stalled_until.unwrap_or(now);
            later.push((until, order, packet));
        }
        self.wire = later;
        let mut due = due;
        due.sort_by_key(|p| (p.0, p.1));
        // Publishes due together at one replica, with nothing between them, are one proposal
        // (`Input::PublishAllAt`), as a broker proposes a turn's publishes: the batch path
        // runs under every fault here too.
        let mut publishes: Option<(ReplicaId, Vec<Record>)> = None;
        for (_, _, packet) in due {
            if let (true, &Packet::Publish { to, publisher, seq }) = (self.core, &packet) {
                self.core_publish(to, publisher, seq);
                continue;
            }
            if let Packet::Publish { to, publisher, seq } = packet {
                let record = Record { tick: now, publisher, seq, payload: seq.to_le_bytes().to_vec() };
                match &mut publishes {
                    Some((target, records)) if *target == to => records.push(record),
                    _ => {
                        self.propose(publishes.take());
                        publishes = Some((to, vec![record]));
                    }
                }
                continue;
            }
            self.propose(publishes.take());
            self.deliver(packet);
        }
        self.propose(publishes);
    }

    fn propose(&mut self, publishes: Option<(ReplicaId, Vec<Record>)>) {
        match publishes {
            Some((to, mut records)) if records.len() == 1 => {
                let Record { publisher, seq, payload, .. } = records.remove(0);
                self.input(to, Input::Publish { publisher, seq, payload });
            }
            Some((to, records)) => {
                self.batched += records.len();
                self.input(to, Input::PublishAllAt(records))
            }
            None => {}
        }
    }

    fn sync_due(&mut self, id: ReplicaId) {
        let Some(node) = self.nodes.get_mut(&id) else { return };
        if node.group.is_none() || node.disk.due.is_none_or(|due| due > self.now) {
            return;
        }
        match node.disk.step() {
            Ok((number, saved)) => {
                if let Some(number) = number {
                    self.input(id, Input::Persisted { number });
                }
                for index in saved {
                    self.input(id, Input::SnapshotSaved { index });
                }
            }
            Err(e) => self.judge.broken = Some(format!("replica {id}: {e}")),
        }
    }

    fn deliver(&mut self, packet: Packet) {
        match packet {
            Packet::Peer { from, to, msg } => {
                if !self.is_cut(from, to) {
                    self.input(to, Input::Message { from, msg });
                }
            }
            Packet::Publish { to, publisher, seq } => self.propose(Some((
                to,
                vec![Record { tick: self.now, publisher, seq, payload: seq.to_le_bytes().to_vec() }],
            ))),
            Packet::Reply { from, publisher, action } => self.reply(from, publisher, action),
        }
    }

    fn reply(&mut self, from: ReplicaId, publisher: u64, action: Action) {
        let Some(p) = self.publishers.get_mut(publisher as usize) else { return };
        match action {
            Action::Acked { seq, tick, .. } => {
                if p.outstanding == Some(seq) {
                    p.outstanding = None;
                    p.tries = 0;
                }
                self.judge.acked(from, publisher, seq, tick);
            }
            Action::Refused { seq, leader, .. } if p.outstanding == Some(seq) => {
                p.target = leader.unwrap_or_else(|| next(&self.ids, p.target));
                p.last_sent = 0;
                p.tries = 0;
            }
            _ => {}
        }
    }

    /// Every publisher acts: a new publish (when `publishing`), a retry, or now and then the
    /// retry of a publish already acknowledged (as after a lost ack), which must get its tick.
    pub(crate) fn publishers_act(&mut self, publishing: bool) {
        for index in 0..self.publishers.len() {
            let replay = self.rng.chance(2);
            let p = &mut self.publishers[index];
            let send = match p.outstanding {
                None if publishing => {
                    p.outstanding = Some(p.next_seq);
                    p.next_seq += 1;
                    p.outstanding
                }
                Some(seq) if self.now >= p.last_sent + 40 => {
                    p.tries += 1;
                    if p.tries.is_multiple_of(3) {
                        p.target = next(&self.ids, p.target);
                    }
                    Some(seq)
                }
                _ => None,
            };
            let (target, next_seq) = (p.target, p.next_seq);
            if send.is_some() {
                p.last_sent = self.now;
            }
            if let Some(seq) = send {
                self.send(Packet::Publish { to: target, publisher: index as u64, seq });
            }
            if replay && next_seq > 1 {
                let old = 1 + self.rng.below(next_seq as usize - 1) as u64;
                if self.judge.acked.contains_key(&(index as u64, old)) {
                    self.send(Packet::Publish { to: target, publisher: index as u64, seq: old });
                }
            }
        }
    }

    /// The replica that leads in the highest term among those running, if any.
    pub(crate) fn leader(&self) -> Option<ReplicaId> {
        let leading = self.nodes.iter().filter_map(|(id, n)| n.group.as_ref()?.leading().map(|t| (t, *id)));
        leading.max().map(|(_, id)| id)
    }

    /// Adds the snapshots of the running replicas to the run's count (at its end).
    pub(crate) fn count_snapshots(&mut self) {
        for node in self.nodes.values() {
            self.snapshots = add_snapshots(self.snapshots, node.group.as_ref());
        }
    }

    /// True once every replica taking part runs, none withholds its vote, every publish is
    /// acknowledged, every replica applied up to the same index (from a snapshot or entry by
    /// entry), and a replace is done (the leader's voters are the replicas taking part).
    pub(crate) fn settled(&self) -> bool {
        let nodes = || self.ids.iter().filter_map(|id| self.nodes.get(id));
        let counts: BTreeSet<Option<u64>> = nodes().map(|n| n.group.as_ref().map(|g| g.status().applied)).collect();
        counts.len() == 1
            && self.replaced()
            && self.publishers.iter().all(|p| p.outstanding.is_none())
            && nodes().all(|n| n.group.as_ref().is_some_and(|g| !g.withholding_vote()))
    }
}

/// The replica after `current` in `ids` (the first after the last): a publisher failing over.
fn next(ids: &[ReplicaId], current: ReplicaId) -> ReplicaId {
    let at = ids.iter().position(|&id| id == current).map_or(0, |i| i + 1);
    ids[at % ids.len()]
}

/// `counts` plus the snapshots `group` took and installed, the snapshot chunks it took and the
/// compactions an installed snapshot ended, since it started.
fn add_snapshots(counts: (u64, u64, u64, u64), group: Option<&ReplicaGroup>) -> (u64, u64, u64, u64) {
    let Some(group) = group else { return counts };
    let s = group.status().snapshots;
    (counts.0 + s.taken, counts.1 + s.received, counts.2 + s.chunks_received, counts.3 + s.aborted)
}
