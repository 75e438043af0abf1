//! One simulated run: build the network, converge and check; then chaos (traffic, churn,
//! barriers, faults and repairs) with the continuous checks after every step; then heal what
//! cells need, converge and check; heal everything, converge and check again.

use std::collections::{BTreeMap, BTreeSet};

use tidings_route::Topology;

use crate::barrier::{self, Requests};
use crate::check::{
    drain, expected_receivers, judge_hops, judge_landed, links_settled, quiet, reference, trees_agree, Reference,
};
use crate::layer::Layer;
use crate::net::{Net, LIVENESS};
use crate::rng::Rng;
use crate::topics::{random_content, random_filter};

/// What one run does: its seed, how many chaos steps, and which faults (by their number in
/// the run) are left out. Shrinking lowers the steps and leaves faults out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The seed every random choice derives from.
    pub seed: u64,
    /// Chaos steps.
    pub steps: usize,
    /// Faults (numbered from 0 in the order drawn) that are drawn but not applied.
    pub skip: BTreeSet<usize>,
}

/// What a run exercised, summed over seeds to show a sweep covered the interesting paths.
#[derive(Clone, Default, Debug)]
pub struct Coverage {
    /// Messages judged exactly-once (published in a quiet network, landed in one).
    pub exactly_once: usize,
    /// Data hops judged against interest.
    pub hops_judged: usize,
    /// Chaos steps that began in a quiet network.
    pub quiet_steps: usize,
    /// Barrier confirmations judged.
    pub barriers: usize,
    /// Sideways copies.
    pub sideways: u64,
    /// Copies dropped for carrying a tree id the receiver no longer held.
    pub stale_tree_drops: u64,
    /// Crashes.
    pub crashes: usize,
    /// Silent faults (cuts or crashes nobody was told about).
    pub silent_faults: usize,
    /// Stalls.
    pub stalls: usize,
    /// Partitions.
    pub partitions: usize,
    /// Faults drawn (applied or skipped).
    pub faults: usize,
    /// Crashes that were power losses (the log's unsynced writes lost, the last torn).
    pub power_losses: usize,
    /// Crashes after which the broker restarted on an empty data directory.
    pub empty_restarts: usize,
}

impl Coverage {
    /// Adds another run's figures.
    pub fn add(&mut self, other: &Coverage) {
        self.exactly_once += other.exactly_once;
        self.hops_judged += other.hops_judged;
        self.quiet_steps += other.quiet_steps;
        self.barriers += other.barriers;
        self.sideways += other.sideways;
        self.stale_tree_drops += other.stale_tree_drops;
        self.crashes += other.crashes;
        self.silent_faults += other.silent_faults;
        self.stalls += other.stalls;
        self.partitions += other.partitions;
        self.faults += other.faults;
        self.power_losses += other.power_losses;
        self.empty_restarts += other.empty_restarts;
    }
}

/// Length of the alternating stretches of chaos and lull.
pub const LULL: usize = 25;

/// A failed run: where and what.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The chaos step it failed at (`None`: in a checkpoint phase).
    pub step: Option<usize>,
    /// Faults drawn before it failed.
    pub faults: usize,
    /// What broke.
    pub message: String,
}

/// The state of one run.
struct Run<L: Layer> {
    net: Net<L>,
    rng: Rng,
    plan: Plan,
    coverage: Coverage,
    requests: Requests,
    /// Messages published in a quiet network, with their expected subscribers.
    watched: BTreeMap<usize, BTreeSet<u64>>,
    /// Whether the network was quiet after the last step (`None`: not computed).
    quiet: Option<Option<Reference>>,
}

