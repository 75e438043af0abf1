//! One guaranteed-delivery run: routers and delivery engines on every broker, guaranteed
//! publishers (publisher id + seq, retried after their broker restarts) and subscribers that
//! start through the subscription barrier and churn; chaos with every fault of the network
//! model and the checks after every step; then every fault heals, time passes, and every
//! live subscriber must have got exactly Expected and every pubend must have released its log.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use tidings_delivery::{CellId, ChildLink, PubendId, Settings, StreamRoute, SubendId, Tick, TickRange, UpstreamCell};
use tidings_route::{BrokerName, PubendRoute, Topology, Via};

use crate::gd::layer::{Command, GdFrame, GdLayer, MATE_CELL};
use crate::gd::world::{Publish, Subscriber, World};
use crate::gd::{settings, Stats};
use crate::layer::LayerInput;
use crate::net::{home_pubend, Net, LIVENESS};
use crate::rng::Rng;
use crate::scenario::{Coverage, Failure, Plan};
use crate::topics::{filter, random_content, random_filter};
use tidings_route::matching::RouteFilter;

/// Virtual time the healed network gets to deliver everything owed and release the logs.
pub const SETTLE_MS: u64 = 20_000;

/// Which disturbances a run draws besides the lossy channel (loss, duplication, reordering,
/// delay of every delivery frame), which is always on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mode {
    /// Crashes (every role), stalls, loud and silent cuts, partitions, and their repairs.
    pub faults: bool,
    /// Subscribers joining (through the barrier) and leaving during the run.
    pub churn: bool,
    /// Publishing brokers crash (loudly or silently) and restart (with a clock stepped back)
    /// while everything else stays up.
    pub pubend_crashes: bool,
    /// Brokers of every role crash and restart while no subscriber is owed anything (the
    /// network settles, then the publisher reconnects and retries).
    pub idle_crashes: bool,
}

impl Mode {
    /// Everything.
    pub const FULL: Mode = Mode { faults: true, churn: true, pubend_crashes: true, idle_crashes: false };
    /// The lossy channel only: subscribers are set up first, brokers and links stay up.
    pub const LOSSY: Mode = Mode { faults: false, churn: false, pubend_crashes: false, idle_crashes: false };
    /// The lossy channel and subscriber churn.
    pub const CHURN: Mode = Mode { faults: false, churn: true, pubend_crashes: false, idle_crashes: false };
    /// The lossy channel and crashes of publishing brokers.
    pub const PUBEND_CRASHES: Mode = Mode { faults: false, churn: false, pubend_crashes: true, idle_crashes: false };
    /// The lossy channel and crashes of every role while nothing is owed.
    pub const IDLE_CRASHES: Mode = Mode { faults: false, churn: false, pubend_crashes: false, idle_crashes: true };
    /// The lossy channel and faults, subscribers set up first.
    pub const FAULTS: Mode = Mode { faults: true, churn: false, pubend_crashes: false, idle_crashes: false };
}

/// The state of one run.
struct GdRun {
    mode: Mode,
    net: Net<GdLayer>,
    world: Rc<RefCell<World>>,
    rng: Rng,
    plan: Plan,
    coverage: Coverage,
}

/// Runs one plan on a topology; returns what it covered and the run's figures.
pub fn run_gd(topology: &Topology, plan: &Plan, mode: Mode) -> Result<(Coverage, Stats), Failure> {
    run_gd_with(topology, plan, mode, settings())
}

/// [`run_gd`] with given engine settings (the mutation tests switch breakages on).
pub fn run_gd_with(
    topology: &Topology,
    plan: &Plan,
    mode: Mode,
    settings: Settings,
) -> Result<(Coverage, Stats), Failure> {
    let mut run = GdRun::new(topology, plan, mode, settings);
    let fail = |run: &GdRun, step: Option<usize>, message: String| Failure {
        step,
        faults: run.coverage.faults,
        message: format!("{message}{}", run.describe()),
    };
    run.setup().map_err(|m| fail(&run, None, format!("setup: {m}")))?;
    for step in 0..plan.steps {
        run.step().map_err(|m| fail(&run, Some(step), m))?;
    }
    run.settle().map_err(|m| fail(&run, None, format!("after healing: {m}")))?;
    let mut stats = run.world.borrow().stats;
    for layer in run.net.nodes.iter().filter_map(|n| n.layer.as_ref()) {
        let counters = layer.engine.counters();
        stats.nack_ticks_sent += counters.nack_ticks_sent;
        stats.nack_ticks_absorbed += counters.nack_ticks_absorbed;
        stats.nacks_sent += counters.nacks_sent;
    }
    run.coverage.exactly_once = stats.deliveries as usize;
    Ok((run.coverage, stats))
}

