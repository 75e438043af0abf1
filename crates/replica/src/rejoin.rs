//! The rule for a replica whose disk was wiped (or replaced), or that is added to a running
//! group: it comes back with no log and no memory of its term or its votes, while messages its
//! old self sent (vote grants, append acks) may still be in flight and count, and a leader may
//! still count what its old self acknowledged. Raft's safety rests on a voter never forgetting,
//! so such a replica takes part only through two fences:
//!
//! 1. **Term fence.** Before stepping any raft message it asks every mate for its term and its
//!    log's last entry ([`Envelope::TermQuery`]), and starts in the highest term answered, `H`,
//!    with no vote. Its old self voted only in terms some mate reached (a candidate persists
//!    its term before asking), so it never acknowledges entries of a term older than a leader
//!    its old self may have helped elect. It needs every mate's answer: a majority could miss
//!    the one candidate its old self voted for, or the one log that holds the furthest entry.
//!    The fence (`H`, `X`), `X` the furthest index of an entry of term `H` in the answers (0 if
//!    none holds one), is written (a [`Write`] with `rejoin_term` and `rejoin_index`) before
//!    anything else it writes.
//! 2. **Vote fence.** Until its durable log reaches (`H`, `X`), an entry of a term past `H` or
//!    one of `H` at index `X` or later, it neither campaigns (its ticks do not reach raft-rs)
//!    nor grants votes or pre-votes (they are dropped). Reaching it is enough:
//!    - an entry of a later term comes from a leader elected without it, whose log holds every
//!      committed entry (its voters, a majority of the others, meet every commit quorum minus
//!      this replica), and a log holding one of its entries holds all before it;
//!    - its old self acknowledged entries of `H` only from the leader of `H`, and any such
//!      entry that counted in a commit is still in some mate's log (the leader's, or the other
//!      voters' of that quorum), so it lies at or below `X`: a log holding the leader's entry
//!      at `X` or past it holds them, and everything committed before `H` (the leader's log
//!      held that when it was elected);
//!    - its old self may have voted in `H`, but no candidate of `H` holds an entry of `H` (a
//!      candidate campaigns before its term has a leader to write one), so a log that holds one
//!      refuses every candidate of `H`.
//!
//!    It may acknowledge appends meanwhile: those are new promises, kept on its disk.
//!
//!    The index is not idle caution: fenced by the term alone, a replica wiped after the
//!    leader of `H` crashed and restarted took that leader's snapshot of an older index (of
//!    term `H`) for proof, voted, and elected a replica that lacked a committed entry (the
//!    simulator's core mode with disk faults, seed 38, on the way to this rule).
//!
//! Before 2026-12-03 the term fence started one past `H` and the vote fence waited for an entry
//! of that new term: sound, but the new term deposed the leader whenever a replica came back
//! empty or was added (an election, and a second of refusals to its publishers). And an added
//! member was fenced by its leader's term alone, with no index: its log soon held an entry of
//! that term older than entries its old self (promoted, then wiped) had acknowledged in it, it
//! voted, and elected a replica that lacked them (the simulator's seed 234).
//!
//! **A new group.** A replica cannot tell a wiped journal from a group it never ran: both are
//! empty. So every replica with an empty journal fences, and the answers tell: if every mate
//! answers term 0, no replica ever stood for election (a candidate persists a term of at least
//! 1 before asking, and so does every voter that grants), hence no vote was ever cast that this
//! replica could repeat and nothing was ever committed, and it starts as a fresh voter
//! ([`ReplicaGroup::bootstrap`]'s state). A fencing replica answers a term query with 0: with
//! one wipe at a time, the asker is then a new group's replica too (any other asker's journal
//! would be empty as well, a second wipe). An added member never starts so: the leader that
//! named it had a term.
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
        Ok(Self::fenced(settings, None))
    }

    /// A replica fencing (see this module); `added`: a member added later, named by a leader
    /// of that term.
    pub(crate) fn fenced(settings: GroupSettings, added: Option<u64>) -> Self {
        let phase = Phase::Fencing { answers: BTreeMap::new(), named: BTreeSet::new(), forgotten: Vec::new(), added };
        Self { settings, phase }
    }

    /// Handles an input while fencing: only ticks (to ask again) and answers count.
    pub(crate) fn fencing(&mut self, input: Input, out: &mut Vec<Action>) {
        let Phase::Fencing { answers, named, forgotten, added } = &mut self.phase else { return };
        let added = *added;
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
            Input::Message { from, msg: Envelope::TermReply { term, voters, last } } => {
                if from != me && (self.settings.voters.contains(&from) || named.contains(&from)) {
                    let best = answers.entry(from).or_insert((term, last));
                    *best = (best.0.max(term), best.1.max(last));
                    named.extend(voters);
                }
            }
            Input::Message { from, msg: Envelope::TermQuery } => {
                let reply = Envelope::TermReply { term: 0, voters: Vec::new(), last: (0, 0) };
                out.push(Action::Send { to: from, msg: reply });
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
        let answered: Vec<_> = asked.iter().filter_map(|mate| answers.get(mate)).copied().collect();
        // An added member is never a new group's voter: in its leader's term at least.
        let highest = answered.iter().map(|&(term, _)| term).max().unwrap_or(0).max(added.unwrap_or(0));
        // The furthest entry of that term in any mate's log: past all its old self acknowledged.
        let reach = answered.iter().map(|&(_, last)| last).filter(|&(term, _)| term == highest).max();
        let index = reach.map_or(0, |(_, index)| index);
        // All zero: a new group, no vote was ever cast, so it starts fresh (see this module),
        // and the empty write is the journal's creation mark, so a restart finds the group.
        let (recovered, write) = match highest {
            0 => (Recovered::default(), Write::default()),
            term => {
                let hard_state = HardState { term, ..HardState::default() };
                let recovered = Recovered {
                    hard_state: hard_state.clone(),
                    rejoin_term: term,
                    rejoin_index: index,
                    ..Recovered::default()
                };
                let write = Write {
                    number: 0,
                    hard_state: Some(hard_state),
                    rejoin_term: Some(term),
                    rejoin_index: index,
                    ..Write::default()
                };
                (recovered, write)
            }
        };
        match Running::start(&self.settings, recovered) {
            Ok(mut running) => {
                // Nothing this replica writes later may be durable before the fence.
                running.unsynced.push_back(Unsynced {
                    number: 0,
                    messages: Vec::new(),
                    reach: (0, 0),
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
