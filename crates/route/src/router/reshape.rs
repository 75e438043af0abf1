//! A topology change (a link up or down, trees recomputed) settled at the cost of what it
//! changed (issue 46: a full rebuild beside a 100,000-filter summary held the broker for
//! seconds). The data path's routes are patched (`routes/reshape.rs`); then every advertised
//! set that existed before and still does is fed only the change of its inputs: the local
//! interest's delta, the change of the child summaries under it, and the mates that left or
//! joined. A set that appears (a new tree, or our cell gains a parent in one) is built from
//! its inputs, the local interest shared chunk by chunk (`minimized/chunks.rs`) rather than
//! copied or inserted again. Each link is then sent, per scope, that set's delta when it kept
//! feeding the same scope of the link, or the difference with what the link was sent
//! otherwise: the whole set for a new link, a removal of what it was sent when a scope stops
//! being its.
//!
//! The result equals the full rebuild (`rebuild_interest`), which stays as the tests' oracle
//! and as the fallback when summary deltas arrived in the same round as the topology change.

use std::collections::{BTreeMap, BTreeSet};

use super::interest::send_summary;
use super::propagate::{feed, Grouped};
use super::routes::{Feed, Held, Reshaped};
use super::{Action, Router};
use crate::filter::Filter;
use crate::minimized::{Delta, Minimized};
use crate::names::{BrokerName, CellName};
use crate::summary::{Scope, Scoped};

/// The deltas of the advertised sets that existed before the topology change and still do.
/// A root absent from a map had its set built anew (or dropped).
struct Patched<F> {
    local: Delta<F>,
    down: BTreeMap<CellName, Delta<F>>,
    subtree: BTreeMap<CellName, Delta<F>>,
}

impl<F: Filter> Router<F> {
    /// Settles a topology change incrementally. `local` is the local interest's change since
    /// the last settle; `dropped` what the links dropped or replaced since then had told us.
    pub(super) fn reshape(
        &mut self,
        (local, held_local, departed): (Delta<F>, &Delta<F>, &BTreeMap<CellName, Delta<F>>),
        dropped: &BTreeMap<BrokerName, Scoped<F>>,
        fresh: &BTreeSet<BrokerName>,
        out: &mut Vec<Action<F>>,
    ) {
        let old_parents: BTreeMap<CellName, Option<CellName>> =
            self.routes.trees.iter().map(|(root, trees)| (root.clone(), trees.current.parent.clone())).collect();
        // Out of `self` meanwhile, so the sets it feeds can be borrowed mutably beside it.
        let received = std::mem::take(&mut self.received);
        let held = Held { now: &received, dropped };
        let Reshaped { fed, mates_gone, mates_new } = self.routes.reshape(&self.table, &held);
        self.sync_dirty = true;
        let mut patched = Patched { local, down: BTreeMap::new(), subtree: BTreeMap::new() };
        self.reshape_down(fed, departed, &mut patched);
        self.reshape_subtree((&held, held_local), (&mates_gone, &mates_new), &mut patched);
        self.received = received;
        self.send_reshaped(&old_parents, &patched, fresh, out);
    }

    /// Brings `advertised.down` to the new child summaries and the departed interest held now
    /// (`departed`: the change of each root's since the last settle).
    fn reshape_down(
        &mut self,
        mut fed: BTreeMap<CellName, Feed<F>>,
        departed: &BTreeMap<CellName, Delta<F>>,
        patched: &mut Patched<F>,
    ) {
        let trees = &self.routes.trees;
        self.advertised.down.retain(|root, _| trees.contains_key(root) && fed.contains_key(root));
        for (root, generations) in trees {
            match (self.advertised.down.get_mut(root), fed.remove(root)) {
                (Some(down), Some(change)) => {
                    let delta = patched.down.entry(root.clone()).or_default();
                    feed(down, &change.removed, &change.added, delta);
                    if let Some(change) = departed.get(root) {
                        feed(down, &change.removed, &change.added, delta);
                    }
                }
                _ => {
                    let children = generations.current.children.iter().flat_map(|child| child.summary.kept());
                    let kept = self.held.get(root).into_iter().flat_map(Minimized::kept);
                    self.advertised.down.insert(root.clone(), Minimized::from_filters(children.chain(kept)));
                }
            }
        }
    }