/// The nack-consolidation measurement: `publisher` publishes every 5 ms for 3 s into a
/// network whose other brokers each hold one catch-all guaranteed subscriber; from 1 s on,
/// every delivery frame on the wire between `a` and `b` is lost for `blackout_ms` (the
/// routing link stays up), then the network settles. Returns the run's figures.
pub fn measure_blackout(
    topology: &Topology,
    seed: u64,
    publisher: &BrokerName,
    wire: (&BrokerName, &BrokerName),
    blackout_ms: u64,
) -> Result<Stats, String> {
    let plan = Plan { seed, steps: 0, skip: Default::default() };
    let mut run = GdRun::new(topology, &plan, Mode::LOSSY, settings());
    let home = run.net.node_of(publisher);
    let pubend = PubendId(home_pubend(publisher).id.0);
    run.world.borrow_mut().pubends = [(home, pubend)].into_iter().collect();
    run.pump(500);
    for node in (0..run.net.nodes.len()).filter(|&n| n != home) {
        run.subscribe_with(node, filter(">", None));
    }
    run.pump(500);
    let (a, b) = (run.net.node_of(wire.0), run.net.node_of(wire.1));
    for slot in 0..600u64 {
        if slot == 200 {
            run.world.borrow_mut().blackout = Some((a.min(b), a.max(b)));
        }
        if slot * 5 == 1000 + blackout_ms {
            run.world.borrow_mut().blackout = None;
        }
        run.publish_at(home);
        run.pump(5);
        run.check()?;
    }
    run.world.borrow_mut().blackout = None;
    run.settle()?;
    let mut stats = run.world.borrow().stats;
    for layer in run.net.nodes.iter().filter_map(|n| n.layer.as_ref()) {
        let counters = layer.engine.counters();
        stats.nack_ticks_sent += counters.nack_ticks_sent;
        stats.nack_ticks_absorbed += counters.nack_ticks_absorbed;
        stats.nacks_sent += counters.nacks_sent;
    }
    Ok(stats)
}

impl GdRun {
    fn new(topology: &Topology, plan: &Plan, mode: Mode, settings: Settings) -> Self {
        let mut rng = Rng::new(plan.seed ^ 0x006d_5eed);
        let names: Vec<BrokerName> = topology.brokers().iter().map(|b| b.name.clone()).collect();
        let mut cells: Vec<_> = topology.brokers().iter().map(|b| b.cell.clone()).collect();
        cells.sort();
        cells.dedup();
        let mut world = World::default();
        for spec in topology.brokers() {
            world.cell_of.push(cells.iter().position(|c| *c == spec.cell).unwrap_or(0) as u32);
        }
        let publishers = rng.between(1, 3.min(names.len()));
        let mut candidates: Vec<usize> = (0..names.len()).collect();
        rng.shuffle(&mut candidates);
        for &node in candidates.iter().take(publishers) {
            world.pubends.insert(node, PubendId(home_pubend(&names[node]).id.0));
        }
        let world = Rc::new(RefCell::new(world));
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let layer = GdLayer { settings, world: world.clone(), names, index, seed: plan.seed };
        let net = Net::new(topology, layer, plan.seed);
        GdRun { mode, net, world, rng, plan: plan.clone(), coverage: Coverage::default() }
    }

    fn setup(&mut self) -> Result<(), String> {
        self.pump(500);
        for node in 0..self.net.nodes.len() {
            for _ in 0..self.rng.between(0, 2) {
                self.subscribe(node);
            }
        }
        self.pump(500);
        self.check()
    }

    fn check(&self) -> Result<(), String> {
        let world = self.world.borrow();
        match (world.violations.first(), self.net.violations.first()) {
            (Some(v), _) | (None, Some(v)) => Err(v.clone()),
            (None, None) => Ok(()),
        }
    }

    fn command(&mut self, node: usize, command: Command) {
        let from = self.net.nodes[node].name.clone();
        self.net.layer_input(node, LayerInput::Frame { from, frame: GdFrame::Command(command) });
    }

