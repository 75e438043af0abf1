//! Interest changes carried forward as deltas, with no topology change in between: a local
//! change or a peer's summary delta updates the data path's child summaries and mates' indexes,
//! then what we advertise per tree, then what each link is sent. Each step hands the next only
//! its net change, so a subscription costs its covering group times the number of trees, never
//! the number of subscriptions.

use std::collections::{BTreeMap, BTreeSet};

use super::interest::send_summary;
use super::stream::{streamed, streams, Cursors};
use super::{Action, Router};
use crate::filter::{Filter, FilterIndex};
use crate::minimized::{Delta, Minimized};
use crate::names::{BrokerName, CellName};
use crate::summary::{Scope, Scoped, SummaryDelta};

/// Net changes of what we advertise, in one round.
struct Changes<F> {
    local: Delta<F>,
    down: BTreeMap<CellName, Delta<F>>,
    subtree: BTreeMap<CellName, Delta<F>>,
}

/// Feeds a change into a minimized set; its own changes go to `delta`.
pub(super) fn feed<'a, F: Filter + 'a>(
    set: &mut Minimized<F>,
    removed: impl IntoIterator<Item = &'a F>,
    added: impl IntoIterator<Item = &'a F>,
    delta: &mut Delta<F>,
) {
    for filter in removed {
        set.remove(filter, delta);
    }
    for filter in added {
        set.insert(filter, delta);
    }
}

/// Feeds a change into an index.
fn index<F: Filter>(index: &mut F::Index, removed: &BTreeSet<F>, added: &BTreeSet<F>) {
    for filter in removed {
        index.remove(filter);
    }
    for filter in added {
        index.insert(filter);
    }
}

impl<F: Filter> Router<F> {
    /// Carries a local change, the change of departed mates' held subscribers and of each
    /// root's held departed interest, and accepted summary deltas forward and sends the result.
    pub(super) fn propagate(
        &mut self,
        (local, held_local, held): (Delta<F>, &Delta<F>, &BTreeMap<CellName, Delta<F>>),
        received: &[(BrokerName, SummaryDelta<F>)],
        out: &mut Vec<Action<F>>,
    ) {
        let mut changes = Changes { local, down: BTreeMap::new(), subtree: BTreeMap::new() };
        if !changes.local.is_empty() {
            self.feed_subtrees(None, &changes.local.removed, &changes.local.added, &mut changes.subtree);
        }
        // Into every subtree, as a mate's own subscribers; not into what mates are told.
        self.feed_subtrees(None, &held_local.removed, &held_local.added, &mut changes.subtree);
        for (root, below) in held {
            self.feed_down(root, below, &mut changes);
        }
        for (from, delta) in received {
            for scope in &delta.scopes {
                self.propagate_received(from, scope, delta, &mut changes);
            }
        }
        self.send_changes(&changes, out);
    }

    /// Feeds a change into the subtree summary of `root`, or of every root when `None`.
    fn feed_subtrees(
        &mut self,
        root: Option<&CellName>,
        removed: &BTreeSet<F>,
        added: &BTreeSet<F>,
        changes: &mut BTreeMap<CellName, Delta<F>>,
    ) {
        for (name, subtree) in &mut self.advertised.subtree {
            if root.is_none_or(|root| root == name) {
                feed(subtree, removed, added, changes.entry(name.clone()).or_default());
            }
        }
    }

    fn propagate_received(
        &mut self,
        from: &BrokerName,
        scope: &Scope,
        delta: &SummaryDelta<F>,
        changes: &mut Changes<F>,
    ) {
        if let Some(mate) = self.routes.mates.iter_mut().find(|mate| mate.name == *from) {
            let removed: BTreeSet<F> = delta.removed.iter().cloned().collect();
            let added: BTreeSet<F> = delta.added.iter().cloned().collect();
            let root = match scope {
                Scope::Local => {
                    index(&mut mate.local, &removed, &added);
                    None
                }
                Scope::Tree(root) => {
                    index(mate.down.entry(root.clone()).or_default(), &removed, &added);
                    Some(root)
                }
            };
            self.feed_subtrees(root, &removed, &added, &mut changes.subtree);
            return;
        }
        let Scope::Tree(root) = scope else { return };
        let Some(tree) = self.routes.trees.get_mut(root) else { return };
        let Some(child) = tree.current.children.iter_mut().find(|child| child.linked.contains(from)) else {
            return;
        };
        let below = child.change(&delta.removed, &delta.added);
        let root = root.clone();
        self.feed_down(&root, &below, changes);
    }

    /// Feeds a change of what comes in from below for `root` (a child summary's, or the
    /// departed interest held for that tree) into `down` and on into that root's subtree.
    fn feed_down(&mut self, root: &CellName, below: &Delta<F>, changes: &mut Changes<F>) {
        let Some(down) = self.advertised.down.get_mut(root) else { return };
        let mut step = Delta::default();
        feed(down, &below.removed, &below.added, &mut step);
        let merged = changes.down.entry(root.clone()).or_default();
        for filter in &step.removed {
            merged.remove(filter.clone());
        }
        for filter in &step.added {
            merged.add(filter.clone());
        }
        self.feed_subtrees(Some(root), &step.removed, &step.added, &mut changes.subtree);
    }

