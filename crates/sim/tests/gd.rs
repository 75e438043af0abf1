//! Guaranteed delivery under chaos: the delivery engines on every simulated broker, checked at
//! every step (I1-I5) and at the end (exactly Expected, logs released). A failure prints its
//! seed, the shrunk plan and the replay command; `SIM_SEEDS=<n>` soaks.

use std::cell::RefCell;

use tidings_sim::gd::{run_gd, Mode, Stats};
use tidings_sim::sweep::{plans, sweep};
use tidings_sim::topology::{random_topology, seed_topology, SEED_TOPOLOGIES};
use tidings_sim::{Plan, Rng};

/// Chaos steps per run.
const STEPS: usize = 300;

/// Sweeps `SIM_SEEDS` (default `count`) random networks through `mode`; returns the coverage
/// and the number of runs.
fn random_sweep(name: &str, count: u64, mode: Mode) -> (tidings_sim::Coverage, usize) {
    let plans = plans(1, count, STEPS);
    let coverage = sweep(name, &plans, |plan| {
        let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
        run_gd(&topology, plan, mode).map(|(coverage, _)| coverage)
    });
    println!("{coverage:?}");
    (coverage, plans.len())
}

/// [`random_sweep`] of a mode with faults: with enough runs, they crashed brokers and
/// partitioned the network (a sweep that drew no fault proves nothing about them).
fn faulty_sweep(name: &str, mode: Mode) {
    let (coverage, runs) = random_sweep(name, 200, mode);
    if runs >= 50 {
        assert!(coverage.crashes > runs && coverage.partitions > 0, "few faults: {coverage:?}");
    }
}

#[test]
fn random_networks_deliver_exactly_expected_over_a_lossy_channel() {
    let name = "random_networks_deliver_exactly_expected_over_a_lossy_channel";
    let plans = plans(1, 1000, STEPS);
    let stats = RefCell::new(Stats::default());
    let coverage = sweep(name, &plans, |plan| {
        let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
        let (coverage, run) = run_gd(&topology, plan, Mode::LOSSY)?;
        stats.borrow_mut().add(&run);
        Ok(coverage)
    });
    let stats = stats.into_inner();
    println!("{coverage:?}\n{stats:?}");
    if plans.len() >= 100 {
        assert!(stats.deliveries > 10 * plans.len() as u64, "few deliveries were judged: {stats:?}");
        assert_eq!(stats.unconfirmed, 0, "subscribers gave up on their barrier: {stats:?}");
    }
}

/// 200 seeds by default (57 and 139 failed until relays took F only from their upstream cell).
/// Publishing brokers crash here too, whatever their subscribers are owed (the arm that draws
/// them could not be reached with faults on until 2026-11-28). The census
/// (`failure_census`, below) runs more: seeds 1-1,000 of every mode pass (2026-11-28).
#[test]
fn random_networks_deliver_exactly_expected_through_faults_and_churn() {
    faulty_sweep("random_networks_deliver_exactly_expected_through_faults_and_churn", Mode::FULL);
}

/// Runs that had a later barrier carry a lower start than an earlier one that had already
/// started the stream at the subscriber's broker: the core refused the start and told the
/// subscriber a gap it was never owed (`full` census seeds 35 and 403 on the schedules of
/// 2026-11-28, 319 on those since), until the shells raised such a start to the stream's
/// floor (`tidings_node::starts`). Each must pass.
#[test]
fn a_barrier_with_a_start_below_the_streams_floor_loses_nothing() {
    for seed in [35, 319, 403] {
        let plan = Plan { seed, steps: STEPS, skip: Default::default() };
        let topology = random_topology(&mut Rng::new(seed ^ 0x7090));
        if let Err(failure) = run_gd(&topology, &plan, Mode::FULL) {
            panic!("seed {seed}: {}", failure.message);
        }
    }
}

#[test]
fn the_seed_networks_deliver_exactly_expected_over_a_lossy_channel() {
    let name = "the_seed_networks_deliver_exactly_expected_over_a_lossy_channel";
    for (file, seeds) in SEED_TOPOLOGIES.iter().zip([40, 40, 5, 5]) {
        let topology = seed_topology(file).unwrap_or_else(|e| panic!("{e}"));
        let coverage = sweep(name, &plans(1000, seeds, STEPS), |plan| {
            run_gd(&topology, plan, Mode::LOSSY).map(|(coverage, _)| coverage)
        });
        println!("{file}: {coverage:?}");
    }
}

