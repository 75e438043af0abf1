//! A pubend's log replicated by raft-rs (`tidings-replica`) under chaos: 3 and 5 replicas,
//! crashes, partitions, a lossy duplicating reordering network, and in the disk modes wiped
//! disks and whole-group power losses. Checked: one leader per term, identical applied logs,
//! every acknowledged publish logged exactly once at its tick on every replica, a retry after a
//! takeover answered with the same tick. With the delivery core around the group (the core
//! modes), each publish also goes through the engine, the host's log and the gate, and every
//! delivery is judged. A failure prints its seed, the shrunk plan and the replay command. The long census (1,000 seeds per mode) is ignored by default:
//! `cargo test -p tidings-sim --test replica -- --ignored` (or `SIM_SEEDS=<n>` on any test).

use std::cell::RefCell;

use tidings_sim::replica::{run_replica, Mode, Mutation, Report};
use tidings_sim::sweep::{plans, sweep};

/// Chaos steps per run (about 1.6 virtual seconds).
const STEPS: usize = 800;

/// Sweeps `SIM_SEEDS` (default `count`) seeds through `mode` and checks the sweep did what it
/// claims to test.
fn census(name: &str, count: u64, mode: Mode) {
    let plans = plans(1, count, STEPS);
    let total = RefCell::new(Report::default());
    let coverage = sweep(name, &plans, |plan| {
        run_replica(plan, mode, Mutation::None).map(|(coverage, report)| {
            let mut total = total.borrow_mut();
            total.acks += report.acks;
            total.acknowledged += report.acknowledged;
            total.elections += report.elections;
            total.retries_after_takeover += report.retries_after_takeover;
            total.batched += report.batched;
            total.snapshots_taken += report.snapshots_taken;
            total.snapshots_installed += report.snapshots_installed;
            total.chunks_received += report.chunks_received;
            total.compactions_aborted += report.compactions_aborted;
            total.paced += report.paced;
            total.forgotten += report.forgotten;
            total.replaced += report.replaced;
            total.member_changes += report.member_changes;
            total.added_wiped_learner += report.added_wiped_learner;
            total.added_wiped_voter += report.added_wiped_voter;
            total.delivered += report.delivered;
            total.seeded += report.seeded;
            total.reopened += report.reopened;
            total.closed += report.closed;
            coverage
        })
    });
    let total = total.into_inner();
    println!("{name}: {} seeds, {coverage:?}, {total:?}", plans.len());
    let runs = plans.len();
    assert!(total.acknowledged >= runs * 10, "too few publishes acknowledged: {total:?}");
    assert!(total.elections > runs, "no takeovers: {total:?}");
    assert!(total.retries_after_takeover * 2 >= runs, "few retries after a takeover: {total:?}");
    assert!(total.batched > 0, "no publishes proposed together: {total:?}");
    assert!(total.snapshots_taken as usize >= runs, "too few compactions: {total:?}");
    assert!(total.snapshots_installed > 0, "no replica caught up from a snapshot: {total:?}");
    assert!(total.chunks_received > 0, "no snapshot travelled in chunks: {total:?}");
    assert!(total.paced > 0, "no snapshot was paced over ticks: {total:?}");
    assert!(coverage.crashes >= runs && coverage.partitions >= runs, "too few faults: {coverage:?}");
    assert!(total.replaced * 5 >= runs && total.member_changes >= total.replaced, "too few replaces: {total:?}");
    if mode.core {
        assert!(total.delivered >= total.acknowledged, "fewer deliveries than publishes acknowledged: {total:?}");
        // A close by a deposed host on one seed in three: fewer since a replica back empty no
        // longer deposes its leader (`rejoin`: 86 closes in 200 seeds of the disk mode).
        assert!(
            total.seeded >= runs && total.reopened * 2 >= runs && total.closed * 3 >= runs,
            "too few takeovers through the core (opened from the group, resumed, closed): {total:?}"
        );
    }
    if mode.disks {
        assert!(
            coverage.power_losses * 4 >= runs && coverage.empty_restarts * 4 >= runs,
            "too few disk faults: {coverage:?}"
        );
        assert!(
            total.added_wiped_learner > 0 && total.added_wiped_voter > 0,
            "a replace's new replica never lost its disk as a learner and as a voter: {total:?}"
        );
    }
}

#[test]
fn three_replicas_keep_every_acknowledged_publish() {
    census("three_replicas_keep_every_acknowledged_publish", 200, Mode::THREE);
}

#[test]
fn five_replicas_keep_every_acknowledged_publish() {
    census("five_replicas_keep_every_acknowledged_publish", 200, Mode::FIVE);
}

#[test]
fn three_replicas_survive_wiped_disks_and_power_losses() {
    census("three_replicas_survive_wiped_disks_and_power_losses", 200, Mode::THREE_DISKS);
}

#[test]
fn five_replicas_survive_wiped_disks_and_power_losses() {
    census("five_replicas_survive_wiped_disks_and_power_losses", 200, Mode::FIVE_DISKS);
}

/// A run is a function of its seed (raft-rs's random election timeouts pinned, every map
/// ordered): a failing seed replays exactly.
#[test]
fn a_run_is_a_function_of_its_seed() {
    for mode in [Mode::FIVE_DISKS, Mode::THREE_DISKS_CORE] {
        for plan in plans(7, 3, STEPS) {
            let run = || run_replica(&plan, mode, Mutation::None).map(|(c, r)| (format!("{c:?}"), r));
            let (first, second) = (run().map_err(|f| f.message), run().map_err(|f| f.message));
            assert!(first.is_ok(), "seed {} failed: {first:?}", plan.seed);
            assert_eq!(first, second, "seed {} ran twice differently", plan.seed);
        }
    }
}

