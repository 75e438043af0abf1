//! Seeded simulations of whole broker networks around the real router: random topologies with
//! cycles and multi-broker cells, traffic, crashes and cut links, then re-convergence. Every run
//! is a function of its seed; a failure prints the seed, and `SIM_SEED=<seed>` replays it.
//! `SIM_SEEDS=<n>` runs more seeds; `SIM_DEBUG=1` adds the whole network state to a failure.

// This whole crate is test code; clippy only sees `#[test]` functions as such.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod check;
mod net;
mod rng;
mod scenario;
mod scenarios;
mod sweep;
mod topic;

use rng::Rng;
use scenario::{random_topology, run};
use tidings_route::Topology;

/// Random topologies, `count` seeds from 1 unless `SIM_SEEDS` / `SIM_SEED` say otherwise.
fn random_topologies(count: u64) {
    let coverage = sweep::sweep("random_topologies", &sweep::seeds(1, count), |seed| {
        let mut rng = Rng::new(seed);
        let topology = random_topology(&mut rng);
        run(&mut rng, &topology, 600)
    });
    if std::env::var("SIM_SEED").is_err() {
        println!("{coverage:?}");
        assert!(coverage.probes > 10 * count as usize, "{coverage:?}");
        assert!(coverage.crashes > 0 && coverage.silent_faults > 0, "{coverage:?}");
        assert!(coverage.sideways > 0, "the sweep never routed sideways: {coverage:?}");
        assert!(coverage.stale_tree_drops > 0, "the sweep never raced a route change: {coverage:?}");
    }
}

#[test]
fn random_topologies_deliver_each_message_once_per_matching_subscriber_through_faults() {
    random_topologies(60);
}

/// The same for a long while: `cargo test -p tidings-route --test simulation -- --ignored`.
#[test]
#[ignore]
fn random_topologies_soak() {
    random_topologies(3000);
}

fn shared_topology(file: &str) -> Topology {
    let path = format!("{}/../../../shared/topologies/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    Topology::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn the_shared_topologies_deliver_each_message_once_through_faults() {
    // The 22-broker networks cost the most per seed; the small ones get more seeds.
    for (file, seeds) in
        [("two-brokers.toml", 6), ("gryphon-fig3.toml", 6), ("narada-22-sparse.toml", 1), ("narada-22-dense.toml", 1)]
    {
        let topology = shared_topology(file);
        let name = format!("the_shared_topologies ({file})");
        sweep::sweep(&name, &sweep::seeds(1000, seeds), |seed| run(&mut Rng::new(seed), &topology, 600));
    }
}

#[test]
fn the_simulated_filter_covers_exactly_when_every_matching_topic_also_matches() {
    use tidings_route::Filter;
    use topic::{all_patterns, all_topics};
    let topics = all_topics();
    for a in all_patterns() {
        for b in all_patterns() {
            let implied = topics.iter().all(|t| !b.matches(t) || a.matches(t));
            // Topics are at most three levels deep, so `>` patterns can look covered by finite ones.
            if a.covers(&b) {
                assert!(implied, "{a:?} claims to cover {b:?}");
            }
        }
    }
}
