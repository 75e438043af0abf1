//! The driver's side of the broker network: which pubends it keeps streams of, the routes it
//! feeds the engine, the peers it hears from and sends to.
//!
//! - Pubends: every broker lists the pubends it hosts in its link-state advert; routing reports
//!   the advertised set ([`GdAction::PubendsAdvertised`]) and the driver tracks each remote one
//!   (so routing reports its moves) and keeps a stream of it.
//! - Routes: routing's per-pubend answer ([`PubendRoute`]) becomes the engine's
//!   [`StreamRoute`] at the start and on every [`GdAction::PubendsMoved`], as the simulator
//!   does (`crates/sim/src/gd/routes.rs`): the upstream by cell, and at the cell's entry broker
//!   the child cells and the linked cell mates (each mate a pseudo cell of its own). Unlike
//!   the simulator, children are not pruned by interest (nobody here sees every subscriber),
//!   and a child cell that drops out of routing's answer because it became unreachable (a
//!   crash, a cut) is kept, as are the children of the previous life after a restart
//!   ([`super::children`]): a stream releases only what every child it may owe acknowledged.
//! - Peers: the engine knows brokers and cells as small integers, numbered here once per life
//!   of the driver. A peer whose link handshake shows a new incarnation is reported with
//!   [`Input::PeerRestarted`] before any of its frames (the link task reads them only after
//!   the handshake that told us).
//! - Frames go out in the guaranteed lane of the link to the destination (never dropped for a
//!   full link, in order). With no link to it they go sideways (gd-protocol §11.3): wrapped in
//!   SIDEWAYS, naming their origin and destination, through a broker linked to both that is a
//!   cell mate of ours or of the destination (routing's `via` first), which hands them on; with
//!   no such broker they are dropped, and the core's nacks, acks and AckExpected recover once
//!   a route exists again. An ack or nack from a child cell that reaches a broker of ours that
//!   is not the pubend's entry broker (the child's link ends here, or it asked the whole cell)
//!   is handed on to the entry the same way, so the entry's ostream hears it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::BytesMut;
use tidings_delivery::{BrokerId, CellId, ChildLink, Input, Message, PubendId, StreamRoute, Tick, UpstreamCell};
use tidings_route::{BrokerName, CellName, GdAction, PubendRef, PubendRoute, Via};
use tidings_wire::peer::{PeerFrame, Sideways};
use tracing::{debug, warn};

use super::children::{Child, Remembered};
use super::driver::Driver;
use super::edges::SharedNames;
use super::peer;
use crate::cluster::Cluster;

use tidings_node::edges::MATE_CELL;

/// The network as the driver sees it.
pub(super) struct Net {
    pub(super) cluster: Arc<Cluster>,
    names: Vec<BrokerName>,
    ids: BTreeMap<BrokerName, BrokerId>,
    cells: BTreeMap<CellName, CellId>,
    /// Cell names by delivery's cell id.
    cell_names: Vec<CellName>,
    /// Linked (or once linked) peers: their cell and last incarnation.
    peers: BTreeMap<BrokerName, (CellName, u64)>,
    /// Remote pubends whose streams are kept here.
    pub(super) remote: BTreeMap<PubendId, PubendRef>,
    /// The pubends the adverts listed last, with their homes (`super::homes`).
    pub(super) advertised: Vec<PubendRef>,
    /// The route last fed per pubend.
    routes: BTreeMap<PubendId, StreamRoute>,
    /// Child cells per pubend as last fed, also in the previous life.
    remembered: Remembered,
    /// The same names for the matcher's filter edges (`super::edges`).
    pub(super) shared: SharedNames,
    scratch: BytesMut,
}

impl Net {
    /// `children_file`: where the streams' child cells are remembered across restarts.
    pub(super) fn new(cluster: Arc<Cluster>, children_file: std::path::PathBuf, shared: SharedNames) -> Net {
        Net {
            shared,
            remembered: Remembered::load(children_file),
            cluster,
            names: Vec::new(),
            ids: BTreeMap::new(),
            cells: BTreeMap::new(),
            cell_names: Vec::new(),
            peers: BTreeMap::new(),
            remote: BTreeMap::new(),
            advertised: Vec::new(),
            routes: BTreeMap::new(),
            scratch: BytesMut::new(),
        }
    }