    /// Mirrors the open connections into the world and feeds every changed route.
    fn refresh(&mut self) {
        let links = self.net.wires.iter().filter(|(_, w)| w.conn.is_some()).map(|(k, _)| *k).collect();
        self.world.borrow_mut().links = links;
        let pubends: Vec<(usize, PubendId)> = self.world.borrow().pubends.iter().map(|(&n, &p)| (n, p)).collect();
        for (home, pubend) in pubends {
            let reference = home_pubend(&self.net.nodes[home].name);
            let raw: Vec<Option<StreamRoute>> = (0..self.net.nodes.len())
                .map(|node| {
                    let router = self.net.router(node)?;
                    Some(router.pubend_route(&reference).map(|r| self.stream_route(node, &r)).unwrap_or_default())
                })
                .collect();
            let interested = self.interested(&raw);
            for (node, route) in raw.into_iter().enumerate() {
                let Some(mut route) = route else { continue };
                route.children.retain(|child| interested[child.broker.0 as usize]);
                let Some(layer) = self.net.nodes[node].layer.as_ref() else { continue };
                if layer.routes.get(&pubend) != Some(&route) {
                    self.command(node, Command::Route { pubend, route });
                }
            }
        }
    }

    /// Per node: whether it or a node below it in the routes has a live subscriber. A child
    /// without one is not in the pubend's tree (gd-protocol §9.1: it is not waited for).
    fn interested(&self, routes: &[Option<StreamRoute>]) -> Vec<bool> {
        let world = self.world.borrow();
        let mut interested: Vec<bool> =
            (0..routes.len()).map(|node| world.subs.values().any(|sub| sub.node == node && !sub.gone)).collect();
        // Fixed point over the child relation (routes may briefly disagree and even loop).
        loop {
            let mut changed = false;
            for (node, route) in routes.iter().enumerate() {
                let below = route.iter().flat_map(|r| &r.children).any(|c| interested[c.broker.0 as usize]);
                if below && !interested[node] {
                    interested[node] = true;
                    changed = true;
                }
            }
            if !changed {
                return interested;
            }
        }
    }

    /// Routing's answer as delivery's route: upstream by cell (a cell mate is a pseudo cell
    /// of its own), children the child cells (at the entry broker) and the linked mates.
    fn stream_route(&self, me: usize, route: &PubendRoute) -> StreamRoute {
        let world = self.world.borrow();
        let cell = |node: usize| {
            if world.cell_of[node] == world.cell_of[me] {
                CellId(MATE_CELL + node as u32)
            } else {
                CellId(world.cell_of[node])
            }
        };
        let broker = |name: &BrokerName| tidings_delivery::BrokerId(self.net.node_of(name) as u32);
        let upstream = route.upstream.first().map(|first| {
            let first_cell = cell(self.net.node_of(first));
            let brokers =
                route.upstream.iter().filter(|b| cell(self.net.node_of(b)) == first_cell).map(broker).collect();
            UpstreamCell { cell: first_cell, brokers }
        });
        let mut children = Vec::new();
        if route.entry == self.net.nodes[me].name {
            for child in &route.children {
                let via = match &child.via {
                    Some(Via::Direct) => None,
                    Some(Via::Mate(mate)) => Some(broker(mate)),
                    None => continue,
                };
                let cell = CellId(world.cell_of[self.net.node_of(&child.broker)]);
                children.push(ChildLink { cell, broker: broker(&child.broker), via });
            }
            for mate in &route.mates {
                let node = self.net.node_of(mate);
                children.push(ChildLink { cell: cell(node), broker: broker(mate), via: None });
            }
        }
        StreamRoute { upstream, children }
    }

    /// Delivers and lets time pass for `ms` of virtual time.
    fn pump(&mut self, ms: u64) {
        let end = self.net.now.after(ms);
        while self.net.now < end {
            let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
            for key in keys {
                self.net.connect(key);
            }
            self.refresh();
            let mut busy = self.net.busy();
            if busy.is_empty() {
                let next = self.net.next_due().map_or(5, |due| due.0.saturating_sub(self.net.now.0));
                self.net.advance(next.clamp(1, 5));
                continue;
            }
            self.rng.shuffle(&mut busy);
            for (key, direction) in busy {
                self.net.deliver(key, direction);
            }
        }
        self.refresh();
    }

