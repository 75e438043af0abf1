//! Guaranteed queue groups (work queues) in the driver: the shell around
//! [`WorkQueue`] (docs/protocol.md, "Guaranteed queue groups").
//!
//! A group is a durable subscription of the driver's own, named [`durable_name`] (`queue:G`,
//! a name no client can claim: durable names have no `:`). So its subend is attached to every
//! stream like a durable one's, its filter and per-pubend checkpoint are in the durable store,
//! and its messages stay in the pubend logs, across a broker restart too, until members
//! acknowledge them. What the core delivers to that subend goes into the group's
//! [`WorkQueue`], which leases each message to one member (GDELIVER on the member's own
//! subscription, flagged redelivered if a member that left had it); a member's DELIVERY_ACK
//! names one tick and releases its lease; the prefix the work queue returns is the group's
//! acknowledgement, written as its checkpoint before the core acknowledges it upstream (the
//! durable checkpoint path). While no member has room the subend is blocked, so a backlog
//! waits in the pubend logs rather than here.
//!
//! The work queue lives in memory while the broker runs, also with no member (blocked): a
//! member joining later gets what the others gave back. After a restart the group resumes from
//! its checkpoint: what was above it comes again, even a message a member acknowledged out of
//! order, so across a restart it is at least once. Leases are not recorded (a write per lease
//! would put a sync on every delivery), so which of those messages a member had is not known:
//! every message the log held when the broker started ([`Driver::restart_marks`]) goes out
//! flagged redelivered. The flag means "may have been delivered before": never missing on a
//! message delivered twice, also set on one that was logged but not yet leased at the crash.
//! A keyed group (`--queue-key`: the key property is kept in the group's durable record, and
//! every member must give the same) offers each message with its value's hash, and the work
//! queue leases it by rendezvous hashing (`tidings_node::work_queue`).
//! In a network every group is kept at one broker, the home (`[cluster] queue_home`): a
//! member is either local ([`Dest::Local`]) or at another broker ([`Dest::Remote`]), leased
//! to over that broker's link to the home ([`super::group_links`]); the work queue does not
//! tell them apart. A new group's subend waits for its barrier before its members are told
//! they joined (`pending`), so a member confirmed gets every message published after.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tidings_delivery::{Input, PubendId, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_node::work_queue::{Lease, MemberId, WorkQueue};
use tidings_route::BrokerName;
use tidings_wire::peer::GroupBody;
use tidings_wire::{GuaranteedDeliver, Message, Notice, SubId, Subscribed};
use tracing::{debug, warn};

use super::driver::Driver;
use super::durable::DurableSpec;
use crate::outbox::Outbox;

/// Messages a member holds at once (leased, not yet acknowledged): enough to keep a worker
/// busy across a round trip, few enough that a member that dies gives back little.
pub const MEMBER_WINDOW: usize = 256;

/// The durable name a guaranteed queue group is kept under.
pub fn durable_name(group: &str) -> String {
    format!("queue:{group}")
}

/// Where a member's leases go: its subscription here, or its broker's link (a remote member,
/// see [`super::group_links`]).
pub(crate) enum Dest {
    /// A member connected here: its subscription and its session's outbox.
    Local {
        /// Its subscription.
        id: SubId,
        /// Its session's outbox.
        outbox: Arc<Outbox>,
    },
    /// A member at another broker, by that broker and the number it gave the member.
    Remote {
        /// Its broker.
        peer: BrokerName,
        /// Its number there.
        member: u64,
    },
}

/// One group at this broker.
pub(super) struct Group {
    name: String,
    /// The property whose value picks the member (`--queue-key`), if keyed.
    key: Option<String>,
    queue: WorkQueue<Message>,
    members: BTreeMap<MemberId, Dest>,
    /// Members not yet told they joined: the group's subend waits for its barrier (a new
    /// group in a network), and a member is confirmed once the group is.
    pending: Vec<MemberId>,
    /// The core was told to stop delivering to the group's subend.
    blocked: bool,
    /// Restored from a previous life of the broker: a tick of another broker's pubend up to
    /// this may have been leased before the restart (that pubend's log is not here, so it has
    /// no restart mark), and goes out flagged redelivered.
    restored_mark: Option<Tick>,
}

