//! Deterministic multi-engine runs: a chain and a fan-out over a lossy, duplicating,
//! reordering network, with an intermediate-broker crash and a pubend crash; invariants after
//! every step, exact delivery at the end.

mod net;

use net::{child, up, Faults, Net};
use tidings_delivery::{BrokerId, CellId, Millis, StreamRoute, SubendId, Tick};

const A: BrokerId = BrokerId(0);
const B: BrokerId = BrokerId(1);
const C: BrokerId = BrokerId(2);
const D: BrokerId = BrokerId(3);

/// Seeds to run: `NET_SEEDS=n` soaks, `NET_SEED=s` replays one (the default keeps `cargo test` to a few seconds).
fn seeds(default: u64) -> std::ops::RangeInclusive<u64> {
    if let Some(seed) = std::env::var("NET_SEED").ok().and_then(|n| n.parse().ok()) {
        return seed..=seed;
    }
    let n = std::env::var("NET_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    1..=n
}

fn lossy() -> Faults {
    Faults { loss_per_mille: 80, dup_per_mille: 30, max_delay_ms: 15 }
}

fn fan_out(seed: u64, faults: Faults) -> Net {
    let mut net = Net::new(seed, faults);
    net.add(A, CellId(0), StreamRoute { upstream: None, children: vec![child(1, 1)] }, &[(CellId(1), vec![1, 2, 3])]);
    net.add(
        B,
        CellId(1),
        StreamRoute { upstream: up(0, &[0]), children: vec![child(2, 2), child(3, 3)] },
        &[(CellId(2), vec![1, 2]), (CellId(3), vec![2, 3])],
    );
    net.add(C, CellId(2), StreamRoute { upstream: up(1, &[1]), children: vec![] }, &[]);
    net.add(D, CellId(3), StreamRoute { upstream: up(1, &[1]), children: vec![] }, &[]);
    net.subscribe(C, SubendId(10), vec![1, 2], Tick(1));
    net.subscribe(C, SubendId(11), vec![1], Tick(1));
    net.subscribe(D, SubendId(20), vec![2, 3], Tick(1));
    net
}

/// Publishes a message of a random topic every few ms until `until`, with faults scheduled by
/// the closure, then lets the network heal and settle.
fn drive(net: &mut Net, until: u64, faults: impl FnMut(&mut Net)) {
    drive_with_quiet(net, until, 0..0, faults)
}

/// Like [`drive`], with no publications during `quiet` (so that the pubend asserts silence far
/// beyond its last logged tick).
fn drive_with_quiet(net: &mut Net, until: u64, quiet: std::ops::Range<u64>, mut faults: impl FnMut(&mut Net)) {
    while net.now < Millis(until) {
        if !quiet.contains(&net.now.0) && net.random(8) == 0 {
            let topic = 1 + net.random(3) as u8;
            net.publish(topic);
        }
        if net.now.0.is_multiple_of(100) {
            net.retry_unacked();
        }
        faults(net);
        net.step();
    }
    net.faults = Faults { loss_per_mille: 0, dup_per_mille: 0, max_delay_ms: 2 };
    for _ in 0..40 {
        net.retry_unacked();
        let until = net.now.after(100);
        net.run_until(until);
    }
}

#[test]
fn a_chain_delivers_exactly_once_in_order_over_a_perfect_network() {
    let mut net = Net::new(1, Faults { loss_per_mille: 0, dup_per_mille: 0, max_delay_ms: 0 });
    net.add(A, CellId(0), StreamRoute { upstream: None, children: vec![child(1, 1)] }, &[(CellId(1), vec![1])]);
    net.add(B, CellId(1), StreamRoute { upstream: up(0, &[0]), children: vec![child(2, 2)] }, &[(CellId(2), vec![1])]);
    net.add(C, CellId(2), StreamRoute { upstream: up(1, &[1]), children: vec![] }, &[]);
    net.subscribe(C, SubendId(10), vec![1], Tick(1));
    drive(&mut net, 1000, |_| {});
    net.check_complete();
}

#[test]
fn a_fan_out_delivers_exactly_once_in_order_over_a_lossy_network() {
    for seed in seeds(8) {
        eprintln!("seed {seed} (replay: NET_SEED={seed} cargo test -p tidings-delivery --test network)");
        let mut net = fan_out(seed, lossy());
        drive(&mut net, 2000, |_| {});
        net.check_complete();
        assert_repaired(&net);
    }
}

#[test]
fn an_intermediate_broker_crash_loses_its_state_but_no_message() {
    for seed in seeds(6) {
        eprintln!("seed {seed} (replay: NET_SEED={seed} cargo test -p tidings-delivery --test network)");
        let mut net = fan_out(seed, lossy());
        drive(&mut net, 3000, |net| match net.now.0 {
            1000 => net.set_up(B, false),
            1300 => {
                net.set_up(B, true);
                net.crash(B);
            }
            _ => {}
        });
        net.check_complete();
        assert_repaired(&net);
    }
}

#[test]
fn a_pubend_crash_loses_unsynced_appends_but_never_reuses_a_tick() {
    for seed in seeds(6) {
        eprintln!("seed {seed} (replay: NET_SEED={seed} cargo test -p tidings-delivery --test network)");
        let mut net = fan_out(seed, lossy());
        drive_with_quiet(&mut net, 3000, 1200..1500, |net| match net.now.0 {
            1500 => net.set_up(A, false),
            1700 => {
                net.set_up(A, true);
                net.crash_with_clock_step_back(A, 400);
            }
            _ => {}
        });
        net.check_complete();
        assert_repaired(&net);
    }
}

/// The faults really were repaired by the protocol (a run without nacks proves little).
fn assert_repaired(net: &Net) {
    let shb_nacks: u64 = [C, D].iter().filter_map(|id| net.nodes.get(id)).map(|n| n.engine.counters().nacks_sent).sum();
    let answers: u64 = net.nodes.values().map(|n| n.engine.counters().retransmitted).sum();
    assert!(shb_nacks > 0 && answers > 0, "no repair happened: nacks {shb_nacks}, answers {answers}");
}

#[test]
fn a_lossy_chain_survives_an_intermediate_crash() {
    for seed in seeds(4) {
        eprintln!("seed {seed} (replay: NET_SEED={seed} cargo test -p tidings-delivery --test network)");
        let mut net = Net::new(seed, lossy());
        net.add(A, CellId(0), StreamRoute { upstream: None, children: vec![child(1, 1)] }, &[(CellId(1), vec![1, 2])]);
        net.add(
            B,
            CellId(1),
            StreamRoute { upstream: up(0, &[0]), children: vec![child(2, 2)] },
            &[(CellId(2), vec![1, 2])],
        );
        net.add(C, CellId(2), StreamRoute { upstream: up(1, &[1]), children: vec![] }, &[]);
        net.subscribe(C, SubendId(10), vec![1], Tick(1));
        net.subscribe(C, SubendId(11), vec![2], Tick(1));
        drive(&mut net, 2500, |net| match net.now.0 {
            800 => net.set_up(B, false),
            1000 => {
                net.set_up(B, true);
                net.crash(B);
            }
            _ => {}
        });
        net.check_complete();
        assert_repaired(&net);
    }
}

#[test]
fn a_failover_to_the_other_broker_of_a_cell_loses_nothing() {
    const B2: BrokerId = BrokerId(4);
    for seed in seeds(4) {
        eprintln!("seed {seed} (replay: NET_SEED={seed} cargo test -p tidings-delivery --test network)");
        let mut net = fan_out(seed, lossy());
        let b_route = StreamRoute { upstream: up(0, &[0]), children: vec![child(2, 2), child(3, 3)] };
        net.add(B2, CellId(1), b_route, &[(CellId(2), vec![1, 2]), (CellId(3), vec![2, 3])]);
        drive(&mut net, 3000, |net| match net.now.0 {
            1000 => net.set_up(B, false),
            1200 => {
                // The link-state layer noticed: P's tree now enters cell 1 at B2.
                net.reroute(A, StreamRoute { upstream: None, children: vec![child(1, 4)] });
                net.reroute(C, StreamRoute { upstream: up(1, &[4]), children: vec![] });
                net.reroute(D, StreamRoute { upstream: up(1, &[4]), children: vec![] });
            }
            _ => {}
        });
        net.check_complete();
        assert_repaired(&net);
    }
}
