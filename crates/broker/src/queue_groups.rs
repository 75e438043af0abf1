//! Queue groups at one broker: which group each member subscription belongs to, and the choice
//! of one member per group for each message this broker is to give to that group.
//!
//! Where a message goes network-wide is routing's business (`tidings_route`'s `route_groups`):
//! it decides which broker serves each group, and a broker serves a group only when the
//! message was published here or its copy names the group. Here, the choice is round robin
//! among the members whose subscription matches, skipping a member whose queue is past half
//! full, slow or closing: a slow worker loses its turn rather than holding the group up.
//!
//! Skipping needs somewhere else to go. At the publisher's broker a group no member here can
//! take now is left to routing (another broker's members); a group routing could send nowhere,
//! and a group a received copy assigns to this broker, goes to a busy member here as a last
//! resort (its queue's own bounds and back-pressure apply, as for any subscriber). Before this,
//! such a copy was dropped without a trace: with one member stopped, the other broker's only
//! member, merely busy, lost over half the group's messages.

use std::sync::Arc;

use tidings_wire::Message;

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
        let start = group.take_turn();
        let mut served = give(chunk, start, true, message, metrics, &mut *out.wake, &mut *out.congested);
        if !served && matches!(allowed, GroupsHere::All) {
            out.unserved.push(group.name.clone());
            continue;
        }
        if !served {
            served = give(chunk, start, false, message, metrics, &mut *out.wake, &mut *out.congested);
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

/// Pushes `message` to the first member of `chunk` in turn from `start` that takes it: only
/// one with room for a group when `with_room`, else any whose connection is open (a full
/// queue's own overflow policy then applies). Whether one took it.
fn give(
    chunk: &[Arc<Target>],
    start: usize,
    with_room: bool,
    message: &Message,
    metrics: &Metrics,
    wake: &mut Vec<Arc<Outbox>>,
    congested: &mut Vec<Arc<Outbox>>,
) -> bool {
    for turn in 0..chunk.len() {
        let member = &chunk[(start + turn) % chunk.len()];
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
        let member = Arc::new(Target::member(SubId(1), outbox, groups.join("g")));
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
