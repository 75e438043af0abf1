//! A replicated pubend under chaos (issue 40): one `tidings-replica` group (raft-rs) on 3 or 5
//! simulated brokers, publishers retrying and failing over, a network that loses, duplicates
//! and reorders, partitions (a cut-off leader must acknowledge nothing), process crashes that
//! lose what was not synced, and in the disk modes wiped disks (one at a time,
//! rejoining through `tidings-replica`'s fences) and power losses of the whole group.
//!
//! A run is [`Plan::steps`] chaos steps of 1-3 virtual ms, then a quiet phase (every replica up,
//! the network whole, no loss) until the group settles; `judge` checks the invariants as the run
//! goes and at its end. Faults are numbered as drawn, so the sweep's shrinker can leave them out.
//!
//! Each replica's disk is the real pubend store on an in-memory file system (`disk`): a restart
//! runs the store's recovery and `tidings-replica`'s journal fold. The replicas compact their
//! logs often ([`COMPACT_BYTES`], every few entries), so restarts start from snapshots and
//! replicas behind a leader's first index (a wiped one, one long down or cut off) catch up from
//! one, sent in chunks of [`SNAPSHOT_CHUNK`] bytes, [`SNAPSHOT_WINDOW`] unacknowledged at a time, and journaled in parts of [`JOURNAL_PART`].
//!
//! Every other seed replaces a voter a third of the way through the faults (an operator's
//! `tidings cell forget`): the voter stops for good, a new replica joins, and the leader of the
//! moment removes the one, adds the other as a learner, catches it up (from a snapshot, as the
//! logs are compacted) and promotes it, amid the same crashes, partitions and power losses, and
//! in the disk modes the new replica's own disk wiped, before or after its promotion; the
//! quiet phase waits for the change to be done.
//!
//! In the core modes ([`Mode::core`]) each replica also runs the delivery core around the group
//! as a broker of the publishers' cell does (`core`): a production engine over its own pubend log,
//! the retry table and the gate (`tidings_node::gate`); successors open the pubend from the
//! group, deposed hosts close it, and every delivery to each replica's subscriber is judged.
//! Not simulated: the routing that moves subscribers' streams to a new home (the process tests
//! and the nemesis run it).

mod core;
mod cores;
mod disk;
mod judge;
mod world;

use tidings_replica::{Command, Input, ReplicaId};

use crate::rng::Rng;
use crate::scenario::{Coverage, Failure, Plan};
use disk::Crash;
use world::{Weather, World};

/// The sim's compaction trigger: about 6 entries of the sim's publishes (or twice the last
/// snapshot), so a run takes snapshots often and ships some to replicas behind.
pub const COMPACT_BYTES: u64 = 256;

/// The sim's compaction slice: records of about 40 bytes a turn (`tidings-replica`'s
/// `compaction`), so nearly every snapshot is encoded over several turns, with publishes,
/// releases, snapshot installs and crashes in between.
pub const COMPACT_SLICE: usize = 40;

/// The sim's snapshot chunk: a few dozen bytes, so nearly every snapshot shipped travels in
/// several chunks, through the network's loss, duplication and reordering (`tidings-replica`'s
/// `chunks`), and is reassembled or refused and sent again.
pub const SNAPSHOT_CHUNK: usize = 32;

/// The sim's snapshot window: 4 chunks unacknowledged by one mate (`tidings-replica`'s `pace`),
/// so most snapshots shipped leave over several round trips (over ticks when the network loses
/// acknowledgements), and their transfers meet crashes, partitions and changes of leader
/// half-way.
pub const SNAPSHOT_WINDOW: usize = 4 * SNAPSHOT_CHUNK;

/// The sim's journal part: a checkpoint's snapshot over it is written as several store
/// records (`tidings_replica::Journal::records`), so restarts and power losses read snapshots
/// back from parts, torn ones included.
pub const JOURNAL_PART: usize = 64;

/// A deliberate bug the mutation tests turn on, to prove the judge would notice it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// None: the real replica.
    None,
    /// A leader acknowledges on its own sync, before a quorum has the entry.
    AckBeforeQuorum,
    /// Every snapshot leaves out the newest unreleased record.
    SnapshotDropsRecord,
    /// With the delivery core: a publish is acknowledged once the host's log synced it, the
    /// group's half not waited for.
    AckBeforeGroup,
    /// With the delivery core: the engine hears a record synced (and sends it to subscribers)
    /// once the host's log synced it, before the group committed it.
    SendBeforeCommit,
}

