//! A guaranteed queue group at one broker (a work queue), sans-IO: the group is one subend of
//! the delivery core, and this hands each of its deliveries to one member at a time.
//!
//! Why a layer of its own: the core's unit is a subscription that takes a pubend's ticks in
//! order and acknowledges a prefix. A work queue's members take messages side by side and
//! acknowledge each one when its work is done, in any order, and a member that dies gives its
//! unfinished messages back. So the group's subend stays the core's (its filter in the
//! summaries, its ticks held in the pubend logs until acknowledged), and this keeps, per group:
//!
//! - the messages the core delivered and no member holds yet (`ready`, oldest first);
//! - each member's **leases**: messages in flight to it, at most its window;
//! - per pubend, the ticks delivered and not yet acknowledged by a member (`open`): the
//!   group's acknowledgement to the core is the prefix below the oldest of them, so a pubend's
//!   log keeps every message some member might still have to do.
//!
//! A member's DELIVERY_ACK names one tick it finished (not a prefix): it releases that lease
//! only, and only the member holding it may (an ack for a tick it does not hold changes
//! nothing). A member that leaves (unsubscribes, disconnects, is cut) gives its leases back to
//! the front of `ready`, flagged redelivered, so another member gets them next. Nothing is
//! acknowledged upstream that no member acknowledged, so nothing is lost; a tick is leased to
//! one member at a time and released by its ack, so no two live members both acknowledge it.
//!
//! A **keyed** group ([`WorkQueue::offer_keyed`]) leases a message with a key hash to the
//! member with room that scores highest for it (`mix(key ^ mix(member))`: rendezvous hashing),
//! instead of taking turns: the same key goes to the same member while it lives and has room in
//! its window; a member leaving moves only its own keys. A member whose window is full is passed
//! over for the key's next-highest member with room, so a slow member stalls none of its keys.
//!
//! The caller (the broker's driver, the simulator) does the I/O: it calls [`WorkQueue::offer`]
//! for each delivery of the group's subend, sends what [`WorkQueue::dispatch`] leases, feeds
//! the acknowledgements [`WorkQueue::ack`] returns to the core, and blocks the subend while
//! [`WorkQueue::wants_more`] is false (the core then holds the rest in the pubend logs).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tidings_delivery::{PubendId, Tick};

/// One member of the group, as the caller numbers them (its subscription, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub u64);

/// Messages queued here beyond the members' windows before the group's subend is blocked: a
/// burst is taken from the core in one go, a backlog stays in the pubend logs.
pub const READY_BOUND: usize = 1024;

/// A message handed to a member: send it as a guaranteed delivery of the member's
/// subscription, flagged `redelivered` if another member had it before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease<M> {
    /// Who takes it.
    pub member: MemberId,
    /// Its pubend.
    pub pubend: PubendId,
    /// Its tick.
    pub tick: Tick,
    /// The message.
    pub message: M,
    /// A member that left had it, unacknowledged.
    pub redelivered: bool,
}

/// Why an acknowledgement changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckRefused {
    /// The member is not in the group.
    UnknownMember,
    /// The member does not hold that tick (never had it, acknowledged it already, or it was
    /// given back when the member left).
    NotLeased,
}

/// A message the core delivered, waiting for a member.
#[derive(Clone, Debug)]
struct Ready<M> {
    pubend: PubendId,
    tick: Tick,
    message: M,
    redelivered: bool,
    /// The hash of its key, in a keyed group.
    key: Option<u64>,
}

/// One member: how many messages it may hold at once, and what it holds.
#[derive(Debug)]
struct Member<M> {
    window: usize,
    /// What it holds, with each message's key hash (given back with it).
    leases: BTreeMap<(PubendId, Tick), (M, Option<u64>)>,
}

/// One guaranteed queue group at one broker (see the module doc).
#[derive(Debug)]
pub struct WorkQueue<M> {
    members: BTreeMap<MemberId, Member<M>>,
    ready: VecDeque<Ready<M>>,
    /// Per pubend, ticks delivered by the core and not yet acknowledged by a member.
    open: BTreeMap<PubendId, BTreeSet<Tick>>,
    /// Per pubend, the last tick the core delivered.
    last: BTreeMap<PubendId, Tick>,
    /// Per pubend, the prefix last acknowledged to the core.
    acked: BTreeMap<PubendId, Tick>,
    /// The member after which the next round-robin choice starts.
    turn: Option<MemberId>,
}

impl<M> Default for WorkQueue<M> {
    fn default() -> Self {
        WorkQueue {
            members: BTreeMap::new(),
            ready: VecDeque::new(),
            open: BTreeMap::new(),
            last: BTreeMap::new(),
            acked: BTreeMap::new(),
            turn: None,
        }
    }
}

impl<M: Clone> WorkQueue<M> {
    /// A member joins, taking at most `window` messages at once (at least one).
    pub fn join(&mut self, member: MemberId, window: usize) {
        self.members.entry(member).or_insert_with(|| Member { window: window.max(1), leases: BTreeMap::new() });
    }

