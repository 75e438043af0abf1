//! Queue groups on the data path. A group wants each matching message once network-wide, so
//! its summary entries are not interest in every copy (`FilterIndex::any_match` ignores them);
//! instead each group the message may serve is given to exactly one next hop, and the copy to
//! that hop names it in its header (`DataHeader::groups`). The publisher's broker decides for
//! every group; a broker downstream only narrows the choice inside the branch it was given, so
//! two brokers with members never both take the same message.
//!
//! Order of preference at a broker: its own members (the shell asked its table, `local`), then
//! a cell mate's, then the first child cell whose summary has the group (the tree's order, so
//! the choice is the same for every message of a publisher while summaries stand still).

use super::routes::TreeRoutes;
use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::message::{Arrival, DataHeader, DataSend, Forwarding, Hop, LocalDelivery, Verdict};
use crate::names::{BrokerName, CellName, PubendId};
use crate::rendezvous::choose;

/// Where a group's copy goes from here.
#[derive(Clone, PartialEq, Eq)]
enum Destination {
    /// To a cell mate, which delivers to its own members.
    Mate(BrokerName),
    /// Down into a child cell through our own link to its entry broker.
    Child(BrokerName),
    /// Into a child cell through a cell mate with a link to it (sideways).
    Sideways(BrokerName, CellName),
}

impl<F: Filter> Router<F> {
    /// As [`Router::route`], and gives each queue group the message may serve to one next hop
    /// (see the module doc). The groups it may serve: any, for a local publisher's message;
    /// those its header names, for a copy received. `local` names the groups this broker has a
    /// member for that can take the message now: those are served here when the message is
    /// delivered locally, and go nowhere else.
    pub fn route_groups(&self, arrival: Arrival<'_>, message: &F::Message, local: &[String], out: &mut Forwarding) {
        self.route(arrival, message, out);
        if out.dropped.is_some() {
            return;
        }
        let (wanted, pubend, root, tree_id, hop) = match arrival {
            Arrival::Published { pubend } => (None, pubend, &self.table.cell, None, &Hop::Down),
            Arrival::Received { header, .. } if header.groups.is_empty() => return,
            Arrival::Received { header, .. } => {
                (Some(header.groups.as_slice()), header.pubend, &header.root, Some(header.tree), &header.hop)
            }
        };
        let Some(generations) = self.routes.trees.get(root) else { return };
        let Some(tree) = (match tree_id {
            None => Some(&generations.current),
            Some(id) => generations.get(id),
        }) else {
            return;
        };
        let mut candidates = Vec::new();
        self.group_candidates(pubend, tree, hop, message, &mut candidates);
        let mut chosen: Vec<(Destination, Vec<String>)> = Vec::new();
        let mut taken: Vec<&str> = Vec::new();
        for (destination, groups) in &candidates {
            for group in groups {
                let here = out.deliver_locally && local.contains(group);
                let allowed = wanted.is_none_or(|wanted| wanted.contains(group));
                if here || !allowed || taken.contains(&group.as_str()) {
                    continue;
                }
                taken.push(group);
                match chosen.iter_mut().find(|(held, _)| held == destination) {
                    Some((_, list)) => list.push(group.clone()),
                    None => chosen.push((destination.clone(), vec![group.clone()])),
                }
            }
        }
        let header =
            |hop: Hop, groups: Vec<String>| DataHeader { pubend, root: root.clone(), tree: tree.id, hop, groups };
        for (destination, groups) in chosen {
            attach(out, destination, groups, header);
        }
    }

    /// Each next hop a group's copy could take from here, in order of preference, with the
    /// groups its summary holds that match the message.
    fn group_candidates(
        &self,
        pubend: PubendId,
        tree: &TreeRoutes<F>,
        hop: &Hop,
        message: &F::Message,
        out: &mut Vec<(Destination, Vec<String>)>,
    ) {
        let mut groups = Vec::new();
        let across = match hop {
            Hop::Down => None,
            Hop::Within { across, .. } => Some(across),
        };
        if across.is_none() {
            for mate in &self.routes.mates {
                mate.local.matching_groups(message, &mut groups);
                if !groups.is_empty() {
                    out.push((Destination::Mate(mate.name.clone()), std::mem::take(&mut groups)));
                }
            }
        }
        for child in &tree.children {
            if !child.known || across.is_some_and(|across| !across.contains(&child.cell)) {
                continue;
            }
            child.index.matching_groups(message, &mut groups);
            if groups.is_empty() {
                continue;
            }
            let Some(index) = choose(pubend, &child.targets) else {
                groups.clear();
                continue;
            };
            let target = &child.targets[index].broker;
            let destination = if child.direct[index] {
                Destination::Child(target.clone())
            } else {
                // Sideways hops are never repeated: only the entry broker sends one.
                let helper = self.routes.mates.iter().find(|mate| mate.links.contains(target));
                match helper {
                    Some(mate) if across.is_none() => Destination::Sideways(mate.name.clone(), child.cell.clone()),
                    _ => {
                        groups.clear();
                        continue;
                    }
                }
            };
            out.push((destination, std::mem::take(&mut groups)));
        }
    }
}

/// Names `groups` on the copy to `destination`, adding the copy (or widening its hop) when the
/// plain route sent none that way.
fn attach(
    out: &mut Forwarding,
    destination: Destination,
    groups: Vec<String>,
    header: impl Fn(Hop, Vec<String>) -> DataHeader,
) {
    let to = match &destination {
        Destination::Mate(to) | Destination::Child(to) | Destination::Sideways(to, _) => to.clone(),
    };
    if let Some(send) = out.sends.iter_mut().find(|send| send.to == to) {
        match (&destination, &mut send.header.hop) {
            (Destination::Mate(_), Hop::Within { deliver, .. }) => *deliver = LocalDelivery::Deliver,
            (Destination::Sideways(_, cell), Hop::Within { across, .. }) if !across.contains(cell) => {
                across.push(cell.clone());
            }
            _ => {}
        }
        send.header.groups.extend(groups);
        return;
    }
    let hop = match destination {
        Destination::Mate(_) => Hop::Within { deliver: LocalDelivery::Deliver, across: Vec::new() },
        Destination::Child(_) => Hop::Down,
        Destination::Sideways(_, cell) => Hop::Within { deliver: LocalDelivery::Skip, across: vec![cell] },
    };
    out.sends.push(DataSend { to, header: header(hop, groups), verdict: Verdict::Deliver });
}