/// Every guaranteed queue group here, by the group's subend, and each member's group.
#[derive(Default)]
pub(super) struct Groups {
    by_subend: BTreeMap<SubendId, Group>,
    member_of: BTreeMap<SubendId, SubendId>,
}

impl Groups {
    /// Whether `subend` is a member's subscription (its acks and its end are the group's).
    pub(super) fn is_member(&self, subend: SubendId) -> bool {
        self.member_of.contains_key(&subend)
    }

    /// Whether `subend` is a group's own subend (its deliveries go to the work queue).
    pub(super) fn is_group(&self, subend: SubendId) -> bool {
        self.by_subend.contains_key(&subend)
    }

    /// Per group name, its members at other brokers (kept here, the home): `/subsz` and
    /// `/state` show them, since no connection here lists them.
    pub(super) fn remote_members(&self) -> BTreeMap<String, Vec<super::state::RemoteMemberState>> {
        let mut out: BTreeMap<String, Vec<super::state::RemoteMemberState>> = BTreeMap::new();
        for group in self.by_subend.values() {
            let name = group.name.strip_prefix("queue:").unwrap_or(&group.name);
            for dest in group.members.values() {
                if let Dest::Remote { peer, member } = dest {
                    let entry = super::state::RemoteMemberState { broker: peer.to_string(), member: *member };
                    out.entry(name.to_string()).or_default().push(entry);
                }
            }
        }
        out
    }
}

/// A member joining: its own subend number, its group's, and where its leases go.
pub(crate) struct Join {
    pub(crate) member: SubendId,
    pub(crate) group: SubendId,
    pub(crate) dest: Dest,
    pub(crate) spec: DurableSpec,
    pub(crate) filter: (Pattern, Option<Selector>),
}

impl Driver {
    /// A member joins (the session claimed the group's name): the group's subend is created,
    /// resumed from its checkpoint, or unblocked, and SUBSCRIBED confirms the member.
    pub(super) fn join_group(&mut self, join: Join) {
        let Join { member, group, dest, spec, filter } = join;
        // Held again, should the last member's leaving have crossed this join's claim.
        self.durables.claims.lock().hold(&spec.name);
        // The group first: attaching its subend may deliver at once (a replay).
        let restored = !self.groups.is_group(group);
        let entry = self.groups.by_subend.entry(group).or_insert_with(|| Group {
            name: spec.name.clone(),
            key: spec.key.clone(),
            queue: WorkQueue::default(),
            members: BTreeMap::new(),
            pending: Vec::new(),
            blocked: false,
            restored_mark: None,
        });
        entry.queue.join(MemberId(member.0), MEMBER_WINDOW);
        entry.members.insert(MemberId(member.0), dest);
        self.groups.member_of.insert(member, group);
        if !self.durables.by_name.contains_key(&spec.name) {
            // New: created like a durable subscription with no outbox of its own; its members
            // are told they joined once it is confirmed (at once with no network).
            if let Err(notice) = self.create_durable(group, SubId(0), spec, filter, None) {
                self.groups.member_of.remove(&member);
                if let Some(dest) =
                    self.groups.by_subend.remove(&group).and_then(|mut g| g.members.remove(&MemberId(member.0)))
                {
                    self.tell_refused(&dest, notice);
                }
                return;
            }
            let waits = self.subends.get(&group).is_some_and(|entry| entry.barrier.is_some());
            match (waits, self.groups.by_subend.get_mut(&group)) {
                (true, Some(entry)) => entry.pending.push(MemberId(member.0)),
                _ => self.tell_joined(group, member),
            }
        } else {
            self.durables.checkpoints.hold(group);
            let waits = self.groups.by_subend.get(&group).is_some_and(|entry| !entry.pending.is_empty());
            match (waits, self.groups.by_subend.get_mut(&group)) {
                (true, Some(entry)) => entry.pending.push(MemberId(member.0)),
                _ => self.tell_joined(group, member),
            }
            if restored {
                // Ticks are the pubend's clock: what was published before this life (give or
                // take the brokers' clock skew) may have been leased in the last one.
                let margin = tidings_node::starts::LATE_PUBEND_MARGIN_MS;
                let mark = Tick(self.engine.settings().ticks(self.started_ms.0.saturating_add(margin)));
                if let Some(entry) = self.groups.by_subend.get_mut(&group) {
                    entry.restored_mark = Some(mark);
                }
                // Restored after a restart, no member since: replayed from its checkpoint.
                if let Some(entry) = self.subends.get_mut(&group) {
                    entry.blocked = false;
                }
                for (pubend, start) in self.durable_starts(group) {
                    self.feed(Input::SubendAttach { pubend, subend: group, start: Some(start), durable: true });
                }
            }
        }
        self.metrics.group_members.set(self.groups.member_of.len() as i64);
        debug!(member = member.0, group = group.0, "guaranteed queue group member joined");
        self.group_turn(group);
        self.run_inputs();
    }

