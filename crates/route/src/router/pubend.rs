//! Routing queries for guaranteed delivery, per pubend rather than per message: where a
//! pubend's stream comes from (upstream candidates, for acks and nacks), where it goes
//! (children, for ostreams), and who shares our cell. The delivery core keeps per-pubend
//! streams keyed by these answers, so route also tells it which tracked pubends' answers moved
//! when the view changed: only those streams reset.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Action, GdAction, Router};
use crate::filter::Filter;
use crate::limits::MAX_PUBENDS_PER_ADVERT;
use crate::message::PeerMessage;
use crate::names::{BrokerName, CellName, PubendId, TreeId};
use crate::rendezvous::{choose, Target};

/// A publishing endpoint as routing needs to know it: its id and the broker hosting it (its
/// PHB), whose cell is the root of its tree.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize)]
pub struct PubendRef {
    /// The pubend's stable id (see [`PubendId::derive`]).
    pub id: PubendId,
    /// The broker that hosts it.
    pub home: BrokerName,
}

/// How this broker reaches the entry broker of a child cell.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub enum Via {
    /// Over our own link.
    Direct,
    /// Sideways through this cell mate, which has the link.
    Mate(BrokerName),
}

/// One child cell of our cell in a pubend's tree.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct PubendChild {
    /// The child cell: guaranteed-delivery ostreams are keyed by it, so acks survive a change of
    /// entry broker inside the cell.
    pub cell: CellName,
    /// The broker the pubend enters the child cell through (rendezvous hashing).
    pub broker: BrokerName,
    /// How we reach it; `None` when neither we nor a linked mate has a link to it (messages for
    /// that child stop here until link state settles).
    pub via: Option<Via>,
}

/// Everything routing says about one pubend at this broker, without a message.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct PubendRoute {
    /// The pubend.
    pub pubend: PubendRef,
    /// Its root cell.
    pub root: CellName,
    /// The tree it travels down now.
    pub tree: TreeId,
    /// The broker of our cell where the pubend enters it (at the root cell: its home). Only that
    /// broker does the cell's work for the pubend (local delivery by mates, child cells).
    pub entry: BrokerName,
    /// Where acks and nacks go, best first. At our cell's entry broker: the linked brokers of the
    /// parent cell, the parent cell's own entry broker first; at any other broker of the cell:
    /// the entry broker, if linked. Empty at the home broker.
    pub upstream: Vec<BrokerName>,
    /// Child cells of our cell in the tree, seen from this broker (meaningful where we are the
    /// entry broker, or a mate it routes sideways through).
    pub children: Vec<PubendChild>,
    /// Linked cell mates, sorted.
    pub mates: Vec<BrokerName>,
}

impl PubendRoute {
    /// What a stream depends on: if this differs between two answers, the pubend's streams at
    /// this broker must reset.
    fn stream_key(&self) -> (&TreeId, &BrokerName, &[BrokerName], &[PubendChild]) {
        (&self.tree, &self.entry, &self.upstream, &self.children)
    }
}

impl<F: Filter> Router<F> {
    /// Where one pubend's stream comes from and goes to at this broker, or `None` when its home
    /// is not reachable in our view.
    pub fn pubend_route(&self, pubend: &PubendRef) -> Option<PubendRoute> {
        let graph = &self.table.graph;
        let root = graph.cell_of(&pubend.home)?.clone();
        let place = self.table.trees.get(&root)?;
        let own_cell = graph.cell_index(&self.settings.cell)?;
        let entry = if place.parent.is_none() {
            pubend.home.clone()
        } else {
            let targets: Vec<Target> =
                place.shape.entries[own_cell].iter().map(|b| Target::new(graph.brokers[*b].clone())).collect();
            targets[choose(pubend.id, &targets)?].broker.clone()
        };
        let me = &self.settings.name;
        let upstream = if *me == entry {
            self.parent_candidates(pubend.id, &root)
        } else if graph.linked_by_name(me, &entry) {
            vec![entry.clone()]
        } else {
            Vec::new()
        };
        let children = place
            .children
            .iter()
            .filter_map(|bundle| {
                let broker = bundle.targets[choose(pubend.id, &bundle.targets)?].broker.clone();
                let via = if graph.linked_by_name(me, &broker) {
                    Some(Via::Direct)
                } else {
                    self.table.mates.iter().find(|mate| graph.linked_by_name(mate, &broker)).cloned().map(Via::Mate)
                };
                Some(PubendChild { cell: bundle.cell.clone(), broker, via })
            })
            .collect();
        let mates = self.table.mates.clone();
        Some(PubendRoute { pubend: pubend.clone(), root, tree: place.id, entry, upstream, children, mates })
    }

