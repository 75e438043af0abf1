//! A simulated broker network around real routers: FIFO connections (like TCP) that can be cut
//! loudly (both ends told) or silently (frames vanish, heartbeats must notice), brokers that
//! crash and restart with a new incarnation, local subscribers, and a record of every data hop
//! so the checks can judge it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tidings_route::{
    Action, Arrival, BrokerName, CellName, DataHeader, Filter, Forwarding, Hop, Incarnation, Input, LivenessSettings,
    LocalDelivery, Millis, PeerMessage, PubendId, Router, Topology,
};

use super::topic::Pattern;

pub(crate) const LIVENESS: LivenessSettings = LivenessSettings { heartbeat_interval_ms: 100, missed_heartbeats: 3 };

pub(crate) enum Packet {
    Control(PeerMessage<Pattern>),
    Data(DataHeader, usize),
}

/// One TCP-like connection: two FIFO directions, index 0 from the lower node index.
pub(crate) struct Conn {
    /// A silently cut connection loses everything; its ends find out by missed heartbeats.
    pub(crate) silent: bool,
    pub(crate) queues: [VecDeque<Packet>; 2],
}

/// A possible connection between two brokers (from the topology), and whether it is cut.
pub(crate) struct Wire {
    pub(crate) cut: bool,
    pub(crate) intra_cell: bool,
    pub(crate) conn: Option<Conn>,
}

pub(crate) struct Node {
    pub(crate) name: BrokerName,
    pub(crate) cell: CellName,
    pub(crate) router: Option<Router<Pattern>>,
    pub(crate) incarnation: u64,
    /// Local subscribers by id; they survive a crash (clients reconnect and re-subscribe).
    pub(crate) subs: BTreeMap<u64, Pattern>,
}

/// A cross-cell data hop, recorded while probing a converged network.
pub(crate) struct DownHop {
    pub(crate) msg: usize,
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) root: CellName,
}

pub(crate) struct Net {
    pub(crate) now: Millis,
    pub(crate) nodes: Vec<Node>,
    pub(crate) wires: BTreeMap<(usize, usize), Wire>,
    index: BTreeMap<BrokerName, usize>,
    /// Topic and publishing node per message id.
    pub(crate) messages: Vec<(String, usize)>,
    /// Accepted arrivals per (message, node): more than one means a loop or a duplicate.
    pub(crate) arrivals: BTreeMap<(usize, usize), u32>,
    /// Deliveries per (message, subscriber).
    pub(crate) deliveries: BTreeMap<(usize, u64), u32>,
    pub(crate) recording: bool,
    pub(crate) down_hops: Vec<DownHop>,
    pub(crate) within_delivers: Vec<(usize, usize)>,
    pub(crate) violations: Vec<String>,
    /// Control messages other than heartbeats, ever sent: quiet rounds leave it unchanged.
    pub(crate) control_sent: u64,
    /// Data copies refused by a receiver, per reason.
    pub(crate) drops: BTreeMap<String, u64>,
    /// Sideways copies (inside a cell, to be sent across a bundle by the receiver).
    pub(crate) sideways: u64,
    next_sub: u64,
    pending: VecDeque<(usize, Input<Pattern>)>,
    actions: Vec<Action<Pattern>>,
    forwarding: Forwarding,
}