    /// Per pubend, where the group's subend resumes (one past its checkpoint).
    fn durable_starts(&self, group: SubendId) -> Vec<(PubendId, Tick)> {
        self.pubends().into_iter().filter_map(|pubend| Some((pubend, self.durable_start(group, pubend)?))).collect()
    }

    /// Tells `member` it is in the group: SUBSCRIBED (with the group's starts) to a local one,
    /// JOINED to a remote one's broker.
    fn tell_joined(&mut self, group: SubendId, member: SubendId) {
        let starts = self.durable_starts(group);
        let Some(dest) = self.groups.by_subend.get(&group).and_then(|g| g.members.get(&MemberId(member.0))) else {
            return;
        };
        match dest {
            Dest::Local { id, outbox } => {
                let wire = starts.iter().map(|(p, t)| (tidings_wire::PubendId(p.0), tidings_wire::Tick(t.0))).collect();
                outbox.push_frame(&tidings_wire::Frame::Subscribed(Subscribed { id: *id, starts: wire }));
            }
            Dest::Remote { peer, member } => {
                let (peer, member) = (peer.clone(), *member);
                self.send_group_frame(&peer, member, GroupBody::Joined);
            }
        }
    }

    /// Tells a member its join was refused: ERROR to a local one, REFUSED to a remote one's.
    pub(super) fn tell_refused(&mut self, dest: &Dest, notice: Notice) {
        match dest {
            Dest::Local { outbox, .. } => outbox.push_frame(&tidings_wire::Frame::Error(notice)),
            Dest::Remote { peer, member } => {
                let body = GroupBody::Refused { code: notice.code, reason: notice.text };
                self.send_group_frame(peer, *member, body);
            }
        }
    }

    /// The group's subend was confirmed (its barrier came back): its waiting members are told.
    pub(super) fn group_confirmed(&mut self, group: SubendId) {
        let pending = match self.groups.by_subend.get_mut(&group) {
            Some(entry) => std::mem::take(&mut entry.pending),
            None => return,
        };
        for member in pending {
            self.tell_joined(group, SubendId(member.0));
        }
        self.group_turn(group);
    }

    /// A member unsubscribed or its session closed: its leases go to the others, flagged
    /// redelivered. The group stays (blocked once no member is left).
    pub(super) fn leave_group(&mut self, member: SubendId) {
        self.leave_groups(&[member]);
    }

    /// Members that leave together (a broker's, cut off from the home): all are out before
    /// their leases are handed on, so none goes to a member about to leave too (it would be
    /// given back, and counted, twice).
    pub(super) fn leave_groups(&mut self, members: &[SubendId]) {
        let mut left = std::collections::BTreeSet::new();
        for &member in members {
            let Some(group) = self.groups.member_of.remove(&member) else { continue };
            let Some(entry) = self.groups.by_subend.get_mut(&group) else { continue };
            let returned = entry.queue.leave(MemberId(member.0));
            entry.members.remove(&MemberId(member.0));
            entry.pending.retain(|pending| pending.0 != member.0);
            self.metrics.group_redeliveries.inc_by(returned as u64);
            debug!(member = member.0, group = group.0, returned, "guaranteed queue group member left");
            if entry.members.is_empty() {
                // What the members acknowledged is written at once, as for a durable's client.
                let name = entry.name.clone();
                self.durables.claims.lock().release(&name);
                self.durables.checkpoints.away(group);
            }
            left.insert(group);
        }
        self.metrics.group_members.set(self.groups.member_of.len() as i64);
        for group in left {
            self.group_turn(group);
        }
        self.run_inputs();
    }

