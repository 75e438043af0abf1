//! Interest: local subscriptions, summaries received from neighbours, and the summaries we
//! advertise (see [`crate::summary`] for what each scope means).
//!
//! Three ways to settle. An interest change (a local subscription, a summary delta) is carried
//! forward as a delta through the structures it feeds, each a [`Minimized`] set, so its cost
//! follows the change and the filters it can cover, not the number of subscriptions
//! (`propagate` does that part). A topology change (links, trees) patches the same structures
//! with what the change added or took away (`reshape`), sending a link a whole set only where
//! a scope became its. The full rebuild here derives everything from what is held and
//! compares every scope of every link: the tests' oracle, and the fallback for a round that
//! mixes summary deltas with a topology change.

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Router};
use crate::error::Limit;
use crate::error::{CloseReason, RouteError};
use crate::filter::Filter;
use crate::limits::{MAX_FILTERS_PER_LINK, MAX_FILTERS_PER_MESSAGE, MAX_SCOPES_PER_MESSAGE};
use crate::message::PeerMessage;
use crate::minimized::{Delta, Minimized};
use crate::names::{BrokerName, CellName};
use crate::summary::{apply, diff_scopes, size, Scope, Scoped, SummaryDelta};

use super::stream::{streamed, streams, Cursors};

/// What changed since the last `settle`.
#[derive(Clone, Debug)]
pub(super) struct Dirty<F> {
    /// The link-state database changed (routes may have).
    pub(super) view: bool,
    /// Links changed: the view is checked and the interest reshaped (`reshape`).
    pub(super) all: bool,
    /// Trees were recomputed: the interest is reshaped as for `all`.
    pub(super) table: bool,
    /// The net change of our minimized local interest.
    pub(super) local: Delta<F>,
    /// The net change of each root's held departed interest (`Router::held`).
    pub(super) held: BTreeMap<CellName, Delta<F>>,
    /// The net change of departed mates' held subscribers (`Router::held_local`).
    pub(super) held_local: Delta<F>,
    /// Summary deltas accepted from peers, in order of arrival.
    pub(super) received: Vec<(BrokerName, SummaryDelta<F>)>,
    /// What the links dropped or replaced since the last `settle` had told us, as it was
    /// then: a topology change takes exactly that out of what it fed.
    pub(super) dropped: BTreeMap<BrokerName, Scoped<F>>,
    /// Links that came up (or were replaced) since the last `settle`: sent nothing yet.
    pub(super) fresh: BTreeSet<BrokerName>,
    /// Derive everything again from what is held (the incremental settle's oracle in tests,
    /// and its fallback when summary deltas meet a topology change in one round).
    pub(super) rebuild: bool,
}

impl<F> Default for Dirty<F> {
    fn default() -> Self {
        Self {
            view: false,
            all: false,
            table: false,
            local: Delta::default(),
            held: BTreeMap::new(),
            held_local: Delta::default(),
            received: Vec::new(),
            dropped: BTreeMap::new(),
            fresh: BTreeSet::new(),
            rebuild: false,
        }
    }
}

impl<F: Filter> Dirty<F> {
    /// Keeps what a dropped or replaced link had told us (the first drop of the round is the
    /// state the derived sets were fed).
    pub(super) fn dropped(&mut self, peer: &BrokerName, held: Option<Scoped<F>>) {
        if let Some(held) = held {
            self.dropped.entry(peer.clone()).or_insert(held);
        } else if !self.dropped.contains_key(peer) {
            self.dropped.insert(peer.clone(), Scoped::new());
        }
    }
}

/// Why a summary message is refused whole.
pub(super) enum Refusal {
    /// Over a size limit: the link closes.
    TooLarge,
    /// `Local` scope from a peer outside our cell: the message is ignored.
    LocalScope,
}

/// What we advertise per tree, kept minimized between rounds so that a change costs only what
/// it touches.
///
/// Invariant (between rounds): `down` holds every root of the data path's current trees, its
/// inputs the kept filters of that tree's child summaries and of the departed interest held
/// for that tree (`Router::held`); `subtree` holds the roots where our
/// cell has a parent, its inputs our kept local filters, `down` of that root's kept filters,
/// every linked mate's local and that root's down summary, and departed mates' held local.
#[derive(Clone, Debug)]
pub(super) struct Advertised<F> {
    /// Per root: interest our own links into child cells bring in (for mates).
    pub(super) down: BTreeMap<CellName, Minimized<F>>,
    /// Per root in which our cell has a parent: our cell's whole subtree interest.
    pub(super) subtree: BTreeMap<CellName, Minimized<F>>,
}

