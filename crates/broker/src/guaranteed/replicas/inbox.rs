//! Messages from cell mates: each REPLICA frame is checked against the cell and the group's
//! creation voters when it arrives (a FORGET goes to `members`), and stepped at the end of the driver's turn with the others its
//! group received meanwhile (`ReplicaGroup::handle_all`): one `Ready`, one journal write and
//! one batch of answers per group and turn, however many appends came.

use tidings_delivery::PubendId;
use tidings_replica::{Envelope, Input};
use tidings_route::BrokerName;
use tidings_wire::peer::{Replica, ReplicaBody, MAX_REPLICA_VOTERS};
use tracing::{error, warn};

use super::{replica_id, Outcome, Replicas};

impl Replicas {
    /// A REPLICA frame from linked peer `from`: its group joined if it is new here, its message
    /// kept for the end of the turn ([`Replicas::deliver`]).
    pub(in crate::guaranteed) fn received(&mut self, from: &BrokerName, frame: Replica) {
        let sender = replica_id(from.as_str());
        let pubend = PubendId(frame.pubend.0);
        if !self.mates.contains_key(&sender) {
            return warn!(%from, pubend = pubend.0, "a replica message from a broker outside this cell: dropped");
        }
        if let ReplicaBody::Forget { broker } = frame.body {
            return self.forgotten_received(from, broker);
        }
        let msg = match Envelope::from_wire(&frame.body) {
            Ok(msg) => msg,
            Err(e) => {
                return warn!(%from, pubend = pubend.0, error = %e, "a replica message that does not decode: dropped")
            }
        };
        match self.groups.get(&pubend) {
            Some(group) if group.voters != frame.voters => {
                return warn!(%from, pubend = pubend.0, "a replica message naming other voters than the group's: dropped");
            }
            Some(_) => {}
            None if self.left.contains(&pubend) => return,
            None => {
                let mut sorted = frame.voters.clone();
                sorted.sort_unstable();
                sorted.dedup();
                let creation = sorted.contains(&self.me);
                // Not a creation voter: only the leader's traffic makes this broker an added
                // member (`members`), in the leader's term.
                let added = match &msg {
                    Envelope::Raft(m) | Envelope::Chunk { header: m, .. } if !creation => {
                        use tidings_replica::MessageType as T;
                        matches!(m.get_msg_type(), T::MsgAppend | T::MsgHeartbeat | T::MsgSnapshot).then_some(m.term)
                    }
                    _ => None,
                };
                let sound = sorted.len() == frame.voters.len()
                    && (1..=MAX_REPLICA_VOTERS).contains(&sorted.len())
                    && (creation && sorted.len() >= 2 && sorted.contains(&sender) || added.is_some());
                if !sound {
                    return warn!(%from, pubend = pubend.0, voters = ?frame.voters, "a replica message for a group this broker cannot be in: dropped");
                }
                if let Err(e) = self.join(pubend, frame.voters.clone(), added) {
                    return error!(pubend = pubend.0, error = %e, "cannot join a replica group");
                }
            }
        }
        self.inbox.entry(pubend).or_default().push((sender, msg));
    }

    /// Steps the messages received this turn, each group's at once
    /// (`ReplicaGroup::handle_all`), after the links as they are now: a pre-vote that a dead
    /// leader's drop brought finds this follower out of the lease if it saw the drop too
    /// (`Input::Links`).
    pub(super) fn deliver(&mut self) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for (pubend, messages) in std::mem::take(&mut self.inbox) {
            let Some(group) = self.groups.get(&pubend) else { continue };
            let up = self.linked(group);
            outcomes.extend(self.handle(pubend, Input::Links { up }));
            let now = crate::guaranteed::driver::now().0;
            let Some(group) = self.groups.get_mut(&pubend) else { continue };
            let actions =
                group.replica.handle_all(now, messages.into_iter().map(|(from, msg)| Input::Message { from, msg }));
            outcomes.extend(self.carry_out(pubend, actions));
        }
        outcomes
    }
}
