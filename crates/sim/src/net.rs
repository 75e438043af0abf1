//! A simulated broker network around real routers. Each link is a TCP-like connection: two
//! in-order directions whose frames are each delayed a little (never overtaking), that can be
//! cut loudly (both ends told) or silently (frames vanish; heartbeats must notice). Brokers
//! crash (soft state lost) and restart with a new incarnation, stall (frames pile up unread,
//! timers stop), and have local subscribers. The data path is recorded hop by hop for the
//! checks in `check`; a second protocol layer rides along (see [`crate::layer`]).

use std::collections::{BTreeMap, VecDeque};

use tidings_route::matching::RouteFilter;
use tidings_route::{
    Action, BrokerName, CellName, DataHeader, GdAction, Incarnation, Input, LivenessSettings, Millis, PeerMessage,
    PubendId, PubendRef, Router, RouterSettings, Tick, Topology,
};

use crate::layer::{Layer, LayerInput, LayerOutput};
use crate::rng::Rng;
use crate::topics::Content;

/// Liveness of every simulated link: fast, so faults are noticed within few steps.
pub const LIVENESS: LivenessSettings = LivenessSettings { heartbeat_interval_ms: 100, missed_heartbeats: 3 };

/// Upper bound of the random delay of one frame on a connection, in ms (well under a
/// heartbeat interval, so delay alone never kills a link).
pub const MAX_DELAY_MS: u64 = 20;

/// A frame of routing's in-order stream.
#[derive(Clone, Debug)]
pub enum Packet {
    /// A control message.
    Control(PeerMessage<RouteFilter>),
    /// A data message: its routing header and its id in [`Net::messages`].
    Data(DataHeader, usize),
}

/// One frame in flight: when it may arrive at the earliest.
#[derive(Clone, Debug)]
pub struct Queued<T> {
    /// The earliest arrival time.
    pub due: Millis,
    /// The frame.
    pub frame: T,
}

/// One TCP-like connection: two in-order directions (index 0 from the lower node index), and
/// the second layer's lossy channel.
#[derive(Clone, Debug)]
pub struct Conn<F> {
    /// A silently cut connection loses everything; its ends find out by missed heartbeats.
    pub silent: bool,
    /// Routing's frames, per direction, in order.
    pub queues: [VecDeque<Queued<Packet>>; 2],
    /// The second layer's frames, per direction, in any order.
    pub lossy: [Vec<Queued<F>>; 2],
}

/// A possible connection between two brokers (from the topology), and whether it is cut.
#[derive(Clone, Debug)]
pub struct Wire<F> {
    /// Cut wires take no new connections.
    pub cut: bool,
    /// Both ends share a cell.
    pub intra_cell: bool,
    /// The open connection, if any.
    pub conn: Option<Conn<F>>,
}

/// One simulated broker.
pub struct Node<L: Layer> {
    /// Its name.
    pub name: BrokerName,
    /// Its cell.
    pub cell: CellName,
    /// The router, `None` while crashed.
    pub router: Option<Router<RouteFilter>>,
    /// Grows on every start.
    pub incarnation: u64,
    /// Local subscribers by id; they survive a crash (clients reconnect and re-subscribe).
    pub subs: BTreeMap<u64, RouteFilter>,
    /// A stalled broker reads nothing and its timers do not fire.
    pub stalled: bool,
    /// Unsubscribes so far (barrier checks need to know interest only grew).
    pub removals: u64,
    /// The second layer's soft state, `None` while crashed.
    pub layer: Option<L::Node>,
    /// The second layer's store.
    pub store: L::Store,
}

/// A cross-cell or sideways data hop, as (message, from, to, hop header).
#[derive(Clone, Debug)]
pub struct HopRecord {
    /// Message id.
    pub msg: usize,
    /// Sending node.
    pub from: usize,
    /// Receiving node.
    pub to: usize,
    /// The header the copy carried.
    pub header: DataHeader,
    /// The sender's verdict for it.
    pub verdict: tidings_route::Verdict,
}

