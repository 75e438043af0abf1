//! Queue groups at one broker: which group each member subscription belongs to, and the choice
//! of one member per group for each message this broker is to give to that group.
//!
//! Where a message goes network-wide is routing's business (`tidings_route`'s `route_groups`):
//! it decides which broker serves each group, and a broker serves a group only when the
//! message was published here or its copy names the group. Here, the choice is round robin
//! among the members whose subscription matches, skipping a member whose queue is past half
//! full, slow or closing: a slow worker loses its turn rather than holding the group up.
//!
//! A keyed group (`--queue-key PROPERTY`) chooses by the message's value of that property
//! instead, with rendezvous (highest random weight) hashing: each matching member scores
//! `hash(value, member)` and the highest score takes the message. The same value goes to the
//! same member while the members do not change; a member leaving moves only its own values
//! (each to its next-highest member), a member joining takes only the values it now scores
//! highest for (about 1/n of them), unlike a hash modulo the member count, which moves almost
//! every value whenever the count changes. A member that cannot take a message now (past half
//! full, slow, closing) is skipped as in round robin, for the next-highest member: a slow
//! worker stalls none of its values (the failure of key-shared consumers that wait for it),
//! at the price of those messages leaving its order while it is behind. A message without the
//! property takes turns.
//!
//! Skipping needs somewhere else to go. At the publisher's broker a group no member here can
//! take now is left to routing (another broker's members); a group routing could send nowhere,
//! and a group a received copy assigns to this broker, goes to a busy member here as a last
//! resort (its queue's own bounds and back-pressure apply, as for any subscriber). Before this,
//! such a copy was dropped without a trace: with one member stopped, the other broker's only
//! member, merely busy, lost over half the group's messages.

use std::sync::Arc;

use tidings_wire::{Message, ValueRef};

pub use crate::membership::{QueueGroup, QueueGroups};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Push, Target};

/// Which groups a message may be given to at this broker.
#[derive(Clone, Copy, Debug)]
pub enum GroupsHere<'a> {
    /// Any: it was published here, so this broker decides first. A group no member here can
    /// take now is left for routing (`Serve::unserved`), not pushed on a busy member.
    All,
    /// Only these, and routing has already decided they are served here: a group with no
    /// member ready goes to a busy one rather than nowhere.
    Only(&'a [String]),
}

impl GroupsHere<'_> {
    fn allows(&self, group: &str) -> bool {
        match self {
            GroupsHere::All => true,
            GroupsHere::Only(groups) => groups.iter().any(|g| g == group),
        }
    }
}

/// What serving groups needs from the caller's scratch.
pub(crate) struct Serve<'s> {
    /// Outboxes that went from empty to non-empty (their writers are woken after the batch).
    pub wake: &'s mut Vec<Arc<Outbox>>,
    /// Outboxes that turned congested.
    pub congested: &'s mut Vec<Arc<Outbox>>,
    /// The groups served, appended to.
    pub served: &'s mut Vec<String>,
    /// The groups with members here that could not take the message now, under
    /// [`GroupsHere::All`]: routing may send them elsewhere, else they come back here.
    pub unserved: &'s mut Vec<String>,
}

/// Gives `message` to one member of each allowed group among `members` (the matched member
/// subscriptions, drained): the next in turn with room, else (under [`GroupsHere::Only`]) the
/// next in turn whose connection is open.
pub(crate) fn serve(
    members: &mut Vec<Arc<Target>>,
    allowed: GroupsHere<'_>,
    message: &Message,
    metrics: &Metrics,
    out: Serve<'_>,
) {
    sort_by_group(members);
    for chunk in members.chunk_by(same_group) {
        let Some(group) = chunk[0].group.as_deref() else { continue };
        if !allowed.allows(&group.name) {
            continue;
        }
        let keyed = group.key.as_deref().and_then(|key| message.property(key)).map(value_hash);
        let order = match keyed {
            Some(hash) => Order::Keyed(by_score(chunk, hash)),
            None => Order::Turn(group.take_turn()),
        };
        let mut served = give(chunk, &order, true, message, metrics, &mut *out.wake, &mut *out.congested);
        if !served && matches!(allowed, GroupsHere::All) {
            out.unserved.push(group.name.clone());
            continue;
        }
        if !served {
            served = give(chunk, &order, false, message, metrics, &mut *out.wake, &mut *out.congested);
        }
        if served {
            metrics.group_deliveries.inc();
            out.served.push(group.name.clone());
        } else {
            metrics.group_unserved.inc();
        }
    }
    members.clear();
}