    fn broker_id(&mut self, name: &BrokerName) -> BrokerId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = BrokerId(self.names.len() as u32);
        self.names.push(name.clone());
        self.shared.write().brokers.push(name.clone());
        self.ids.insert(name.clone(), id);
        id
    }

    fn cell_id(&mut self, cell: &CellName) -> CellId {
        if let Some(id) = self.cells.get(cell) {
            return *id;
        }
        let id = CellId(self.cell_names.len() as u32);
        self.cell_names.push(cell.clone());
        self.shared.write().cells.push(cell.clone());
        self.cells.insert(cell.clone(), id);
        id
    }

    /// The cell a message from `broker` comes from, as the engine keys it. A broker never
    /// linked to us (the origin of a sideways frame) is placed by routing's view.
    fn cell_of(&mut self, broker: &BrokerName) -> CellId {
        let cell = self.peers.get(broker).map(|(cell, _)| cell.clone()).or_else(|| self.cluster.cell_of_broker(broker));
        match cell {
            Some(cell) if cell != *self.cluster.cell() => self.cell_id(&cell),
            // A mate, or a peer not heard of (treated as its own cell).
            _ => CellId(MATE_CELL + self.broker_id(broker).0),
        }
    }

    /// Routing's answer as the engine's route.
    fn stream_route(&mut self, route: &PubendRoute) -> StreamRoute {
        let upstream = match route.upstream.first() {
            Some(first) => {
                let cell = self.cell_of(first);
                let mut brokers = Vec::new();
                for broker in &route.upstream {
                    if self.cell_of(broker) == cell {
                        brokers.push(self.broker_id(broker));
                    }
                }
                Some(UpstreamCell { cell, brokers })
            }
            None => None,
        };
        let mut children = Vec::new();
        if route.entry == *self.cluster.name() {
            for child in &route.children {
                // Unreachable now: kept, sends fail until a link is back (the core recovers).
                let via = match &child.via {
                    Some(Via::Mate(mate)) => Some(self.broker_id(mate)),
                    Some(Via::Direct) | None => None,
                };
                let cell = self.cell_id(&child.cell);
                children.push(ChildLink { cell, broker: self.broker_id(&child.broker), via });
            }
            for mate in &route.mates {
                let broker = self.broker_id(mate);
                children.push(ChildLink { cell: CellId(MATE_CELL + broker.0), broker, via: None });
            }
        }
        StreamRoute { upstream, children }
    }

    /// Children of the last route that routing no longer lists stay in the route while their
    /// cell is unreachable in the pubend's tree (`root`; `None`: the home itself is out of
    /// view): a broker that crashed or was cut off drops out of the view, and a pubend with no
    /// child left would release (and answer F for) what that subtree still needs. The stream
    /// waits for it instead (back-pressure in the log, never loss); a cell reachable through
    /// another part of the tree is let go.
    fn keep_unreachable_children(&mut self, pubend: PubendId, root: Option<&CellName>, route: &mut StreamRoute) {
        let last = match self.routes.get(&pubend) {
            Some(last) => last.children.clone(),
            None => self.remembered_children(pubend),
        };
        for child in &last {
            if route.children.iter().any(|c| c.cell == child.cell) {
                continue;
            }
            // Mates are pseudo cells (our own cell, always reachable): let go.
            let Some(cell) = self.cell_names.get(child.cell.0 as usize) else { continue };
            if root.is_none_or(|root| !self.cluster.cell_reachable(root, cell)) {
                route.children.push(*child);
            }
        }
    }

    /// The children of `pubend` remembered from the previous life (or none), as delivery's ids.
    fn remembered_children(&mut self, pubend: PubendId) -> Vec<ChildLink> {
        let remembered: Vec<Child> = self.remembered.get(pubend).map(<[Child]>::to_vec).unwrap_or_default();
        remembered
            .iter()
            .map(|(cell, broker)| ChildLink { cell: self.cell_id(cell), broker: self.broker_id(broker), via: None })
            .collect()
    }

    /// Remembers the child cells just fed for `pubend` (cell mates are not cells: left out).
    fn remember(&mut self, pubend: PubendId, route: &StreamRoute) {
        let children = route
            .children
            .iter()
            .filter_map(|child| {
                let cell = self.cell_names.get(child.cell.0 as usize)?;
                Some((cell.clone(), self.names.get(child.broker.0 as usize)?.clone()))
            })
            .collect();
        self.remembered.update(pubend, children);
    }

    /// The last route fed for `pubend`, as broker names: (upstream, children).
    pub(super) fn route_names(&self, pubend: PubendId) -> (Vec<String>, Vec<String>) {
        let name = |id: &BrokerId| self.broker_name(*id).unwrap_or_default();
        let Some(route) = self.routes.get(&pubend) else { return Default::default() };
        let upstream = route.upstream.iter().flat_map(|up| &up.brokers).map(name).collect();
        (upstream, route.children.iter().map(|child| name(&child.broker)).collect())
    }

    /// The name of the broker delivery calls `id`, if known.
    pub(super) fn broker_name(&self, id: BrokerId) -> Option<String> {
        self.names.get(id.0 as usize).map(ToString::to_string)
    }

    /// Sends one message of the engine to `to`: on our own link, else sideways through a
    /// broker linked to both (`via`, the cell mate routing chose for a child cell, first).
    pub(super) fn send(&mut self, to: BrokerId, via: Option<BrokerId>, message: &Message) -> Sent {
        let Some(name) = self.names.get(to.0 as usize).cloned() else { return Sent::Not };
        let frame = match peer::to_frame(message) {
            Ok(frame) => frame,
            Err(error) => {
                unsendable(&error, message);
                return Sent::Not;
            }
        };
        if let Some(bytes) = self.encode(&frame) {
            if self.cluster.send_guaranteed(&name, bytes) {
                return Sent::Direct;
            }
        }
        let via = via.and_then(|via| self.names.get(via.0 as usize).cloned());
        let Some(hop) = self.cluster.sideways_hop(&name, via.as_ref()) else { return Sent::Not };
        let origin = self.cluster.name().to_string();
        let sideways = PeerFrame::Sideways(Sideways { origin, to: name.to_string(), frame: Box::new(frame) });
        let Some(bytes) = self.encode(&sideways) else { return Sent::Not };
        if self.cluster.send_guaranteed(&hop, bytes) {
            Sent::Sideways
        } else {
            Sent::Not
        }
    }

    /// Hands a sideways frame on to its destination, on our own link only (a sideways frame
    /// crosses two links at most).
    fn hand_on(&mut self, frame: &Sideways) -> bool {
        let to = BrokerName::from(frame.to.as_str());
        let Some(bytes) = self.encode(&PeerFrame::Sideways(frame.clone())) else { return false };
        self.cluster.send_guaranteed(&to, bytes)
    }

    fn encode(&mut self, frame: &PeerFrame) -> Option<bytes::Bytes> {
        if let Err(error) = frame.encode(&mut self.scratch) {
            self.scratch.clear();
            unsendable(&error, frame);
            return None;
        }
        Some(self.scratch.split().freeze())
    }

    /// The entry broker of our cell for `pubend`, when it is a cell mate and not us: an ack or
    /// nack from a child cell that reaches us belongs to its ostream there.
    fn mate_entry(&self, pubend: PubendId) -> Option<BrokerName> {
        let reference = self.remote.get(&pubend)?;
        let route = self.cluster.pubend_route(reference)?;
        let mine = self.cluster.cell();
        let entry_cell = self.cluster.cell_of_broker(&route.entry);
        (route.entry != *self.cluster.name() && entry_cell.as_ref() == Some(mine)).then_some(route.entry)
    }
}

