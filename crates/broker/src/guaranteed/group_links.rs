//! Guaranteed queue groups with members on several brokers: the driver's shell around
//! [`super::remote_members`] (docs/protocol.md, "Guaranteed queue groups").
//!
//! Every group of the network is kept at one broker, its home (`[cluster] queue_home`, the
//! same name in every broker's configuration): its durable subscription, its checkpoints and
//! its [`WorkQueue`](tidings_node::work_queue::WorkQueue) are there, exactly as for a group
//! whose members are all local ([`super::groups`]). A member at another broker is a **remote
//! member**: its broker sends JOIN over its link to the home, the home makes it a member of the
//! work queue like any other and answers JOINED (the member's SUBSCRIBED goes then) or
//! REFUSED (an ERROR); leases go to it as LEASE frames in the link's guaranteed lane, its
//! DELIVERY_ACKs go back as ACK (one tick each), its end as LEAVE. So a message is leased to
//! one member at a time and released only by that member's ack, network-wide, by the same
//! code that does it for local members.
//!
//! A link that goes down or is replaced (a new handshake with the peer) makes the home take
//! every member of that peer out of the group: their leases go to the other members, flagged
//! redelivered. The member's broker joins its members again over the next link; an ack it
//! sends for a lease of the old link changes nothing (that lease was given back), so across a
//! cut a message may be done twice, once by each side, and the second copy says so. A home
//! that restarts resumes its groups from their checkpoints; what other brokers' pubends replay
//! from before its start is flagged redelivered (a restored group's mark, `super::groups`).

use std::sync::Arc;