impl<F> Default for Advertised<F> {
    fn default() -> Self {
        Self { down: BTreeMap::new(), subtree: BTreeMap::new() }
    }
}

impl<F: Filter> Router<F> {
    pub(super) fn handle_subscribe(&mut self, filter: F) {
        self.local.insert(&filter, &mut self.dirty.local);
    }

    pub(super) fn handle_unsubscribe(&mut self, filter: F, out: &mut Vec<Action<F>>) {
        if !self.local.remove(&filter, &mut self.dirty.local) {
            let error = RouteError::NotSubscribed { filter: format!("{filter:?}") };
            out.push(Action::Rejected { error });
        }
    }

    /// Why a summary message from `from` is refused whole, before any of it is applied.
    pub(super) fn summary_refusal(&self, from: &BrokerName, deltas: &[SummaryDelta<F>]) -> Option<Refusal> {
        let filters: usize = deltas.iter().map(|delta| delta.added.len() + delta.removed.len()).sum();
        let scopes: usize = deltas.iter().map(|delta| delta.scopes.len()).sum();
        if filters > MAX_FILTERS_PER_MESSAGE || scopes > MAX_SCOPES_PER_MESSAGE {
            return Some(Refusal::TooLarge);
        }
        let is_mate = self.links.get(from).is_some_and(|link| link.cell == self.settings.cell);
        let local_scope = deltas.iter().any(|delta| delta.scopes.contains(&Scope::Local));
        (local_scope && !is_mate).then_some(Refusal::LocalScope)
    }

    pub(super) fn handle_summary(&mut self, from: &BrokerName, deltas: Vec<SummaryDelta<F>>, out: &mut Vec<Action<F>>) {
        match self.summary_refusal(from, &deltas) {
            Some(Refusal::TooLarge) => return self.exceeded(from, Limit::Summary, out),
            Some(Refusal::LocalScope) => {
                let error = RouteError::LocalScopeFromOtherCell { peer: from.clone() };
                return out.push(Action::Rejected { error });
            }
            None => {}
        }
        let held = self.received.entry(from.clone()).or_default();
        match apply(held, &deltas) {
            Ok(()) if size(held) > MAX_FILTERS_PER_LINK => {
                // Taken back before the link is dropped, so what it drops is what was settled.
                let undo: Vec<SummaryDelta<F>> = deltas.into_iter().rev().map(SummaryDelta::inverse).collect();
                if apply(held, &undo).is_err() {
                    self.dirty.rebuild = true;
                }
                self.exceeded(from, Limit::Summary, out);
            }
            Ok(()) => self.dirty.received.extend(deltas.into_iter().map(|delta| (from.clone(), delta))),
            Err(out_of_sync) => {
                let error = RouteError::SummaryOutOfSync { peer: from.clone(), scope: out_of_sync.scope };
                out.push(Action::Rejected { error });
                out.push(Action::CloseLink { peer: from.clone(), reason: CloseReason::OutOfSync });
                self.drop_link(from, out);
            }
        }
    }

    /// Brings the data path's summaries, what we advertise, and what each link was sent up to
    /// date with what changed.
    pub(super) fn settle_interest(&mut self, out: &mut Vec<Action<F>>) {
        let dirty = std::mem::take(&mut self.dirty);
        let topology = dirty.all || dirty.table;
        if dirty.rebuild || (topology && !dirty.received.is_empty()) {
            // Everything is derived again from what is held, changes included.
            self.rebuild_interest(topology, out);
        } else if topology {
            self.reshape((dirty.local, &dirty.held_local, &dirty.held), &dirty.dropped, &dirty.fresh, out);
        } else if !dirty.local.is_empty()
            || !dirty.received.is_empty()
            || !dirty.held.is_empty()
            || !dirty.held_local.is_empty()
        {
            self.propagate((dirty.local, &dirty.held_local, &dirty.held), &dirty.received, out);
        }
        for held in dirty.dropped.into_values() {
            self.garbage.scoped(held);
        }
    }