/// What a run may do to the group.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// Replicas in the group.
    pub replicas: u64,
    /// Wipe disks and cut the whole group's power, beside crashes and partitions.
    pub disks: bool,
    /// Each replica runs the delivery core around the group (`core`): publishes go through the
    /// engine and the gate, successors open the pubend from the group, and every delivery is
    /// judged.
    pub core: bool,
}

impl Mode {
    /// Three replicas: crashes, partitions, a faulty network.
    pub const THREE: Mode = Mode { replicas: 3, disks: false, core: false };
    /// Five replicas: crashes, partitions, a faulty network.
    pub const FIVE: Mode = Mode { replicas: 5, disks: false, core: false };
    /// Three replicas, and wiped disks and whole-group power losses too.
    pub const THREE_DISKS: Mode = Mode { replicas: 3, disks: true, core: false };
    /// Five replicas, and wiped disks and whole-group power losses too.
    pub const FIVE_DISKS: Mode = Mode { replicas: 5, disks: true, core: false };
    /// Three replicas with the delivery core: crashes, partitions, a faulty network.
    pub const THREE_CORE: Mode = Mode { replicas: 3, disks: false, core: true };
    /// Five replicas with the delivery core: crashes, partitions, stalls, a faulty network.
    pub const FIVE_CORE: Mode = Mode { replicas: 5, disks: false, core: true };
    /// Three replicas with the delivery core, and wiped disks and whole-group power losses.
    pub const THREE_DISKS_CORE: Mode = Mode { replicas: 3, disks: true, core: true };
}

/// What a run did, beside the routing coverage fields it fills.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Report {
    /// Acknowledgements publishers received (retries included).
    pub acks: usize,
    /// Distinct publishes acknowledged.
    pub acknowledged: usize,
    /// Terms with a leader.
    pub elections: usize,
    /// Publishes acknowledged again by a later leader (a retry after a takeover).
    pub retries_after_takeover: usize,
    /// Publishes proposed together with another (`Input::PublishAllAt`), as a broker proposes a
    /// turn's publishes.
    pub batched: usize,
    /// Snapshots the replicas took (compactions).
    pub snapshots_taken: u64,
    /// Snapshots a replica installed from its leader.
    pub snapshots_installed: u64,
    /// Snapshot chunks a replica took into an assembly.
    pub chunks_received: u64,
    /// Compactions ended before they were whole by a snapshot installed from the leader.
    pub compactions_aborted: u64,
    /// Ticks after which a leader still had snapshot chunks queued (paced over ticks).
    pub paced: usize,
    /// Retries answered "logged earlier, tick forgotten" (their record released).
    pub forgotten: usize,
    /// Runs in which a voter was replaced by a new replica (`tidings_replica`'s membership
    /// changes: removed, added as a learner, caught up, promoted) amid the faults.
    pub replaced: usize,
    /// Membership changes applied, summed over the replicas.
    pub member_changes: usize,
    /// Times the replica a replace added had its disk wiped while a learner (or with its
    /// promotion not yet applied by the leader)...
    pub added_wiped_learner: usize,
    /// ...and once a voter.
    pub added_wiped_voter: usize,
    /// With the delivery core: deliveries to the replicas' local subscribers.
    pub delivered: usize,
    /// With the delivery core: pubends opened from the group's state into an empty log...
    pub seeded: usize,
    /// ...and into the log a replica found at start or closed before (`reopen`)...
    pub reopened: usize,
    /// ...and logs a deposed host closed.
    pub closed: usize,
}

const PUBLISHERS: u64 = 3;
/// Virtual milliseconds the quiet phase may take before a run counts as stuck.
const QUIET_LIMIT_MS: u64 = 30_000;