#[test]
fn the_seed_networks_deliver_exactly_expected_through_faults_and_churn() {
    let name = "the_seed_networks_deliver_exactly_expected_through_faults_and_churn";
    for (file, seeds) in SEED_TOPOLOGIES.iter().zip([5, 5, 1, 1]) {
        let topology = seed_topology(file).unwrap_or_else(|e| panic!("{e}"));
        let coverage = sweep(name, &plans(1000, seeds, STEPS), |plan| {
            run_gd(&topology, plan, Mode::FULL).map(|(coverage, _)| coverage)
        });
        println!("{file}: {coverage:?}");
    }
}

/// The census the README quotes: runs `SIM_SEEDS` seeds (default 50) of each of the five modes
/// without shrinking, prints the kinds of failure and how many runs passed, and fails if any
/// run failed. The README's figure is
/// `SIM_SEEDS=1000 cargo test --release -p tidings-sim --test gd -- --ignored --nocapture failure_census`
/// (1,000 seeds per mode, release build; 2026-11-29, 03:00 to 03:40 UTC, at 0fbd9b4: with the
/// real pubend log, power losses, empty restarts and the broker's retry table, churn, idle
/// crashes, pubend crashes, faults and full pass 1,000 of 1,000 each, 5,000 of 5,000. Before,
/// `full` had 998 of 1,000 (seeds 35 and 403), then 999 (seed 319): a later barrier's start
/// below the stream's floor was refused with a gap, until the shells raised it to the floor;
/// see `a_barrier_with_a_start_below_the_streams_floor_loses_nothing`).
/// `SIM_CENSUS_MODE=<label>` runs one mode only;
/// `SIM_CENSUS_VERBOSE=1` prints every failing seed's message.
#[test]
#[ignore]
fn failure_census() {
    let modes = [
        ("churn", Mode::CHURN),
        ("idle crashes", Mode::IDLE_CRASHES),
        ("pubend crashes", Mode::PUBEND_CRASHES),
        ("faults", Mode::FAULTS),
        ("full", Mode::FULL),
    ];
    let only = std::env::var("SIM_CENSUS_MODE").ok();
    let (mut runs, mut failed) = (0, 0);
    for (label, mode) in modes.into_iter().filter(|(label, _)| only.as_deref().is_none_or(|o| o == *label)) {
        let mut kinds: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        let plans = plans(1, 50, STEPS);
        for plan in &plans {
            let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
            if let Err(failure) = run_gd(&topology, plan, mode) {
                if std::env::var("SIM_CENSUS_VERBOSE").is_ok() {
                    println!("{label} seed {}: {}", plan.seed, failure.message);
                }
                let kind: String = failure.message.split([':', '(']).take(2).collect::<Vec<_>>().join(":");
                kinds.entry(kind).or_insert((0, plan.seed)).0 += 1;
            }
        }
        let failures: u64 = kinds.values().map(|(count, _)| count).sum();
        println!("{label}: {} seeds; failures by kind (count, first seed): {kinds:?}", plans.len());
        (runs, failed) = (runs + plans.len() as u64, failed + failures);
    }
    println!("census: {} of {runs} runs passed", runs - failed);
    assert!(runs > 0, "the census ran nothing (SIM_CENSUS_MODE names no mode?)");
    assert_eq!(failed, 0, "{failed} of {runs} runs failed");
}

/// 200 seeds by default; the publishing broker crashes whatever its subscribers are still owed
/// (until 2026-11-28 only once they had caught up). Seeds 1-1,000 pass (940 failed until a lazily told F
/// was judged again when the summaries moved, 920 until restarted entry brokers were held; 535
/// never released its log until relays became curious about their own holes, and 647 stalled
/// until walks fetched the payloads they stop at).
#[test]
fn random_networks_deliver_exactly_expected_through_publisher_crashes() {
    let (coverage, runs) =
        random_sweep("random_networks_deliver_exactly_expected_through_publisher_crashes", 200, Mode::PUBEND_CRASHES);
    if runs >= 50 {
        assert!(coverage.crashes > runs, "few crashes: {coverage:?}");
    }
}