/// One published message.
pub struct MessageRecord {
    /// What it carries.
    pub content: Content,
    /// The message as routing tests it, built once.
    pub probe: tidings_route::matching::Probe,
    /// The publishing node.
    pub publisher: usize,
    /// Copies in flight.
    pub in_flight: u32,
}

/// A barrier confirmation seen at a node.
#[derive(Clone, Debug)]
pub struct Confirmation {
    /// The node.
    pub node: usize,
    /// The request number.
    pub number: u64,
    /// The ticks reported.
    pub ticks: Vec<(PubendId, Tick)>,
}

/// The simulated network.
pub struct Net<L: Layer> {
    /// Virtual time.
    pub now: Millis,
    /// The brokers.
    pub nodes: Vec<Node<L>>,
    /// Possible connections, keyed by (lower, higher) node index.
    pub wires: BTreeMap<(usize, usize), Wire<L::Frame>>,
    index: BTreeMap<BrokerName, usize>,
    /// Every message published.
    pub messages: Vec<MessageRecord>,
    /// Accepted arrivals per (message, node): more than one means a loop or a duplicate.
    pub arrivals: BTreeMap<(usize, usize), u32>,
    /// Deliveries per (message, subscriber).
    pub deliveries: BTreeMap<(usize, u64), u32>,
    /// Hops of the current step (the checks judge and clear them).
    pub hops: Vec<HopRecord>,
    /// Safety violations seen so far.
    pub violations: Vec<String>,
    /// Control messages other than heartbeats, ever sent: quiet rounds leave it unchanged.
    pub control_sent: u64,
    /// Data copies refused by a receiver, per reason.
    pub drops: BTreeMap<String, u64>,
    /// Sideways copies (inside a cell, to be sent across a bundle by the receiver).
    pub sideways: u64,
    /// Data copies lost in flight (cuts, crashes, closes), ever.
    pub lost_copies: u64,
    /// Barrier confirmations not yet judged.
    pub confirmations: Vec<Confirmation>,
    /// The second layer.
    pub layer: L,
    /// Frame delays and lossy-channel faults.
    pub rng: Rng,
    next_sub: u64,
    pending: VecDeque<(usize, Input<RouteFilter>)>,
    actions: Vec<Action<RouteFilter>>,
}

/// The pubend every simulated broker hosts (its next tick answers barriers).
pub fn home_pubend(name: &BrokerName) -> PubendRef {
    PubendRef { id: PubendId::derive(name, "sim"), home: name.clone() }
}

impl<L: Layer> Net<L> {
    /// All brokers of the topology started, nothing connected yet.
    pub fn new(topology: &Topology, layer: L, seed: u64) -> Self {
        let nodes: Vec<Node<L>> = topology
            .brokers()
            .iter()
            .map(|spec| Node {
                name: spec.name.clone(),
                cell: spec.cell.clone(),
                router: None,
                incarnation: 0,
                subs: BTreeMap::new(),
                stalled: false,
                removals: 0,
                layer: None,
                store: L::Store::default(),
            })
            .collect();
        let index: BTreeMap<BrokerName, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let wires = topology
            .connections()
            .iter()
            .map(|(a, b)| {
                let (i, j) = (index[a], index[b]);
                let key = (i.min(j), i.max(j));
                (key, Wire { cut: false, intra_cell: nodes[i].cell == nodes[j].cell, conn: None })
            })
            .collect();
        let mut net = Net {
            now: Millis(0),
            nodes,
            wires,
            index,
            messages: Vec::new(),
            arrivals: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            hops: Vec::new(),
            violations: Vec::new(),
            control_sent: 0,
            drops: BTreeMap::new(),
            sideways: 0,
            confirmations: Vec::new(),
            lost_copies: 0,
            layer,
            rng: Rng::new(seed ^ 0x005e_ed0f_de1a),
            next_sub: 0,
            pending: VecDeque::new(),
            actions: Vec::new(),
        };
        for node in 0..net.nodes.len() {
            net.start(node);
        }
        net
    }