    fn publish(&mut self) {
        let hosts: Vec<usize> = self.world.borrow().pubends.keys().copied().collect();
        let Some(&node) = self.rng.pick(&hosts) else { return };
        self.publish_at(node);
    }

    fn publish_at(&mut self, node: usize) {
        let content = random_content(&mut self.rng);
        if !self.net.alive(node) || self.net.nodes[node].stalled {
            return;
        }
        let (seq, msg) = {
            let mut world = self.world.borrow_mut();
            let msg = world.probes.len() as u64;
            world.probes.push(content.probe());
            let publishes = world.publishes.entry(node).or_default();
            let seq = publishes.len() as u64 + 1;
            publishes.push(Publish { seq, msg, acked: false });
            (seq, msg)
        };
        self.command(node, Command::Publish { seq, msg });
    }

    fn subscribe(&mut self, node: usize) {
        let filter = random_filter(&mut self.rng);
        self.subscribe_with(node, filter);
    }

    fn subscribe_with(&mut self, node: usize, filter: RouteFilter) {
        if !self.net.alive(node) {
            return;
        }
        let id = self.net.subscribe(node, filter.clone());
        let sub = Subscriber {
            node,
            filter,
            gone: false,
            starts: BTreeMap::new(),
            delivered: BTreeMap::new(),
            barrier: None,
        };
        self.world.borrow_mut().subs.insert(SubendId(id), sub);
        self.command(node, Command::Attach { subend: SubendId(id) });
        self.barrier(node, SubendId(id));
    }

    /// Asks for a barrier covering `subend`; a confirmation that came back at once is replayed.
    fn barrier(&mut self, node: usize, subend: SubendId) {
        let Some(number) = self.net.request_barrier(node) else { return };
        let confirmed = {
            let mut world = self.world.borrow_mut();
            if let Some(sub) = world.subs.get_mut(&subend) {
                sub.barrier = Some(number);
            }
            world.confirmed.get(&node).filter(|(n, _)| *n >= number).cloned()
        };
        if let Some((number, ticks)) = confirmed {
            self.command(node, Command::Confirmed { number, ticks });
        }
    }

    fn unsubscribe(&mut self, node: usize) {
        let subs: Vec<SubendId> =
            self.world.borrow().subs.iter().filter(|(_, s)| s.node == node && !s.gone).map(|(&id, _)| id).collect();
        let Some(&subend) = self.rng.pick(&subs) else { return };
        self.end_sub(node, subend);
        if self.net.alive(node) {
            self.command(node, Command::Detach { subend });
        }
    }

    fn end_sub(&mut self, node: usize, subend: SubendId) {
        if let Some(sub) = self.world.borrow_mut().subs.get_mut(&subend) {
            sub.gone = true;
        }
        self.net.unsubscribe(node, subend.0);
    }

    fn crash(&mut self, node: usize, loud: bool) {
        self.coverage.crashes += 1;
        self.net.crash(node, loud);
        let subs: Vec<SubendId> =
            self.world.borrow().subs.iter().filter(|(_, s)| s.node == node && !s.gone).map(|(&id, _)| id).collect();
        for subend in subs {
            self.end_sub(node, subend);
        }
        self.world.borrow_mut().confirmed.remove(&node);
    }

    /// A publishing broker crashes and comes straight back (its store keeps synced appends,
    /// its clock may step back). Only while every subscriber has what it is owed of that
    /// pubend: a restarted pubend knows no tree until routing reconverges, and today's core
    /// releases its log at once then (reported as a finding, not exercised here).
    fn crash_pubend(&mut self) {
        let hosts: Vec<(usize, PubendId)> = self.world.borrow().pubends.iter().map(|(&n, &p)| (n, p)).collect();
        let Some(&(node, pubend)) = self.rng.pick(&hosts) else { return };
        let loud = self.rng.chance(50);
        if self.net.alive(node) && self.world.borrow().caught_up(pubend) {
            self.crash(node, loud);
            self.restart(node);
            self.command(node, Command::Retry);
        }
    }

