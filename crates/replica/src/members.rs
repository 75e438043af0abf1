//! Membership changes (issue 40: "adding or replacing a broker in a cell catches its replica up
//! from a snapshot plus the log tail, without stopping publishers"), through raft-rs's
//! configuration changes.
//!
//! **One change at a time, single steps.** The leader makes at most one change while none is
//! pending (raft-rs's `pending_conf_index`), each a simple one-node change (a v1 `ConfChange`):
//! add a learner, promote a learner to voter, remove a member. A replace is remove-then-add,
//! not a joint-consensus swap (`ConfChangeV2`): a broker is forgotten because it is gone, so
//! removing it first costs nothing (a quorum of three with one dead needs both live members,
//! a quorum of two needs the same two), and single steps never leave a joint configuration
//! that a restart's replay or a snapshot would have to carry.
//!
//! **Catching up.** A new member joins as a learner: it counts in no quorum and in no vote, so
//! publishes go on being acknowledged by the voters while it receives the leader's snapshot
//! (in chunks, paced) and the log's tail. The leader promotes it once it holds everything up to
//! [`PROMOTE_SLACK`] entries of the commit index (so the quorum it joins is not held back by
//! it). Order of the leader's decisions at each [`Input::Membership`](crate::Input): remove a
//! forgotten member, else promote a caught-up learner, else add a candidate while the group is
//! below its target.
//!
//! **Durable.** A change takes effect where it is applied (raft-rs's rule); the members at a
//! snapshot's index are written with it ([`Write::conf`](crate::Write)) and the conf changes
//! after it are in the log, so a restart replays the same changes onto the same start and knows
//! the current members, not the creation voters.
//!
//! **Removed.** A replica that applies its own removal reports [`Action::Removed`]: the shell
//! drops its journal. Messages from a replica that is not a member here are refused
//! (`envelope`), except leader traffic to a replica still outside its own membership: one just
//! added, which learns the members from the log or the snapshot.

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, Entry};
use raft::StateRole;

use crate::group::{Action, Conf, GroupSettings, Membership, Phase, ReplicaError, ReplicaGroup, ReplicaId, Running};

/// How many entries behind the commit index a learner may be and still be promoted: under
/// steady publishing it never holds the very last one, and a voter a few entries behind is
/// what every follower is most of the time.
pub const PROMOTE_SLACK: u64 = 64;

impl ReplicaGroup {
    /// A replica added to a running group on a broker that holds no journal of it: it starts
    /// empty and learns the members from the leader's log or snapshot, and counts in no quorum
    /// until promoted. Its broker cannot tell a first start from an old self of the same id
    /// (added, promoted, then wiped), whose acknowledgements counted in commits and whose votes
    /// in elections, so it fences as a wiped creation voter does (`rejoin`): it asks every
    /// mate's term, starts in the highest of them and of `term` (the term of the first message
    /// that named it, the leader's), and neither campaigns nor votes until its log reaches the
    /// last index the leader answered with. Fenced by the leader's term alone, with no index,
    /// it once voted with a log that lacked entries its old self had acknowledged in that term
    /// (the simulator's seed 234).
    pub fn added(settings: GroupSettings, term: u64) -> Result<Self, ReplicaError> {
        Ok(Self::fenced(settings, Some(term)))
    }

    /// The members as applied here (voters, learners): the creation voters until a change is
    /// applied. A fencing replica knows only the creation voters.
    pub fn members(&self) -> Conf {
        match &self.phase {
            Phase::Running(running) => running.raw.store().conf(),
            Phase::Fencing { .. } => (self.settings.voters.clone(), Vec::new()),
        }
    }
}

impl Running {
    /// A heartbeat that commits past this log's last index (raft-rs would panic on it) comes
    /// from a leader that believes this replica holds more than it does: its disk was wiped,
    /// and it came back in the leader's own term (`ReplicaGroup::added`). Refusing the
    /// heartbeat left the leader waiting forever for an answer to its last probe, with nothing
    /// new to append in a quiet group (the simulator found it). So the heartbeat is stepped
    /// with its commit held at this log's own commit index: it advances nothing, and its
    /// answer lets the leader probe again, whose refused append then tells it the log is gone
    /// (`forget_lost_progress`).
    pub(crate) fn hold_commit(&self, m: &mut raft::eraftpb::Message) {
        let log = &self.raw.raft.raft_log;
        if m.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeat && m.commit > log.last_index() {
            m.commit = log.committed;
        }
    }