    /// Brings `advertised.subtree` to the new trees: patched where our cell had and has a
    /// parent (and `down` was patched), built where it gains one, dropped where it loses it.
    fn reshape_subtree(
        &mut self,
        (held, held_local): (&Held<'_, F>, &Delta<F>),
        (mates_gone, mates_new): (&[BrokerName], &[BrokerName]),
        patched: &mut Patched<F>,
    ) {
        let trees = &self.routes.trees;
        let down = &patched.down;
        let has_parent = |root: &CellName| trees.get(root).is_some_and(|trees| trees.current.parent.is_some());
        let gone: Vec<CellName> = self
            .advertised
            .subtree
            .keys()
            .filter(|root| !has_parent(root) || !down.contains_key(*root))
            .cloned()
            .collect();
        for root in gone {
            if let Some(set) = self.advertised.subtree.remove(&root) {
                self.garbage.minimized(set);
            }
        }
        for (root, generations) in trees {
            if generations.current.parent.is_none() {
                continue;
            }
            let scope = Scope::Tree(root.clone());
            let before = |mate| held.before(mate, &Scope::Local).chain(held.before(mate, &scope));
            let after = |mate| held.after(mate, &Scope::Local).chain(held.after(mate, &scope));
            match (self.advertised.subtree.get_mut(root), patched.down.get(root)) {
                (Some(subtree), Some(below)) => {
                    let gone = mates_gone.iter().flat_map(before);
                    let joined = mates_new.iter().flat_map(after);
                    let local = (patched.local.removed.iter().chain(&held_local.removed), &held_local.added);
                    let removed = local.0.chain(&below.removed).chain(gone);
                    let added = patched.local.added.iter().chain(local.1).chain(&below.added).chain(joined);
                    feed(subtree, removed, added, patched.subtree.entry(root.clone()).or_default());
                }
                _ => {
                    let mut subtree = Minimized::from_kept_of(&self.local);
                    let mates = self.routes.mates.iter().flat_map(|mate| after(&mate.name));
                    let below = self.advertised.down.get(root).into_iter().flat_map(Minimized::kept);
                    for filter in below.chain(mates).chain(self.held_local.kept()) {
                        subtree.insert(filter, &mut Delta::default());
                    }
                    self.advertised.subtree.insert(root.clone(), subtree);
                }
            }
        }
    }

    /// Sends each link, per scope, the patched set's delta when the same set fed that scope
    /// before and after, or the difference between what it was sent and what it should hold.
    fn send_reshaped(
        &mut self,
        old_parents: &BTreeMap<CellName, Option<CellName>>,
        patched: &Patched<F>,
        fresh: &BTreeSet<BrokerName>,
        out: &mut Vec<Action<F>>,
    ) {
        let roots: Vec<&CellName> = self.routes.trees.keys().collect();
        for (peer, link) in &self.links {
            let sent = self.sent.entry(peer.clone()).or_default();
            let mate = link.cell == self.settings.cell;
            let mut scopes: BTreeSet<Scope> = roots.iter().map(|root| Scope::Tree((*root).clone())).collect();
            scopes.extend(sent.keys().cloned());
            if mate {
                scopes.insert(Scope::Local);
            }
            let cursors = self.streams.cursors.entry(peer.clone()).or_default();
            let mut grouped = Grouped::new(cursors, Some(self.stream_slice));
            for scope in scopes {
                let (desired, delta) = match &scope {
                    Scope::Local if mate => (Some(&self.local), Some(&patched.local)),
                    Scope::Local => (None, None),
                    Scope::Tree(root) if mate => (self.advertised.down.get(root), patched.down.get(root)),
                    Scope::Tree(root) => {
                        let parent =
                            |trees: Option<&Option<CellName>>| trees.and_then(Option::as_ref) == Some(&link.cell);
                        let now = parent(self.routes.trees.get(root).map(|trees| &trees.current.parent));
                        let before = parent(old_parents.get(root));
                        let delta = patched.subtree.get(root).filter(|_| now && before);
                        (self.advertised.subtree.get(root).filter(|_| now), delta)
                    }
                };
                match delta.filter(|_| !fresh.contains(peer)) {
                    Some(delta) => grouped.record(sent, scope, delta),
                    None => grouped.replace(sent, scope, desired),
                }
            }
            let deltas = grouped.deltas();
            if !deltas.is_empty() {
                self.counters.summary_deltas_sent += deltas.len() as u64;
                send_summary(out, peer, deltas);
            }
        }
    }
}