/// Runs one plan; `mutation` is the bug the mutation tests turn on.
pub fn run_replica(plan: &Plan, mode: Mode, mutation: Mutation) -> Result<(Coverage, Report), Failure> {
    let weather = Weather { loss: 5, duplication: 5, max_delay: 15 };
    let mut run = Run {
        world: World::new(plan.seed, (mode.replicas, mode.core), PUBLISHERS, weather, mutation),
        faults: Rng::new(plan.seed ^ 0xfa17),
        next_tick: 0,
        next_lease: 0,
        heal_at: None,
        coverage: Coverage::default(),
        added_wiped: (0, 0),
    };
    // Every other seed replaces a voter from a third of the way through the faults on, once no
    // wiped replica is catching up (that and the forgotten voter would be two permanent
    // failures, which a group of three cannot outlive).
    let replace_from = plan.seed.is_multiple_of(2).then_some(plan.steps / 3);
    for step in 0..plan.steps {
        let now = run.world.now + 1 + run.faults.below(3) as u64;
        run.step(now, true);
        let rejoining = run.world.nodes.values().any(|n| n.rejoining);
        if replace_from.is_some_and(|from| step >= from) && run.world.replace.is_none() && !rejoining {
            let gone = run.world.voters[run.faults.below(run.world.voters.len())];
            run.world.replace(gone);
        }
        if run.faults.chance(2) {
            let index = run.coverage.faults;
            run.coverage.faults += 1;
            run.fault(mode, !plan.skip.contains(&index));
        }
        if let Some(message) = run.world.judge.broken.take() {
            return Err(Failure { step: Some(step), faults: run.coverage.faults, message });
        }
    }
    run.quiet()?;
    run.world.count_snapshots();
    let states = run.world.nodes.iter().filter_map(|(id, n)| Some((*id, n.group.as_ref()?.state()?.clone()))).collect();
    run.world.judge.finish(&states);
    if mode.core {
        run.world.judge.finish_core();
    }
    if let Some(message) = run.world.judge.broken.take() {
        return Err(Failure { step: None, faults: run.coverage.faults, message });
    }
    let judge = &run.world.judge;
    let report = Report {
        acks: judge.acks,
        acknowledged: judge.acked.len(),
        elections: judge.terms(),
        retries_after_takeover: judge.retries_after_takeover,
        batched: run.world.batched,
        snapshots_taken: run.world.snapshots.0,
        snapshots_installed: run.world.snapshots.1,
        chunks_received: run.world.snapshots.2,
        compactions_aborted: run.world.snapshots.3,
        paced: run.world.paced,
        forgotten: judge.forgotten,
        replaced: usize::from(run.world.replace.is_some()),
        member_changes: run.world.member_changes,
        added_wiped_learner: run.added_wiped.0,
        added_wiped_voter: run.added_wiped.1,
        delivered: judge.delivered,
        seeded: run.world.core_counts.0,
        reopened: run.world.core_counts.1,
        closed: run.world.core_counts.2,
    };
    Ok((run.coverage, report))
}

/// The state of one run.
struct Run {
    world: World,
    /// Fault draws, apart from the world's own, so a skipped fault leaves the others in place.
    faults: Rng,
    next_tick: u64,
    next_lease: u64,
    heal_at: Option<u64>,
    coverage: Coverage,
    /// The added replica's disk wiped (before its promotion, after it).
    added_wiped: (usize, usize),
}

impl Run {
    /// Advances to `now`: deliveries and syncs, raft ticks every 10 ms, the leader's lease and
    /// release every 100 ms, and the publishers.
    fn step(&mut self, now: u64, publishing: bool) {
        self.world.advance(now);
        if self.heal_at.is_some_and(|at| at <= now) {
            self.world.cut.clear();
            self.heal_at = None;
        }
        if now >= self.next_tick {
            self.next_tick = now + 10;
            let wanted = self.world.wanted();
            for id in self.world.ids.clone() {
                self.world.input(id, Input::Tick);
                // A replica that does not lead ignores it.
                if let Some(wanted) = &wanted {
                    self.world.input(id, Input::Membership(wanted.clone()));
                }
            }
        }
        if self.world.core {
            self.world.core_turns();
        } else if now >= self.next_lease {
            self.next_lease = now + 100;
            if let Some(leader) = self.world.leader() {
                let silence = Command::Silence { up_to: now.saturating_sub(30) };
                self.world.input(leader, Input::Propose(silence));
                let release = Command::Release { up_to: now.saturating_sub(300) };
                self.world.input(leader, Input::Propose(release));
            }
        }
        self.world.publishers_act(publishing);
    }