    /// A member leaves: what it held goes back to the front of the queue, oldest first,
    /// flagged redelivered. Returns how many messages it gave back.
    pub fn leave(&mut self, member: MemberId) -> usize {
        let Some(gone) = self.members.remove(&member) else { return 0 };
        let returned = gone.leases.len();
        for ((pubend, tick), (message, key)) in gone.leases.into_iter().rev() {
            self.ready.push_front(Ready { pubend, tick, message, redelivered: true, key });
        }
        // Oldest first across pubends too: by tick, as the core delivered them.
        self.ready.make_contiguous()[..returned].sort_by_key(|r| (r.tick, r.pubend));
        returned
    }

    /// The core delivered `tick` of `pubend` to the group's subend (ticks only increase per
    /// pubend; a tick offered again, after a core's resend, is ignored).
    pub fn offer(&mut self, pubend: PubendId, tick: Tick, message: M) {
        self.offer_keyed(pubend, tick, message, None);
    }

    /// [`WorkQueue::offer`] of a message whose key hashes to `key` (`None`: it takes turns).
    pub fn offer_keyed(&mut self, pubend: PubendId, tick: Tick, message: M, key: Option<u64>) {
        if self.last.get(&pubend).is_some_and(|last| tick <= *last) {
            return;
        }
        self.last.insert(pubend, tick);
        self.open.entry(pubend).or_default().insert(tick);
        self.ready.push_back(Ready { pubend, tick, message, redelivered: false, key });
    }

    /// Leases ready messages to members with room (by key, else round robin) into `out`.
    pub fn dispatch(&mut self, out: &mut Vec<Lease<M>>) {
        while let Some(front) = self.ready.front() {
            let chosen = match front.key {
                Some(key) => self.best_with_room(key),
                None => self.next_with_room(),
            };
            let Some(member) = chosen else { return };
            let Some(next) = self.ready.pop_front() else { return };
            let Some(holder) = self.members.get_mut(&member) else { return };
            holder.leases.insert((next.pubend, next.tick), (next.message.clone(), next.key));
            if next.key.is_none() {
                self.turn = Some(member);
            }
            out.push(Lease {
                member,
                pubend: next.pubend,
                tick: next.tick,
                message: next.message,
                redelivered: next.redelivered,
            });
        }
    }

    /// The member with a lease to spare that scores highest for `key`.
    fn best_with_room(&self, key: u64) -> Option<MemberId> {
        use tidings_wire::hash::mix;
        let members = self.members.iter().filter(|(_, m)| m.leases.len() < m.window);
        members.max_by_key(|(id, _)| mix(key ^ mix(id.0))).map(|(id, _)| *id)
    }

    /// The member after the last one chosen (wrapping) with a lease to spare.
    fn next_with_room(&self) -> Option<MemberId> {
        let has_room = |(_, m): &(&MemberId, &Member<M>)| m.leases.len() < m.window;
        let after = self.turn.map(|turn| self.members.range(turn..).skip(1).find(has_room));
        let wrapped = || self.members.iter().find(has_room);
        after.flatten().or_else(wrapped).map(|(id, _)| *id)
    }

    /// `member` finished `tick` of `pubend`: its lease is released. Returns the group's new
    /// acknowledgement of `pubend` to give the core, if it moved.
    pub fn ack(&mut self, member: MemberId, pubend: PubendId, tick: Tick) -> Result<Option<Tick>, AckRefused> {
        let holder = self.members.get_mut(&member).ok_or(AckRefused::UnknownMember)?;
        holder.leases.remove(&(pubend, tick)).ok_or(AckRefused::NotLeased)?;
        let open = self.open.entry(pubend).or_default();
        open.remove(&tick);
        let prefix = match open.first() {
            Some(oldest) => oldest.prev(),
            None => self.last.get(&pubend).copied().unwrap_or_default(),
        };
        // Only an ack that closed the oldest open tick moves the prefix; the first prefix of a
        // pubend covers a tick a member acknowledged, never only ticks before the group's first.
        if tick > prefix || self.acked.get(&pubend).is_some_and(|acked| *acked >= prefix) {
            return Ok(None);
        }
        self.acked.insert(pubend, prefix);
        Ok(Some(prefix))
    }

    /// Whether the core should keep delivering to the group's subend: false while the
    /// messages no member has room for reach [`READY_BOUND`] (or no member is left), so a
    /// backlog waits in the pubend logs rather than in memory here.
    pub fn wants_more(&self) -> bool {
        !self.members.is_empty() && self.ready.len() < READY_BOUND
    }

    /// Members in the group.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Messages waiting for a member, and messages leased.
    pub fn depth(&self) -> (usize, usize) {
        (self.ready.len(), self.members.values().map(|m| m.leases.len()).sum())
    }
}

#[cfg(test)]
mod tests;
