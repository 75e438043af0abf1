//! raft-rs's asynchronous persistence, as actions: every `Ready` becomes sends (a leader's go at
//! once, raft thesis 10.2.1), applies of committed entries, and one [`Write`]; the messages that
//! may only leave once that write is durable (a follower's append acks, votes) wait in
//! [`Unsynced`] until [`Input::Persisted`](crate::Input::Persisted) comes back.
//!
//! The [`Log`](crate::log::Log) raft-rs reads is the replica's view of its own log: everything handed to
//! the shell, synced or not (raft-rs must read back what it handed out before it is synced, for
//! `advance_append_async`). What counts as durable is only ever what the shell reported: raft-rs
//! counts the leader's own copy toward the quorum at `on_persist_ready`, not before.

use raft::eraftpb::{Entry, EntryType, Message, MessageType};
use raft::StateRole;

use crate::command::Command;
use crate::group::{Action, Applied, Envelope, GroupSettings, Running, Unsynced, Write};
use crate::state::Outcome;

impl Running {
    /// Turns every pending `Ready` into actions, then reports a change of leadership.
    pub(crate) fn drain(&mut self, settings: &GroupSettings, out: &mut Vec<Action>) {
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            let number = rd.number();
            let sent = self.send(rd.take_messages(), out);
            for read in rd.take_read_states() {
                if let Ok(at) = <[u8; 8]>::try_from(read.request_ctx.as_slice()) {
                    out.push(Action::Confirmed { at: u64::from_be_bytes(at) });
                }
            }
            // A snapshot from the leader: the state and the log become it. Its write goes out
            // with this ready's, and the answer waits for that write's sync.
            let snapshot = (!rd.snapshot().is_empty()).then(|| rd.snapshot().clone());
            if let Some(snapshot) = &snapshot {
                self.install(snapshot, out);
            }
            let committed = rd.take_committed_entries();
            if !committed.is_empty() {
                self.apply(committed, out);
            }
            let entries = rd.take_entries();
            let hard_state = rd.hs().cloned();
            let messages = rd.take_persisted_messages();
            {
                let log = self.raw.mut_store();
                if let Err(e) = log.append(&entries) {
                    out.push(Action::Fault { reason: format!("appending to the replica log: {e}") });
                }
                if let Some(hs) = &hard_state {
                    log.set_hard_state(hs.clone());
                }
            }
            self.raw.advance_append_async(rd);
            self.report_sent(&sent);
            if entries.is_empty() && hard_state.is_none() && snapshot.is_none() && self.unsynced.is_empty() {
                // Nothing to write and nothing before it in flight: durable already.
                self.raw.on_persist_ready(number);
                let sent = self.send(messages, out);
                self.report_sent(&sent);
                continue;
            }
            // A log's (term, index) grow together: its last entry reaches furthest.
            let snapshot_reach = snapshot.as_ref().map_or((0, 0), |s| (s.get_metadata().term, s.get_metadata().index));
            let reach = entries.last().map_or((0, 0), |e| (e.term, e.index)).max(snapshot_reach);
            let installed = snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
            // Decoding copies every payload: only the mutation reads these.
            let publishes = match settings.ack_before_quorum {
                true => entries
                    .iter()
                    .filter_map(|e| match Command::decode(&e.data) {
                        Ok(Command::Publish { publisher, seq, tick, .. }) => Some((publisher, seq, tick)),
                        _ => None,
                    })
                    .collect(),
                false => Vec::new(),
            };
            self.unsynced.push_back(Unsynced { number, messages, reach, publishes, installed });
            self.last_number = number;
            let conf = snapshot.as_ref().map(|s| crate::members::conf_of(s.get_metadata().get_conf_state()));
            let snapshot = snapshot.as_ref().map(crate::snapshot::to_parts);
            out.push(Action::Persist(Write {
                number,
                entries,
                hard_state,
                rejoin_term: None,
                rejoin_index: 0,
                snapshot,
                snapshot_apart: false,
                conf,
            }));
        }
        self.track_leadership(out);
        self.maybe_compact(settings, out);
    }

    /// The shell synced every write up to `number`.
    pub(crate) fn persisted(&mut self, settings: &GroupSettings, number: u64, out: &mut Vec<Action>) {
        let mut last = None;
        let mut installed = 0;
        while self.unsynced.front().is_some_and(|u| u.number <= number) {
            let Some(done) = self.unsynced.pop_front() else { break };
            installed = installed.max(done.installed);
            if self.rejoin_term != 0 && done.reach >= (self.rejoin_term, self.rejoin_index) {
                (self.rejoin_term, self.rejoin_index) = (0, 0);
            }
            if settings.ack_before_quorum {
                self.ack_on_own_sync(&done.publishes, out);
            }
            let sent = self.send(done.messages, out);
            self.report_sent(&sent);
            last = Some(done.number);
        }
        if let Some(last) = last {
            self.raw.on_persist_ready(last);
        }
        // raft-rs leaves its applied index below an installed snapshot; the state is the
        // snapshot's, so it is applied, and nothing below it is ever read again.
        if installed > self.raw.raft.raft_log.applied {
            self.raw.advance_apply_to(installed);
        }
    }

    /// The mutation: acknowledges what the leader's own disk holds, quorum or not.
    fn ack_on_own_sync(&mut self, publishes: &[(u64, u64, u64)], out: &mut Vec<Action>) {
        for &(publisher, seq, tick) in publishes {
            let Some(&term) = self.pending.get(&(publisher, seq)) else { continue };
            if self.leads_in(term) {
                self.pending.remove(&(publisher, seq));
                out.push(Action::Acked { publisher, seq, tick: Some(tick) });
            }
        }
    }

    /// Sends `messages` (a snapshot over one message's size in chunks, paced: see `chunks` and
    /// `pace`); returns the followers whose snapshot has left whole.
    fn send(&mut self, messages: Vec<Message>, out: &mut Vec<Action>) -> Vec<u64> {
        let mut finished = Vec::new();
        for msg in messages {
            // A rejoined replica that has not caught up grants no vote (see `rejoin`).
            let grant = matches!(
                msg.get_msg_type(),
                MessageType::MsgRequestVoteResponse | MessageType::MsgRequestPreVoteResponse
            ) && !msg.reject;
            if grant && self.rejoin_term != 0 {
                continue;
            }
            if crate::snapshot::is_snapshot(msg.get_msg_type()) {
                self.snapshots.sent += 1;
                let to = msg.to;
                let mut envelopes = crate::chunks::split(msg, self.chunk);
                if envelopes.len() == 1 {
                    // Whole: one message, not paced, finished at once.
                    self.pacer.drop_queue(to);
                    out.extend(envelopes.pop().map(|msg| Action::Send { to, msg }));
                    finished.push(to);
                    continue;
                }
                let emitted = self.pacer.send(to, envelopes, out);
                self.snapshots.chunks_sent += emitted.chunks;
                finished.extend(emitted.finished);
                continue;
            }
            out.push(Action::Send { to: msg.to, msg: Envelope::Raft(msg) });
        }
        finished
    }

    /// Applies committed entries in order and acknowledges what this leader proposed in the term
    /// it still leads.
    fn apply(&mut self, entries: Vec<Entry>, out: &mut Vec<Action>) {
        let mut applied = Vec::with_capacity(entries.len());
        let mut last_index = 0;
        let mut changed = false;
        for entry in entries {
            last_index = entry.index;
            if entry.get_entry_type() == EntryType::EntryConfChange {
                self.apply_conf(&entry, out);
                changed = true;
            }
            let command = match entry.get_entry_type() {
                EntryType::EntryNormal if !entry.data.is_empty() => Command::decode(&entry.data).ok(),
                _ => None,
            };
            let outcome = match &mut self.compaction {
                Some(compaction) => self.state.apply_with(command, &mut |r| compaction.keep(r)),
                None => self.state.apply(command),
            };
            let acked = match outcome {
                Outcome::Logged { publisher, seq, tick } => Some((publisher, seq, Some(tick))),
                Outcome::Duplicate { publisher, seq, tick } => Some((publisher, seq, tick)),
                _ => None,
            };
            if let Some((publisher, seq, tick)) = acked {
                if let Some(term) = self.pending.remove(&(publisher, seq)) {
                    if self.leads_in(term) {
                        out.push(Action::Acked { publisher, seq, tick });
                    }
                }
            }
            self.applied_term = entry.term;
            applied.push(Applied { index: entry.index, term: entry.term, outcome });
        }
        self.raw.advance_apply_to(last_index);
        out.push(Action::Apply(applied));
        if changed {
            let id = self.raw.raft.id;
            self.members_changed(id, out);
        }
    }

    /// Reports taking or losing the lead; a change forgets every pending acknowledgement, so
    /// nothing proposed in one term is acknowledged in another.
    fn track_leadership(&mut self, out: &mut Vec<Action>) {
        let now = (self.raw.raft.state == StateRole::Leader).then_some(self.raw.raft.term);
        if now == self.leading {
            return;
        }
        if let Some(term) = self.leading {
            out.push(Action::LostLeadership { term });
        }
        self.pending.clear();
        self.pacer.clear();
        self.leading = now;
        if let Some(term) = now {
            self.last_proposed = self.state.last_tick();
            out.push(Action::BecameLeader { term });
        }
    }

    /// A leader that is not the group's preferred replica (the first voter: the pubend's host,
    /// where its publishers and its stream are) hands the lead back once that replica is live
    /// and holds the whole log, so the transfer is immediate (raft-rs drops proposals while one
    /// is under way, and would wait an election timeout for a replica that is down).
    pub(crate) fn hand_back(&mut self, settings: &GroupSettings) {
        let Some(&preferred) = settings.voters.first() else { return };
        if !settings.hand_back
            || self.leading.is_none()
            || preferred == settings.id
            || self.raw.raft.lead_transferee.is_some()
        {
            return;
        }
        let last = self.raw.raft.raft_log.last_index();
        let ready = self.raw.raft.prs().get(preferred).is_some_and(|p| p.recent_active && p.matched == last);
        if ready {
            self.raw.transfer_leader(preferred);
        }
    }
}
