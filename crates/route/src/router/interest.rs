//! Interest: local subscriptions, summaries received from neighbours, and the summaries we
//! advertise (see [`crate::summary`] for what each scope means).

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Router};
use crate::error::{CloseReason, RouteError};
use crate::filter::{minimize, Filter};
use crate::message::PeerMessage;
use crate::names::{BrokerName, CellName};
use crate::summary::{apply, diff, Scope, Scoped, SummaryDelta};

/// What we advertise this round, computed once and then cut per link.
struct Advertised<F> {
    local: BTreeSet<F>,
    /// Per root: interest our own links into child cells bring in (for mates).
    down: BTreeMap<CellName, BTreeSet<F>>,
    /// Per root in which our cell has a parent: our cell's whole subtree interest.
    subtree: BTreeMap<CellName, BTreeSet<F>>,
}

impl<F: Filter> Router<F> {
    pub(super) fn handle_subscribe(&mut self, filter: F) {
        let count = self.local.entry(filter).or_insert(0);
        *count += 1;
        self.dirty |= *count == 1;
    }

    pub(super) fn handle_unsubscribe(&mut self, filter: F, out: &mut Vec<Action<F>>) {
        match self.local.get_mut(&filter) {
            Some(count) if *count > 1 => *count -= 1,
            Some(_) => {
                self.local.remove(&filter);
                self.dirty = true;
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
            Ok(()) => self.dirty = true,
            Err(out_of_sync) => {
                let error = RouteError::SummaryOutOfSync { peer: from.clone(), scope: out_of_sync.scope };
                out.push(Action::Rejected { error });
                out.push(Action::CloseLink { peer: from.clone(), reason: CloseReason::OutOfSync });
                self.drop_link(from, out);
            }
        }
    }

    /// Sends every link the difference between what it should now know and what it was told.
    pub(super) fn refresh_summaries(&mut self, out: &mut Vec<Action<F>>) {
        let advertised = self.advertised();
        for (peer, link) in &self.links {
            let desired = if link.cell == self.settings.cell {
                advertised.for_mate()
            } else {
                advertised.for_parent(&link.cell, &self.table)
            };
            let sent = self.sent.entry(peer.clone()).or_default();
            let deltas = diff(sent, &desired);
            if deltas.is_empty() {
                continue;
            }
            self.counters.summary_deltas_sent += deltas.len() as u64;
            *sent = desired;
            out.push(Action::Send { to: peer.clone(), message: PeerMessage::Summary(deltas) });
        }
    }

    fn advertised(&self) -> Advertised<F> {
        let local: BTreeSet<F> = minimize(self.local.keys()).into_iter().collect();
        let mut down = BTreeMap::new();
        let mut subtree = BTreeMap::new();
        for (root, tree) in &self.routes.trees {
            let below: BTreeSet<F> =
                minimize(tree.children.iter().flat_map(|child| &child.summary)).into_iter().collect();
            if tree.parent.is_some() {
                let mates = self
                    .routes
                    .mates
                    .iter()
                    .flat_map(|mate| mate.local.iter().chain(mate.down.get(root).into_iter().flatten()));
                let whole: BTreeSet<F> = minimize(local.iter().chain(&below).chain(mates)).into_iter().collect();
                if !whole.is_empty() {
                    subtree.insert(root.clone(), whole);
                }
            }
            if !below.is_empty() {
                down.insert(root.clone(), below);
            }
        }
        Advertised { local, down, subtree }
    }
}

impl<F: Filter> Advertised<F> {
    /// A mate learns our local interest and what our own links into child cells bring in.
    fn for_mate(&self) -> Scoped<F> {
        let mut desired: Scoped<F> =
            self.down.iter().map(|(root, set)| (Scope::Tree(root.clone()), set.clone())).collect();
        if !self.local.is_empty() {
            desired.insert(Scope::Local, self.local.clone());
        }
        desired
    }

    /// A broker of another cell learns our subtree's interest for every tree in which its cell
    /// is our parent; in every other tree it would never send us anything.
    fn for_parent(&self, peer_cell: &CellName, table: &crate::tree::RouteTable) -> Scoped<F> {
        self.subtree
            .iter()
            .filter(|(root, _)| table.trees.get(*root).and_then(|place| place.parent.as_ref()) == Some(peer_cell))
            .map(|(root, set)| (Scope::Tree(root.clone()), set.clone()))
            .collect()
    }
}
