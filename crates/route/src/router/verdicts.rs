//! Filter verdicts per downstream of a pubend's stream, asked without an arriving copy:
//! guaranteed delivery's filter edges (gd-protocol §5) judge stored ticks when they answer a
//! nack or send silence, long after the copy arrived, so they ask "would this message be F
//! for that child cell (or that mate's local subscribers) now?" rather than "where does this
//! copy go?". The answers come from the same summaries, vouching and sideways helpers as
//! [`Router::route_with_verdicts`], so a child whose summary is not vouched for the current
//! tree (a relay that just restarted, a tree that just moved) is `Unsure`, never F.

use super::forward::child_verdict;
use super::pubend::PubendRef;
use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::message::Verdict;
use crate::names::{BrokerName, CellName};
use crate::rendezvous::choose;

impl<F: Filter> Router<F> {
    /// The filter edge towards child cell `cell` of our cell in `pubend`'s current tree: F only
    /// if the child's vouched summary (ours, or, without a link of ours into the child, that of
    /// the mate a sideways copy would go through) rules the message out. `Unsure` when `cell`
    /// is not such a child in our view (the caller's route is older or newer than ours).
    pub fn child_cell_verdict(&self, pubend: &PubendRef, cell: &CellName, message: &F::Message) -> Verdict {
        let Some(root) = self.table.graph.cell_of(&pubend.home) else { return Verdict::Unsure };
        let Some(tree) = self.routes.trees.get(root).map(|generations| &generations.current) else {
            return Verdict::Unsure;
        };
        let Some(child) = tree.children.iter().find(|child| child.cell == *cell) else { return Verdict::Unsure };
        if child.known {
            return child_verdict(true, child.synced, || child.index.any_match(message));
        }
        let Some(target) = choose(pubend.id, &child.targets).map(|index| &child.targets[index].broker) else {
            return Verdict::Unsure;
        };
        match self.routes.mates.iter().find(|mate| mate.links.contains(target)) {
            Some(helper) => child_verdict(true, helper.down_synced.contains(root), || {
                helper.down.get(root).is_some_and(|down| down.any_match(message))
            }),
            None => Verdict::Unsure,
        }
    }

    /// The filter edge towards linked cell mate `mate`'s local subscribers: F only if the
    /// mate vouched for its local summary and that rules the message out; `Unsure` for a
    /// broker that is not a linked mate.
    pub fn mate_verdict(&self, mate: &BrokerName, message: &F::Message) -> Verdict {
        match self.routes.mates.iter().find(|held| held.name == *mate) {
            Some(held) => child_verdict(true, held.local_synced, || held.local.any_match(message)),
            None => Verdict::Unsure,
        }
    }
}