/// Says at WARN (at most once a second, with a count of those held back) that a guaranteed
/// message of ours does not encode, with its content: a peer would refuse it, so it is not
/// sent, and the bug that built it is ours. The protocol asks again; nothing loops on it.
fn unsendable(error: &tidings_wire::WireError, what: &dyn std::fmt::Debug) {
    static HUSH: crate::hush::Hush = crate::hush::Hush::new();
    if let Some(held) = HUSH.pass() {
        let content = format!("{what:?}");
        let content = content.get(..content.len().min(512)).unwrap_or(&content);
        warn!(%error, content, held, "a guaranteed frame of ours is malformed; not sent");
    }
}

/// How [`Net::send`] sent a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// On our own link to the destination.
    Direct,
    /// Through a broker linked to both.
    Sideways,
    /// Not at all: no link and no broker to go through.
    Not,
}

impl Driver {
    /// A link handshake completed: a new incarnation of a known peer voids what we believed
    /// it holds.
    pub(super) fn peer_up(&mut self, peer: BrokerName, cell: CellName, incarnation: u64) {
        if let Some(replicas) = self.replicas.as_mut() {
            replicas.peer_up(&peer, &cell);
        }
        // A new link voids what either end of it believed about remote queue group members.
        self.group_peer_reset(&peer, true);
        let Some(net) = self.net.as_mut() else { return };
        debug!(%peer, %cell, incarnation, "peer up");
        let previous = net.peers.insert(peer.clone(), (cell, incarnation));
        let broker = net.broker_id(&peer);
        if previous.is_some_and(|(_, before)| before != incarnation) {
            self.metrics.peer_restarts.inc();
            self.feed(Input::PeerRestarted { broker });
        }
        // Children kept while unreachable are let go now if routing placed them elsewhere.
        for pubend in self.pubends() {
            self.refresh_route(pubend);
        }
    }

    /// A guaranteed frame from a linked peer.
    pub(super) fn received(&mut self, from: BrokerName, message: Message) {
        self.metrics.pubend_received.message(&message);
        self.take_in(from, message);
    }