/// The order in which a group's members are offered a message.
enum Order {
    /// Round robin from this turn.
    Turn(usize),
    /// Members' indexes by rendezvous score, highest first.
    Keyed(Vec<usize>),
}

impl Order {
    /// The index of the member offered the message `turn`-th, among `n`.
    fn member(&self, turn: usize, n: usize) -> usize {
        match self {
            Order::Turn(start) => (start + turn) % n,
            Order::Keyed(order) => order[turn],
        }
    }
}

/// A stable hash of a property value (type included: `1` and `"1"` are different keys).
pub(crate) fn value_hash(value: ValueRef<'_>) -> u64 {
    use tidings_wire::hash::{fnv1a, mix};
    match value {
        ValueRef::Str(text) => fnv1a(text.as_bytes()),
        ValueRef::Int(i) => mix(i as u64 ^ 0x11),
        ValueRef::Float(x) => mix(x.to_bits() ^ 0x22),
        ValueRef::Bool(b) => mix(u64::from(b) ^ 0x33),
    }
}

/// Members' indexes in `chunk` by their rendezvous score for a value hashing to `hash`,
/// highest first. A member's identity is its subscription's place in memory: the same for as
/// long as it lives, which is as long as its values must stay with it.
fn by_score(chunk: &[Arc<Target>], hash: u64) -> Vec<usize> {
    let score =
        |member: &Arc<Target>| tidings_wire::hash::mix(hash ^ tidings_wire::hash::mix(Arc::as_ptr(member) as u64));
    let mut order: Vec<usize> = (0..chunk.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(score(&chunk[i])));
    order
}

/// Pushes `message` to the first member of `chunk` in `order` that takes it: only one with
/// room for a group when `with_room`, else any whose connection is open (a full queue's own
/// overflow policy then applies). Whether one took it.
fn give(
    chunk: &[Arc<Target>],
    order: &Order,
    with_room: bool,
    message: &Message,
    metrics: &Metrics,
    wake: &mut Vec<Arc<Outbox>>,
    congested: &mut Vec<Arc<Outbox>>,
) -> bool {
    for turn in 0..chunk.len() {
        let member = &chunk[order.member(turn, chunk.len())];
        if with_room && !member.outbox.has_room_for_group() {
            metrics.group_skips.inc();
            continue;
        }
        match member.outbox.push(member, message, wake) {
            Push::Queued => return true,
            Push::Congested => {
                if !congested.iter().any(|o| Arc::ptr_eq(o, &member.outbox)) {
                    congested.push(Arc::clone(&member.outbox));
                }
                return true;
            }
            Push::Dropped | Push::Disconnected | Push::Closed | Push::Withheld => {
                if with_room {
                    metrics.group_skips.inc();
                }
            }
        }
    }
    false
}

/// The allowed groups among `members` with a member that can take a message now: what this
/// broker tells routing it will serve itself.
pub(crate) fn ready(members: &mut Vec<Arc<Target>>, allowed: GroupsHere<'_>, out: &mut Vec<String>) {
    sort_by_group(members);
    for chunk in members.chunk_by(same_group) {
        let Some(group) = chunk[0].group.as_deref() else { continue };
        if allowed.allows(&group.name) && chunk.iter().any(|member| member.outbox.has_room_for_group()) {
            out.push(group.name.clone());
        }
    }
    members.clear();
}

fn group_key(target: &Arc<Target>) -> usize {
    target.group.as_ref().map_or(0, |group| Arc::as_ptr(group) as usize)
}

/// Sorts members so each group's are together, in a stable order within the group (by
/// subscription, so round robin takes turns over the same sequence every time).
fn sort_by_group(members: &mut [Arc<Target>]) {
    members.sort_by_key(|member| (group_key(member), Arc::as_ptr(member) as usize));
}