    /// A member's DELIVERY_ACK: releases that one lease; the group's prefix, if it moved, is
    /// its new checkpoint.
    pub(super) fn group_ack(&mut self, member: SubendId, pubend: PubendId, tick: Tick) {
        let Some(&group) = self.groups.member_of.get(&member) else { return };
        let Some(entry) = self.groups.by_subend.get_mut(&group) else { return };
        match entry.queue.ack(MemberId(member.0), pubend, tick) {
            Ok(Some(prefix)) => self.durable_ack(group, pubend, prefix),
            Ok(None) => {}
            Err(why) => debug!(member = member.0, tick = tick.0, ?why, "a member's ack changed nothing"),
        }
        self.group_turn(group);
        self.run_inputs();
    }

    /// The core delivered `tick` to a group's subend: into its work queue.
    pub(super) fn group_deliver(&mut self, group: SubendId, pubend: PubendId, tick: Tick, payload: Bytes) {
        let message = match Message::decode(payload) {
            Ok(message) => message,
            Err(error) => {
                warn!(%error, pubend = pubend.0, tick = tick.0, "a logged message does not decode; not delivered");
                return;
            }
        };
        self.durable_delivered(group, pubend, tick);
        if let Some(entry) = self.groups.by_subend.get_mut(&group) {
            let key = entry.key.as_deref().and_then(|key| message.property(key)).map(crate::queue_groups::value_hash);
            entry.queue.offer_keyed(pubend, tick, message, key);
        }
        self.group_turn(group);
    }

    /// Sends what the work queue leases, and blocks or unblocks the group's subend on
    /// `wants_more` (the inputs are queued for the caller's [`Driver::run_inputs`] or feed).
    fn group_turn(&mut self, group: SubendId) {
        let Some(entry) = self.groups.by_subend.get_mut(&group) else { return };
        let mut leases = Vec::new();
        entry.queue.dispatch(&mut leases);
        let mut remote = Vec::new();
        for Lease { member, pubend, tick, message, redelivered } in leases {
            let Some(to) = entry.members.get(&member) else { continue };
            let redelivered = redelivered
                || self.restart_marks.get(&pubend).is_some_and(|mark| tick <= *mark)
                || (!self.hosted.contains(&pubend) && entry.restored_mark.is_some_and(|mark| tick <= mark));
            let wire_pubend = tidings_wire::PubendId(pubend.0);
            match to {
                Dest::Local { id, outbox } => {
                    let tick = GuaranteedDeliver::wire_tick(tidings_wire::Tick(tick.0), redelivered);
                    // Never dropped; the member's window bounds what queues for it.
                    let _ = outbox.push_guaranteed(*id, wire_pubend, tick, &message);
                }
                Dest::Remote { peer, member } => {
                    // Along the path to its broker; with none, the break makes its members
                    // leave, and this lease comes back to the group.
                    let tick = tidings_wire::Tick(tick.0);
                    let body = GroupBody::Lease { pubend: wire_pubend, tick, redelivered, message };
                    remote.push((peer.clone(), *member, body));
                }
            }
            self.metrics.deliveries.inc();
        }
        for (peer, member, body) in remote {
            self.send_group_frame(&peer, member, body);
        }
        let Some(entry) = self.groups.by_subend.get_mut(&group) else { return };
        let wants = entry.queue.wants_more();
        if wants != entry.blocked {
            return;
        }
        entry.blocked = !wants;
        if let Some(subend) = self.subends.get_mut(&group) {
            subend.blocked = !wants;
        }
        self.inputs.push_back(match wants {
            true => Input::OutboxReady { subend: group },
            false => Input::OutboxFull { subend: group },
        });
    }

    /// The group's durable name was deleted (`tidings durable rm`, only with no member).
    pub(super) fn forget_group(&mut self, group: SubendId) {
        self.groups.by_subend.remove(&group);
    }
}
