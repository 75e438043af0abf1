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
    for seed in 1..=8 {
        let mut net = fan_out(seed, lossy());
        drive(&mut net, 2000, |_| {});
        net.check_complete();
        assert_repaired(&net);
    }
}

#[test]
fn an_intermediate_broker_crash_loses_its_state_but_no_message() {
    for seed in 1..=6 {
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
    for seed in 1..=6 {
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
    let shb_nacks: u64 = [C, D].iter().map(|id| net.nodes[id].engine.counters().nacks_sent).sum();
    let answers: u64 = [A, B].iter().map(|id| net.nodes[id].engine.counters().retransmitted).sum();
    assert!(shb_nacks > 0 && answers > 0, "no repair happened: nacks {shb_nacks}, answers {answers}");
}
