//! The data path's routes carried across a topology change without rebuilding what did not
//! change: a child cell that stays a child keeps its summary and index and is patched with
//! the summaries of the brokers that joined or left its linked set (or whose link was
//! replaced); a mate that stays linked keeps its indexes. The work follows what the change
//! touched, so a link flap beside a 100,000-filter summary does not minimize it again.
//!
//! The result equals [`DataRoutes::rebuild`] over every root from the same table and summaries
//! (the router's tests compare the two after random link flaps).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    direct_links, index_of, linked_members, mate_links, mate_route, tree_routes, ChildRoute, DataRoutes, Generations,
    MateRoute, TreeRoutes,
};
use crate::filter::Filter;
use crate::minimized::Minimized;
use crate::names::{BrokerName, CellName};
use crate::summary::{Scope, Scoped};
use crate::tree::{ChildBundle, RouteTable};

/// The summaries held from each peer now, and, for the peers whose link went down or was
/// replaced since the last settle, what they had told us until then: a topology change must
/// take out exactly what was fed in.
pub(crate) struct Held<'a, F> {
    /// Summaries per up link, as the peer sent them.
    pub(crate) now: &'a BTreeMap<BrokerName, Scoped<F>>,
    /// Summaries of the links dropped (or replaced) since the last settle, as they were then.
    pub(crate) dropped: &'a BTreeMap<BrokerName, Scoped<F>>,
}

impl<'a, F: Filter> Held<'a, F> {
    /// What `peer` had told us for `scope` as of the last settle.
    pub(crate) fn before(&self, peer: &BrokerName, scope: &Scope) -> impl Iterator<Item = &'a F> {
        let held = self.dropped.get(peer).or_else(|| self.now.get(peer));
        held.and_then(|held| held.get(scope)).into_iter().flatten()
    }

    /// What `peer` has told us for `scope` now.
    pub(crate) fn after(&self, peer: &BrokerName, scope: &Scope) -> impl Iterator<Item = &'a F> {
        self.now.get(peer).and_then(|held| held.get(scope)).into_iter().flatten()
    }

    /// Whether what `peer` told us is the same as at the last settle (its link was neither
    /// dropped nor replaced).
    pub(crate) fn unchanged(&self, peer: &BrokerName) -> bool {
        !self.dropped.contains_key(peer)
    }
}

/// Filters that left and joined a multiset (each listed once per occurrence): what a derived
/// set must be fed.
#[derive(Debug)]
pub(crate) struct Feed<F> {
    pub(crate) removed: Vec<F>,
    pub(crate) added: Vec<F>,
}

impl<F> Default for Feed<F> {
    fn default() -> Self {
        Self { removed: Vec::new(), added: Vec::new() }
    }
}

/// What a reshape changed that the advertised sets depend on.
#[derive(Debug)]
pub(crate) struct Reshaped<F> {
    /// Per root whose tree was there before and still is: the change of the multiset of its
    /// child summaries' kept filters (the inputs of what we advertise to mates for it). Roots
    /// not listed are new: their sets are built from scratch.
    pub(crate) fed: BTreeMap<CellName, Feed<F>>,
    /// Mates no longer linked, or whose link was replaced: what they told us leaves.
    pub(crate) mates_gone: Vec<BrokerName>,
    /// Mates newly linked, or whose link was replaced: what they tell us now joins.
    pub(crate) mates_new: Vec<BrokerName>,
}

