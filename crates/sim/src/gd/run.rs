//! One guaranteed-delivery run: routers and delivery engines on every broker, guaranteed
//! publishers (publisher id + seq, retried after their broker restarts) and subscribers that
//! start through the subscription barrier and churn; chaos with every fault of the network
//! model and the checks after every step; then every fault heals, time passes, and every
//! live subscriber must have got exactly Expected and every pubend must have released its log.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use tidings_delivery::{PubendId, Settings, SubendId, Tick, TickRange};
use tidings_route::{BrokerName, Topology};

use crate::gd::bundles::thin_bundles;
use crate::gd::layer::{Command, GdFrame, GdLayer};
use crate::gd::world::{Durable, Publish, Subscriber, World};
use crate::gd::{settings, Stats};
use crate::layer::LayerInput;
use crate::net::{home_pubend, Net, LIVENESS};
use crate::rng::Rng;
use crate::scenario::{Coverage, Failure, Plan};
use crate::topics::{random_content, random_filter};
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
    /// Bundles between cells keep only some of their links (at least one each): a pubend's
    /// entry broker often has no link of its own into a child cell's entry, so data goes
    /// sideways through a cell mate and acks and nacks come back the same way.
    pub partial_bundles: bool,
    /// Half the subscribers (a seeded choice) are durable: acknowledged by checkpoints their
    /// application's acknowledgements make, their clients going away and coming back.
    pub durable: bool,
    /// Brokers hosting a durable subscriber crash at any moment and restart, restoring each
    /// durable subscription from its stored checkpoint.
    pub shb_crashes: bool,
    /// Half the crashes are power losses: the log loses every write not yet synced (the last
    /// kept one torn), where a process crash leaves them to the page cache.
    pub power_loss: bool,
    /// A crashed broker without a pubend or a durable subscriber (a relay, a host of plain
    /// subscribers) may restart on an empty data directory, its incarnation from the clock.
    pub empty_restarts: bool,
    /// Every broker's clock is off the network's by its own fixed amount, ahead or behind by
    /// up to this many ms (0: none; a restart still steps it back further): a pubend's ticks
    /// are its home's clock, and a late start is taken from the subscriber's broker's clock.
    pub clock_spread_ms: u64,
}

/// How far a broker's clock may be ahead of the network's or behind it in [`Mode::SKEWED`],
/// ms. Two brokers differ by up to twice this, and a restart adds up
/// to [`super::layer::MAX_SKEW_MS`] behind: 4.5 s in all, inside the margin a late start
/// takes below its confirmation (`tidings_node::starts::LATE_PUBEND_MARGIN_MS`, 5 s), the
/// skew the broker is built to bear.
pub const CLOCK_SPREAD_MS: u64 = 1500;

impl Mode {
    /// Everything.
    pub const FULL: Mode =
        Mode { faults: true, churn: true, pubend_crashes: true, power_loss: true, empty_restarts: true, ..Mode::LOSSY };
    /// The lossy channel only: subscribers are set up first, brokers and links stay up.
    pub const LOSSY: Mode = Mode {
        faults: false,
        churn: false,
        pubend_crashes: false,
        idle_crashes: false,
        partial_bundles: false,
        durable: false,
        shb_crashes: false,
        power_loss: false,
        empty_restarts: false,
        clock_spread_ms: 0,
    };
    /// The lossy channel and subscriber churn.
    pub const CHURN: Mode = Mode { churn: true, ..Mode::LOSSY };
    /// The lossy channel and crashes of publishing brokers.
    pub const PUBEND_CRASHES: Mode = Mode { pubend_crashes: true, power_loss: true, ..Mode::LOSSY };
    /// The lossy channel and crashes of every role while nothing is owed.
    pub const IDLE_CRASHES: Mode = Mode { idle_crashes: true, power_loss: true, empty_restarts: true, ..Mode::LOSSY };
    /// The lossy channel over partial bundles (sideways routing through cell mates).
    pub const CELLS: Mode = Mode { partial_bundles: true, ..Mode::LOSSY };
    /// The lossy channel and faults, subscribers set up first.
    pub const FAULTS: Mode = Mode { faults: true, power_loss: true, empty_restarts: true, ..Mode::LOSSY };
    /// The lossy channel, durable subscribers whose clients come and go, and crashes of
    /// their brokers at any moment.
    pub const DURABLE: Mode = Mode { durable: true, shb_crashes: true, power_loss: true, ..Mode::LOSSY };
    /// Everything but restarts on an empty data directory, with every broker's clock off by
    /// its own amount. A broker without a data directory (a first start, or one wiped) starts
    /// late subscriptions no lower than its own start time (`tidings_node::starts::late_start`),
    /// which holds only while its clock is not ahead of the pubend's home: at a first start,
    /// seed 139 starts a subscription 289 ms above what was published after its confirmation
    /// (`random_networks_deliver_exactly_expected_with_skewed_clocks`, ignored for it).
    pub const SKEWED: Mode = Mode { clock_spread_ms: CLOCK_SPREAD_MS, empty_restarts: false, ..Mode::FULL };
}

