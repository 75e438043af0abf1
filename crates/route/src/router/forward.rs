//! The data path: per message, which neighbours get a copy. Everything that does not depend on
//! the message is precomputed in `DataRoutes` (see `routes`) whenever routes or summaries
//! change, so a message costs one tree lookup, one summary test per child cell (through the
//! filter type's [`FilterIndex`], so a test costs the filters that could match) and one hash
//! per entry candidate.

use super::routes::TreeRoutes;
use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::message::{Arrival, DataHeader, DataSend, DropReason, Forwarding, Hop, LocalDelivery};
use crate::names::{BrokerName, CellName, PubendId, TreeId};
use crate::rendezvous::choose;

impl<F: Filter> Router<F> {
    /// Decides where one data message goes from this broker; `out` is cleared first.
    ///
    /// A message enters each cell of its tree once, at the broker the parent cell's hashing
    /// chose. That broker delivers locally, hands a copy to each linked cell mate with matching
    /// local interest, and sends one copy into each child cell whose summary matches, directly
    /// or, when it has no link to the chosen entry broker, sideways through a mate that has one.
    pub fn route(&self, arrival: Arrival<'_>, message: &F::Message, out: &mut Forwarding) {
        out.clear();
        match arrival {
            Arrival::Published { pubend } => {
                let root = &self.table.cell;
                match self.routes.trees.get(root) {
                    Some(generations) => self.enter(pubend, root, &generations.current, message, out),
                    None => out.dropped = Some(DropReason::UnknownRoot),
                }
            }
            Arrival::Received { from, header } => self.route_received(from, header, message, out),
        }
    }

    fn route_received(&self, from: &BrokerName, header: &DataHeader, message: &F::Message, out: &mut Forwarding) {
        let Some(generations) = self.routes.trees.get(&header.root) else {
            out.dropped = Some(DropReason::UnknownRoot);
            return;
        };
        let Some(tree) = generations.get(header.tree) else {
            out.dropped = Some(DropReason::UnknownTreeId);
            return;
        };
        match &header.hop {
            Hop::Down => {
                if tree.parent.is_none() || self.table.cell_of(from) != tree.parent.as_ref() {
                    out.dropped = Some(DropReason::NotFromParent);
                    return;
                }
                self.enter(header.pubend, &header.root, tree, message, out);
            }
            Hop::Within { deliver, across } => {
                if !self.routes.mates.iter().any(|mate| mate.name == *from) {
                    out.dropped = Some(DropReason::NotFromMate);
                    return;
                }
                out.deliver_locally = *deliver == LocalDelivery::Deliver;
                for cell in across {
                    let Some(child) = tree.children.iter().find(|child| child.cell == *cell) else { continue };
                    if !child.known || (child.synced && !child.index.any_match(message)) {
                        continue;
                    }
                    // Sideways hops are never repeated: without our own link, the copy stops.
                    let Some(index) = choose(header.pubend, &child.targets) else { continue };
                    if child.direct[index] {
                        let target = &child.targets[index].broker;
                        out.sends.push(self.send(target, header.pubend, &header.root, tree.id, Hop::Down));
                    }
                }
            }
        }
    }

    /// Our cell's work for a message that entered it here.
    fn enter(
        &self,
        pubend: PubendId,
        root: &CellName,
        tree: &TreeRoutes<F>,
        message: &F::Message,
        out: &mut Forwarding,
    ) {
        out.deliver_locally = true;
        let mut sideways: Vec<(usize, CellName)> = Vec::new();
        for child in &tree.children {
            if child.known && child.synced && !child.index.any_match(message) {
                continue;
            }
            let Some(index) = choose(pubend, &child.targets) else { continue };
            let target = &child.targets[index].broker;
            if child.direct[index] {
                out.sends.push(self.send(target, pubend, root, tree.id, Hop::Down));
                continue;
            }
            let helper = self.routes.mates.iter().position(|mate| {
                mate.links.contains(target)
                    && (child.known
                        || !mate.down_synced.contains(root)
                        || mate.down.get(root).is_some_and(|down| down.any_match(message)))
            });
            if let Some(helper) = helper {
                sideways.push((helper, child.cell.clone()));
            }
        }
        for (index, mate) in self.routes.mates.iter().enumerate() {
            let deliver = if !mate.local_synced || mate.local.any_match(message) {
                LocalDelivery::Deliver
            } else {
                LocalDelivery::Skip
            };
            let across: Vec<CellName> =
                sideways.iter().filter(|(helper, _)| *helper == index).map(|(_, cell)| cell.clone()).collect();
            if deliver == LocalDelivery::Deliver || !across.is_empty() {
                out.sends.push(self.send(&mate.name, pubend, root, tree.id, Hop::Within { deliver, across }));
            }
        }
    }

    fn send(&self, to: &BrokerName, pubend: PubendId, root: &CellName, tree: TreeId, hop: Hop) -> DataSend {
        DataSend { to: to.clone(), header: DataHeader { pubend, root: root.clone(), tree, hop } }
    }
}
