//! [`Status`]: where a group stands on one replica, for an operator (`/state`, metrics): who
//! leads, in which term, how far the log is committed and applied, and, on the leader, how far
//! each follower lags; and the accessors the shell reads (leading, applied state, fenced).
//! Read-only; nothing here changes the group.

use crate::group::{Phase, ReplicaGroup, ReplicaId};
use crate::state::PubendReplica;

/// One replica's view of its group.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Status {
    /// The term this replica is in (0 while a wiped replica is still fencing).
    pub term: u64,
    /// The leader it last heard from, if any (itself when it leads).
    pub leader: Option<ReplicaId>,
    /// Its log's first index held (entries before it are compacted into its last snapshot).
    pub first_index: u64,
    /// Its log's last index.
    pub last_index: u64,
    /// The bytes of the entries it holds (what the next compaction frees).
    pub log_bytes: u64,
    /// Snapshots taken, sent, received and refused here.
    pub snapshots: crate::SnapshotCounts,
    /// The highest index it knows committed.
    pub commit: u64,
    /// The highest index it applied.
    pub applied: u64,
    /// True while it may not vote or campaign (wiped, not caught up: see `rejoin`).
    pub fenced: bool,
    /// On the leader: each other voter and how many entries it is behind the leader's log, by
    /// replica id.
    pub lag: Vec<(ReplicaId, u64)>,
    /// The voters as applied here (membership changes: `members`).
    pub voters: Vec<ReplicaId>,
    /// The learners as applied here: added members still catching up, in no quorum.
    pub learners: Vec<ReplicaId>,
}

impl ReplicaGroup {
    /// The term this replica leads, if it does.
    pub fn leading(&self) -> Option<u64> {
        match &self.phase {
            Phase::Running(running) => running.leading,
            Phase::Fencing { .. } => None,
        }
    }

    /// The applied state (`None` while a wiped replica is still fencing).
    pub fn state(&self) -> Option<&PubendReplica> {
        match &self.phase {
            Phase::Running(running) => Some(&running.state),
            Phase::Fencing { .. } => None,
        }
    }

    /// The state to open the pubend from, once this replica may host it: it leads in the
    /// returned term and has applied an entry of that term. Raft commits a leader's first
    /// entry only after every entry before it, so the state then holds every record any
    /// earlier leader acknowledged, and a pubend opened from it breaks none of their promises.
    /// Before that (an election just won, a wiped replica still fencing) it is `None`: the
    /// state may lack committed records, and serving from it would tell their ticks silent.
    pub fn serving(&self) -> Option<(u64, &PubendReplica)> {
        match &self.phase {
            Phase::Running(running) => {
                let term = running.leading?;
                (running.leads_in(term) && running.applied_term == term).then_some((term, &running.state))
            }
            Phase::Fencing { .. } => None,
        }
    }

    /// True while this replica may not vote or campaign (wiped and not yet caught up).
    pub fn withholding_vote(&self) -> bool {
        match &self.phase {
            Phase::Running(running) => running.rejoin_term != 0,
            Phase::Fencing { .. } => true,
        }
    }

    /// Where this group stands here.
    pub fn status(&self) -> Status {
        let (voters, learners) = self.members();
        let Phase::Running(running) = &self.phase else {
            return Status { fenced: true, voters, learners, ..Status::default() };
        };
        let raft = &running.raw.raft;
        let last_index = raft.raft_log.last_index();
        let lag = match running.leading {
            Some(_) => raft
                .prs()
                .iter()
                .filter(|(&id, _)| id != self.settings.id)
                .map(|(&id, progress)| (id, last_index.saturating_sub(progress.matched)))
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .collect(),
            None => Vec::new(),
        };
        Status {
            term: raft.term,
            leader: Some(raft.leader_id).filter(|&l| l != 0),
            first_index: running.raw.store().base() + 1,
            last_index,
            log_bytes: running.raw.store().bytes(),
            snapshots: crate::SnapshotCounts { chunks_queued: running.pacer.queued(), ..running.snapshots },
            commit: raft.raft_log.committed,
            applied: raft.raft_log.applied,
            fenced: self.withholding_vote(),
            lag,
            voters,
            learners,
        }
    }
}
