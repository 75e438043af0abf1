//! One simulated run: build the network, converge and check, break things while traffic flows
//! (checking safety at every step), heal what cells need, converge and check again, heal
//! everything, converge and check a third time.

use tidings_route::Topology;

use super::check::{drain, links_settled, probe, reference, trees_agree};
use super::net::{Net, LIVENESS};
use super::rng::Rng;
use super::topic::{all_topics, random_pattern};

/// What a run exercised, summed over seeds to show the sweep covered the interesting paths.
#[derive(Default, Debug)]
pub(crate) struct Coverage {
    pub(crate) probes: usize,
    pub(crate) sideways: u64,
    pub(crate) stale_tree_drops: u64,
    pub(crate) crashes: usize,
    pub(crate) silent_faults: usize,
    pub(crate) route_recomputations: u64,
}

impl Coverage {
    pub(crate) fn add(&mut self, other: &Coverage) {
        self.probes += other.probes;
        self.sideways += other.sideways;
        self.stale_tree_drops += other.stale_tree_drops;
        self.crashes += other.crashes;
        self.silent_faults += other.silent_faults;
        self.route_recomputations += other.route_recomputations;
    }
}

/// A random network as a topology file: one to six cells of one to three brokers, a random
/// spanning tree of cell links plus extra links that make cycles. Cell names are shuffled
/// letters so that name order and creation order differ (tie-breaks must not depend on either).
pub(crate) fn random_topology(rng: &mut Rng) -> Topology {
    let mut letters: Vec<char> = "QDKAXMBT".chars().collect();
    for i in (1..letters.len()).rev() {
        letters.swap(i, rng.below(i + 1));
    }
    let cells = rng.between(1, 6);
    let mut text = String::from("name = \"random\"\n");
    let mut cell_names = Vec::new();
    let mut linked = std::collections::BTreeSet::new();
    for (index, letter) in letters.iter().take(cells).enumerate() {
        let size = if rng.chance(40) { 1 } else { rng.between(2, 3) };
        let lone = size == 1 && rng.chance(50);
        let cell = if lone { format!("{}1", letter.to_ascii_lowercase()) } else { letter.to_string() };
        for member in 1..=size {
            text += &format!("[[broker]]\nname = \"{}{member}\"\n", letter.to_ascii_lowercase());
            if !lone {
                text += &format!("cell = \"{cell}\"\n");
            }
        }
        if index > 0 {
            let other = rng.below(index);
            linked.insert((other, index));
            text += &format!("[[link]]\nbetween = [\"{}\", \"{cell}\"]\n", cell_names[other]);
        }
        cell_names.push(cell);
    }
    for a in 0..cells {
        for b in a + 1..cells {
            if rng.chance(20) && !linked.contains(&(a, b)) {
                text += &format!("[[link]]\nbetween = [\"{}\", \"{}\"]\n", cell_names[a], cell_names[b]);
            }
        }
    }
    Topology::parse(&text).unwrap_or_else(|e| panic!("generated topology is invalid: {e}\n{text}"))
}

/// Connects everything possible and exchanges control traffic until two rounds in a row change
/// nothing; time moves half a heartbeat per round so no healthy link is declared dead.
pub(crate) fn converge(net: &mut Net, rng: &mut Rng) -> Result<(), String> {
    let mut quiet = 0;
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
        if !changed && net.control_sent == before && links_settled(net).is_ok() {
            quiet += 1;
            if quiet == 2 {
                return Ok(());
            }
        } else {
            quiet = 0;
        }
    }
    Err(format!("no convergence after 400 rounds: {:?}", links_settled(net).err()))
}

fn check_phase(net: &mut Net, rng: &mut Rng, phase: &str, coverage: &mut Coverage) -> Result<(), String> {
    let result = converge(net, rng).and_then(|()| {
        let truth = reference(net);
        trees_agree(net, &truth)?;
        coverage.probes += probe(net, rng, &truth)?;
        Ok(())
    });
    let result = match net.violations.first() {
        Some(violation) => Err(violation.clone()),
        None => result,
    };
    result.map_err(|e| format!("{phase}: {e}{}", describe(net)))
}

/// The network's state, for a failure message when `SIM_DEBUG` is set.
fn describe(net: &Net) -> String {
    if std::env::var("SIM_DEBUG").is_err() {
        return String::new();
    }
    let mut text = String::from("\n");
    for node in &net.nodes {
        let alive = node.router.is_some();
        text += &format!(
            "{} (cell {}) incarnation {} alive {alive} subs {:?}\n",
            node.name, node.cell, node.incarnation, node.subs
        );
    }
    for ((a, b), wire) in &net.wires {
        let conn = wire.conn.as_ref().map_or("none", |c| if c.silent { "silent" } else { "open" });
        text += &format!("wire {}-{} cut {} connection {conn}\n", net.nodes[*a].name, net.nodes[*b].name, wire.cut);
    }
    for router in net.nodes.iter().filter_map(|n| n.router.as_ref()) {
        text += &format!("{}\n", serde_json::to_string(&router.snapshot()).unwrap_or_default());
    }
    text
}