/// Runs one plan on a topology with a second layer.
pub fn run<L: Layer>(topology: &Topology, layer: L, plan: &Plan) -> Result<Coverage, Failure> {
    let mut rng = Rng::new(plan.seed);
    let net = Net::new(topology, layer, plan.seed);
    let mut run = Run {
        net,
        rng: rng.clone(),
        plan: plan.clone(),
        coverage: Coverage::default(),
        requests: BTreeMap::new(),
        watched: BTreeMap::new(),
        quiet: None,
    };
    for node in 0..run.net.nodes.len() {
        for _ in 0..rng.between(1, 3) {
            let filter = random_filter(&mut rng);
            run.net.subscribe(node, filter);
        }
    }
    run.rng = rng;
    let at_phase = |run: &Run<L>, message: String| Failure {
        step: None,
        faults: run.coverage.faults,
        message: format!("{message}{}", describe(&run.net)),
    };
    run.checkpoint("initial").map_err(|m| at_phase(&run, m))?;
    for step in 0..plan.steps {
        run.step(step).map_err(|message| Failure {
            step: Some(step),
            faults: run.coverage.faults,
            message: format!("{message}{}", describe(&run.net)),
        })?;
    }
    run.heal(true);
    run.checkpoint("after faults").map_err(|m| at_phase(&run, m))?;
    run.heal(false);
    run.checkpoint("healed").map_err(|m| at_phase(&run, m))?;
    run.coverage.sideways = run.net.sideways;
    run.coverage.stale_tree_drops = run.net.drops.get("UnknownTreeId").copied().unwrap_or(0);
    Ok(run.coverage)
}

impl<L: Layer> Run<L> {
    /// One chaos step and the continuous checks. Every other stretch of [`LULL`] steps is a
    /// lull (traffic only), so the network often turns quiet mid-run and the quiet-time checks
    /// apply between faults, not only at the checkpoints.
    fn step(&mut self, step: usize) -> Result<(), String> {
        if step.is_multiple_of(LULL) && (step / LULL) % 2 == 1 {
            self.start_lull();
            self.quiet = None;
        }
        let before = self.quiet.take().unwrap_or_else(|| quiet(&self.net));
        self.net.hops.clear();
        let lost_before = self.net.lost_copies;
        let disturbed = if (step / LULL) % 2 == 1 {
            self.traffic();
            false
        } else {
            self.chaos()
        };
        if let Some(violation) = self.net.violations.first() {
            return Err(violation.clone());
        }
        if let Some(truth) = &before {
            self.coverage.quiet_steps += 1;
            judge_hops(&self.net, truth, &self.net.hops)?;
            self.coverage.hops_judged += self.net.hops.len();
        }
        self.coverage.barriers += barrier::judge(&mut self.net, &mut self.requests)?;
        // Churn, faults and lost copies change what a watched message is owed.
        let undisturbed = !disturbed && self.net.lost_copies == lost_before;
        let after = quiet(&self.net);
        let still_quiet = undisturbed && after.is_some();
        self.quiet = Some(after);
        self.judge_watched(still_quiet)
    }

    /// A lull begins: stalls end and cells are made whole, so the network can turn quiet.
    fn start_lull(&mut self) {
        for node in &mut self.net.nodes {
            node.stalled = false;
        }
        let intra: Vec<(usize, usize)> =
            self.net.wires.iter().filter(|(_, w)| w.intra_cell && w.cut).map(|(k, _)| *k).collect();
        for key in intra {
            self.net.repair(key);
        }
    }

    /// Judges watched messages that landed; a network no longer quiet ends every watch.
    fn judge_watched(&mut self, still_quiet: bool) -> Result<(), String> {
        if !still_quiet {
            self.watched.clear();
            return Ok(());
        }
        let landed: Vec<usize> =
            self.watched.keys().copied().filter(|msg| self.net.messages[*msg].in_flight == 0).collect();
        for msg in landed {
            if let Some(expected) = self.watched.remove(&msg) {
                judge_landed(&self.net, msg, &expected)?;
                self.coverage.exactly_once += 1;
            }
        }
        Ok(())
    }

