//! Seeded sweeps over random networks and the seed networks. A failure prints its seed, the
//! shrunk plan and the one-line replay command; `SIM_SEEDS=<n>` soaks.

use tidings_sim::sweep::{plans, sweep};
use tidings_sim::topology::{random_topology, seed_topology, SEED_TOPOLOGIES};
use tidings_sim::{run, NoLayer, Rng};

/// Chaos steps per random run.
const STEPS: usize = 150;

#[test]
fn random_networks_keep_every_routing_invariant_at_every_step_through_faults() {
    let plans = plans(1, 1000, STEPS);
    let coverage = sweep("random_networks_keep_every_routing_invariant_at_every_step_through_faults", &plans, |plan| {
        let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
        run(&topology, NoLayer, plan)
    });
    println!("{coverage:?}");
    if plans.len() >= 100 {
        assert!(coverage.exactly_once > 10 * plans.len(), "{coverage:?}");
        assert!(coverage.quiet_steps > 10 * plans.len(), "the network was rarely quiet: {coverage:?}");
        assert!(coverage.hops_judged > plans.len(), "{coverage:?}");
        assert!(coverage.barriers > plans.len() / 4, "few barriers were judged: {coverage:?}");
        assert!(coverage.crashes > 0 && coverage.silent_faults > 0 && coverage.stalls > 0, "{coverage:?}");
        assert!(coverage.partitions > 0, "{coverage:?}");
        assert!(coverage.sideways > 0, "the sweep never routed sideways: {coverage:?}");
        assert!(coverage.stale_tree_drops > 0, "the sweep never raced a route change: {coverage:?}");
    }
}

#[test]
fn the_seed_networks_keep_every_routing_invariant_through_faults() {
    // The 22-broker networks cost the most per seed; the small ones get more seeds.
    for (file, seeds) in SEED_TOPOLOGIES.iter().zip([20, 10, 2, 2]) {
        let topology = seed_topology(file).unwrap_or_else(|e| panic!("{e}"));
        let name = "the_seed_networks_keep_every_routing_invariant_through_faults";
        let coverage = sweep(name, &plans(1000, seeds, 400), |plan| run(&topology, NoLayer, plan));
        println!("{file}: {coverage:?}");
    }
}