    /// The cell of any broker in our view (linked to us or not): a frame handed sideways names
    /// its origin, whose cell the receiver's core keys the stream by.
    pub fn cell_of_broker(&self, broker: &BrokerName) -> Option<CellName> {
        self.table.graph.cell_of(broker).cloned()
    }

    /// The broker to hand a guaranteed frame for `to` through when this broker has no link of
    /// its own to `to` (gd-protocol §11.3): one with an up link from us that our view shows
    /// linked to `to`, and a cell mate of ours or of `to` (never a broker of a third cell, so a
    /// sideways frame crosses exactly two links). `via`, the mate routing chose for a child
    /// cell, is preferred; otherwise the first such broker by name. `None` if `to` is linked to
    /// us (send it directly) or nobody qualifies (the frame waits for the core's recovery).
    pub fn sideways_hop(&self, to: &BrokerName, via: Option<&BrokerName>) -> Option<BrokerName> {
        if self.links.contains_key(to) {
            return None;
        }
        let graph = &self.table.graph;
        let (mine, theirs) = (graph.cell_of(&self.settings.name), graph.cell_of(to));
        let fits = |hop: &BrokerName| {
            let cell = graph.cell_of(hop);
            hop != to
                && self.links.contains_key(hop)
                && graph.linked_by_name(hop, to)
                && cell.is_some()
                && (cell == mine || cell == theirs)
        };
        if let Some(via) = via.filter(|via| fits(via)) {
            return Some(via.clone());
        }
        self.links.keys().find(|hop| fits(hop)).cloned()
    }

    /// Linked peers on a shortest path to `to` in our view, in name order (`to` alone when it
    /// is linked; none when it is us or unreachable): where a frame for one broker goes next
    /// when brokers between hand it on (a guaranteed queue group's GROUP). Every broker on the
    /// way picks among its own, so the frame's hops come ever closer to `to` in each view.
    pub fn next_hops(&self, to: &BrokerName) -> Vec<BrokerName> {
        if *to == self.settings.name {
            return Vec::new();
        }
        if self.links.contains_key(to) {
            return vec![to.clone()];
        }
        let graph = &self.table.graph;
        let (Some(target), Some(me)) = (graph.broker_index(to), graph.broker_index(&self.settings.name)) else {
            return Vec::new();
        };
        let distance = graph.distances_from_all(&[target]);
        let Some(closer) = distance[me].checked_sub(1).filter(|_| distance[me] != usize::MAX) else {
            return Vec::new();
        };
        graph.links[me]
            .iter()
            .filter(|peer| distance[**peer] == closer)
            .map(|peer| graph.brokers[*peer].clone())
            .filter(|peer| self.links.contains_key(peer))
            .collect()
    }

    /// Whether `cell` is reachable in the tree rooted at `root` in our view. Guaranteed delivery
    /// keeps waiting for a child cell that left a pubend's route by becoming unreachable (a
    /// crash or a cut), but not for one that is reachable through another part of the tree.
    pub fn cell_reachable(&self, root: &CellName, cell: &CellName) -> bool {
        let (Some(place), Some(index)) = (self.table.trees.get(root), self.table.graph.cell_index(cell)) else {
            return false;
        };
        place.shape.depth.get(index).is_some_and(Option::is_some)
    }