    /// The node of a broker name.
    pub fn node_of(&self, name: &BrokerName) -> usize {
        self.index[name]
    }

    /// Whether a broker is running.
    pub fn alive(&self, node: usize) -> bool {
        self.nodes[node].router.is_some()
    }

    /// A running broker's router.
    pub fn router(&self, node: usize) -> Option<&Router<RouteFilter>> {
        self.nodes[node].router.as_ref()
    }

    /// Starts (or restarts, with the next incarnation) a broker; its subscribers re-subscribe.
    pub fn start(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.incarnation = self.layer.incarnation(&mut n.store, self.now, n.incarnation);
        n.stalled = false;
        let settings = RouterSettings {
            name: n.name.clone(),
            cell: n.cell.clone(),
            incarnation: Incarnation(n.incarnation),
            liveness: LIVENESS,
            departed_interest_ms: self.layer.departed_interest_ms(),
        };
        n.router = Some(Router::new(settings));
        n.layer = Some(self.layer.start(&n.name, &mut n.store));
        let pubend = home_pubend(&n.name);
        let subs: Vec<RouteFilter> = n.subs.values().cloned().collect();
        self.input(node, Input::TrackPubend { pubend });
        for filter in subs {
            self.input(node, Input::Subscribe { filter });
        }
    }

    /// Crashes a broker: soft state lost, store kept minus what the layer says. Loudly: its
    /// peers see the connections close. Silently: they must notice by missed heartbeats.
    pub fn crash(&mut self, node: usize, loud: bool) {
        self.nodes[node].router = None;
        self.nodes[node].layer = None;
        self.layer.crash(&mut self.nodes[node].store);
        let keys: Vec<(usize, usize)> = self.wires.keys().filter(|(a, b)| *a == node || *b == node).copied().collect();
        for key in keys {
            let other = if key.0 == node { key.1 } else { key.0 };
            self.break_conn(key, node, other, loud);
        }
    }

    /// Cuts a wire; an open connection over it closes loudly or silently.
    pub fn cut(&mut self, key: (usize, usize), loud: bool) {
        if let Some(wire) = self.wires.get_mut(&key) {
            wire.cut = true;
        }
        let open = self.wires.get(&key).is_some_and(|w| w.conn.is_some());
        self.break_conn(key, key.0, key.1, loud);
        if loud && open {
            self.tell_down(key.0, key.1);
        }
    }

    fn break_conn(&mut self, key: (usize, usize), gone: usize, other: usize, loud: bool) {
        let Some(wire) = self.wires.get_mut(&key) else { return };
        let Some(conn) = wire.conn.as_mut() else { return };
        if loud {
            let lost = wire.conn.take().map(|conn| conn.queues).unwrap_or_default();
            self.forget_copies(lost);
            self.tell_down(other, gone);
        } else {
            conn.silent = true;
            let lost = std::mem::take(&mut conn.queues);
            conn.lossy.iter_mut().for_each(Vec::clear);
            self.forget_copies(lost);
        }
    }

    /// Data copies lost with a connection are no longer in flight.
    fn forget_copies(&mut self, queues: [VecDeque<Queued<Packet>>; 2]) {
        for queued in queues.into_iter().flatten() {
            if let Packet::Data(_, msg) = queued.frame {
                self.messages[msg].in_flight -= 1;
                self.lost_copies += 1;
            }
        }
    }

    fn tell_down(&mut self, node: usize, peer: usize) {
        let input = Input::LinkDown {
            peer: self.nodes[peer].name.clone(),
            incarnation: Incarnation(self.nodes[peer].incarnation),
        };
        self.input(node, input);
    }