/// The long census: 1,000 seeds in every mode.
#[test]
#[ignore = "long: 1,000 seeds per mode"]
fn census_of_1000_seeds_per_mode() {
    for (name, mode) in [
        ("three", Mode::THREE),
        ("five", Mode::FIVE),
        ("three_disks", Mode::THREE_DISKS),
        ("five_disks", Mode::FIVE_DISKS),
        ("three_core", Mode::THREE_CORE),
        ("five_core", Mode::FIVE_CORE),
        ("three_disks_core", Mode::THREE_DISKS_CORE),
    ] {
        census(name, 1_000, mode);
    }
}

/// Runs `seeds` seeds of `mode` with `mutation` on, prints how many caught it, and fails if
/// none did; returns the failures' messages.
fn mutation_is_caught(mode: Mode, seeds: u64, mutation: Mutation) -> Vec<String> {
    let plans = plans(1, seeds, STEPS);
    let failures: Vec<_> =
        plans.iter().filter_map(|plan| run_replica(plan, mode, mutation).err().map(|f| (plan.seed, f))).collect();
    println!("{mode:?}, {mutation:?}: {} of {} seeds caught it", failures.len(), plans.len());
    match failures.first() {
        Some((seed, failure)) => println!("{mode:?}: first caught at seed {seed}: {}", failure.message),
        None => panic!("{mutation:?} went unnoticed for {seeds} seeds in {mode:?}"),
    }
    failures.into_iter().map(|(_, f)| f.message).collect()
}

/// The mutation: a leader acknowledging on its own sync, before a quorum has the entry, must be
/// caught (an acknowledgement no successor kept: the publish lost, or logged at another tick).
#[test]
fn acknowledging_before_the_quorum_is_caught() {
    for mode in [Mode::THREE, Mode::FIVE_DISKS] {
        let caught = mutation_is_caught(mode, 200, Mutation::AckBeforeQuorum);
        let lost = caught.iter().filter(|m| m.contains("has it at None")).count();
        println!("{mode:?}: {lost} caught as a lost publish");
    }
}

/// The mutation: a snapshot that leaves out an unreleased record (the newest) must be caught: a
/// replica restarted from it, or caught up with it, applies or ends with something else.
#[test]
fn a_snapshot_that_drops_a_record_is_caught() {
    for mode in [Mode::THREE, Mode::FIVE_DISKS] {
        mutation_is_caught(mode, 100, Mutation::SnapshotDropsRecord);
    }
}

/// The delivery core around the group (issue 40: "the simulator runs the Raft groups with the
/// delivery core"): every publish goes through the engine, the host's log and the gate,
/// successors open the pubend from the group, deposed hosts close it, and every delivery to
/// each replica's subscriber is judged (one tick, one publish, at every replica).
#[test]
fn the_delivery_core_around_three_replicas_delivers_each_acknowledged_publish_once() {
    census("the_delivery_core_around_three_replicas_delivers_each_acknowledged_publish_once", 200, Mode::THREE_CORE);
}

/// The delivery core around five replicas: a quorum of three, two down or cut off at once.
#[test]
fn the_delivery_core_around_five_replicas_delivers_each_acknowledged_publish_once() {
    census("the_delivery_core_around_five_replicas_delivers_each_acknowledged_publish_once", 200, Mode::FIVE_CORE);
}

/// The delivery core with wiped disks and whole-group power losses: a host's pubend log, like
/// its journal, loses what was not synced, and a wiped one is seeded again from the group.
#[test]
fn the_delivery_core_survives_wiped_disks_and_power_losses() {
    census("the_delivery_core_survives_wiped_disks_and_power_losses", 200, Mode::THREE_DISKS_CORE);
}

/// The mutations of the seam between the engine and the group: acknowledging a publish on the
/// host's sync alone, and letting the engine send a record before the group committed it, must
/// each be caught (an acknowledged publish no successor holds at its tick, or a publish
/// delivered at two ticks).
#[test]
fn the_seams_mutations_are_caught() {
    for mutation in [Mutation::AckBeforeGroup, Mutation::SendBeforeCommit] {
        mutation_is_caught(Mode::THREE_CORE, 200, mutation);
    }
}

/// Seed 234 of the core mode with disk faults, found by the 1,000-seed census: a replica added
/// in a replace, promoted, then wiped came back fenced only by its leader's term; its log soon
/// held an entry of that term, older than entries its old self had acknowledged in the same
/// term, so it voted, and elected a replica that lacked them (two replicas applied different
/// entries at index 37). A replica back empty, added or not, now withholds its vote until its
/// log reaches the furthest entry of the highest term its mates hold (`rejoin`). The core's
/// sync delays have come from the run's generator since, and the seed still fails with the old
/// rule put back (2026-12-02).
#[test]
fn a_wiped_added_replica_never_elects_a_replica_lacking_what_it_acknowledged() {
    for plan in plans(234, 1, STEPS) {
        let run = run_replica(&plan, Mode::THREE_DISKS_CORE, Mutation::None);
        assert!(run.is_ok(), "seed {}: {:?}", plan.seed, run.err().map(|f| f.message));
    }
}