    /// Rebuilds every tree's summaries and what we advertise, and sends each link what differs
    /// from what it was sent; after a `topology` change a scope's first summary of more than a
    /// slice streams, as the incremental settle does.
    fn rebuild_interest(&mut self, topology: bool, out: &mut Vec<Action<F>>) {
        let roots: BTreeSet<CellName> = self.routes.trees.keys().chain(self.table.trees.keys()).cloned().collect();
        self.routes.rebuild(&self.table, &self.received, &roots);
        self.sync_dirty = true;
        self.advertised = Advertised::default();
        let roots: Vec<CellName> = self.routes.trees.keys().cloned().collect();
        for root in &roots {
            self.advertise(root);
        }
        let local = self.local.kept_sorted();
        let sets = |map: &BTreeMap<CellName, Minimized<F>>| -> BTreeMap<CellName, BTreeSet<F>> {
            map.iter().map(|(root, set)| (root.clone(), set.kept_sorted())).filter(|(_, set)| !set.is_empty()).collect()
        };
        let (down, subtree) = (sets(&self.advertised.down), sets(&self.advertised.subtree));
        for (peer, link) in &self.links {
            let sent = self.sent.entry(peer.clone()).or_default();
            let mate = link.cell == self.settings.cell;
            let mut scopes: BTreeSet<Scope> = roots.iter().map(|root| Scope::Tree(root.clone())).collect();
            scopes.extend(sent.keys().cloned());
            if mate {
                scopes.insert(Scope::Local);
            }
            let table = &self.table;
            let whole = |scope: &Scope| match scope {
                Scope::Local if mate => Some(&local),
                Scope::Local => None,
                Scope::Tree(root) if mate => down.get(root),
                Scope::Tree(root) => {
                    let parent = table.trees.get(root).and_then(|place| place.parent.as_ref());
                    subtree.get(root).filter(|_| parent == Some(&link.cell))
                }
            };
            let cursors = self.streams.cursors.entry(peer.clone()).or_default();
            let slice = topology.then_some(self.stream_slice);
            let streaming = streaming_parts(cursors, sent, &scopes, slice, whole);
            let deltas = diff_scopes(sent, scopes, |scope| streaming.get(scope).or_else(|| whole(scope)));
            if !deltas.is_empty() {
                self.counters.summary_deltas_sent += deltas.len() as u64;
                send_summary(out, peer, deltas);
            }
        }
    }

    /// Builds what we advertise for one tree from scratch: what our links into child cells
    /// bring in (departed ones' held for this tree included), and, if our cell has a parent
    /// there, the interest of our cell's whole subtree.
    fn advertise(&mut self, root: &CellName) {
        let Some(tree) = self.routes.trees.get(root).map(|generations| &generations.current) else {
            return;
        };
        let held = self.held.get(root).into_iter().flat_map(Minimized::kept);
        let below = Minimized::from_filters(tree.children.iter().flat_map(|child| child.summary.kept()).chain(held));
        if tree.parent.is_some() {
            let scope = Scope::Tree(root.clone());
            let mates = self.routes.mates.iter().filter_map(|mate| self.received.get(&mate.name)).flat_map(|held| {
                held.get(&Scope::Local).into_iter().flatten().chain(held.get(&scope).into_iter().flatten())
            });
            let local = self.local.kept().chain(self.held_local.kept());
            let subtree = Minimized::from_filters(local.chain(below.kept()).chain(mates));
            self.advertised.subtree.insert(root.clone(), subtree);
        }
        self.advertised.down.insert(root.clone(), below);
    }
}

/// What the scopes streaming to a link (`router/stream.rs`) should hold by now: the part of
/// their set up to the cursor; a scope sent nothing whose set holds more than `slice` filters
/// starts streaming from nothing. A stream ends only at its next slice, finding nothing after
/// its cursor, whichever way the router settles, so the rebuild and the incremental settles
/// keep the same streams.
fn streaming_parts<'a, F: Filter + 'a>(
    cursors: &mut Cursors<F>,
    sent: &Scoped<F>,
    scopes: &BTreeSet<Scope>,
    slice: Option<usize>,
    whole: impl Fn(&Scope) -> Option<&'a BTreeSet<F>>,
) -> BTreeMap<Scope, BTreeSet<F>> {
    let mut parts = BTreeMap::new();
    for scope in scopes {
        let set = whole(scope).filter(|set| !set.is_empty());
        match (cursors.get(scope), set) {
            (Some(cursor), set) => {
                let part = set.into_iter().flatten().filter(|filter| streamed(cursor, filter)).cloned().collect();
                parts.insert(scope.clone(), part);
            }
            (None, Some(set)) if !sent.contains_key(scope) && streams(set.len(), slice) => {
                cursors.insert(scope.clone(), None);
                parts.insert(scope.clone(), BTreeSet::new());
            }
            (None, _) => {}
        }
    }
    parts
}

/// Sends `deltas` to `peer` in messages of at most [`crate::limits::SUMMARY_SLICE`] filters.
pub(super) fn send_summary<F: Filter>(out: &mut Vec<Action<F>>, peer: &BrokerName, deltas: Vec<SummaryDelta<F>>) {
    for message in crate::summary::split(deltas, crate::limits::SUMMARY_SLICE) {
        out.push(Action::Send { to: peer.clone(), message: PeerMessage::Summary(message) });
    }
}