/// The state of one run.
pub(super) struct GdRun {
    pub(super) mode: Mode,
    pub(super) net: Net<GdLayer>,
    pub(super) world: Rc<RefCell<World>>,
    pub(super) rng: Rng,
    /// Draws what each crash does to the data directory, apart from `rng`: the chaos drawn
    /// is the same with or without the disk faults, so a seed replays the same schedule.
    pub(super) disk_rng: Rng,
    pub(super) plan: Plan,
    pub(super) coverage: Coverage,
    /// Each broker's delivery route for each home's pubend (at `home × brokers + broker`),
    /// with the route epoch of the router it was computed from (`routes.rs`): most steps
    /// change no router's routes. A broker's entries go when it starts again (a new router
    /// counts its epochs from zero).
    pub(super) routes: Vec<Option<(u64, tidings_delivery::StreamRoute)>>,
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
    let stats = run.stats();
    run.coverage.exactly_once = stats.deliveries as usize;
    Ok((run.coverage, stats))
}

impl GdRun {
    pub(super) fn new(topology: &Topology, plan: &Plan, mode: Mode, settings: Settings) -> Self {
        Self::with_publisher(topology, plan, mode, settings, None)
    }

    /// As [`GdRun::new`], with the one publishing broker given instead of drawn (a
    /// measurement's fixed scenario); its pubend is open from the start like a drawn one.
    pub(super) fn with_publisher(
        topology: &Topology,
        plan: &Plan,
        mode: Mode,
        settings: Settings,
        publisher: Option<&BrokerName>,
    ) -> Self {
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
        let fixed = publisher.and_then(|name| names.iter().position(|n| n == name));
        let chosen: Vec<usize> = match fixed {
            Some(node) => vec![node],
            None => candidates.iter().take(publishers).copied().collect(),
        };
        for node in chosen {
            world.pubends.insert(node, PubendId(home_pubend(&names[node]).id.0));
        }
        world.names = names.clone();
        world.cell_names = cells;
        let world = Rc::new(RefCell::new(world));
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let layer = GdLayer {
            settings,
            world: world.clone(),
            names,
            index,
            seed: plan.seed,
            wall_us: Cell::new(0),
            clock_spread_ms: mode.clock_spread_ms,
        };
        let mut net = Net::new(topology, layer, plan.seed);
        if mode.partial_bundles {
            thin_bundles(&mut net, &mut Rng::new(plan.seed ^ 0x00b0_4d1e));
        }
        let disk_rng = Rng::new(plan.seed ^ 0x00d1_5c00);
        GdRun { mode, net, world, rng, disk_rng, plan: plan.clone(), coverage: Coverage::default(), routes: Vec::new() }
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

    /// The run's figures, with the nack counters of the engines alive now.
    pub(super) fn stats(&self) -> Stats {
        let mut stats = self.world.borrow().stats;
        for layer in self.net.nodes.iter().filter_map(|n| n.layer.as_ref()) {
            let counters = layer.engine.counters();
            stats.nack_ticks_sent += counters.nack_ticks_sent;
            stats.nack_ticks_absorbed += counters.nack_ticks_absorbed;
            stats.nacks_sent += counters.nacks_sent;
        }
        stats
    }

    pub(super) fn check(&self) -> Result<(), String> {
        let world = self.world.borrow();
        match (world.violations.first(), self.net.violations.first()) {
            (Some(v), _) | (None, Some(v)) => Err(v.clone()),
            (None, None) => Ok(()),
        }
    }

    pub(super) fn command(&mut self, node: usize, command: Command) {
        let from = self.net.nodes[node].name.clone();
        self.net.layer_input(node, LayerInput::Frame { from, frame: GdFrame::Command(command) });
    }

    /// Delivers and lets time pass for `ms` of virtual time.
    pub(super) fn pump(&mut self, ms: u64) {
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

    pub(super) fn publish(&mut self) {
        let hosts: Vec<usize> = self.world.borrow().pubends.keys().copied().collect();
        let Some(&node) = self.rng.pick(&hosts) else { return };
        self.publish_at(node);
    }

    pub(super) fn publish_at(&mut self, node: usize) {
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

    pub(super) fn subscribe(&mut self, node: usize) {
        let filter = random_filter(&mut self.rng);
        let durable = self.mode.durable && self.rng.chance(50);
        self.subscribe_with(node, filter, durable);
    }

    pub(super) fn subscribe_with(&mut self, node: usize, filter: RouteFilter, durable: bool) {
        if !self.net.alive(node) {
            return;
        }
        let id = self.net.subscribe(node, filter.clone());
        let sub = Subscriber {
            node,
            filter,
            gone: false,
            starts: BTreeMap::new(),
            promised: BTreeMap::new(),
            late: Default::default(),
            delivered: BTreeMap::new(),
            barrier: None,
            durable: durable.then(|| Durable { connected: true, ..Durable::default() }),
        };
        self.world.borrow_mut().subs.insert(SubendId(id), sub);
        self.command(node, Command::Attach { subend: SubendId(id), durable });
        self.barrier(node, SubendId(id));
    }

    /// Asks for a barrier covering `subend`; a confirmation that came back at once is replayed.
    /// The subend keeps the number of its first request: any confirmation from that number on
    /// covers it. (Moving it to each re-request's number starved subscribers whose barrier
    /// took longer than the re-request interval: every confirmation came for a number the
    /// subend had just given up.)
    pub(super) fn barrier(&mut self, node: usize, subend: SubendId) {
        let Some(number) = self.net.request_barrier(node) else { return };
        let confirmed = {
            let mut world = self.world.borrow_mut();
            if let Some(sub) = world.subs.get_mut(&subend) {
                sub.barrier.get_or_insert(number);
            }
            world.confirmed.get(&node).filter(|(n, _)| *n >= number).cloned()
        };
        if let Some((number, ticks)) = confirmed {
            self.command(node, Command::Confirmed { number, ticks });
        }
    }

    pub(super) fn unsubscribe(&mut self, node: usize) {
        let subs: Vec<SubendId> =
            self.world.borrow().subs.iter().filter(|(_, s)| s.node == node && !s.gone).map(|(&id, _)| id).collect();
        let Some(&subend) = self.rng.pick(&subs) else { return };
        self.end_sub(node, subend);
        if self.net.alive(node) {
            self.command(node, Command::Detach { subend });
        }
    }

    pub(super) fn end_sub(&mut self, node: usize, subend: SubendId) {
        if let Some(sub) = self.world.borrow_mut().subs.get_mut(&subend) {
            sub.gone = true;
        }
        self.net.unsubscribe(node, subend.0);
    }

    /// Heals every fault, then lets time pass until every live subscriber has exactly its
    /// Expected and every pubend released its whole log, or [`SETTLE_MS`] runs out.
    pub(super) fn settle(&mut self) -> Result<(), String> {
        for node in 0..self.net.nodes.len() {
            self.net.nodes[node].stalled = false;
            if !self.net.alive(node) {
                self.restart(node);
            }
        }
        for node in 0..self.net.nodes.len() {
            self.command(node, Command::Retry);
        }
        self.clients_back();
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
        self.world.borrow().judge_checkpointed()?;
        let world = self.world.borrow();
        let unacked = world.publishes.values().flatten().filter(|p| !p.acked).count();
        if unacked > 0 {
            return Err(format!("{unacked} publishes never acknowledged"));
        }
        for (&home, &pubend) in &world.pubends {
            // A durable subscriber pins the log at its checkpoint, its last tick received.
            let floor = world.checkpoint_floor(pubend);
            let held = self.net.nodes[home].store.held(pubend, TickRange { from: Tick(0), to: floor });
            if held > 0 {
                return Err(format!("{pubend:?} at node {home} still holds {held} records up to {floor:?}"));
            }
        }
        Ok(())
    }
}