impl<F: Filter> DataRoutes<F> {
    /// Brings the routes from the table they were built for to `table`, given the summaries
    /// `held`; equal to [`DataRoutes::rebuild`] over every root, at the cost of what changed.
    pub(crate) fn reshape(&mut self, table: &RouteTable, held: &Held<'_, F>) -> Reshaped<F> {
        let (mates_gone, mates_new) = self.reshape_mates(table, held);
        let roots: BTreeSet<CellName> = self.trees.keys().chain(table.trees.keys()).cloned().collect();
        let mut fed = BTreeMap::new();
        for root in roots {
            let Some(place) = table.trees.get(&root) else {
                self.trees.remove(&root);
                continue;
            };
            let Some(generations) = self.trees.get_mut(&root) else {
                let current = tree_routes(table, held.now, &root, place);
                self.trees.insert(root, Generations { current, previous: None });
                continue;
            };
            let scope = Scope::Tree(root.clone());
            let moved = generations.current.id != place.id;
            let mut feed = Feed::default();
            let mut old: Vec<Option<ChildRoute<F>>> =
                std::mem::take(&mut generations.current.children).into_iter().map(Some).collect();
            for child in old.iter().flatten() {
                if !place.children.iter().any(|bundle| bundle.cell == child.cell) {
                    feed.removed.extend(child.summary.kept().cloned());
                }
            }
            let children = place
                .children
                .iter()
                .map(|bundle| {
                    let slot = old.iter_mut().find(|slot| slot.as_ref().is_some_and(|child| child.cell == bundle.cell));
                    let start = match slot {
                        Some(slot) if moved => slot.clone(),
                        Some(slot) => slot.take(),
                        None => None,
                    };
                    child_route(table, held, &scope, bundle, start, &mut feed)
                })
                .collect();
            let current = TreeRoutes { id: place.id, parent: place.parent.clone(), children };
            if moved {
                generations.current.children = old.into_iter().flatten().collect();
                let mut previous = std::mem::replace(&mut generations.current, current);
                for child in &mut previous.children {
                    child.direct = direct_links(table, &child.targets);
                }
                generations.previous = Some(previous);
            } else {
                generations.current = current;
                for child in generations.previous.iter_mut().flat_map(|tree| tree.children.iter_mut()) {
                    child.direct = direct_links(table, &child.targets);
                }
            }
            fed.insert(root, feed);
        }
        Reshaped { fed, mates_gone, mates_new }
    }

    /// Keeps the indexes of mates still linked over the same link; returns the mates that left
    /// and the ones that joined (a replaced link is both).
    fn reshape_mates(&mut self, table: &RouteTable, held: &Held<'_, F>) -> (Vec<BrokerName>, Vec<BrokerName>) {
        let mut old: BTreeMap<BrokerName, MateRoute<F>> =
            std::mem::take(&mut self.mates).into_iter().map(|mate| (mate.name.clone(), mate)).collect();
        let gone: Vec<BrokerName> =
            old.keys().filter(|name| !table.mates.contains(name) || !held.unchanged(name)).cloned().collect();
        let mut new = Vec::new();
        self.mates = table
            .mates
            .iter()
            .map(|name| match old.remove(name).filter(|_| held.unchanged(name)) {
                Some(mut mate) => {
                    mate.links = mate_links(table, name);
                    mate.local_synced = false;
                    mate.down_synced.clear();
                    mate
                }
                None => {
                    new.push(name.clone());
                    mate_route(table, held.now, name)
                }
            })
            .collect();
        (gone, new)
    }
}

/// One child cell's routes in the new tree: `start` (its routes in the tree before, if it was
/// a child there) patched with the summaries of the brokers that left or joined its linked
/// set, or built from the summaries held. The change of its kept filters goes to `feed`.
fn child_route<F: Filter>(
    table: &RouteTable,
    held: &Held<'_, F>,
    scope: &Scope,
    bundle: &ChildBundle,
    start: Option<ChildRoute<F>>,
    feed: &mut Feed<F>,
) -> ChildRoute<F> {
    let linked: Vec<BrokerName> = linked_members(table, &bundle.cell).into_iter().cloned().collect();
    let (summary, index) = match start {
        Some(mut child) => {
            let left = child.linked.iter().filter(|broker| !linked.contains(broker) || !held.unchanged(broker));
            let removed: Vec<&F> = left.flat_map(|broker| held.before(broker, scope)).collect();
            let joined = linked.iter().filter(|broker| !child.linked.contains(broker) || !held.unchanged(broker));
            let added: Vec<&F> = joined.flat_map(|broker| held.after(broker, scope)).collect();
            let delta = child.change(removed, added);
            feed.removed.extend(delta.removed);
            feed.added.extend(delta.added);
            (child.summary, child.index)
        }
        None => {
            let summary = Minimized::from_filters(linked.iter().flat_map(|broker| held.after(broker, scope)));
            feed.added.extend(summary.kept().cloned());
            let index = index_of(&summary);
            (summary, index)
        }
    };
    ChildRoute::new(table, bundle, linked, summary, index)
}
