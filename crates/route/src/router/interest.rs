//! Interest: local subscriptions, summaries received from neighbours, and the summaries we
//! advertise (see [`crate::summary`] for what each scope means).

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Router};
use crate::error::{CloseReason, RouteError};
use crate::filter::{minimize, Filter};
use crate::message::PeerMessage;
use crate::names::{BrokerName, CellName};
use crate::summary::{apply, diff_scopes, Scope, SummaryDelta};

/// What changed since the last `settle`, so that only the affected trees are recomputed.
#[derive(Clone, Debug, Default)]
pub(super) struct Dirty {
    /// The link-state database changed (routes may have).
    pub(super) view: bool,
    /// Links or trees changed: every tree is recomputed and every scope of every link compared.
    pub(super) all: bool,
    /// Our local subscriptions changed.
    pub(super) local: bool,
    /// A cell mate's local interest changed, or the set of linked mates did.
    pub(super) mates_local: bool,
    /// Trees were recomputed: cell mates' links may differ even where no tree id changed.
    pub(super) table: bool,
    /// Trees whose received summaries changed.
    pub(super) roots: BTreeSet<CellName>,
}

/// What we advertise, kept between rounds so that a change recomputes only its own trees.
#[derive(Clone, Debug)]
pub(super) struct Advertised<F> {
    local: BTreeSet<F>,
    /// Per root: interest our own links into child cells bring in (for mates).
    down: BTreeMap<CellName, BTreeSet<F>>,
    /// Per root in which our cell has a parent: our cell's whole subtree interest.
    subtree: BTreeMap<CellName, BTreeSet<F>>,
}

impl<F> Default for Advertised<F> {
    fn default() -> Self {
        Self { local: BTreeSet::new(), down: BTreeMap::new(), subtree: BTreeMap::new() }
    }
}

impl<F: Filter> Router<F> {
    pub(super) fn handle_subscribe(&mut self, filter: F) {
        let count = self.local.entry(filter).or_insert(0);
        *count += 1;
        self.dirty.local |= *count == 1;
    }

    pub(super) fn handle_unsubscribe(&mut self, filter: F, out: &mut Vec<Action<F>>) {
        match self.local.get_mut(&filter) {
            Some(count) if *count > 1 => *count -= 1,
            Some(_) => {
                self.local.remove(&filter);
                self.dirty.local = true;
            }
            None => {
                let error = RouteError::NotSubscribed { filter: format!("{filter:?}") };
                out.push(Action::Rejected { error });
            }
        }
    }

    pub(super) fn handle_summary(&mut self, from: &BrokerName, deltas: &[SummaryDelta<F>], out: &mut Vec<Action<F>>) {
        let is_mate = self.links.get(from).is_some_and(|link| link.cell == self.settings.cell);
        let local_scope = deltas.iter().any(|delta| delta.scopes.contains(&Scope::Local));
        if local_scope && !is_mate {
            out.push(Action::Rejected { error: RouteError::LocalScopeFromOtherCell { peer: from.clone() } });
            return;
        }
        let held = self.received.entry(from.clone()).or_default();
        match apply(held, deltas) {
            Ok(()) => {
                for scope in deltas.iter().flat_map(|delta| &delta.scopes) {
                    match scope {
                        Scope::Local => self.dirty.mates_local = true,
                        Scope::Tree(root) => {
                            self.dirty.roots.insert(root.clone());
                        }
                    }
                }
            }
            Err(out_of_sync) => {
                let error = RouteError::SummaryOutOfSync { peer: from.clone(), scope: out_of_sync.scope };
                out.push(Action::Rejected { error });
                out.push(Action::CloseLink { peer: from.clone(), reason: CloseReason::OutOfSync });
                self.drop_link(from, out);
            }
        }
    }

    /// Recomputes what changed interest affects: the data path's routes, what we advertise, and
    /// the deltas each link must be sent.
    pub(super) fn settle_interest(&mut self, out: &mut Vec<Action<F>>) {
        let dirty = std::mem::take(&mut self.dirty);
        if !(dirty.all || dirty.local || dirty.mates_local || dirty.table || !dirty.roots.is_empty()) {
            return;
        }
        let mut roots: BTreeSet<CellName> = dirty.roots;
        if dirty.all {
            roots.extend(self.routes.trees.keys().cloned());
            roots.extend(self.table.trees.keys().cloned());
        }
        self.routes.rebuild(&self.table, &self.received, &roots);
        if dirty.all || dirty.local {
            self.advertised.local = minimize(self.local.keys()).into_iter().collect();
        }
        if dirty.local || dirty.mates_local {
            roots.extend(self.table.trees.keys().cloned());
        }
        for root in &roots {
            self.advertise(root);
        }
        for (peer, link) in &self.links {
            let sent = self.sent.entry(peer.clone()).or_default();
            let mut scopes: BTreeSet<Scope> = roots.iter().map(|root| Scope::Tree(root.clone())).collect();
            if dirty.all {
                scopes.extend(sent.keys().cloned());
            }
            let mate = link.cell == self.settings.cell;
            if mate && (dirty.all || dirty.local) {
                scopes.insert(Scope::Local);
            }
            let advertised = &self.advertised;
            let table = &self.table;
            let deltas = diff_scopes(sent, scopes, |scope| match scope {
                Scope::Local if mate => Some(&advertised.local),
                Scope::Local => None,
                Scope::Tree(root) if mate => advertised.down.get(root),
                Scope::Tree(root) => {
                    let parent = table.trees.get(root).and_then(|place| place.parent.as_ref());
                    advertised.subtree.get(root).filter(|_| parent == Some(&link.cell))
                }
            });
            if !deltas.is_empty() {
                self.counters.summary_deltas_sent += deltas.len() as u64;
                out.push(Action::Send { to: peer.clone(), message: PeerMessage::Summary(deltas) });
            }
        }
    }

    /// Recomputes what we advertise for one tree: what our links into child cells bring in,
    /// and, if our cell has a parent there, the interest of our cell's whole subtree.
    fn advertise(&mut self, root: &CellName) {
        let Some(tree) = self.routes.trees.get(root).map(|generations| &generations.current) else {
            self.advertised.down.remove(root);
            self.advertised.subtree.remove(root);
            return;
        };
        let below: BTreeSet<F> = minimize(tree.children.iter().flat_map(|child| &child.summary)).into_iter().collect();
        let subtree: BTreeSet<F> = if tree.parent.is_some() {
            let mates = self
                .routes
                .mates
                .iter()
                .flat_map(|mate| mate.local.iter().chain(mate.down.get(root).into_iter().flatten()));
            minimize(self.advertised.local.iter().chain(&below).chain(mates)).into_iter().collect()
        } else {
            BTreeSet::new()
        };
        store(&mut self.advertised.down, root, below);
        store(&mut self.advertised.subtree, root, subtree);
    }
}

/// Keeps only non-empty sets, so an absent scope and an empty one are the same thing.
fn store<F>(map: &mut BTreeMap<CellName, BTreeSet<F>>, root: &CellName, set: BTreeSet<F>) {
    if set.is_empty() {
        map.remove(root);
    } else {
        map.insert(root.clone(), set);
    }
}