/// One step of chaos: mostly traffic, sometimes a fault or a repair.
fn chaos_step(net: &mut Net, rng: &mut Rng, coverage: &mut Coverage) {
    let n = net.nodes.len();
    let keys: Vec<(usize, usize)> = net.wires.keys().copied().collect();
    match rng.below(100) {
        0..=44 => {
            let busy = net.busy();
            if let Some(&(key, direction)) = rng.pick(&busy) {
                net.deliver(key, direction);
            }
        }
        45..=54 => net.advance(rng.between(1, 80) as u64),
        55..=60 => {
            let node = rng.below(n);
            net.subscribe(node, random_pattern(rng));
        }
        61..=63 => {
            let node = rng.below(n);
            let subs: Vec<u64> = net.nodes[node].subs.keys().copied().collect();
            if let Some(&sub) = rng.pick(&subs) {
                net.unsubscribe(node, sub);
            }
        }
        64..=77 => {
            let node = rng.below(n);
            let topic = rng.pick(&all_topics()).cloned().unwrap_or_default();
            net.publish(node, rng.below(16) as u64, &topic);
        }
        78..=87 => {
            if let Some(&key) = rng.pick(&keys) {
                net.connect(key);
            }
        }
        88..=91 => fault(net, rng, coverage),
        _ => repair(net, rng, &keys),
    }
}

fn fault(net: &mut Net, rng: &mut Rng, coverage: &mut Coverage) {
    let n = net.nodes.len();
    let loud = rng.chance(50);
    if !loud {
        coverage.silent_faults += 1;
    }
    let dead = (0..n).filter(|i| !net.alive(*i)).count();
    if rng.chance(30) && (dead + 1) * 3 <= n {
        let node = rng.below(n);
        if net.alive(node) {
            coverage.crashes += 1;
            net.crash(node, loud);
        }
    } else {
        let keys: Vec<(usize, usize)> = net.wires.keys().copied().collect();
        if let Some(&key) = rng.pick(&keys) {
            net.cut(key, loud);
        }
    }
}

fn repair(net: &mut Net, rng: &mut Rng, keys: &[(usize, usize)]) {
    if rng.chance(50) {
        let cut: Vec<(usize, usize)> = keys.iter().copied().filter(|k| net.wires[k].cut).collect();
        if let Some(&key) = rng.pick(&cut) {
            net.repair(key);
        }
    } else {
        let dead: Vec<usize> = (0..net.nodes.len()).filter(|i| !net.alive(*i)).collect();
        if let Some(&node) = rng.pick(&dead) {
            net.start(node);
        }
    }
}

/// The whole run for one seed; an `Err` names the phase and the broken invariant.
pub(crate) fn run(rng: &mut Rng, topology: &Topology, steps: usize) -> Result<Coverage, String> {
    let mut coverage = Coverage::default();
    let mut net = Net::new(topology);
    for node in 0..net.nodes.len() {
        for _ in 0..rng.below(3) {
            net.subscribe(node, random_pattern(rng));
        }
    }
    check_phase(&mut net, rng, "initial", &mut coverage)?;
    for step in 0..steps {
        chaos_step(&mut net, rng, &mut coverage);
        if let Some(violation) = net.violations.first() {
            return Err(format!("chaos step {step}: {violation}{}", describe(&net)));
        }
    }
    // Cells assume their brokers are linked with each other: heal every intra-cell wire, and
    // keep the broken cell links and crashed brokers, so routes must go around them.
    let intra: Vec<(usize, usize)> = net.wires.iter().filter(|(_, w)| w.intra_cell).map(|(k, _)| *k).collect();
    for key in intra {
        net.repair(key);
    }
    check_phase(&mut net, rng, "after faults", &mut coverage)?;
    let keys: Vec<(usize, usize)> = net.wires.keys().copied().collect();
    for key in keys {
        net.repair(key);
    }
    for node in 0..net.nodes.len() {
        if !net.alive(node) {
            net.start(node);
        }
    }
    check_phase(&mut net, rng, "healed", &mut coverage)?;
    coverage.sideways = net.sideways;
    coverage.stale_tree_drops = net.drops.get("UnknownTreeId").copied().unwrap_or(0);
    coverage.route_recomputations =
        (0..net.nodes.len()).filter_map(|i| net.router(i)).map(|r| r.metrics().route_recomputations).sum();
    Ok(coverage)
}
