//! The data path: per message, which neighbours get a copy. Everything that does not depend on
//! the message is precomputed in [`DataRoutes`] whenever routes or summaries change, so a
//! message costs one tree lookup, one summary test per child cell and one hash per entry
//! candidate.

use std::collections::{BTreeMap, BTreeSet};

use super::Router;
use crate::filter::{any_matches, minimize, Filter};
use crate::message::{Arrival, DataHeader, DataSend, DropReason, Forwarding, Hop, LocalDelivery};
use crate::names::{BrokerName, CellName, PubendId, TreeId};
use crate::rendezvous::{choose, Target};
use crate::summary::{Scope, Scoped};
use crate::tree::{Place, RouteTable};

/// Precomputed routes for every tree this broker is in.
#[derive(Clone, Debug)]
pub(crate) struct DataRoutes<F> {
    pub(crate) trees: BTreeMap<CellName, Generations<F>>,
    /// Linked cell mates, sorted by name.
    pub(crate) mates: Vec<MateRoute<F>>,
}

/// The current tree of a root and the one before it. Messages routed upstream under the
/// previous tree are still carried under it, with today's links, so a link failure costs a
/// sideways hop instead of the messages in flight (Gryphon's transient sideways routing).
#[derive(Clone, Debug)]
pub(crate) struct Generations<F> {
    pub(crate) current: TreeRoutes<F>,
    pub(crate) previous: Option<TreeRoutes<F>>,
}

impl<F> Generations<F> {
    fn get(&self, id: TreeId) -> Option<&TreeRoutes<F>> {
        if self.current.id == id {
            return Some(&self.current);
        }
        self.previous.as_ref().filter(|previous| previous.id == id)
    }
}

/// Our cell's place in one tree, with summaries filled in.
#[derive(Clone, Debug)]
pub(crate) struct TreeRoutes<F> {
    pub(crate) id: TreeId,
    pub(crate) parent: Option<CellName>,
    pub(crate) children: Vec<ChildRoute<F>>,
}

/// One child cell: where a message may enter it and what lies behind it.
#[derive(Clone, Debug)]
pub(crate) struct ChildRoute<F> {
    pub(crate) cell: CellName,
    pub(crate) targets: Vec<Target>,
    /// Per target: whether we have a two-way link to it now (refreshed for both generations on
    /// every rebuild, so an old tree is followed over today's links).
    pub(crate) direct: Vec<bool>,
    /// Whether we have any link into the child cell, hence a summary of our own for it.
    pub(crate) known: bool,
    /// Interest behind the child cell, from our own links into it, minimized.
    pub(crate) summary: Vec<F>,
}

/// A linked cell mate and what it told us.
#[derive(Clone, Debug)]
pub(crate) struct MateRoute<F> {
    pub(crate) name: BrokerName,
    /// Its local subscribers' interest.
    pub(crate) local: Vec<F>,
    /// Per root: interest it reaches through its own links into child cells.
    pub(crate) down: BTreeMap<CellName, Vec<F>>,
    /// Brokers it has two-way links with (for choosing a sideways helper).
    pub(crate) links: BTreeSet<BrokerName>,
}

impl<F: Filter> DataRoutes<F> {
    pub(crate) fn empty(table: &RouteTable) -> Self {
        let mut routes = Self { trees: BTreeMap::new(), mates: Vec::new() };
        routes.rebuild(table, &BTreeMap::new(), table.trees.keys());
        routes
    }

    /// Recomputes the routes of the listed roots (and the mates) from the table and summaries.
    /// A root whose tree changed keeps its former tree as the previous generation; a root no
    /// longer in the table is forgotten.
    pub(crate) fn rebuild<'r>(
        &mut self,
        table: &RouteTable,
        received: &BTreeMap<BrokerName, Scoped<F>>,
        roots: impl IntoIterator<Item = &'r CellName>,
    ) {
        self.mates = table.mates.iter().map(|mate| mate_route(table, received, mate)).collect();
        for root in roots {
            let Some(place) = table.trees.get(root) else {
                self.trees.remove(root);
                continue;
            };
            let current = tree_routes(table, received, root, place);
            match self.trees.get_mut(root) {
                Some(generations) if generations.current.id != current.id => {
                    let mut previous = std::mem::replace(&mut generations.current, current);
                    for child in &mut previous.children {
                        child.direct = direct_links(table, &child.targets);
                    }
                    generations.previous = Some(previous);
                }
                Some(generations) => {
                    generations.current = current;
                    for child in generations.previous.iter_mut().flat_map(|tree| tree.children.iter_mut()) {
                        child.direct = direct_links(table, &child.targets);
                    }
                }
                None => {
                    self.trees.insert(root.clone(), Generations { current, previous: None });
                }
            }
        }
    }
}

fn tree_routes<F: Filter>(
    table: &RouteTable,
    received: &BTreeMap<BrokerName, Scoped<F>>,
    root: &CellName,
    place: &Place,
) -> TreeRoutes<F> {
    let scope = Scope::Tree(root.clone());
    let children = place
        .children
        .iter()
        .map(|bundle| {
            let graph = &table.graph;
            let members = graph.cell_index(&bundle.cell).map_or(&[][..], |cell| &graph.members[cell]);
            let linked: Vec<&BrokerName> = members
                .iter()
                .map(|broker| &graph.brokers[*broker])
                .filter(|broker| graph.linked_by_name(&table.me, broker))
                .collect();
            let summary = minimize(linked.iter().filter_map(|broker| received.get(*broker)?.get(&scope)).flatten());
            ChildRoute {
                cell: bundle.cell.clone(),
                direct: direct_links(table, &bundle.targets),
                targets: bundle.targets.clone(),
                known: !linked.is_empty(),
                summary,
            }
        })
        .collect();
    TreeRoutes { id: place.id, parent: place.parent.clone(), children }
}

fn direct_links(table: &RouteTable, targets: &[Target]) -> Vec<bool> {
    targets.iter().map(|target| table.graph.linked_by_name(&table.me, &target.broker)).collect()
}

fn mate_route<F: Filter>(
    table: &RouteTable,
    received: &BTreeMap<BrokerName, Scoped<F>>,
    mate: &BrokerName,
) -> MateRoute<F> {
    let held = received.get(mate);
    let local = held.and_then(|h| h.get(&Scope::Local)).map(|set| set.iter().cloned().collect()).unwrap_or_default();
    let down = held
        .into_iter()
        .flatten()
        .filter_map(|(scope, set)| match scope {
            Scope::Tree(root) => Some((root.clone(), set.iter().cloned().collect())),
            Scope::Local => None,
        })
        .collect();
    let graph = &table.graph;
    let links = graph
        .broker_index(mate)
        .map(|index| graph.links[index].iter().map(|peer| graph.brokers[*peer].clone()).collect())
        .unwrap_or_default();
    MateRoute { name: mate.clone(), local, down, links }
}

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
                    if !child.known || !any_matches(&child.summary, message) {
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
            if child.known && !any_matches(&child.summary, message) {
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
                    && (child.known || mate.down.get(root).is_some_and(|down| any_matches(down, message)))
            });
            if let Some(helper) = helper {
                sideways.push((helper, child.cell.clone()));
            }
        }
        for (index, mate) in self.routes.mates.iter().enumerate() {
            let deliver = if any_matches(&mate.local, message) { LocalDelivery::Deliver } else { LocalDelivery::Skip };
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