use tidings_delivery::{PubendId, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_route::BrokerName;
use tidings_wire::peer::{Group, GroupBody, PeerFrame};
use tidings_wire::{GuaranteedDeliver, Notice, ReasonCode, SubId, Subscribed};
use tracing::debug;

use super::driver::Driver;
use super::durable::DurableSpec;
use super::groups::{durable_name, Dest, Join};
use crate::outbox::Outbox;

/// A member joining a group kept at another broker (from the sessions' handle).
pub(crate) struct RemoteJoin {
    pub(crate) member: SubendId,
    pub(crate) home: BrokerName,
    pub(crate) id: SubId,
    pub(crate) outbox: Arc<Outbox>,
    /// The JOIN to send (group, filter texts, key).
    pub(crate) join: GroupBody,
}

/// What a member's broker keeps of a member whose group is elsewhere.
pub(crate) struct AwaySession {
    id: SubId,
    outbox: Arc<Outbox>,
    join: GroupBody,
}

impl Driver {
    /// Sends one GROUP frame to `peer` (false: no up link that speaks it).
    pub(super) fn send_group_frame(&self, peer: &BrokerName, member: u64, body: GroupBody) -> bool {
        let Some(net) = &self.net else { return false };
        match PeerFrame::Group(Group { member, body }).to_bytes() {
            Ok(bytes) => net.cluster.send_group(peer, bytes),
            Err(error) => {
                debug!(%error, "a GROUP frame does not encode; not sent");
                false
            }
        }
    }

    /// A member here joins a group kept at `home`: JOIN now if the link is up, else when it is.
    pub(super) fn join_remote(&mut self, join: RemoteJoin) {
        let RemoteJoin { member, home, id, outbox, join } = join;
        self.away.add(member, home, AwaySession { id, outbox, join });
        self.send_join(member);
    }

    fn send_join(&self, member: SubendId) {
        let Some(entry) = self.away.get(member) else { return };
        if !self.send_group_frame(&entry.home, member.0, entry.session.join.clone()) {
            debug!(member = member.0, home = %entry.home, "no link to the queue groups' home yet; joins when one is up");
        }
    }

    /// A member here of a group kept elsewhere ended: LEAVE to the home (with no link, the home
    /// took it out already).
    pub(super) fn leave_remote(&mut self, member: SubendId) {
        if let Some(entry) = self.away.remove(member) {
            self.send_group_frame(&entry.home, member.0, GroupBody::Leave);
        }
    }

    /// A member here acknowledged one message of a group kept elsewhere: ACK to the home.
    pub(super) fn ack_remote(&mut self, member: SubendId, pubend: tidings_wire::PubendId, tick: tidings_wire::Tick) {
        if let Some(entry) = self.away.get(member) {
            self.send_group_frame(&entry.home, member.0, GroupBody::Ack { pubend, tick });
        }
    }

    /// The link to `peer` came up (`up`, a new or replacing connection) or went down: the
    /// home's members of that peer leave their groups (their leases to the others, flagged
    /// redelivered), and this broker's members homed there join again if the link is up.
    pub(super) fn group_peer_reset(&mut self, peer: &BrokerName, up: bool) {
        for local in self.homed.peer_gone(peer) {
            self.leave_group(local);
        }
        for member in self.away.rejoin(peer) {
            if up {
                self.send_join(member);
            }
        }
    }

    /// A GROUP frame from linked peer `from`.
    pub(super) fn group_frame(&mut self, from: BrokerName, frame: Group) {
        let Group { member, body } = frame;
        match body {
            GroupBody::Join { group, pattern, selector, key } => {
                self.remote_join(&from, member, (group, pattern, selector, key));
            }
            GroupBody::Leave => {
                if let Some(local) = self.homed.leave(&from, member) {
                    self.leave_group(local);
                }
            }
            GroupBody::Ack { pubend, tick } => {
                if let Some(local) = self.homed.local(&from, member) {
                    self.group_ack(local, PubendId(pubend.0), Tick(tick.0));
                }
            }
            GroupBody::Joined => {
                let member = SubendId(member);
                if self.away.get(member).is_some_and(|e| e.home == from) && self.away.joined(member) {
                    if let Some(entry) = self.away.get(member) {
                        let id = entry.session.id;
                        entry
                            .session
                            .outbox
                            .push_frame(&tidings_wire::Frame::Subscribed(Subscribed { id, starts: vec![] }));
                    }
                }
            }
            GroupBody::Refused { code, reason } => {
                let member = SubendId(member);
                if self.away.get(member).is_some_and(|e| e.home == from) {
                    if let Some(entry) = self.away.remove(member) {
                        // As a local join refused: the ERROR, and the connection closed.
                        let notice = Notice { code, text: reason };
                        entry.session.outbox.close_with(&tidings_wire::Frame::Error(notice));
                    }
                }
            }
            GroupBody::Lease { pubend, tick, redelivered, message } => {
                let Some(entry) = self.away.get(SubendId(member)).filter(|e| e.home == from) else {
                    // Its member left meanwhile: the LEAVE on its way gives the lease back.
                    return;
                };
                let tick = GuaranteedDeliver::wire_tick(tick, redelivered);
                // Never dropped; the member's window at the home bounds what queues for it.
                let _ = entry.session.outbox.push_guaranteed(entry.session.id, pubend, tick, &message);
                self.metrics.deliveries.inc();
            }
        }
    }

    /// A JOIN from `peer` for its member `remote`: refused unless this broker is the home and
    /// the group exists for the same filter (or not at all); else a member like a local one.
    fn remote_join(
        &mut self,
        peer: &BrokerName,
        remote: u64,
        (group, pattern, selector, key): (String, String, Option<String>, Option<String>),
    ) {
        let refuse = |driver: &mut Driver, notice: Notice| {
            let dest = Dest::Remote { peer: peer.clone(), member: remote };
            driver.tell_refused(&dest, notice);
        };
        let home = self.net.as_ref().and_then(|net| net.cluster.queue_home().cloned());
        if home.as_ref() != Some(&self.broker) {
            let text = format!("{} does not keep guaranteed queue groups ([cluster] queue_home)", self.broker);
            return refuse(self, Notice::new(ReasonCode::UnsupportedDeliveryMode, text));
        }
        if let Err(why) = tidings_wire::check_group_name(&group) {
            return refuse(self, Notice::new(ReasonCode::InvalidQueueGroup, why));
        }
        let filter = match (Pattern::parse(&pattern), selector.as_deref().map(Selector::parse).transpose()) {
            (Ok(pattern), Ok(selector)) => (pattern, selector),
            _ => {
                let text = format!("the filter {pattern:?} {selector:?} does not parse");
                return refuse(self, Notice::new(ReasonCode::InvalidPattern, text));
            }
        };
        let name = durable_name(&group);
        let next = || SubendId(self.next_subend.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let (fresh, local) = (next(), next());
        let claimed =
            self.durables.claims.lock().claim_group(&name, (&pattern, selector.as_deref(), key.as_deref()), fresh);
        let group_subend = match claimed {
            Ok(subend) => subend,
            Err(notice) => return refuse(self, notice),
        };
        let local = match self.homed.join(peer, remote, local) {
            Ok(local) => local,
            Err(_) => {
                // A JOIN again (one of an old connection overtaken by the new one's): it is in
                // the group already; JOINED again, which its broker takes as nothing new.
                self.send_group_frame(peer, remote, GroupBody::Joined);
                return;
            }
        };
        let spec = DurableSpec { name, pattern, selector, key };
        let dest = Dest::Remote { peer: peer.clone(), member: remote };
        self.join_group(Join { member: local, group: group_subend, dest, spec, filter });
    }
}