    /// A leader told by a member that its log ends below what that member once acknowledged
    /// (a rejected append whose hint is under the member's `matched`) takes the member's word:
    /// its disk was wiped or replaced (an added member restarted empty, which is fenced by
    /// `ReplicaGroup::added`, not by a new term). raft-rs takes such a rejection for a stale
    /// one and ignores it, so without this the leader would go on sending from past the
    /// member's log, and heartbeats committing past it, and the member would never catch up.
    /// Lowering `matched` is safe: it only counts toward commits, which never go back.
    pub(crate) fn forget_lost_progress(&mut self, from: ReplicaId, m: &raft::eraftpb::Message) {
        let raft = &mut self.raw.raft;
        if raft.state != StateRole::Leader
            || m.get_msg_type() != raft::eraftpb::MessageType::MsgAppendResponse
            || !m.reject
            || m.term != raft.term
        {
            return;
        }
        if let Some(pr) = raft.mut_prs().get_mut(from) {
            if m.reject_hint < pr.matched && m.index <= pr.matched {
                pr.matched = m.reject_hint;
                pr.become_probe();
                pr.next_idx = m.reject_hint + 1;
            }
        }
    }

    /// Whether `id` is a voter or a learner as applied here.
    pub(crate) fn is_member(&self, id: ReplicaId) -> bool {
        let conf = self.raw.raft.prs().conf();
        conf.voters().contains(id) || conf.learners().contains(&id)
    }

    /// The leader's one membership decision per [`Input::Membership`](crate::Input): see this
    /// module for the order.
    pub(crate) fn membership(&mut self, settings: &GroupSettings, wanted: &Membership) {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader || self.leading.is_none() || raft.pending_conf_index > raft.raft_log.applied
        {
            return;
        }
        let (voters, learners) = self.raw.store().conf();
        let forgotten = voters.iter().chain(&learners).find(|&&id| id != settings.id && wanted.forgotten.contains(&id));
        let committed = raft.raft_log.committed;
        let caught_up = learners.iter().find(|&&id| {
            raft.prs()
                .get(id)
                .is_some_and(|p| p.recent_active && p.matched > 0 && p.matched + PROMOTE_SLACK >= committed)
        });
        let candidate = (voters.len() + learners.len() < wanted.target)
            .then(|| {
                wanted.candidates.iter().find(|&&id| {
                    id != 0 && !voters.contains(&id) && !learners.contains(&id) && !wanted.forgotten.contains(&id)
                })
            })
            .flatten();
        let change = match (forgotten, caught_up, candidate) {
            (Some(&id), _, _) => (ConfChangeType::RemoveNode, id),
            (None, Some(&id), _) => (ConfChangeType::AddNode, id),
            (None, None, Some(&id)) => (ConfChangeType::AddLearnerNode, id),
            (None, None, None) => return,
        };
        let mut cc = ConfChange::default();
        cc.set_change_type(change.0);
        cc.node_id = change.1;
        let _ = self.raw.propose_conf_change(Vec::new(), cc);
    }

    /// Applies a committed conf change entry (every replica, in log order, a restart's replay
    /// too). One that does not parse or that raft-rs refuses changes nothing: `envelope`
    /// refused every malformed one on the way in, so only a bug gets here.
    pub(crate) fn apply_conf(&mut self, entry: &Entry, out: &mut Vec<Action>) {
        let cc = match ConfChange::parse_from_bytes(&entry.data) {
            Ok(cc) => cc,
            Err(e) => return out.push(Action::Fault { reason: format!("conf change {}: {e}", entry.index) }),
        };
        match self.raw.apply_conf_change(&cc) {
            Ok(conf_state) => self.raw.mut_store().set_conf_state(conf_state),
            Err(e) => out.push(Action::Fault { reason: format!("conf change {} refused: {e}", entry.index) }),
        }
    }

    /// Reports the members after a change (applied or installed with a snapshot), and this
    /// replica's removal if it was a member and no longer is.
    pub(crate) fn members_changed(&mut self, id: ReplicaId, out: &mut Vec<Action>) {
        let (voters, learners) = self.raw.store().conf();
        let member = voters.contains(&id) || learners.contains(&id);
        out.push(Action::Members { voters, learners });
        if self.was_member && !member {
            out.push(Action::Removed);
        }
        self.was_member |= member;
    }
}

/// Members as a [`Write`](crate::Write) records them: voters and learners, each in id order
/// (raft-rs lists them in hash order).
pub(crate) fn conf_of(conf_state: &ConfState) -> Conf {
    let sorted = |ids: &[u64]| {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids
    };
    (sorted(&conf_state.voters), sorted(&conf_state.learners))
}

/// Whether a conf change entry's data is one this build proposes: one node (not 0) added as a
/// voter or a learner, or removed.
pub(crate) fn sound_change(data: &[u8]) -> bool {
    ConfChange::parse_from_bytes(data).is_ok_and(|cc| {
        cc.node_id != 0
            && matches!(
                cc.get_change_type(),
                ConfChangeType::AddNode | ConfChangeType::AddLearnerNode | ConfChangeType::RemoveNode
            )
    })
}