impl Net {
    pub(crate) fn new(topology: &Topology) -> Self {
        let nodes: Vec<Node> = topology
            .brokers()
            .iter()
            .map(|spec| Node {
                name: spec.name.clone(),
                cell: spec.cell.clone(),
                router: None,
                incarnation: 0,
                subs: BTreeMap::new(),
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
            recording: false,
            down_hops: Vec::new(),
            within_delivers: Vec::new(),
            violations: Vec::new(),
            control_sent: 0,
            drops: BTreeMap::new(),
            sideways: 0,
            next_sub: 0,
            pending: VecDeque::new(),
            actions: Vec::new(),
            forwarding: Forwarding::default(),
        };
        for node in 0..net.nodes.len() {
            net.start(node);
        }
        net
    }

    pub(crate) fn alive(&self, node: usize) -> bool {
        self.nodes[node].router.is_some()
    }

    pub(crate) fn router(&self, node: usize) -> Option<&Router<Pattern>> {
        self.nodes[node].router.as_ref()
    }

    /// Starts (or restarts, with the next incarnation) a broker; its subscribers re-subscribe.
    pub(crate) fn start(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.incarnation += 1;
        let settings = tidings_route::RouterSettings {
            name: n.name.clone(),
            cell: n.cell.clone(),
            incarnation: Incarnation(n.incarnation),
            liveness: LIVENESS,
        };
        n.router = Some(Router::new(settings));
        let subs: Vec<Pattern> = n.subs.values().cloned().collect();
        for filter in subs {
            self.input(node, Input::Subscribe { filter });
        }
    }

    /// Crashes a broker. Loudly: its peers see the connections close. Silently: they must
    /// notice by missed heartbeats.
    pub(crate) fn crash(&mut self, node: usize, loud: bool) {
        self.nodes[node].router = None;
        let keys: Vec<(usize, usize)> = self.wires.keys().filter(|(a, b)| *a == node || *b == node).copied().collect();
        for key in keys {
            let other = if key.0 == node { key.1 } else { key.0 };
            self.break_conn(key, node, other, loud);
        }
    }

    /// Cuts a wire; an open connection over it closes loudly or silently.
    pub(crate) fn cut(&mut self, key: (usize, usize), loud: bool) {
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
            wire.conn = None;
            self.tell_down(other, gone);
        } else {
            conn.silent = true;
            conn.queues.iter_mut().for_each(VecDeque::clear);
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
    pub(crate) fn repair(&mut self, key: (usize, usize)) {
        if let Some(wire) = self.wires.get_mut(&key) {
            wire.cut = false;
            if wire.conn.as_ref().is_some_and(|c| c.silent) {
                wire.conn = None;
            }
        }
    }

    /// Opens a connection over a wire if it is whole, both ends are up and none is open.
    pub(crate) fn connect(&mut self, key: (usize, usize)) -> bool {
        let (a, b) = key;
        let Some(wire) = self.wires.get_mut(&key) else { return false };
        if wire.cut || wire.conn.is_some() || self.nodes[a].router.is_none() || self.nodes[b].router.is_none() {
            return false;
        }
        wire.conn = Some(Conn { silent: false, queues: [VecDeque::new(), VecDeque::new()] });
        for (me, peer) in [(a, b), (b, a)] {
            let p = &self.nodes[peer];
            let input =
                Input::LinkUp { peer: p.name.clone(), cell: p.cell.clone(), incarnation: Incarnation(p.incarnation) };
            self.input(me, input);
        }
        true
    }

    pub(crate) fn subscribe(&mut self, node: usize, filter: Pattern) -> u64 {
        self.next_sub += 1;
        self.nodes[node].subs.insert(self.next_sub, filter.clone());
        self.input(node, Input::Subscribe { filter });
        self.next_sub
    }

    pub(crate) fn unsubscribe(&mut self, node: usize, sub: u64) {
        if let Some(filter) = self.nodes[node].subs.remove(&sub) {
            self.input(node, Input::Unsubscribe { filter });
        }
    }

    /// Forgets silently broken connections that no live router holds any more (both ends
    /// crashed, or restarted): nobody is left to time them out.
    fn reap_silent(&mut self) {
        let holds = |net: &Net, me: usize, peer: usize| {
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

    /// Advances the clock and ticks every broker whose deadline has come.
    pub(crate) fn advance(&mut self, ms: u64) {
        self.reap_silent();
        self.now = self.now.after(ms);
        for node in 0..self.nodes.len() {
            let due = self.router(node).and_then(Router::next_deadline).is_some_and(|d| d <= self.now);
            if due {
                self.input(node, Input::Tick);
            }
        }
    }

    /// Feeds an input and everything it causes (closes reach the other end at once).
    pub(crate) fn input(&mut self, node: usize, input: Input<Pattern>) {
        self.pending.push_back((node, input));
        while let Some((node, input)) = self.pending.pop_front() {
            let Some(router) = self.nodes[node].router.as_mut() else { continue };
            let mut actions = std::mem::take(&mut self.actions);
            router.handle(self.now, input, &mut actions);
            for action in actions.drain(..) {
                self.apply(node, action);
            }
            self.actions = actions;
        }
    }

    fn apply(&mut self, node: usize, action: Action<Pattern>) {
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
                let loud = self.wires.get(&key).and_then(|w| w.conn.as_ref()).is_some_and(|c| !c.silent);
                if let Some(wire) = self.wires.get_mut(&key) {
                    wire.conn = None;
                }
                if loud {
                    self.pending.push_back((
                        peer,
                        Input::LinkDown {
                            peer: self.nodes[node].name.clone(),
                            incarnation: Incarnation(self.nodes[node].incarnation),
                        },
                    ));
                }
            }
            Action::RoutesChanged { .. } | Action::Guaranteed(_) => {}
            Action::Rejected { error } => {
                self.violations.push(format!("{} rejected an input: {error}", self.nodes[node].name));
            }
        }
    }

    fn enqueue(&mut self, from: usize, to: usize, packet: Packet) {
        let key = (from.min(to), from.max(to));
        let direction = usize::from(from > to);
        if let Some(conn) = self.wires.get_mut(&key).and_then(|w| w.conn.as_mut()) {
            if !conn.silent {
                conn.queues[direction].push_back(packet);
            }
        }
    }

    /// Connections with something queued, as (wire, direction).
    pub(crate) fn busy(&self) -> Vec<((usize, usize), usize)> {
        let mut busy = Vec::new();
        for (key, wire) in &self.wires {
            if let Some(conn) = &wire.conn {
                for direction in 0..2 {
                    if !conn.queues[direction].is_empty() {
                        busy.push((*key, direction));
                    }
                }
            }
        }
        busy
    }

    /// Delivers the first packet queued on one connection direction.
    pub(crate) fn deliver(&mut self, key: (usize, usize), direction: usize) {
        let Some(conn) = self.wires.get_mut(&key).and_then(|w| w.conn.as_mut()) else { return };
        let Some(packet) = conn.queues[direction].pop_front() else { return };
        let (from, to) = if direction == 0 { key } else { (key.1, key.0) };
        match packet {
            Packet::Control(message) => {
                self.input(to, Input::Received { from: self.nodes[from].name.clone(), message });
            }
            Packet::Data(header, msg) => self.data_arrival(to, from, &header, msg),
        }
    }

    /// A local publisher at `node` publishes on `topic`; returns the message id.
    pub(crate) fn publish(&mut self, node: usize, pubend: u64, topic: &str) -> usize {
        let msg = self.messages.len();
        self.messages.push((topic.to_string(), node));
        let Some(router) = self.nodes[node].router.as_ref() else { return msg };
        router.route(Arrival::Published { pubend: PubendId(pubend) }, topic, &mut self.forwarding);
        self.accept(node, msg);
        msg
    }

    fn data_arrival(&mut self, node: usize, from: usize, header: &DataHeader, msg: usize) {
        let Some(router) = self.nodes[node].router.as_ref() else { return };
        let topic = self.messages[msg].0.clone();
        let arrival = Arrival::Received { from: &self.nodes[from].name, header };
        router.route(arrival, &topic, &mut self.forwarding);
        match self.forwarding.dropped {
            None => self.accept(node, msg),
            Some(reason) => *self.drops.entry(format!("{reason:?}")).or_insert(0) += 1,
        }
    }

    /// Carries out a forwarding decision held in `self.forwarding`.
    fn accept(&mut self, node: usize, msg: usize) {
        let count = self.arrivals.entry((msg, node)).or_insert(0);
        *count += 1;
        if *count > 1 {
            self.violations.push(format!("message {msg} reached {} {} times", self.nodes[node].name, count));
        }
        let forwarding = std::mem::take(&mut self.forwarding);
        let topic = self.messages[msg].0.clone();
        if forwarding.deliver_locally {
            for (sub, filter) in &self.nodes[node].subs {
                if filter.matches(&topic) {
                    let delivered = self.deliveries.entry((msg, *sub)).or_insert(0);
                    *delivered += 1;
                    if *delivered > 1 {
                        self.violations.push(format!("message {msg} delivered {delivered} times to subscriber {sub}"));
                    }
                }
            }
        }
        let mut targets = BTreeSet::new();
        for send in &forwarding.sends {
            let to = self.index[&send.to];
            if !targets.insert(to) {
                self.violations.push(format!("{} sent message {msg} twice to {}", self.nodes[node].name, send.to));
            }
            if matches!(&send.header.hop, Hop::Within { across, .. } if !across.is_empty()) {
                self.sideways += 1;
            }
            if self.recording {
                match &send.header.hop {
                    Hop::Down => self.down_hops.push(DownHop { msg, from: node, to, root: send.header.root.clone() }),
                    Hop::Within { deliver: LocalDelivery::Deliver, .. } => self.within_delivers.push((msg, to)),
                    Hop::Within { .. } => {}
                }
            }
            self.enqueue(node, to, Packet::Data(send.header.clone(), msg));
        }
        self.forwarding = forwarding;
    }
}
