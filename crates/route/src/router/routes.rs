//! The data path's precomputed routes: per tree our cell is in, its children with their
//! summaries (minimized and indexed for the data path), and the linked cell mates with theirs.
//! Built from the route table and the summaries held on every topology change; between those,
//! summary changes update the current trees in place (see `propagate`).

use std::collections::{BTreeMap, BTreeSet};

use crate::filter::{Filter, FilterIndex};
use crate::minimized::{Delta, Minimized};
use crate::names::{BrokerName, CellName, TreeId};
use crate::rendezvous::Target;
use crate::summary::{Scope, Scoped};
use crate::tree::{ChildBundle, Place, RouteTable};

mod reshape;
pub(crate) use reshape::{Feed, Held, Reshaped};

/// Precomputed routes for every tree this broker is in.
#[derive(Clone, Debug)]
pub(crate) struct DataRoutes<F: Filter> {
    pub(crate) trees: BTreeMap<CellName, Generations<F>>,
    /// Linked cell mates, sorted by name.
    pub(crate) mates: Vec<MateRoute<F>>,
}

/// The current tree of a root and the one before it. Messages routed upstream under the
/// previous tree are still carried under it, with today's links, so a link failure costs a
/// sideways hop instead of the messages in flight (Gryphon's transient sideways routing).
#[derive(Clone, Debug)]
pub(crate) struct Generations<F: Filter> {
    pub(crate) current: TreeRoutes<F>,
    pub(crate) previous: Option<TreeRoutes<F>>,
}

impl<F: Filter> Generations<F> {
    pub(super) fn get(&self, id: TreeId) -> Option<&TreeRoutes<F>> {
        if self.current.id == id {
            return Some(&self.current);
        }
        self.previous.as_ref().filter(|previous| previous.id == id)
    }
}

/// Our cell's place in one tree, with summaries filled in.
#[derive(Clone, Debug)]
pub(crate) struct TreeRoutes<F: Filter> {
    pub(crate) id: TreeId,
    pub(crate) parent: Option<CellName>,
    pub(crate) children: Vec<ChildRoute<F>>,
}

/// One child cell: where a message may enter it and what lies behind it.
#[derive(Clone, Debug)]
pub(crate) struct ChildRoute<F: Filter> {
    pub(crate) cell: CellName,
    pub(crate) targets: Vec<Target>,
    /// Per target: whether we have a two-way link to it now (refreshed for both generations on
    /// every rebuild, so an old tree is followed over today's links).
    pub(crate) direct: Vec<bool>,
    /// Whether we have any link into the child cell, hence a summary of our own for it.
    pub(crate) known: bool,
    /// Whether every linked broker of the child cell vouched (`Synced`) for its summary in this
    /// tree; until then the summary may lag the tree and cannot rule a message out.
    pub(crate) synced: bool,
    /// Brokers of the child cell we have a two-way link to: whose summaries make ours.
    pub(crate) linked: Vec<BrokerName>,
    /// Interest behind the child cell, from our own links into it, minimized.
    pub(crate) summary: Minimized<F>,
    /// The kept filters of `summary`, indexed for the data path.
    pub(crate) index: F::Index,
}

impl<F: Filter> ChildRoute<F> {
    /// Applies one linked broker's summary change; returns the change of our summary.
    pub(crate) fn change<'f>(
        &mut self,
        removed: impl IntoIterator<Item = &'f F>,
        added: impl IntoIterator<Item = &'f F>,
    ) -> Delta<F>
    where
        F: 'f,
    {
        let mut delta = Delta::default();
        for filter in removed {
            self.summary.remove(filter, &mut delta);
        }
        for filter in added {
            self.summary.insert(filter, &mut delta);
        }
        for filter in &delta.removed {
            self.index.remove(filter);
        }
        for filter in &delta.added {
            self.index.insert(filter);
        }
        delta
    }
}

