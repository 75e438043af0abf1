//! A leader's proposals of publishes: many publishes in one raft proposal (one entry each), so
//! a turn of the shell's publishes costs one `Ready`, one journal write and one append message
//! per follower (see [`Input::PublishAllAt`](crate::Input)).

use raft::eraftpb::{Entry, Message, MessageType};

use crate::command::Command;
use crate::group::{Action, Running};
use crate::state::Record;

impl Running {
    /// Proposes publishes, each at its record's tick at the earliest (the clock, or the host
    /// engine's tick), as one raft proposal (see [`Input::PublishAllAt`](crate::Input)). Ticks
    /// grow in the order given; one already applied is answered from the retry table, one
    /// already proposed in this term is not proposed twice. With `exact`, one whose tick the
    /// group has passed is refused instead of moved ([`crate::GroupSettings::exact_ticks`]).
    pub(crate) fn publish_all(&mut self, records: Vec<Record>, exact: bool, out: &mut Vec<Action>) {
        let Some(term) = self.leading.filter(|&term| self.leads_in(term)) else {
            let leader = Some(self.raw.raft.leader_id).filter(|&l| l != 0);
            for Record { publisher, seq, .. } in records {
                out.push(Action::Refused { publisher, seq, leader });
            }
            return;
        };
        let mut last = self.last_proposed.max(self.state.last_tick());
        let mut keys = Vec::with_capacity(records.len());
        let mut entries = Vec::with_capacity(records.len());
        for Record { tick, publisher, seq, payload } in records {
            // Already applied: committed for good, so the first tick is the answer.
            if let Some(tick) = self.state.logged(publisher, seq) {
                out.push(Action::Acked { publisher, seq, tick });
                continue;
            }
            if exact && tick <= last {
                out.push(Action::Refused { publisher, seq, leader: None });
                continue;
            }
            if self.pending.insert((publisher, seq), term) == Some(term) {
                continue;
            }
            let tick = tick.max(last + 1);
            last = tick;
            keys.push((publisher, seq));
            let data = Command::Publish { publisher, seq, tick, payload }.encode();
            entries.push(Entry { data: data.into(), ..Entry::default() });
        }
        if entries.is_empty() {
            return;
        }
        // What `RawNode::propose` steps, with every entry in one message: raft-rs appends them
        // at once and sends each follower one append for all of them.
        let mut propose = Message::default();
        propose.set_msg_type(MessageType::MsgPropose);
        propose.from = self.raw.raft.id;
        propose.set_entries(entries.into());
        if self.raw.raft.step(propose).is_ok() {
            self.last_proposed = last;
        } else {
            for (publisher, seq) in keys {
                self.pending.remove(&(publisher, seq));
                out.push(Action::Refused { publisher, seq, leader: None });
            }
        }
    }
}