    /// Repairs a wire; a silently broken connection over it is gone for good (TCP would reset
    /// it), and the brokers reconnect afresh.
    pub fn repair(&mut self, key: (usize, usize)) {
        if let Some(wire) = self.wires.get_mut(&key) {
            wire.cut = false;
            if wire.conn.as_ref().is_some_and(|c| c.silent) {
                wire.conn = None;
            }
        }
    }

    /// Opens a connection over a wire if it is whole, both ends are up and none is open.
    pub fn connect(&mut self, key: (usize, usize)) -> bool {
        let (a, b) = key;
        let Some(wire) = self.wires.get_mut(&key) else { return false };
        if wire.cut || wire.conn.is_some() || self.nodes[a].router.is_none() || self.nodes[b].router.is_none() {
            return false;
        }
        wire.conn = Some(Conn { silent: false, queues: Default::default(), lossy: [Vec::new(), Vec::new()] });
        for (me, peer) in [(a, b), (b, a)] {
            let p = &self.nodes[peer];
            let input =
                Input::LinkUp { peer: p.name.clone(), cell: p.cell.clone(), incarnation: Incarnation(p.incarnation) };
            self.input(me, input);
        }
        true
    }

    /// A local client subscribes; returns the subscription id.
    pub fn subscribe(&mut self, node: usize, filter: RouteFilter) -> u64 {
        self.next_sub += 1;
        self.nodes[node].subs.insert(self.next_sub, filter.clone());
        self.input(node, Input::Subscribe { filter });
        self.next_sub
    }

    /// A local subscription ends.
    pub fn unsubscribe(&mut self, node: usize, sub: u64) {
        if let Some(filter) = self.nodes[node].subs.remove(&sub) {
            self.nodes[node].removals += 1;
            self.input(node, Input::Unsubscribe { filter });
        }
    }

    /// Asks a broker's router for a barrier over its subscriptions so far; returns its number.
    pub fn request_barrier(&mut self, node: usize) -> Option<u64> {
        let mut actions = std::mem::take(&mut self.actions);
        let number = self.nodes[node].router.as_mut().map(|router| router.request_barrier(&mut actions));
        for action in actions.drain(..) {
            self.apply(node, action);
        }
        self.actions = actions;
        self.run_pending();
        number
    }

    /// Forgets silently broken connections that no live router holds any more (both ends
    /// crashed, or restarted): nobody is left to time them out.
    fn reap_silent(&mut self) {
        let holds = |net: &Net<L>, me: usize, peer: usize| {
            net.router(me).is_some_and(|r| r.peers().any(|p| *p == net.nodes[peer].name))
        };
        let orphans: Vec<(usize, usize)> = self
            .wires
            .iter()
            .filter(|(_, w)| w.conn.as_ref().is_some_and(|c| c.silent))
            .map(|(k, _)| *k)
            .filter(|&(a, b)| !holds(self, a, b) && !holds(self, b, a))
            .collect();
        for key in orphans {
            if let Some(wire) = self.wires.get_mut(&key) {
                wire.conn = None;
            }
        }
    }

    /// Advances the clock and ticks every running, unstalled broker whose deadline has come.
    pub fn advance(&mut self, ms: u64) {
        self.reap_silent();
        self.now = self.now.after(ms);
        for node in 0..self.nodes.len() {
            if self.nodes[node].stalled {
                continue;
            }
            let due = self.router(node).and_then(Router::next_deadline).is_some_and(|d| d <= self.now);
            if due {
                self.input(node, Input::Tick);
            }
            let layer_due = self.nodes[node].layer.as_ref().and_then(|n| self.layer.next_deadline(n));
            if layer_due.is_some_and(|d| d <= self.now) {
                self.layer_input(node, LayerInput::Tick);
            }
        }
    }

    /// Feeds an input and everything it causes (closes reach the other end at once).
    pub fn input(&mut self, node: usize, input: Input<RouteFilter>) {
        self.pending.push_back((node, input));
        self.run_pending();
    }

