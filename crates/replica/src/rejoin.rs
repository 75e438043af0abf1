//! The rule for a replica whose disk was wiped (or replaced): it comes back with no log and no
//! memory of its term or its votes, while messages its old self sent (vote grants, append acks)
//! may still be in flight and count. Raft's safety rests on a voter never forgetting, so such a
//! replica takes part only through two fences:
//!
//! 1. **Term fence.** Before stepping any raft message it asks every mate for its term
//!    ([`Envelope::TermQuery`]) and starts at one past the highest answer, with no vote. Its old
//!    self voted only in terms some mate reached (a candidate persists its term before asking),
//!    so it never votes twice in a term, and it never acknowledges entries of a term older than
//!    a leader its old self may have helped elect. It needs every mate's answer: a majority
//!    could miss the one candidate its old self voted for. The new term is written (a [`Write`]
//!    with `rejoin_term`) before anything else it writes.
//! 2. **Vote fence.** Until its durable log holds an entry of term `rejoin_term` or later, it
//!    neither campaigns (its ticks do not reach raft-rs) nor grants votes or pre-votes (they are
//!    dropped). Such an entry comes from a leader elected without it, which holds every committed
//!    entry (its voters, a majority of the others, meet every commit quorum minus this replica),
//!    so a log holding it holds everything this replica may have acknowledged before the wipe.
//!    It may acknowledge appends meanwhile: those are new promises, kept on its disk.
//!
//! **A new group.** A replica cannot tell a wiped journal from a group it never ran: both are
//! empty. So every replica with an empty journal fences, and the answers tell: if every mate
//! answers term 0, no replica ever stood for election (a candidate persists a term of at least
//! 1 before asking, and so does every voter that grants), hence no vote was ever cast that this
//! replica could repeat and nothing was ever committed, and it starts as a fresh voter
//! ([`ReplicaGroup::bootstrap`]'s state). A fencing replica answers a term query with 0: with
//! one wipe at a time, the asker is then a new group's replica too (any other asker's journal
//! would be empty as well, a second wipe).
//!
//! **Members changed.** The fence asks the creation voters and every voter an answer names
//! (each answer carries the voters its sender applied, `members`), so a member added since is
//! asked too; a broker forgotten in the cell ([`Input::Membership`]) is not waited for: it is
//! gone for good, and a vote its old self cast for it cannot elect it again.
//!
//! Limits: one wiped replica at a time (two wiped voters of a commit quorum lose what only they
//! held, which no replication rule can restore), and it waits while any mate it asks is
//! unreachable.

use std::collections::{BTreeMap, BTreeSet};

use raft::eraftpb::HardState;

use crate::group::{
    Action, Envelope, GroupSettings, Input, Phase, Recovered, ReplicaError, ReplicaGroup, ReplicaId, Running, Unsynced,
    Write,
};
use crate::state::Record;

impl ReplicaGroup {
    /// A replica whose journal is empty (its disk was wiped, or the group is new here): it
    /// fences (see this module) before it takes part.
    pub fn rejoin(settings: GroupSettings) -> Result<Self, ReplicaError> {
        if !settings.voters.contains(&settings.id) {
            return Err(ReplicaError::Settings("this replica is not a voter of its group".into()));
        }
        let phase = Phase::Fencing { answers: BTreeMap::new(), named: BTreeSet::new(), forgotten: Vec::new() };
        Ok(Self { settings, phase })
    }

    /// Handles an input while fencing: only ticks (to ask again) and answers count.
    pub(crate) fn fencing(&mut self, input: Input, out: &mut Vec<Action>) {
        let Phase::Fencing { answers, named, forgotten } = &mut self.phase else { return };
        let me = self.settings.id;
        // Every creation voter and every voter an answer named, but this replica and the
        // brokers forgotten in the cell (gone for good: see this module).
        let asked = |named: &BTreeSet<ReplicaId>, forgotten: &[ReplicaId]| -> BTreeSet<ReplicaId> {
            self.settings.voters.iter().chain(named).copied().filter(|v| *v != me && !forgotten.contains(v)).collect()
        };
        match input {
            Input::Tick => {
                for mate in asked(named, forgotten) {
                    if !answers.contains_key(&mate) {
                        out.push(Action::Send { to: mate, msg: Envelope::TermQuery });
                    }
                }
            }
            Input::Message { from, msg: Envelope::TermReply { term, voters } } => {
                if from != me && (self.settings.voters.contains(&from) || named.contains(&from)) {
                    let best = answers.entry(from).or_insert(term);
                    *best = (*best).max(term);
                    named.extend(voters);
                }
            }
            Input::Message { from, msg: Envelope::TermQuery } => {
                out.push(Action::Send { to: from, msg: Envelope::TermReply { term: 0, voters: Vec::new() } });
            }
            Input::Membership(wanted) => *forgotten = wanted.forgotten,
            Input::Publish { publisher, seq, .. } | Input::PublishAt { publisher, seq, .. } => {
                out.push(Action::Refused { publisher, seq, leader: None });
            }
            Input::PublishAllAt(records) => {
                for Record { publisher, seq, .. } in records {
                    out.push(Action::Refused { publisher, seq, leader: None });
                }
            }
            // Raft traffic, proposals and completions mean nothing before the fence.
            Input::Message { .. }
            | Input::Propose(_)
            | Input::Persisted { .. }
            | Input::SnapshotSaved { .. }
            | Input::Links { .. }
            | Input::ClaimLead => {}
        }
        let asked = asked(named, forgotten);
        if !asked.iter().all(|mate| answers.contains_key(mate)) {
            return;
        }
        let highest = asked.iter().filter_map(|mate| answers.get(mate)).copied().max().unwrap_or(0);
        // All zero: a new group, no vote was ever cast, so it starts fresh (see this module),
        // and the empty write is the journal's creation mark, so a restart finds the group.
        let (recovered, write) = match highest {
            0 => (Recovered::default(), Write::default()),
            _ => {
                let term = highest + 1;
                let hard_state = HardState { term, ..HardState::default() };
                let recovered = Recovered { hard_state: hard_state.clone(), rejoin_term: term, ..Recovered::default() };
                let write =
                    Write { number: 0, hard_state: Some(hard_state), rejoin_term: Some(term), ..Write::default() };
                (recovered, write)
            }
        };
        match Running::start(&self.settings, recovered) {
            Ok(mut running) => {
                // Nothing this replica writes later may be durable before the fence.
                running.unsynced.push_back(Unsynced {
                    number: 0,
                    messages: Vec::new(),
                    max_term: 0,
                    publishes: Vec::new(),
                    installed: 0,
                });
                out.push(Action::Persist(write));
                self.phase = Phase::Running(Box::new(running));
            }
            Err(e) => out.push(Action::Fault { reason: e.to_string() }),
        }
    }
}