    /// Draws one fault; applies it unless `apply` is false (the shrinker left it out).
    fn fault(&mut self, mode: Mode, apply: bool) {
        let now = self.world.now;
        let voters = self.world.ids.clone();
        let victim = voters[self.faults.below(voters.len())];
        let back = now + 10 + self.faults.below(300) as u64;
        // The core modes add stalls (a SIGSTOPped replica, the leader half the time), drawn as
        // one more kind so that the other modes' schedules stay as they were.
        let kinds = if mode.disks { 10 } else { 7 } + usize::from(mode.core);
        let kind = self.faults.below(kinds);
        let stalled = match mode.core && self.faults.chance(50) {
            true => self.world.leader().unwrap_or(victim),
            false => victim,
        };
        if !apply {
            return;
        }
        if mode.core && kind == kinds - 1 {
            if !self.world.stalled(stalled) && self.world.nodes[&stalled].group.is_some() {
                self.coverage.stalls += 1;
                self.world.stall(stalled, now + 50 + self.faults.below(550) as u64);
            }
            return;
        }
        let up = |w: &World, id: ReplicaId| w.nodes[&id].group.is_some();
        match kind {
            0..=2 => {
                if up(&self.world, victim) {
                    self.coverage.crashes += 1;
                    self.world.crash(victim, Crash::Process, back);
                }
            }
            3..=6 => self.partition(victim, back + 200),
            7 => {
                self.coverage.power_losses += 1;
                for id in voters {
                    if up(&self.world, id) {
                        let back = now + 10 + self.faults.below(200) as u64;
                        self.world.crash(id, Crash::PowerLoss, back);
                    }
                }
            }
            _ => {
                // One wiped disk at a time: two would lose what only they held. None of a
                // creation voter while a replace is under way: the forgotten voter, still a
                // member, is one permanent failure already (docs/replication.md,
                // "Membership"). The added replica's disk may go at any time, as a learner
                // (it counts in no quorum) or once promoted: it restarts empty as an added
                // member, fenced as any replica back empty (`ReplicaGroup::added`, `rejoin`),
                // and the leader must take its word that it lost what it had acknowledged.
                let replaced = self.world.replaced();
                // Once a replace is done, the first disk to go is the new voter's (it rarely
                // would by chance: the change completes late in a run).
                let victim = match self.world.replace {
                    Some((_, added)) if replaced && self.added_wiped.1 == 0 => added,
                    _ => victim,
                };
                let added = self.world.replace.is_some_and(|(_, added)| added == victim);
                if (added || replaced) && !self.world.nodes.values().any(|n| n.rejoining) {
                    self.coverage.empty_restarts += 1;
                    match (added, replaced) {
                        (true, false) => self.added_wiped.0 += 1,
                        (true, true) => self.added_wiped.1 += 1,
                        _ => {}
                    }
                    self.world.crash(victim, Crash::Wipe, back);
                }
            }
        }
    }

    /// Cuts the leader (or `victim` when there is none, or half the time a random minority)
    /// from the others until `heal_at`.
    fn partition(&mut self, victim: ReplicaId, heal_at: u64) {
        self.coverage.partitions += 1;
        let voters = self.world.ids.clone();
        let mut minority = vec![self.world.leader().unwrap_or(victim)];
        if self.faults.chance(50) {
            minority = vec![victim];
            if voters.len() == 5 && self.faults.chance(50) {
                minority.push(voters[self.faults.below(voters.len())]);
            }
        }
        self.world.cut.clear();
        for &a in &minority {
            for &b in &voters {
                if !minority.contains(&b) {
                    self.world.cut.insert((a, b));
                }
            }
        }
        self.heal_at = Some(heal_at);
    }

    /// Heals everything, restarts every replica and runs without faults until the group
    /// settles (every publish acknowledged, every replica caught up to the same log).
    fn quiet(&mut self) -> Result<(), Failure> {
        self.world.cut.clear();
        self.heal_at = None;
        self.world.weather = Weather { loss: 0, duplication: 0, ..self.world.weather };
        for id in self.world.ids.clone() {
            if self.world.nodes[&id].group.is_none() {
                self.world.start(id);
            }
        }
        let end = self.world.now + QUIET_LIMIT_MS;
        while self.world.now < end {
            let now = self.world.now + 5;
            self.step(now, false);
            if let Some(message) = self.world.judge.broken.take() {
                return Err(Failure { step: None, faults: self.coverage.faults, message });
            }
            if self.world.settled()
                && self.world.core_settled()
                && (!self.world.core || self.world.judge.all_delivered())
            {
                return Ok(());
            }
        }
        let applied: Vec<_> = self
            .world
            .nodes
            .iter()
            .map(|(id, n)| {
                let status = n.group.as_ref().map(|g| g.status());
                let at = status.as_ref().map(|s| s.applied);
                (*id, at, status.map(|s| (s.term, s.leader, s.commit, s.first_index, s.voters, s.learners, s.fenced)))
            })
            .collect();
        let judge = &self.world.judge;
        let undelivered: Vec<_> = judge.acked.iter().filter(|(k, _)| !judge.delivered_at.contains_key(k)).collect();
        let message = match self.world.settled() && self.world.core_settled() {
            // With the delivery core: the group settled and its leader serves the pubend, but
            // acknowledged publishes never reached a subscriber (lost).
            true => format!("acknowledged publishes (publisher, seq) at their ticks never delivered: {undelivered:?}"),
            false => {
                let cores: Vec<_> =
                    self.world.nodes.iter().map(|(id, n)| (*id, n.core.as_ref().map(|c| c.describe()))).collect();
                format!(
                    "the group did not settle in {QUIET_LIMIT_MS} ms of quiet (applied per replica: {applied:?}; cores: {cores:?})"
                )
            }
        };
        Err(Failure { step: None, faults: self.coverage.faults, message })
    }
}
