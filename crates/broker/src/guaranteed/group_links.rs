//! Guaranteed queue groups with members on several brokers: the driver's shell around
//! [`super::remote_members`] (docs/protocol.md, "Guaranteed queue groups").
//!
//! Every group of the network is kept at one broker, its home (`[cluster] queue_home`, the
//! same name in every broker's configuration): its durable subscription, its checkpoints and
//! its [`WorkQueue`](tidings_node::work_queue::WorkQueue) are there, exactly as for a group
//! whose members are all local ([`super::groups`]). A member at another broker is a **remote
//! member**: its broker sends JOIN over its link to the home, the home makes it a member of the
//! work queue like any other and answers JOINED (the member's SUBSCRIBED goes then) or
//! REFUSED (an ERROR); leases go to it as LEASE frames in the links' guaranteed lanes, its
//! DELIVERY_ACKs go back as ACK (one tick each), its end as LEAVE. So a message is leased to
//! one member at a time and released only by that member's ack, network-wide, by the same
//! code that does it for local members.
//!
//! The two brokers need not be linked: every GROUP frame names its two ends, and each broker
//! on the way hands it on along routing's shortest path ([`super::group_paths`]). A break on
//! that path (a link down or replaced at any hop, a path that moved, no way on) is told to
//! both ends, by the brokers on either side of it: the home takes every member of that broker
//! out of the group (their leases go to the other members, flagged redelivered) and sends it
//! RESET; the member's broker sends RESET (so the home lets go of what it may have sent into
//! the break) and joins its members again once a path is there. An ack it sends for a lease
//! given back changes nothing, so across a break a message may be done twice, once by each
//! side, and the second copy says so. A home
//! that restarts resumes its groups from their checkpoints; what other brokers' pubends replay
//! from before its start is flagged redelivered (a restored group's mark, `super::groups`).

use std::sync::Arc;