    /// A broker of any role crashes while no subscriber is owed anything, restarts, the
    /// network settles, and its publisher retries what was not acknowledged.
    fn crash_idle(&mut self) {
        let node = self.rng.below(self.net.nodes.len());
        let loud = self.rng.chance(50);
        let pubends: Vec<PubendId> = self.world.borrow().pubends.values().copied().collect();
        let idle = pubends.iter().all(|&p| self.world.borrow().caught_up(p));
        if !idle || !self.net.alive(node) {
            return;
        }
        self.crash(node, loud);
        if !loud {
            self.pump(4 * LIVENESS.heartbeat_interval_ms);
        }
        self.restart(node);
        self.pump(4 * LIVENESS.heartbeat_interval_ms);
        self.command(node, Command::Retry);
    }

    fn restart(&mut self, node: usize) {
        self.net.start(node);
        for peer in 0..self.net.nodes.len() {
            if peer != node && self.net.alive(peer) {
                self.command(peer, Command::PeerRestarted { peer: node });
            }
        }
    }

    /// One chaos step and the checks.
    fn step(&mut self) -> Result<(), String> {
        let n = self.net.nodes.len();
        let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
        match self.rng.below(100) {
            0..=59 => {
                // Frames due are delivered (a round: one per connection direction) before
                // time moves on, so only faults, never the scheduler, starve a link.
                let mut busy = self.net.busy();
                if busy.is_empty() {
                    self.net.advance(self.rng.between(1, 30) as u64);
                }
                self.rng.shuffle(&mut busy);
                for (key, direction) in busy {
                    self.net.deliver(key, direction);
                }
            }
            60..=62 if self.mode.churn => {
                let node = self.rng.below(n);
                self.subscribe(node);
            }
            63..=64 if self.mode.churn => {
                let node = self.rng.below(n);
                self.unsubscribe(node);
            }
            65..=79 => self.publish(),
            80..=88 => {
                if let Some(&key) = self.rng.pick(&keys) {
                    self.net.connect(key);
                }
            }
            89..=91 if self.mode.faults => self.fault(),
            92..=99 if self.mode.faults => self.repair(&keys),
            89..=90 if self.mode.pubend_crashes => self.crash_pubend(),
            89..=90 if self.mode.idle_crashes => self.crash_idle(),
            _ => self.net.advance(1),
        }
        self.refresh();
        self.check()
    }

    /// Draws a fault and applies it unless the plan skips it.
    fn fault(&mut self) {
        let number = self.coverage.faults;
        self.coverage.faults += 1;
        let n = self.net.nodes.len();
        let loud = self.rng.chance(50);
        let kind = self.rng.below(100);
        let node = self.rng.below(n);
        let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
        let key = self.rng.pick(&keys).copied();
        let side: Vec<bool> = (0..n).map(|_| self.rng.chance(50)).collect();
        if self.plan.skip.contains(&number) {
            return;
        }
        let dead = (0..n).filter(|i| !self.net.alive(*i)).count();
        if !loud {
            self.coverage.silent_faults += 1;
        }
        match kind {
            0..=29 if (dead + 1) * 3 <= n && self.net.alive(node) => self.crash(node, loud),
            30..=39 if self.net.alive(node) => {
                self.coverage.stalls += 1;
                self.net.nodes[node].stalled = true;
            }
            40..=49 => {
                self.coverage.partitions += 1;
                for key in keys.into_iter().filter(|(a, b)| side[*a] != side[*b]) {
                    self.net.cut(key, loud);
                }
            }
            _ => {
                if let Some(key) = key {
                    self.net.cut(key, loud);
                }
            }
        }
    }

    fn repair(&mut self, keys: &[(usize, usize)]) {
        match self.rng.below(3) {
            0 => {
                let cut: Vec<(usize, usize)> = keys.iter().copied().filter(|k| self.net.wires[k].cut).collect();
                if let Some(&key) = self.rng.pick(&cut) {
                    self.net.repair(key);
                }
            }
            1 => {
                let stalled: Vec<usize> = (0..self.net.nodes.len()).filter(|i| self.net.nodes[*i].stalled).collect();
                if let Some(&node) = self.rng.pick(&stalled) {
                    self.net.nodes[node].stalled = false;
                }
            }
            _ => {
                let dead: Vec<usize> = (0..self.net.nodes.len()).filter(|i| !self.net.alive(*i)).collect();
                if let Some(&node) = self.rng.pick(&dead) {
                    self.restart(node);
                    self.command(node, Command::Retry);
                }
            }
        }
    }

