//! Measurements, run on demand (`cargo test -p tidings-sim --release --test gd_measure --
//! --ignored --nocapture`); they print figures and assert nothing about time.

use std::time::Instant;

use tidings_route::BrokerName;
use tidings_sim::gd::{measure_blackout, run_gd, Mode, Stats};
use tidings_sim::sweep::plans;
use tidings_sim::topology::{random_topology, seed_topology};
use tidings_sim::Rng;

fn name(text: &str) -> BrokerName {
    BrokerName::new(text)
}

/// Share of nacked ticks absorbed by consolidation when the delivery frames on one of
/// gryphon-fig3's PHB-IB1 links are lost for 300 ms under 200 messages/s with a catch-all
/// subscriber on every other broker (and, as a baseline, with no blackout: the lossy channel
/// alone). Only the link the pubend's tree uses shows the cut.
#[test]
#[ignore]
fn nack_consolidation_in_the_gryphon_fig3_link_cut() {
    let topology = seed_topology("gryphon-fig3.toml").unwrap_or_else(|e| panic!("{e}"));
    for (entry, blackout_ms) in [("b1", 0), ("b1", 300), ("b2", 300)] {
        let mut total = Stats::default();
        for seed in 1..=10 {
            let wire = (&name("p1"), &name(entry));
            let stats = measure_blackout(&topology, seed, &name("p1"), wire, blackout_ms)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            total.add(&stats);
        }
        let asked = total.nack_ticks_sent + total.nack_ticks_absorbed;
        println!(
            "gryphon-fig3, p1-{entry} blackout {blackout_ms} ms, 10 seeds: {} nack messages, {} ticks nacked upstream, {} absorbed: {:.1}% of requested ticks absorbed; {} deliveries judged",
            total.nacks_sent,
            total.nack_ticks_sent,
            total.nack_ticks_absorbed,
            100.0 * total.nack_ticks_absorbed as f64 / asked.max(1) as f64,
            total.deliveries,
        );
    }
}

/// Simulated guaranteed deliveries and delivery frames per second of wall time over the
/// lossy-channel sweep.
#[test]
#[ignore]
fn simulated_messages_per_second() {
    let started = Instant::now();
    let mut total = Stats::default();
    let plans = plans(1, 200, 300);
    for plan in &plans {
        let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
        let (_, stats) = run_gd(&topology, plan, Mode::LOSSY).unwrap_or_else(|f| panic!("{}", f.message));
        total.add(&stats);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{} seeds in {seconds:.1} s: {:.0} deliveries/s, {:.0} delivery frames/s ({} deliveries, {} frames)",
        plans.len(),
        total.deliveries as f64 / seconds,
        total.frames as f64 / seconds,
        total.deliveries,
        total.frames
    );
}
