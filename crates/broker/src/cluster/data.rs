//! The data path: one routing decision per message, then a frame prefix per copy, with the
//! message section shared by every copy.

use std::sync::Arc;

use bytes::BytesMut;
use tidings_route::{Arrival, BrokerName, DataHeader, DropReason, Forwarding};
use tidings_wire::Message;

use super::convert;
use super::queue::{DataPush, LinkQueue};
use super::{Cluster, Probe};
use crate::metrics::WhyLabel;

/// Per-thread scratch for the data path, reused across messages.
#[derive(Default)]
pub struct RouteScratch {
    forwarding: Forwarding,
    prefix: BytesMut,
    /// Link queues that reported congestion since the sender last held back.
    pub congested: Vec<Arc<LinkQueue>>,
}

impl RouteScratch {
    /// Whether the last message routed was sent to any neighbour, i.e. some neighbour's
    /// routing summary wanted it (what "no responders" is decided from).
    pub fn sent_any(&self) -> bool {
        !self.forwarding.sends.is_empty()
    }

    /// Whether the last message routed went to another broker for queue group `group`.
    pub fn routed_group(&self, group: &str) -> bool {
        self.forwarding.sends.iter().any(|send| send.header.groups.iter().any(|g| g == group))
    }

    /// Waits, until `deadline` at the latest, for every congested link queue to drain below
    /// half full.
    pub async fn hold_back(&mut self, deadline: tokio::time::Instant) {
        for queue in self.congested.drain(..) {
            queue.wait_drained(deadline).await;
        }
    }
}

impl Cluster {
    /// Routes one message: from a local publisher (`Arrival::Published`) or from a peer. Queues
    /// a copy on each link the router chose and returns whether this broker delivers it to its
    /// own subscribers. `local_groups` are the queue groups a member here serves (or, for a
    /// received copy, can serve): no copy carries those on; each other group the message may
    /// serve goes with one copy (see `tidings_route::Router::route_groups`).
    pub fn forward(
        &self,
        arrival: Arrival<'_>,
        message: &Message,
        local_groups: &[String],
        scratch: &mut RouteScratch,
    ) -> bool {
        let probe = Probe::new(message);
        let core = self.core.read();
        core.router.route_groups(arrival, &probe, local_groups, &mut scratch.forwarding);
        if let Some(reason) = scratch.forwarding.dropped {
            self.metrics.route_drops.get_or_create(&WhyLabel { why: drop_label(reason) }).inc();
            return false;
        }
        if scratch.forwarding.unreachable > 0 {
            let unreachable = self.metrics.route_drops.get_or_create(&WhyLabel { why: "unreachable" });
            unreachable.inc_by(u64::from(scratch.forwarding.unreachable));
        }
        let section = message.as_bytes();
        for send in &scratch.forwarding.sends {
            let Some(entry) = core.links.get(&send.to) else {
                // The router's view holds a link the cluster has already closed.
                self.metrics.route_drops.get_or_create(&WhyLabel { why: "link_closed" }).inc();
                continue;
            };
            if scratch.prefix.capacity() < 1024 {
                scratch.prefix.reserve(64 * 1024);
            }
            if convert::routed_prefix(&send.header, section.len(), &mut scratch.prefix).is_err() {
                // A header over the frame's field limits (a cell name over 64 KiB): never sent.
                self.metrics.route_drops.get_or_create(&WhyLabel { why: "unencodable" }).inc();
                continue;
            }
            let prefix = scratch.prefix.split().freeze();
            match entry.queue.push_data(prefix, section.clone()) {
                DataPush::Congested if !scratch.congested.iter().any(|queue| Arc::ptr_eq(queue, &entry.queue)) => {
                    scratch.congested.push(Arc::clone(&entry.queue));
                }
                DataPush::Closed => {
                    self.metrics.route_drops.get_or_create(&WhyLabel { why: "link_closed" }).inc();
                }
                _ => {}
            }
        }
        scratch.forwarding.deliver_locally
    }

    /// Routes a message that arrived from `from` with `header`; `local_groups` as for
    /// [`Cluster::forward`].
    pub fn forward_received(
        &self,
        (from, header): (&BrokerName, &DataHeader),
        message: &Message,
        local_groups: &[String],
        scratch: &mut RouteScratch,
    ) -> bool {
        self.forward(Arrival::Received { from, header }, message, local_groups, scratch)
    }
}

fn drop_label(reason: DropReason) -> &'static str {
    match reason {
        DropReason::UnknownTreeId => "unknown_tree",
        DropReason::UnknownRoot => "unknown_root",
        DropReason::NotFromParent => "not_from_parent",
        DropReason::NotFromMate => "not_from_mate",
    }
}