fn same_group(a: &Arc<Target>, b: &Arc<Target>) -> bool {
    group_key(a) == group_key(b)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_wire::SubId;

    use super::*;
    use crate::budget::QueueBudget;
    use crate::config::SlowConsumer;
    use crate::membership::QueueGroups;

    fn metrics() -> Metrics {
        Metrics::new(&mut prometheus_client::registry::Registry::default())
    }

    /// One member of group `g` whose queue is already past half full (4 of 6).
    fn busy_member(groups: &QueueGroups, metrics: &Metrics) -> Arc<Target> {
        let limits = SlowConsumer { max_messages: 6, ..SlowConsumer::default() };
        let outbox = Outbox::new(limits, metrics.clone(), &QueueBudget::new(0));
        let member = Arc::new(Target::member(SubId(1), outbox, groups.join("g", None).unwrap()));
        for _ in 0..4 {
            member.outbox.push(&member, &message(), &mut Vec::new());
        }
        assert!(!member.outbox.has_room_for_group());
        member
    }

    fn message() -> Message {
        Message::new("t", &[], Bytes::from_static(b"p"), 0).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Serves one message to `member` under `allowed`: (served, unserved).
    fn serve_one(member: &Arc<Target>, allowed: GroupsHere<'_>, metrics: &Metrics) -> (Vec<String>, Vec<String>) {
        let (mut wake, mut congested, mut served, mut unserved) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let out = Serve { wake: &mut wake, congested: &mut congested, served: &mut served, unserved: &mut unserved };
        serve(&mut vec![Arc::clone(member)], allowed, &message(), metrics, out);
        (served, unserved)
    }

    fn keyed_message(value: i64) -> Message {
        Message::new("t", &[tidings_wire::Property::new("k", value)], Bytes::from_static(b"p"), 0)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Which of `members` each value of `k` in 0..400 goes to.
    fn owners(members: &[Arc<Target>], metrics: &Metrics) -> Vec<usize> {
        (0..400)
            .map(|value| {
                let before: Vec<usize> = members.iter().map(|m| m.outbox.depth().0).collect();
                let (mut wake, mut congested, mut served, mut unserved) = (vec![], vec![], vec![], vec![]);
                let out =
                    Serve { wake: &mut wake, congested: &mut congested, served: &mut served, unserved: &mut unserved };
                serve(&mut members.to_vec(), GroupsHere::All, &keyed_message(value), metrics, out);
                let got: Vec<usize> = (0..members.len()).filter(|&i| members[i].outbox.depth().0 > before[i]).collect();
                assert_eq!(got.len(), 1, "one member per message");
                got[0]
            })
            .collect()
    }

    #[test]
    fn a_keyed_group_keeps_each_value_on_one_member_and_a_leaving_member_moves_only_its_own() {
        let (groups, metrics) = (QueueGroups::default(), metrics());
        let limits = SlowConsumer { max_messages: 100_000, ..SlowConsumer::default() };
        let members: Vec<Arc<Target>> = (0..3)
            .map(|i| {
                let outbox = Outbox::new(limits.clone(), metrics.clone(), &QueueBudget::new(0));
                Arc::new(Target::member(SubId(i), outbox, groups.join("g", Some("k")).unwrap()))
            })
            .collect();
        assert!(groups.join("g", None).is_err(), "the members here share one key");
        let first = owners(&members, &metrics);
        assert_eq!(owners(&members, &metrics), first, "the same value, the same member");
        for i in 0..3 {
            let share = first.iter().filter(|&&o| o == i).count();
            assert!((80..=190).contains(&share), "member {i} got {share} of 400 values");
        }
        // Member 1 leaves: only its values move.
        let left = [Arc::clone(&members[0]), Arc::clone(&members[2])];
        let after = owners(&left, &metrics);
        for (value, (&before, &now)) in first.iter().zip(&after).enumerate() {
            let now = [0, 2][now];
            if before != 1 {
                assert_eq!(now, before, "value {value} moved though its member stayed");
            }
        }
    }

    #[test]
    fn a_busy_member_is_left_to_routing_where_the_message_was_published() {
        let (groups, metrics) = (QueueGroups::default(), metrics());
        let member = busy_member(&groups, &metrics);
        let (served, unserved) = serve_one(&member, GroupsHere::All, &metrics);
        assert_eq!((served, unserved), (vec![], vec!["g".to_string()]));
        assert_eq!(member.outbox.depth().0, 4, "nothing pushed on the busy member");
        assert_eq!(metrics.group_unserved.get(), 0, "not lost yet: routing decides next");
    }

    #[test]
    fn a_group_assigned_here_goes_to_a_busy_member_rather_than_nowhere() {
        let (groups, metrics) = (QueueGroups::default(), metrics());
        let member = busy_member(&groups, &metrics);
        let only = ["g".to_string()];
        let (served, unserved) = serve_one(&member, GroupsHere::Only(&only), &metrics);
        assert_eq!((served, unserved), (vec!["g".to_string()], vec![]));
        assert_eq!(member.outbox.depth().0, 5, "queued on the busy member");
        assert_eq!((metrics.group_skips.get(), metrics.group_deliveries.get()), (1, 1));
        // Full: its own policy drops, and the group's message is counted as unserved.
        serve_one(&member, GroupsHere::Only(&only), &metrics);
        let (served, _) = serve_one(&member, GroupsHere::Only(&only), &metrics);
        assert!(served.is_empty());
        assert_eq!(metrics.group_unserved.get(), 1);
    }
}