    /// Sends each link the changes of the scopes it is sent, grouping scopes with identical
    /// changes, and records them as sent.
    fn send_changes(&mut self, changes: &Changes<F>, out: &mut Vec<Action<F>>) {
        for (peer, link) in &self.links {
            let mut scoped: Vec<(Scope, &Delta<F>)> = Vec::new();
            if link.cell == self.settings.cell {
                scoped.push((Scope::Local, &changes.local));
                scoped.extend(changes.down.iter().map(|(root, delta)| (Scope::Tree(root.clone()), delta)));
            } else {
                let parent_is_link = |root: &CellName| {
                    self.table.trees.get(root).and_then(|place| place.parent.as_ref()) == Some(&link.cell)
                };
                scoped.extend(
                    changes
                        .subtree
                        .iter()
                        .filter(|(root, _)| parent_is_link(root))
                        .map(|(root, delta)| (Scope::Tree(root.clone()), delta)),
                );
            }
            let sent = self.sent.entry(peer.clone()).or_default();
            // An interest change starts no stream: the shell hands bulk changes in slices.
            let mut grouped = Grouped::new(self.streams.cursors.entry(peer.clone()).or_default(), None);
            for (scope, delta) in scoped {
                grouped.record(sent, scope, delta);
            }
            let deltas = grouped.deltas();
            if !deltas.is_empty() {
                self.counters.summary_deltas_sent += deltas.len() as u64;
                send_summary(out, peer, deltas);
            }
        }
    }
}

/// The changes of one link's scopes in one round, scopes with identical changes grouped
/// together (a subscription that matters to many trees travels once), each applied to what
/// the link was sent as it is recorded. A scope whose first summary is streaming
/// (`router/stream.rs`) records only the part of a change the link already holds; in a
/// topology change, a scope sent nothing so far that must now hold more than a slice starts
/// streaming instead (the full rebuild decides the same way, so the two stay equal).
pub(super) struct Grouped<'c, F> {
    changes: BTreeMap<(Vec<F>, Vec<F>), Vec<Scope>>,
    /// The link's streaming scopes.
    cursors: &'c mut Cursors<F>,
    /// Filters per streamed slice, when new streams may start.
    slice: Option<usize>,
}

impl<'c, F: Filter> Grouped<'c, F> {
    /// Changes for the link whose streaming scopes are `cursors`; a scope bound for more than
    /// `slice` filters starts a stream (never without `slice`).
    pub(super) fn new(cursors: &'c mut Cursors<F>, slice: Option<usize>) -> Self {
        Self { changes: BTreeMap::new(), cursors, slice }
    }

    /// Records `delta`, the change of the set `scope` is fed from, as that scope's change.
    pub(super) fn record(&mut self, sent: &mut Scoped<F>, scope: Scope, delta: &Delta<F>) {
        let narrowed;
        let delta = match self.cursors.get(&scope) {
            Some(cursor) => {
                let held = |filters: &BTreeSet<F>| filters.iter().filter(|f| streamed(cursor, f)).cloned().collect();
                narrowed = Delta { added: held(&delta.added), removed: held(&delta.removed) };
                &narrowed
            }
            // Unsent so far, the set is this delta's additions.
            None if !sent.contains_key(&scope)
                && delta.removed.is_empty()
                && streams(delta.added.len(), self.slice) =>
            {
                self.cursors.insert(scope, None);
                return;
            }
            None => delta,
        };
        if delta.is_empty() {
            return;
        }
        let set = sent.entry(scope.clone()).or_default();
        for filter in &delta.removed {
            set.remove(filter);
        }
        set.extend(delta.added.iter().cloned());
        if set.is_empty() {
            sent.remove(&scope);
        }
        self.add(scope, delta.added.iter().cloned().collect(), delta.removed.iter().cloned().collect());
    }

    /// Records what brings `scope` of `sent` to the kept filters of `desired` (absent: empty),
    /// comparing the two: for a scope whose set was not fed by a known delta. A scope sent
    /// nothing so far gets the whole set, or streams it when it holds more than a slice; a
    /// streaming scope gets the new set's part up to its cursor (this pass costs the set's
    /// size, as it did before streams: only a topology change in mid-stream takes it); one no
    /// longer fed gives back what it was sent, moved rather than copied.
    pub(super) fn replace(&mut self, sent: &mut Scoped<F>, scope: Scope, desired: Option<&Minimized<F>>) {
        let desired = desired.filter(|set| set.kept().next().is_some());
        let cursor = self.cursors.get(&scope).cloned();
        let large = |set: &Minimized<F>| self.slice.is_some_and(|slice| set.kept().nth(slice).is_some());
        if cursor.is_none() && !sent.contains_key(&scope) && desired.is_some_and(large) {
            self.cursors.insert(scope, None);
            return;
        }
        let held = |filter: &F| cursor.as_ref().is_none_or(|cursor| streamed(cursor, filter));
        let (added, removed) = match (sent.remove(&scope), desired) {
            (None, None) => return,
            (Some(before), None) => (Vec::new(), before.into_iter().collect()),
            (before, Some(after)) => {
                let mut before = before.unwrap_or_default();
                let removed: Vec<F> = before.iter().filter(|filter| !after.is_kept(filter)).cloned().collect();
                let mut added: Vec<F> =
                    after.kept().filter(|filter| held(filter) && !before.contains(*filter)).cloned().collect();
                added.sort_unstable();
                for filter in &removed {
                    before.remove(filter);
                }
                before.extend(added.iter().cloned());
                if !before.is_empty() {
                    sent.insert(scope.clone(), before);
                }
                (added, removed)
            }
        };
        if !added.is_empty() || !removed.is_empty() {
            self.add(scope, added, removed);
        }
    }

    fn add(&mut self, scope: Scope, added: Vec<F>, removed: Vec<F>) {
        self.changes.entry((added, removed)).or_default().push(scope);
    }

    /// The recorded changes as summary deltas.
    pub(super) fn deltas(self) -> Vec<SummaryDelta<F>> {
        self.changes.into_iter().map(|((added, removed), scopes)| SummaryDelta { scopes, added, removed }).collect()
    }
}