    /// Heals every fault, then lets time pass until every live subscriber has exactly its
    /// Expected and every pubend released its whole log, or [`SETTLE_MS`] runs out.
    fn settle(&mut self) -> Result<(), String> {
        for node in 0..self.net.nodes.len() {
            self.net.nodes[node].stalled = false;
            if !self.net.alive(node) {
                self.restart(node);
            }
        }
        for node in 0..self.net.nodes.len() {
            self.command(node, Command::Retry);
        }
        let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
        for key in keys {
            self.net.repair(key);
        }
        let rounds = SETTLE_MS / (4 * LIVENESS.heartbeat_interval_ms);
        let mut last = String::new();
        for round in 0..rounds {
            self.pump(4 * LIVENESS.heartbeat_interval_ms);
            self.check()?;
            if round == rounds / 2 {
                self.give_up_barriers();
            }
            self.restart_barriers();
            match self.finished() {
                Ok(()) => return Ok(()),
                Err(reason) => last = reason,
            }
        }
        Err(last)
    }

    /// Subscribers still missing a start tick ask for another barrier.
    fn restart_barriers(&mut self) {
        let pubends = self.world.borrow().pubends.len();
        let waiting: Vec<(usize, SubendId)> = self
            .world
            .borrow()
            .subs
            .iter()
            .filter(|(_, s)| !s.gone && s.starts.len() < pubends)
            .map(|(&id, s)| (s.node, id))
            .collect();
        for (node, subend) in waiting {
            self.barrier(node, subend);
        }
    }

    /// The delivery state of every broker, for a failure message when `SIM_DEBUG` is set.
    fn describe(&self) -> String {
        if std::env::var("SIM_DEBUG").is_err() {
            return String::new();
        }
        let world = self.world.borrow();
        let mut text = format!("\nnow {:?} pubends {:?} cells {:?}\n", self.net.now, world.pubends, world.cell_of);
        for (i, node) in self.net.nodes.iter().enumerate() {
            let Some(layer) = node.layer.as_ref() else {
                text += &format!("node {i} down\n");
                continue;
            };
            for (pubend, route) in &layer.routes {
                let view = layer.engine.inspect(*pubend);
                let state = view.map(|v| (v.done(), v.horizon(), v.acked(), v.release()));
                text += &format!("node {i} {pubend:?} {route:?} (done, horizon, acked, release) {state:?}\n");
                let home = world.pubends.iter().find(|(_, p)| *p == pubend).map(|(h, _)| *h).unwrap_or(0);
                let raw = node.router.as_ref().map(|r| r.pubend_route(&home_pubend(&self.net.nodes[home].name)));
                text += &format!(
                    "   raw {raw:?} peers {:?}\n",
                    node.router.as_ref().map(|r| r.peers().cloned().collect::<Vec<_>>())
                );
            }
        }
        for (id, sub) in &world.subs {
            text += &format!(
                "{id:?} node {} gone {} barrier {:?} starts {:?}\n",
                sub.node, sub.gone, sub.barrier, sub.starts
            );
        }
        text
    }

    /// Subscribers whose barrier never listed every pubend (a routing-barrier liveness
    /// matter, judged by the routing sweeps) give up half-way through settling: they are
    /// counted, and they end so they no longer pin the logs.
    fn give_up_barriers(&mut self) {
        let pubends = self.world.borrow().pubends.len();
        let waiting: Vec<(usize, SubendId)> = self
            .world
            .borrow()
            .subs
            .iter()
            .filter(|(_, s)| !s.gone && s.starts.len() < pubends)
            .map(|(&id, s)| (s.node, id))
            .collect();
        for (node, subend) in waiting {
            self.world.borrow_mut().stats.unconfirmed += 1;
            self.end_sub(node, subend);
            self.command(node, Command::Detach { subend });
        }
    }

    fn finished(&self) -> Result<(), String> {
        self.world.borrow().judge_complete()?;
        let world = self.world.borrow();
        let unacked = world.publishes.values().flatten().filter(|p| !p.acked).count();
        if unacked > 0 {
            return Err(format!("{unacked} publishes never acknowledged"));
        }
        for (&home, &pubend) in &world.pubends {
            let held = self.net.nodes[home].store.held(pubend, TickRange { from: Tick(0), to: Tick(u64::MAX) });
            if held > 0 {
                return Err(format!("{pubend:?} at node {home} still holds {held} records"));
            }
        }
        Ok(())
    }
}