    fn run_pending(&mut self) {
        while let Some((node, input)) = self.pending.pop_front() {
            let Some(router) = self.nodes[node].router.as_mut() else { continue };
            let mut actions = std::mem::take(&mut self.actions);
            let trace = routing_traced();
            if trace && !matches!(input, Input::Tick | Input::Received { message: PeerMessage::Heartbeat, .. }) {
                eprintln!("ROUTE {:?} node {node} in {input:?}", self.now);
            }
            router.handle(self.now, input, &mut actions);
            for action in actions.iter().filter(|_| trace) {
                if !matches!(action, Action::Send { message: PeerMessage::Heartbeat, .. }) {
                    eprintln!("ROUTE {:?} node {node} out {action:?}", self.now);
                }
            }
            for action in actions.drain(..) {
                self.apply(node, action);
            }
            self.actions = actions;
        }
    }

    fn apply(&mut self, node: usize, action: Action<RouteFilter>) {
        match action {
            Action::Send { to, message } => {
                if !matches!(message, PeerMessage::Heartbeat) {
                    self.control_sent += 1;
                }
                let to = self.index[&to];
                self.enqueue(node, to, Packet::Control(message));
            }
            Action::CloseLink { peer, .. } => {
                let peer = self.index[&peer];
                let key = (node.min(peer), node.max(peer));
                let conn = self.wires.get_mut(&key).and_then(|w| w.conn.take());
                let loud = conn.as_ref().is_some_and(|c| !c.silent);
                if let Some(conn) = conn {
                    self.forget_copies(conn.queues);
                }
                if loud {
                    let incarnation = Incarnation(self.nodes[node].incarnation);
                    let input = Input::LinkDown { peer: self.nodes[node].name.clone(), incarnation };
                    self.pending.push_back((peer, input));
                }
            }
            Action::RoutesChanged { .. } => {}
            Action::Guaranteed(gd) => self.guaranteed(node, gd),
            Action::Rejected { error } => {
                self.violations.push(format!("{} rejected an input: {error}", self.nodes[node].name));
            }
        }
    }

    /// Routing's guaranteed-delivery actions: the simulator answers tick requests with the
    /// publish count of the broker (standing in for the delivery core) and records
    /// confirmations; the second layer sees them all.
    fn guaranteed(&mut self, node: usize, gd: GdAction) {
        match &gd {
            GdAction::NextTicksWanted { round, pubends } if !self.layer.answers_ticks() => {
                let next = self.messages.iter().filter(|m| m.publisher == node).count() as u64;
                let ticks = pubends.iter().map(|p| (*p, Tick(next))).collect();
                self.pending.push_back((node, Input::NextTicks { round: *round, ticks }));
            }
            GdAction::BarrierConfirmed { number, ticks } => {
                self.confirmations.push(Confirmation { node, number: *number, ticks: ticks.clone() });
            }
            GdAction::PubendsMoved { .. } | GdAction::PubendsAdvertised { .. } | GdAction::NextTicksWanted { .. } => {}
        }
        self.layer_input(node, LayerInput::Routing(gd));
    }

    /// Feeds the second layer of `node` one input and carries out what it asks (a driver
    /// injects its workload this way).
    pub fn layer_input(&mut self, node: usize, input: LayerInput<L::Frame>) {
        let n = &mut self.nodes[node];
        let Some(layer_node) = n.layer.as_mut() else { return };
        let mut out = Vec::new();
        self.layer.handle(layer_node, &mut n.store, &mut n.router, self.now, input, &mut out);
        for output in out {
            match output {
                LayerOutput::Send { to, frame } => self.enqueue_lossy(node, self.index[&to], frame),
                LayerOutput::Route(input) => self.pending.push_back((node, input)),
            }
        }
        self.run_pending();
    }
}

/// Whether `SIM_RTRACE` asks for every router's inputs and actions (heartbeats and timer ticks
/// left out) on stderr; read once, as the check runs for every input.
fn routing_traced() -> bool {
    static TRACED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACED.get_or_init(|| std::env::var_os("SIM_RTRACE").is_some())
}
