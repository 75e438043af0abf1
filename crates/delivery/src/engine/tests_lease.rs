//! Ack leases: a broker acknowledges a stream upstream only as far as its store remembers
//! doing so, and after a restart starts new subscriptions above that (nemesis seed 310).

use super::{data, Byte0, P};
use crate::engine::{Action, Engine, Input, StreamRoute, UpstreamCell};
use crate::message::Message;
use crate::names::{BrokerId, CellId, Millis, SubendId, Tick};
use crate::settings::Settings;
use crate::store::{StoreAction, StoreInput};

fn leased_relay() -> (Engine<Byte0>, Vec<Action>) {
    let mut engine = Engine::new(Settings { ack_leases: true, ..Settings::default() }, Byte0);
    let mut out = Vec::new();
    let route =
        StreamRoute { upstream: Some(UpstreamCell { cell: CellId(0), brokers: vec![BrokerId(0)] }), children: vec![] };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    (engine, out)
}

fn acks(out: &[Action]) -> Vec<Tick> {
    let ack = |a: &Action| match a {
        Action::Send { message: Message::Ack { ack_prefix, .. }, .. } => Some(*ack_prefix),
        _ => None,
    };
    out.iter().filter_map(ack).collect()
}

fn lease_asks(out: &[Action]) -> Vec<Tick> {
    let ask = |a: &Action| match a {
        Action::Store(StoreAction::AckLease { up_to, .. }) => Some(*up_to),
        _ => None,
    };
    out.iter().filter_map(ask).collect()
}

/// The ack waits for the lease: first asked for, then sent once the store says it is durable,
/// never beyond it.
#[test]
fn an_ack_upstream_waits_until_the_store_holds_its_lease() {
    let (mut engine, mut out) = leased_relay();
    let attach = Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(Tick(1)), durable: false };
    engine.handle(Millis(1), attach, &mut out);
    out.clear();
    engine.handle(Millis(500), data(100, 1, 1, false), &mut out);
    assert_eq!(lease_asks(&out), [Tick(100)], "{out:?}");
    assert!(acks(&out).iter().all(|&ack| ack == Tick(0)), "acked beyond the lease: {out:?}");
    out.clear();
    let done = Input::Store(StoreInput::AckLeaseDone { pubend: P, lease: Tick(100) });
    engine.handle(Millis(501), done, &mut out);
    engine.handle(Millis(700), Input::Tick, &mut out);
    assert_eq!(acks(&out).last(), Some(&Tick(100)), "{out:?}");
}

/// A restarted broker is told its lease before any subscription: a subscription made then
/// may start no lower than one past it, attached or not, though the stream is new.
#[test]
fn a_restored_lease_floors_new_subscriptions_starts() {
    let (mut engine, mut out) = leased_relay();
    assert_eq!(engine.start_floor(P, SubendId(5)), None);
    engine.handle(Millis(2), Input::Store(StoreInput::AckLeaseDone { pubend: P, lease: Tick(354) }), &mut out);
    assert_eq!(engine.start_floor(P, SubendId(5)), Some(Tick(355)));
    let other = crate::names::PubendId(2);
    assert_eq!(engine.start_floor(other, SubendId(5)), None, "a stream never acknowledged here has no floor");
}

/// Without leases (a core alone, nothing to store them) acks go out as before.
#[test]
fn without_leases_acks_are_not_held() {
    let (mut engine, mut out) = super::relay(vec![], vec![BrokerId(0)]);
    let attach = Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(Tick(1)), durable: false };
    engine.handle(Millis(1), attach, &mut out);
    engine.handle(Millis(500), data(100, 1, 1, false), &mut out);
    assert!(lease_asks(&out).is_empty());
    assert_eq!(acks(&out).last(), Some(&Tick(100)), "{out:?}");
}