    /// One random action of a lull: deliver, let time pass, publish.
    fn traffic(&mut self) {
        match self.rng.below(10) {
            0..=5 => {
                let busy = self.net.busy();
                match self.rng.pick(&busy) {
                    Some(&(key, direction)) => self.net.deliver(key, direction),
                    None => self.net.advance(self.rng.between(1, 30) as u64),
                }
            }
            6 => self.net.advance(self.rng.between(1, 30) as u64),
            7 => {
                let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
                if let Some(&key) = self.rng.pick(&keys) {
                    self.net.connect(key);
                }
            }
            _ => self.publish(),
        }
    }

    /// One random action: mostly traffic, sometimes churn, a fault or a repair. Returns
    /// whether it was more than traffic.
    fn chaos(&mut self) -> bool {
        let n = self.net.nodes.len();
        let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
        let roll = self.rng.below(100);
        match roll {
            0..=41 => {
                let busy = self.net.busy();
                match self.rng.pick(&busy) {
                    Some(&(key, direction)) => self.net.deliver(key, direction),
                    None => self.net.advance(self.rng.between(1, 10) as u64),
                }
            }
            42..=51 => self.net.advance(self.rng.between(1, 80) as u64),
            52..=57 => {
                let node = self.rng.below(n);
                let filter = random_filter(&mut self.rng);
                self.net.subscribe(node, filter);
                if self.rng.chance(60) {
                    barrier::request(&mut self.net, &mut self.requests, node);
                }
            }
            58..=60 => {
                let node = self.rng.below(n);
                let subs: Vec<u64> = self.net.nodes[node].subs.keys().copied().collect();
                if let Some(&sub) = self.rng.pick(&subs) {
                    self.net.unsubscribe(node, sub);
                }
            }
            61..=75 => self.publish(),
            76..=85 => {
                if let Some(&key) = self.rng.pick(&keys) {
                    self.net.connect(key);
                }
            }
            86..=89 => self.fault(),
            _ => self.repair(&keys),
        }
        !matches!(roll, 0..=51 | 61..=75)
    }

    fn publish(&mut self) {
        let node = self.rng.below(self.net.nodes.len());
        let content = random_content(&mut self.rng);
        let truth = quiet(&self.net);
        let msg = self.net.publish(node, content);
        if let Some(truth) = truth.filter(|_| self.net.alive(node)) {
            let expected = expected_receivers(&self.net, &truth, msg);
            self.watched.insert(msg, expected);
        }
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
            0..=24 if (dead + 1) * 3 <= n && self.net.alive(node) => {
                self.coverage.crashes += 1;
                self.net.crash(node, loud);
            }
            25..=34 if self.net.alive(node) => {
                self.coverage.stalls += 1;
                self.net.nodes[node].stalled = true;
            }
            35..=44 => {
                self.coverage.partitions += 1;
                let cross: Vec<(usize, usize)> = keys.into_iter().filter(|(a, b)| side[*a] != side[*b]).collect();
                for key in cross {
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
                    self.net.start(node);
                }
            }
        }
    }

    /// Ends stalls and heals intra-cell wires (cells assume their brokers are linked), or
    /// everything: every wire and every broker.
    fn heal(&mut self, cells_only: bool) {
        for node in &mut self.net.nodes {
            node.stalled = false;
        }
        let keys: Vec<(usize, usize)> =
            self.net.wires.iter().filter(|(_, w)| !cells_only || w.intra_cell).map(|(k, _)| *k).collect();
        for key in keys {
            self.net.repair(key);
        }
        if !cells_only {
            for node in 0..self.net.nodes.len() {
                if !self.net.alive(node) {
                    self.net.start(node);
                }
            }
        }
    }

    /// Converges, then checks trees and views and probes with traffic.
    fn checkpoint(&mut self, phase: &str) -> Result<(), String> {
        let result = self.converge().and_then(|()| {
            let truth = reference(&self.net);
            trees_agree(&self.net, &truth)?;
            self.probe()
        });
        let result = match self.net.violations.first() {
            Some(violation) => Err(violation.clone()),
            None => result,
        };
        result.map_err(|e| format!("{phase}: {e}"))
    }

    /// Converges (see [`converge`]), judging barrier confirmations after every round.
    fn converge(&mut self) -> Result<(), String> {
        let Run { net, rng, coverage, requests, .. } = self;
        converge_with(net, rng, |net| {
            coverage.barriers += barrier::judge(net, requests)?;
            Ok(())
        })
    }

    /// Publishes from several brokers into the settled network; each message must reach every
    /// matching subscriber of its group exactly once and go nowhere without interest.
    fn probe(&mut self) -> Result<(), String> {
        let live: Vec<usize> = (0..self.net.nodes.len()).filter(|i| self.net.alive(*i)).collect();
        let truth = quiet(&self.net).ok_or("the converged network is not quiet")?;
        for _ in 0..live.len().min(6) * 2 {
            let Some(&publisher) = self.rng.pick(&live) else { break };
            self.net.hops.clear();
            let content = random_content(&mut self.rng);
            let msg = self.net.publish(publisher, content);
            let expected = expected_receivers(&self.net, &truth, msg);
            drain(&mut self.net, &mut self.rng);
            judge_hops(&self.net, &truth, &self.net.hops)?;
            judge_landed(&self.net, msg, &expected)?;
            self.coverage.exactly_once += 1;
        }
        Ok(())
    }
}