/// A linked cell mate and what it told us.
#[derive(Clone, Debug)]
pub(crate) struct MateRoute<F: Filter> {
    pub(crate) name: BrokerName,
    /// Its local subscribers' interest.
    pub(crate) local: F::Index,
    /// Per root: interest it reaches through its own links into child cells.
    pub(crate) down: BTreeMap<CellName, F::Index>,
    /// Brokers it has two-way links with (for choosing a sideways helper).
    pub(crate) links: BTreeSet<BrokerName>,
    /// Whether it vouched for its `Local` scope (any `Synced` since the link came up).
    pub(crate) local_synced: bool,
    /// Roots whose `down` it vouched for, for the tree we have now.
    pub(crate) down_synced: BTreeSet<CellName>,
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

pub(super) fn tree_routes<F: Filter>(
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
            let linked = linked_members(table, &bundle.cell);
            let summary = Minimized::from_filters(
                linked.iter().filter_map(|broker| received.get(*broker)?.get(&scope)).flatten(),
            );
            let index = index_of(&summary);
            ChildRoute::new(table, bundle, linked.into_iter().cloned().collect(), summary, index)
        })
        .collect();
    TreeRoutes { id: place.id, parent: place.parent.clone(), children }
}

impl<F: Filter> ChildRoute<F> {
    /// A child's routes in `table` with this summary of what lies behind it (not yet vouched
    /// for: `settle_sync` decides that).
    pub(super) fn new(
        table: &RouteTable,
        bundle: &ChildBundle,
        linked: Vec<BrokerName>,
        summary: Minimized<F>,
        index: F::Index,
    ) -> Self {
        Self {
            cell: bundle.cell.clone(),
            direct: direct_links(table, &bundle.targets),
            targets: bundle.targets.clone(),
            known: !linked.is_empty(),
            synced: false,
            linked,
            summary,
            index,
        }
    }
}

/// The kept filters of `summary`, indexed.
pub(super) fn index_of<F: Filter>(summary: &Minimized<F>) -> F::Index {
    let mut index = F::Index::default();
    for filter in summary.kept() {
        index.insert(filter);
    }
    index
}

/// The brokers of `cell` we have a two-way link to, by the graph.
pub(super) fn linked_members<'t>(table: &'t RouteTable, cell: &CellName) -> Vec<&'t BrokerName> {
    let graph = &table.graph;
    let members = graph.cell_index(cell).map_or(&[][..], |cell| &graph.members[cell]);
    members
        .iter()
        .map(|broker| &graph.brokers[*broker])
        .filter(|broker| graph.linked_by_name(&table.me, broker))
        .collect()
}

pub(super) fn direct_links(table: &RouteTable, targets: &[Target]) -> Vec<bool> {
    targets.iter().map(|target| table.graph.linked_by_name(&table.me, &target.broker)).collect()
}

pub(super) fn mate_route<F: Filter>(
    table: &RouteTable,
    received: &BTreeMap<BrokerName, Scoped<F>>,
    mate: &BrokerName,
) -> MateRoute<F> {
    let held = received.get(mate);
    let local = held.and_then(|h| h.get(&Scope::Local)).map(indexed).unwrap_or_default();
    let down = held
        .into_iter()
        .flatten()
        .filter_map(|(scope, set)| match scope {
            Scope::Tree(root) => Some((root.clone(), indexed(set))),
            Scope::Local => None,
        })
        .collect();
    let links = mate_links(table, mate);
    MateRoute { name: mate.clone(), local, down, links, local_synced: false, down_synced: BTreeSet::new() }
}

/// The brokers `mate` has two-way links with, by the graph.
pub(super) fn mate_links(table: &RouteTable, mate: &BrokerName) -> BTreeSet<BrokerName> {
    let graph = &table.graph;
    graph
        .broker_index(mate)
        .map(|index| graph.links[index].iter().map(|peer| graph.brokers[*peer].clone()).collect())
        .unwrap_or_default()
}

fn indexed<F: Filter>(filters: &BTreeSet<F>) -> F::Index {
    let mut index = F::Index::default();
    for filter in filters {
        index.insert(filter);
    }
    index
}