    /// A SIDEWAYS frame from linked peer `carrier`: for us, its message is taken in as from
    /// its origin; for another broker, it is handed on.
    pub(super) fn sideways(&mut self, carrier: BrokerName, frame: Sideways) {
        let Some(net) = self.net.as_mut() else { return };
        if frame.to != net.cluster.name().as_str() {
            if net.hand_on(&frame) {
                self.metrics.sideways_carried.inc();
            } else {
                self.metrics.sideways_unsent.inc();
                debug!(%carrier, to = frame.to, "no link to hand a sideways frame on to");
            }
            return;
        }
        let Some(message) = peer::from_frame(&frame.frame) else { return };
        self.metrics.pubend_received.message(&message);
        self.take_in(BrokerName::from(frame.origin.as_str()), message);
    }

    /// A message from `from` (directly or sideways) into the core, unless it is an ack or
    /// nack from another cell for a pubend whose entry broker in our cell is a mate: that
    /// belongs to the entry's ostream and is handed on to it.
    fn take_in(&mut self, from: BrokerName, message: Message) {
        let Some(net) = self.net.as_mut() else { return };
        let from_cell = net.cell_of(&from);
        let upstream_bound = matches!(message, Message::Ack { .. } | Message::Nack { .. });
        if upstream_bound && from_cell.0 < MATE_CELL {
            if let Some(entry) = net.mate_entry(message.pubend()) {
                let frame = match peer::to_frame(&message) {
                    Ok(frame) => frame,
                    Err(_) => return,
                };
                let sideways = Sideways { origin: from.to_string(), to: entry.to_string(), frame: Box::new(frame) };
                if net.hand_on(&sideways) {
                    self.metrics.sideways_carried.inc();
                } else {
                    self.metrics.sideways_unsent.inc();
                }
                return;
            }
        }
        tracing::trace!(me = %self.broker, from = %from, ?message, "gd in");
        let from = net.broker_id(&from);
        self.feed(Input::Received { from, from_cell, message });
    }

    /// One of routing's guaranteed-delivery actions.
    pub(super) fn routing(&mut self, action: GdAction) {
        match action {
            GdAction::PubendsAdvertised { pubends } => self.advertised(pubends),
            GdAction::PubendsMoved { pubends } => {
                for pubend in pubends {
                    self.refresh_route(PubendId(pubend.0));
                }
                // A home that went out of view may have a successor advertised already.
                self.rehome();
                // One that came into view answers a barrier for subscriptions waiting on it.
                self.ask_for_unstarted();
            }
            GdAction::NextTicksWanted { round, pubends } => {
                let ticks =
                    pubends.iter().map(|p| (*p, tidings_route::Tick(self.next_tick(PubendId(p.0)).0))).collect();
                if let Some(net) = &self.net {
                    net.cluster.handle(tidings_route::Input::NextTicks { round, ticks });
                }
            }
            GdAction::BarrierConfirmed { number, ticks } => {
                let ticks = ticks.into_iter().map(|(p, t)| (PubendId(p.0), Tick(t.0))).collect();
                self.barrier_confirmed(number, &ticks);
            }
        }
    }

    /// Feeds the pubend's current route if it differs from the last one fed.
    pub(super) fn refresh_route(&mut self, pubend: PubendId) {
        let Some(net) = self.net.as_mut() else { return };
        let reference = match net.remote.get(&pubend) {
            Some(reference) => reference.clone(),
            None if self.hosted.contains(&pubend) => {
                PubendRef { id: tidings_route::PubendId(pubend.0), home: net.cluster.name().clone() }
            }
            None => return,
        };
        let answer = net.cluster.pubend_route(&reference);
        let mut route = answer.as_ref().map(|r| net.stream_route(r)).unwrap_or_default();
        net.keep_unreachable_children(pubend, answer.as_ref().map(|r| &r.root), &mut route);
        if net.routes.get(&pubend) == Some(&route) {
            return;
        }
        debug!(me = %net.cluster.name(), pubend = pubend.0, ?route, "pubend route");
        net.routes.insert(pubend, route.clone());
        net.remember(pubend, &route);
        self.feed(Input::Route { pubend, route });
    }

    /// Whether the route last fed for remote `pubend` reaches its home
    /// (`tidings_node::starts::may_start_late`); a hosted pubend is always in view.
    pub(super) fn in_view(&self, pubend: PubendId) -> bool {
        self.hosted.contains(&pubend)
            || tidings_node::starts::may_start_late(self.net.as_ref().and_then(|net| net.routes.get(&pubend)))
    }

    /// Every pubend with a stream here: hosted and remote.
    pub(super) fn pubends(&self) -> Vec<PubendId> {
        let mut all: Vec<PubendId> = self.hosted.iter().copied().collect();
        if let Some(net) = &self.net {
            all.extend(net.remote.keys().copied());
        }
        all.sort_unstable();
        all.dedup();
        all
    }
}