/// Connects everything possible and exchanges control traffic until two rounds in a row change
/// nothing; time moves half a heartbeat per round so no healthy link dies.
pub fn converge<L: Layer>(net: &mut Net<L>, rng: &mut Rng) -> Result<(), String> {
    converge_with(net, rng, |_| Ok(()))
}

/// As [`converge`], calling `each_round` after every round.
fn converge_with<L: Layer>(
    net: &mut Net<L>,
    rng: &mut Rng,
    mut each_round: impl FnMut(&mut Net<L>) -> Result<(), String>,
) -> Result<(), String> {
    let mut quiet_rounds = 0;
    for _ in 0..400 {
        let before = net.control_sent;
        let mut changed = false;
        let keys: Vec<(usize, usize)> = net.wires.keys().copied().collect();
        for key in keys {
            changed |= net.connect(key);
        }
        drain(net, rng);
        net.advance(LIVENESS.heartbeat_interval_ms / 2);
        drain(net, rng);
        each_round(net)?;
        if !changed && net.control_sent == before && links_settled(net).is_ok() {
            quiet_rounds += 1;
            if quiet_rounds == 2 {
                return Ok(());
            }
        } else {
            quiet_rounds = 0;
        }
    }
    Err(format!("no convergence after 400 rounds: {:?}", links_settled(net).err()))
}

/// The network's state, for a failure message when `SIM_DEBUG` is set.
fn describe<L: Layer>(net: &Net<L>) -> String {
    if std::env::var("SIM_DEBUG").is_err() {
        return String::new();
    }
    let mut text = format!("\nnow {:?}\n", net.now);
    for node in &net.nodes {
        let alive = node.router.is_some();
        text += &format!(
            "{} (cell {}) incarnation {} alive {alive} stalled {} subs {:?}\n",
            node.name, node.cell, node.incarnation, node.stalled, node.subs
        );
    }
    for ((a, b), wire) in &net.wires {
        let conn = wire.conn.as_ref().map_or("none", |c| if c.silent { "silent" } else { "open" });
        let queued = wire.conn.as_ref().map_or(0, |c| c.queues[0].len() + c.queues[1].len());
        text += &format!(
            "wire {}-{} cut {} connection {conn} queued {queued}\n",
            net.nodes[*a].name, net.nodes[*b].name, wire.cut
        );
    }
    for router in net.nodes.iter().filter_map(|n| n.router.as_ref()) {
        text += &format!("{}\n", serde_json::to_string(&router.snapshot()).unwrap_or_default());
    }
    text
}