/// 200 seeds by default; seeds 1-1,000 pass (`failure_census`, 2026-11-28).
#[test]
fn random_networks_deliver_exactly_expected_through_subscriber_churn() {
    random_sweep("random_networks_deliver_exactly_expected_through_subscriber_churn", 200, Mode::CHURN);
}

/// 200 seeds by default: crashes of every role, stalls, loud and silent cuts and partitions,
/// with their repairs, on a lossy channel.
#[test]
fn random_networks_deliver_exactly_expected_through_faults() {
    faulty_sweep("random_networks_deliver_exactly_expected_through_faults", Mode::FAULTS);
}

/// 200 seeds by default; seeds 1-1,000 pass (103 and 114 failed until relays took F only from
/// their upstream cell).
#[test]
fn random_networks_deliver_exactly_expected_through_crashes_of_every_role_while_idle() {
    let (coverage, runs) = random_sweep(
        "random_networks_deliver_exactly_expected_through_crashes_of_every_role_while_idle",
        200,
        Mode::IDLE_CRASHES,
    );
    if runs >= 50 {
        assert!(coverage.crashes > runs, "few crashes: {coverage:?}");
    }
}

/// 200 seeds by default: everything of `full` but restarts on an empty directory, with every
/// broker's clock off the network's by its own amount, up to `CLOCK_SPREAD_MS` ahead or
/// behind (a restart steps it back further). A pubend's ticks are its home's clock and a late
/// start comes from the subscriber's broker's clock, so the promise each start makes is what
/// this judges.
///
/// Ignored: one known failure, seed 139 of 1-200 (199 pass, 2026-12-02). A broker that starts
/// without a durable store (its first start, or a wiped directory) floors its late starts at
/// its own start time (`tidings_node::starts::late_start`), to stay above what an earlier life
/// may have acknowledged upstream. That floor is its clock; seed 139's node 8 runs ahead of the
/// pubend's home and started a subscription 289 ms above what was published after its
/// confirmation. Dropping the floor loses messages silently at a broker restarted empty with
/// clocks that agree (`gd_links`' `a_subscriber_back_at_its_broker_restarted_empty_...`, 49 of
/// 1,500). The fix wanted: the upstream tells a restarted child what its earlier life
/// acknowledged, in the pubend's ticks, and that replaces the clock floor. Tried and dropped
/// (2026-12-02): no floor, and an upstream answering a restarted entry's nacks below its
/// earlier life's ack as lost rather than final. Full mode's seed 98 then told a subscriber at
/// a broker further down a gap over ticks with nothing for it: that ack had not covered only
/// the restarted broker's own needs.
/// `cargo test --release -p tidings-sim --test gd -- --ignored skewed` runs it.
#[test]
#[ignore = "known: an empty start's late-start floor is its own clock (seed 139)"]
fn random_networks_deliver_exactly_expected_with_skewed_clocks() {
    faulty_sweep("random_networks_deliver_exactly_expected_with_skewed_clocks", Mode::SKEWED);
}

/// The skewed mode bites: with clocks up to 4 s ahead or behind, two brokers may differ by more
/// than the 5 s a late start takes below its confirmation, and some start breaks its promise
/// (seed 1-120's first failure: a start 312 ms above a message published after it).
/// Without this, a mode that never moved a clock would pass as well as one that does.
#[test]
fn clocks_further_apart_than_a_late_starts_margin_break_its_promise() {
    let mode = Mode { clock_spread_ms: 4_000, ..Mode::SKEWED };
    let failure = (1..=120).find_map(|seed| {
        let plan = Plan { seed, steps: STEPS, skip: Default::default() };
        let topology = random_topology(&mut Rng::new(seed ^ 0x7090));
        run_gd(&topology, &plan, mode).err()
    });
    let message = failure.map(|f| f.message).unwrap_or_default();
    println!("{message}");
    assert!(message.contains("published after its confirmation"), "no start broke its promise: {message:?}");
}
