//! Queue groups at one broker: which group each member subscription belongs to, and the choice
//! of one member per group for each message this broker is to give to that group.
//!
//! Where a message goes network-wide is routing's business (`tidings_route`'s `route_groups`):
//! it decides which broker serves each group, and a broker serves a group only when the
//! message was published here or its copy names the group. Here, the choice is round robin
//! among the members whose subscription matches, skipping a member whose queue is past half
//! full, slow or closing: a slow worker loses its turn rather than holding the group up.

use std::sync::Arc;

use tidings_wire::Message;

pub use crate::membership::{QueueGroup, QueueGroups};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Push, Target};

/// Which groups a message may be given to at this broker.
#[derive(Clone, Copy, Debug)]
pub enum GroupsHere<'a> {
    /// Any: it was published here, so this broker decides first.
    All,
    /// Only these: the groups its copy names (routing assigned them to this broker).
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
}

/// Gives `message` to one member of each allowed group among `members` (the matched member
/// subscriptions, drained).
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
        let mut served = false;
        for turn in 0..chunk.len() {
            let member = &chunk[(start + turn) % chunk.len()];
            if !member.outbox.has_room_for_group() {
                metrics.group_skips.inc();
                continue;
            }
            match member.outbox.push(member, message, out.wake) {
                Push::Queued => {}
                Push::Congested => {
                    if !out.congested.iter().any(|o| Arc::ptr_eq(o, &member.outbox)) {
                        out.congested.push(Arc::clone(&member.outbox));
                    }
                }
                Push::Dropped | Push::Disconnected | Push::Closed | Push::Withheld => {
                    metrics.group_skips.inc();
                    continue;
                }
            }
            served = true;
            break;
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