use std::time::{Duration, Instant};
use tidings_delivery::{PubendId, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_route::BrokerName;
use tidings_wire::peer::{Group, GroupBody, PeerFrame};
use tidings_wire::{GuaranteedDeliver, Notice, ReasonCode, SubId, Subscribed};
use tracing::debug;

use super::driver::Driver;
use super::durable::DurableSpec;
use super::group_paths::Broken;
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

/// How often members waiting for a path to their home are tried again (a path appears when
/// link state spreads, which no event here tells of).
const JOIN_RETRY: Duration = Duration::from_millis(250);

impl Driver {
    /// Sends one GROUP frame of ours to `dest`, along routing's path (a frame with no way on
    /// is a break, settled at the end of the turn).
    pub(super) fn send_group_frame(&mut self, dest: &BrokerName, member: u64, body: GroupBody) {
        let frame = Group { origin: self.broker.to_string(), dest: dest.to_string(), member, body };
        self.hand_on_group(frame, None);
    }

    /// Hands a GROUP frame on toward its `dest` (`from`: the peer it came from; `None`: made
    /// here).
    fn hand_on_group(&mut self, frame: Group, from: Option<&BrokerName>) {
        let Some(net) = &self.net else { return };
        let (origin, dest) = (BrokerName::new(&frame.origin), BrokerName::new(&frame.dest));
        let hops = net.cluster.group_hops(&dest);
        let quiet = matches!(frame.body, GroupBody::Reset);
        let Some(hop) = self.paths.forward((&origin, &dest), from, &hops, quiet, &mut self.broken) else {
            debug!(%origin, %dest, "no path for a GROUP frame; its ends are told");
            return;
        };
        match PeerFrame::Group(frame).to_bytes() {
            // A link gone meanwhile: its PeerDown tells the ends (the pair is recorded on it).
            Ok(bytes) => {
                net.cluster.send_group(&hop, bytes);
            }
            Err(error) => debug!(%error, "a GROUP frame does not encode; not sent"),
        }
        if from.is_some() {
            self.metrics.group_relayed.inc();
        }
    }

    /// Once a turn: the ends told of the breaks found (this broker's own end handled here,
    /// the others sent RESET), then the members waiting for a path to their home tried again.
    pub(super) fn group_paths_turn(&mut self) {
        while !self.broken.is_empty() {
            for Broken { near, far } in std::mem::take(&mut self.broken) {
                self.metrics.group_breaks.inc();
                if near == self.broker {
                    self.lost_end(&far, true);
                } else {
                    let frame =
                        Group { origin: far.to_string(), dest: near.to_string(), member: 0, body: GroupBody::Reset };
                    self.hand_on_group(frame, None);
                }
            }
        }
        if self.joins_tried.elapsed() >= JOIN_RETRY {
            self.joins_tried = Instant::now();
            self.join_unasked();
        }
    }

    /// What passed between this broker and `end` may have been lost (`local`: this broker
    /// found the break; else `end`, or a broker between, sent RESET). As the home: `end`'s
    /// members leave (their leases to the others, flagged) and `end` is told. As a member's
    /// broker: its members homed at `end` join again, after a RESET if the break was found here.
    fn lost_end(&mut self, end: &BrokerName, local: bool) {
        let dropped = self.homed.peer_gone(end);
        let told = !dropped.is_empty();
        self.leave_groups(&dropped);
        if told {
            self.send_group_frame(end, 0, GroupBody::Reset);
        }
        if !self.away.rejoin(end).is_empty() {
            if local {
                self.away.owe(end, true);
            }
            self.join_unasked();
        }
    }

    /// Sends JOIN for every member not asked since the last break whose home has a path now
    /// (RESET first if one is owed there).
    fn join_unasked(&mut self) {
        let Some(net) = &self.net else { return };
        let reachable: Vec<(SubendId, BrokerName)> =
            self.away.unasked().into_iter().filter(|(_, home)| !net.cluster.group_hops(home).is_empty()).collect();
        for (member, home) in reachable {
            if self.away.owe(&home, false) {
                self.send_group_frame(&home, 0, GroupBody::Reset);
            }
            let Some(join) = self.away.get(member).map(|e| e.session.join.clone()) else { continue };
            self.away.asked(member);
            self.send_group_frame(&home, member.0, join);
        }
    }

    /// A member here joins a group kept at `home`: JOIN now if a path is there, else when one is.
    pub(super) fn join_remote(&mut self, join: RemoteJoin) {
        let RemoteJoin { member, home, id, outbox, join } = join;
        self.away.add(member, home, AwaySession { id, outbox, join });
        self.join_unasked();
    }

    /// A member here of a group kept elsewhere ended: LEAVE to the home (with no path, the
    /// break makes the home take it out).
    pub(super) fn leave_remote(&mut self, member: SubendId) {
        if let Some(entry) = self.away.remove(member) {
            self.send_group_frame(&entry.home, member.0, GroupBody::Leave);
        }
    }

    /// A member here acknowledged one message of a group kept elsewhere: ACK to the home.
    pub(super) fn ack_remote(&mut self, member: SubendId, pubend: tidings_wire::PubendId, tick: tidings_wire::Tick) {
        if let Some(home) = self.away.get(member).map(|e| e.home.clone()) {
            self.send_group_frame(&home, member.0, GroupBody::Ack { pubend, tick });
        }
    }

    /// The link to `peer` came up (`up`, a new or replacing connection) or went down: the ends
    /// whose GROUP frames crossed the old one are told (at the end of the turn), and members
    /// waiting for a path try the new one.
    pub(super) fn group_peer_reset(&mut self, peer: &BrokerName, up: bool) {
        let broken = self.paths.link_down(peer);
        self.broken.extend(broken);
        if up {
            self.join_unasked();
        }
    }

    /// A GROUP frame from linked peer `link`: handed on if it is for another broker.
    pub(super) fn group_frame(&mut self, link: BrokerName, frame: Group) {
        if frame.dest != self.broker.as_str() {
            return self.hand_on_group(frame, Some(&link));
        }
        let from = BrokerName::new(&frame.origin);
        self.paths.arrived(&from, &self.broker, &link);
        let Group { member, body, .. } = frame;
        match body {
            GroupBody::Reset => self.lost_end(&from, false),
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
