//! Durable subscriptions under chaos ([`Mode::DURABLE`]): half the subscribers are durable,
//! acknowledged by the checkpoints their application's acknowledgements make; their clients go
//! away and come back, and their brokers crash at any moment and restore them from the stored
//! checkpoints. Every tick a client accepts is judged (exactly once, in order, no gap; a
//! redelivery of a tick it already received is skipped, as the real client does), no log is
//! released above a durable checkpoint, and at the end every client has exactly Expected.

use std::cell::RefCell;

use tidings_sim::gd::{run_gd, Mode, Stats};
use tidings_sim::sweep::{plans, sweep};
use tidings_sim::topology::random_topology;
use tidings_sim::Rng;

/// Chaos steps per run.
const STEPS: usize = 300;

/// 53 seeds by default. Seeds 4, 17 and 21 failed until the routers held a departed link's
/// interest (`route/src/router/departed.rs`): a message in flight when a durable subscriber's
/// broker crashed was judged F upstream while its filter was out of the summaries. A soak of
/// 300 (`SIM_SEEDS=300`, release build) passes; seed 74 (I2) failed until relays became
/// curious about holes in their own istream.
#[test]
fn durable_subscribers_get_exactly_expected_through_client_absences_and_crashes_of_their_broker() {
    let name = "durable_subscribers_get_exactly_expected_through_client_absences_and_crashes_of_their_broker";
    let plans = plans(1, 53, STEPS);
    let stats = RefCell::new(Stats::default());
    let coverage = sweep(name, &plans, |plan| {
        let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
        let (coverage, run) = run_gd(&topology, plan, Mode::DURABLE)?;
        stats.borrow_mut().add(&run);
        Ok(coverage)
    });
    let stats = stats.into_inner();
    println!("{coverage:?}\n{stats:?}");
    if plans.len() >= 50 {
        assert!(stats.shb_crashes > plans.len() as u64, "few crashes of durable subscribers' brokers: {stats:?}");
        assert!(stats.clients_away > plans.len() as u64, "few clients went away: {stats:?}");
        assert!(stats.orders_at_a_moved_seam > 0, "no catch-up was served by a cursor across a moving seam: {stats:?}");
        assert!(stats.checkpoints > 10 * plans.len() as u64, "few checkpoints: {stats:?}");
        assert!(stats.skipped > 0, "no client ever skipped a redelivery: {stats:?}");
        assert!(stats.deliveries > 10 * plans.len() as u64, "few deliveries were judged: {stats:?}");
    }
}

/// Not a check: runs `SIM_SEEDS` seeds (default 50) of [`Mode::DURABLE`] without shrinking and
/// prints every failure, for the report (`cargo test -p tidings-sim --test gd_durable --
/// --ignored --nocapture durable_census`); `SIM_CENSUS_NO_CRASH=1` leaves the crashes out.
#[test]
#[ignore]
fn durable_census() {
    let mode = match std::env::var("SIM_CENSUS_NO_CRASH") {
        Ok(_) => Mode { shb_crashes: false, ..Mode::DURABLE },
        Err(_) => Mode::DURABLE,
    };
    let (mut failed, mut stats) = (Vec::new(), Stats::default());
    let plans = plans(1, 50, STEPS);
    for plan in &plans {
        let topology = random_topology(&mut Rng::new(plan.seed ^ 0x7090));
        match run_gd(&topology, plan, mode) {
            Ok((_, run)) => stats.add(&run),
            Err(failure) => {
                println!("seed {} step {:?}: {}", plan.seed, failure.step, failure.message);
                failed.push(plan.seed);
            }
        }
    }
    println!("{} seeds; failed: {failed:?}; passing runs: {stats:?}", plans.len());
}