    /// Linked brokers of our parent cell in `root`'s tree, the parent cell's entry broker for
    /// the pubend first.
    fn parent_candidates(&self, pubend: PubendId, root: &CellName) -> Vec<BrokerName> {
        let mut peers = self.upstream_peers(root);
        let graph = &self.table.graph;
        let Some(place) = self.table.trees.get(root) else { return peers };
        let Some(parent) = place.parent.as_ref().and_then(|cell| graph.cell_index(cell)) else { return peers };
        let targets: Vec<Target> =
            place.shape.entries[parent].iter().map(|b| Target::new(graph.brokers[*b].clone())).collect();
        if let Some(first) = choose(pubend, &targets).map(|index| &targets[index].broker) {
            if let Some(at) = peers.iter().position(|peer| peer == first) {
                let entry = peers.remove(at);
                peers.insert(0, entry);
            }
        }
        peers
    }

    /// Pubends whose streams the shell keeps here; [`GdAction::PubendsMoved`] reports changes
    /// to their routes.
    pub(super) fn track(&mut self, pubend: PubendRef) {
        let route = self.pubend_route(&pubend);
        self.tracked.insert(pubend, route);
    }

    /// Re-issues our advert if the pubends hosted here changed (tracked ones whose home we are).
    pub(super) fn advertise_own_pubends(&mut self, out: &mut Vec<Action<F>>) {
        let me = &self.settings.name;
        let hosted: Vec<PubendId> = self
            .tracked
            .keys()
            .filter(|pubend| pubend.home == *me)
            .map(|pubend| pubend.id)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .take(MAX_PUBENDS_PER_ADVERT)
            .collect();
        if hosted == self.db.own().pubends {
            return;
        }
        let own = self.db.set_own_pubends(hosted);
        for peer in self.links.keys() {
            out.push(Action::Send { to: peer.clone(), message: PeerMessage::Adverts(vec![own.clone()]) });
        }
        self.dirty.view = true;
    }

    /// Reports the pubends the adverts list, when that changed with the view.
    pub(super) fn settle_advertised_pubends(&mut self, out: &mut Vec<Action<F>>) {
        if self.advertised_pubends.0 == self.table.view {
            return;
        }
        let pubends: std::collections::BTreeSet<PubendRef> = self
            .db
            .adverts()
            .flat_map(|advert| advert.pubends.iter().map(|id| PubendRef { id: *id, home: advert.origin.clone() }))
            .collect();
        let pubends: Vec<PubendRef> = pubends.into_iter().collect();
        let changed = pubends != self.advertised_pubends.1;
        self.advertised_pubends = (self.table.view, pubends);
        if changed {
            out.push(Action::Guaranteed(GdAction::PubendsAdvertised { pubends: self.advertised_pubends.1.clone() }));
        }
    }

    /// Recomputes every tracked pubend's route after a view change and reports those that moved.
    pub(super) fn report_moved_pubends(&mut self, out: &mut Vec<Action<F>>) {
        let pubends: Vec<PubendRef> = self.tracked.keys().cloned().collect();
        let mut moved = Vec::new();
        for pubend in pubends {
            let route = self.pubend_route(&pubend);
            let before = self.tracked.get(&pubend).and_then(Option::as_ref).map(PubendRoute::stream_key);
            if before != route.as_ref().map(PubendRoute::stream_key) {
                moved.push(pubend.id);
            }
            self.tracked.insert(pubend, route);
        }
        if !moved.is_empty() {
            out.push(Action::Guaranteed(GdAction::PubendsMoved { pubends: moved }));
        }
    }
}

/// Per tracked pubend, its last route (`None`: unreachable then).
pub(super) type Tracked = BTreeMap<PubendRef, Option<PubendRoute>>;
