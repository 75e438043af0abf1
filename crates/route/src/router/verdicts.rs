//! Filter verdicts per downstream of a pubend's stream, asked without an arriving copy:
//! guaranteed delivery's filter edges (gd-protocol §5) judge stored ticks when they answer a
//! nack or send silence, long after the copy arrived, so they ask "would this message be F
//! for that child cell (or that mate's local subscribers) now?" rather than "where does this
//! copy go?". The answers come from the same summaries, vouching and sideways helpers as
//! [`Router::route_with_verdicts`], so a child whose summary is not vouched for the current
//! tree (a relay that just restarted, a tree that just moved) is `Unsure`, never F.
//!
//! The same summaries say which downstreams are in a pubend's tree at all (gd-protocol §9.1):
//! one whose vouched summary is empty could never match, so its acks are not waited for.

use super::forward::child_verdict;
use super::pubend::PubendRef;
use super::routes::{ChildRoute, MateRoute, TreeRoutes};
use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::message::Verdict;
use crate::names::{BrokerName, CellName, TreeId};
use crate::rendezvous::choose;
use crate::summary::Scope;

/// Whose summary judges a child cell: ours (we have links into it), or, without one, that of
/// the mate a sideways copy would go through (its interest in the root's tree).
enum Judge<'a, F: Filter> {
    Own(&'a ChildRoute<F>, &'a CellName, &'a TreeRoutes<F>),
    Mate(&'a MateRoute<F>, &'a CellName),
}

impl<F: Filter> Router<F> {
    /// The filter edge towards child cell `cell` of our cell in `pubend`'s current tree: F only
    /// if the child's vouched summary (ours, or, without a link of ours into the child, that of
    /// the mate a sideways copy would go through) rules the message out. `Unsure` when `cell`
    /// is not such a child in our view (the caller's route is older or newer than ours).
    pub fn child_cell_verdict(&self, pubend: &PubendRef, cell: &CellName, message: &F::Message) -> Verdict {
        let verdict = match self.judge(pubend, cell) {
            Some(Judge::Own(child, root, tree)) => self.own_verdict((root, tree), child, message, true),
            Some(Judge::Mate(helper, root)) => child_verdict(true, helper.down_synced.contains(root), || {
                helper.down.get(root).is_some_and(|down| down.any_match(message))
            }),
            None => Verdict::Unsure,
        };
        self.unless_departed_wants(verdict, Some(cell), None, message)
    }

    /// Whether child cell `cell` is in `pubend`'s tree below us: false only when the summary
    /// [`Router::child_cell_verdict`] judges by is vouched and empty (nothing behind the child
    /// could match, so guaranteed delivery need not wait for its acks) and no departed broker
    /// of the cell is held. A child we cannot judge is in.
    pub fn child_cell_in_tree(&self, pubend: &PubendRef, cell: &CellName) -> bool {
        if self.departed_held(Some(cell), None) {
            return true;
        }
        match self.judge(pubend, cell) {
            Some(Judge::Own(child, ..)) => !child.synced || child.summary.kept().next().is_some(),
            Some(Judge::Mate(helper, root)) => {
                !helper.down_synced.contains(root) || self.holds_any(&helper.name, &Scope::Tree(root.clone()))
            }
            None => true,
        }
    }

    /// The filter edge towards linked cell mate `mate`'s local subscribers: F only if the
    /// mate vouched for its local summary and that rules the message out; `Unsure` for a
    /// broker that is not a linked mate.
    pub fn mate_verdict(&self, mate: &BrokerName, message: &F::Message) -> Verdict {
        let verdict = match self.routes.mates.iter().find(|held| held.name == *mate) {
            Some(held) => child_verdict(true, held.local_synced, || held.local.any_match(message)),
            None => Verdict::Unsure,
        };
        self.unless_departed_wants(verdict, None, Some(mate), message)
    }

    /// A summary's F stands only if no held departed peer of that downstream wanted the
    /// message (`router/departed.rs`): interest held for a peer that went away still counts
    /// toward it when it comes back, until the hold ends.
    fn unless_departed_wants(
        &self,
        verdict: Verdict,
        cell: Option<&CellName>,
        mate: Option<&BrokerName>,
        message: &F::Message,
    ) -> Verdict {
        if verdict == Verdict::Filtered && self.departed_wants(cell, mate, message) {
            Verdict::Deliver
        } else {
            verdict
        }
    }

    /// Whether linked cell mate `mate`'s local subscribers are in a pubend's tree: false only
    /// when the mate vouched for an empty local summary.
    pub fn mate_in_tree(&self, mate: &BrokerName) -> bool {
        if self.departed_held(None, Some(mate)) {
            return true;
        }
        match self.routes.mates.iter().find(|held| held.name == *mate) {
            Some(held) => !held.local_synced || self.holds_any(mate, &Scope::Local),
            None => true,
        }
    }

    /// The id of the tree the filter edges judge `pubend`'s messages under now (its root's
    /// current tree here), `None` when its home's cell is not known. Guaranteed delivery tags
    /// each F it tells with it, and takes an F only under the same id: an F is sound only for
    /// the subtree it was judged for, and a receiver whose tree moved since may have gained
    /// subscribers below it that the judging summary did not hold.
    pub fn pubend_tree(&self, pubend: &PubendRef) -> Option<TreeId> {
        let root = self.table.graph.cell_of(&pubend.home)?;
        Some(self.routes.trees.get(root)?.current.id)
    }

    fn judge(&self, pubend: &PubendRef, cell: &CellName) -> Option<Judge<'_, F>> {
        let root = self.table.graph.cell_of(&pubend.home)?;
        let tree = &self.routes.trees.get(root)?.current;
        let child = tree.children.iter().find(|child| child.cell == *cell)?;
        if child.known {
            return Some(Judge::Own(child, root, tree));
        }
        let target = &child.targets[choose(pubend.id, &child.targets)?].broker;
        let helper = self.routes.mates.iter().find(|mate| mate.links.contains(target))?;
        Some(Judge::Mate(helper, root))
    }

    /// Whether `peer`'s summary for `scope` holds any filter.
    fn holds_any(&self, peer: &BrokerName, scope: &Scope) -> bool {
        self.received.get(peer).and_then(|scoped| scoped.get(scope)).is_some_and(|filters| !filters.is_empty())
    }
}
