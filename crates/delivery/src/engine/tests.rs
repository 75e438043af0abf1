//! Role-level tests of the engine: pubend, relay, subends (the multi-broker scenarios are in
//! `tests/`).

use bytes::Bytes;

use crate::engine::{Action, ChildLink, Engine, Input, Matcher, StreamRoute, UpstreamCell, Verdict};
use crate::message::Message;
use crate::names::{BrokerId, CellId, Millis, PubendId, PublisherId, SubendId, Tick, TickRange, TreeTag};
use crate::settings::Settings;
use crate::store::{Recovered, StoreAction, StoreInput};

const P: PubendId = PubendId(1);

/// Payload byte 0 != 0 matches everything; 0 matches nothing.
struct Byte0;

impl Matcher for Byte0 {
    fn child(&self, _: PubendId, _: CellId, payload: &Bytes) -> Verdict {
        if payload[0] != 0 {
            Verdict::Data
        } else {
            Verdict::Final
        }
    }
    fn subends(&self, _: PubendId, payload: &Bytes, out: &mut Vec<SubendId>) {
        if payload[0] != 0 {
            out.extend([SubendId(1), SubendId(2)]);
        }
    }
    fn subend(&self, _: PubendId, _: SubendId, payload: &Bytes) -> bool {
        payload[0] != 0
    }
    fn epoch(&self) -> u64 {
        0
    }

    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

fn child() -> ChildLink {
    ChildLink { cell: CellId(9), broker: BrokerId(9), via: None }
}

fn pubend() -> (Engine<Byte0>, Vec<Action>) {
    pubend_on(Recovered::default(), Millis(1))
}

/// A pubend with one child whose log opens at `at` with `recovered`; the actions of the open.
fn pubend_on(recovered: Recovered, at: Millis) -> (Engine<Byte0>, Vec<Action>) {
    let mut engine = Engine::new(Settings::default(), Byte0);
    let mut out = Vec::new();
    engine.handle(
        Millis(1),
        Input::Route { pubend: P, route: StreamRoute { upstream: None, children: vec![child()] } },
        &mut out,
    );
    engine.handle(at, Input::Store(StoreInput::Opened { pubend: P, recovered }), &mut out);
    (engine, out)
}

fn publish(engine: &mut Engine<Byte0>, now: u64, seq: u64, out: &mut Vec<Action>) {
    let input = Input::Publish { pubend: P, publisher: PublisherId(1), seq, payload: Bytes::from_static(b"\x01m") };
    engine.handle(Millis(now), input, out);
}

fn appends(out: &[Action]) -> Vec<Tick> {
    out.iter()
        .filter_map(|a| if let Action::Store(StoreAction::Append { tick, .. }) = a { Some(*tick) } else { None })
        .collect()
}

fn sent(out: &[Action]) -> Vec<&Message> {
    out.iter().filter_map(|a| if let Action::Send { message, .. } = a { Some(message) } else { None }).collect()
}

/// A first-time F silence over `from..=to`.
fn final_silence(from: u64, to: u64) -> Message {
    Message::Silence {
        pubend: P,
        ranges: vec![TickRange { from: Tick(from), to: Tick(to) }],
        kind: crate::message::SilenceKind::Final,
        requested_only: false,
        tree: TreeTag(0),
    }
}

/// Every range nacked in `out`, in order.
fn nacked(out: &[Action]) -> Vec<TickRange> {
    sent(out)
        .into_iter()
        .filter_map(|m| if let Message::Nack { ranges, .. } = m { Some(ranges.clone()) } else { None })
        .flatten()
        .collect()
}

#[test]
fn ticks_are_the_clock_or_one_more_than_the_last() {
    let (mut engine, mut out) = pubend();
    for seq in 1..=3 {
        publish(&mut engine, 5, seq, &mut out);
    }
    assert_eq!(appends(&out), vec![Tick(5000), Tick(5001), Tick(5002)]);
}

#[test]
fn a_repeated_publisher_sequence_number_gets_no_second_tick() {
    let (mut engine, mut out) = pubend();
    publish(&mut engine, 5, 1, &mut out);
    publish(&mut engine, 6, 1, &mut out);
    assert_eq!(appends(&out).len(), 1);
    assert_eq!(engine.counters().duplicate_publishes, 1);
}

#[test]
fn nothing_leaves_the_pubend_before_its_append_is_durable() {
    let (mut engine, mut out) = pubend();
    out.clear();
    publish(&mut engine, 5, 1, &mut out);
    assert!(sent(&out).iter().all(|m| !matches!(m, Message::Data { .. })));
    engine.handle(Millis(6), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: Tick(5000) }), &mut out);
    assert!(sent(&out).iter().any(|m| matches!(m, Message::Data { tick: Tick(5000), .. })));
    assert!(out.iter().any(|a| matches!(a, Action::PublishAcked { seq: 1, .. })));
}

#[test]
fn silence_stops_below_an_unlogged_tick_and_at_the_lease() {
    let (mut engine, mut out) = pubend();
    // No lease yet: no F at all, however much time passes.
    engine.handle(Millis(1000), Input::Tick, &mut out);
    assert!(sent(&out).iter().all(|m| !matches!(m, Message::Silence { .. })));
    engine.handle(Millis(1000), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(1_500_000) }), &mut out);
    publish(&mut engine, 1000, 1, &mut out);
    out.clear();
    engine.handle(Millis(2000), Input::Tick, &mut out);
    assert!(sent(&out).iter().any(|m| matches!(m, Message::Silence { .. })), "silence below the unlogged tick is told");
    for message in sent(&out) {
        if let Message::Silence { ranges, .. } = message {
            assert!(ranges.iter().all(|r| r.to < Tick(1_000_000)), "F must stop below the unlogged tick: {ranges:?}");
        }
    }
}

fn relay(children: Vec<ChildLink>, brokers: Vec<BrokerId>) -> (Engine<Byte0>, Vec<Action>) {
    let mut engine = Engine::new(Settings::default(), Byte0);
    let mut out = Vec::new();
    let route = StreamRoute { upstream: Some(UpstreamCell { cell: CellId(0), brokers }), children };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    (engine, out)
}

fn data(tick: u64, from: u64, byte: u8, requested_only: bool) -> Input {
    let message = Message::Data {
        pubend: P,
        tick: Tick(tick),
        final_from: Tick(from),
        final_to: Tick(tick),
        requested_only,
        tree: TreeTag(0),
        payload: Bytes::from(vec![byte]),
    };
    Input::Received { from: BrokerId(0), from_cell: CellId(0), message }
}

#[test]
fn an_f_tick_counts_as_acknowledged_at_once() {
    let (mut engine, mut out) = relay(vec![child()], vec![BrokerId(0)]);
    for n in 1..=5 {
        engine.handle(Millis(n * 200), data(n * 1000, n * 1000 - 999, 0, false), &mut out);
    }
    let acks: Vec<Tick> = sent(&out)
        .iter()
        .filter_map(|m| if let Message::Ack { ack_prefix, .. } = m { Some(*ack_prefix) } else { None })
        .collect();
    assert!(acks.last().is_some_and(|&a| a >= Tick(4000)), "a child that never matches must not pin acks: {acks:?}");
    assert!(sent(&out).iter().all(|m| !matches!(m, Message::Data { .. })), "nothing matched");
}

fn ack_targets(out: &[Action]) -> Vec<BrokerId> {
    out.iter()
        .filter_map(|a| if let Action::Send { to, message: Message::Ack { .. }, .. } = a { Some(*to) } else { None })
        .collect()
}

#[test]
fn acks_go_to_the_last_sender_else_to_every_upstream_broker() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0), BrokerId(5)]);
    engine.handle(
        Millis(1),
        Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(Tick(1)), durable: false },
        &mut out,
    );
    let probe = |tick| Input::Received {
        from: BrokerId(5),
        from_cell: CellId(0),
        message: Message::AckExpected { pubend: P, tick: Tick(tick) },
    };
    out.clear();
    engine.handle(Millis(2), probe(0), &mut out);
    assert_eq!(ack_targets(&out), vec![BrokerId(0), BrokerId(5)]);
    engine.handle(Millis(3), data(1000, 1, 1, false), &mut out);
    out.clear();
    engine.handle(Millis(4), probe(1000), &mut out);
    assert_eq!(ack_targets(&out), vec![BrokerId(0)]);
}

fn delivered(out: &[Action], subend: u64) -> Vec<Tick> {
    out.iter()
        .filter_map(|a| {
            if let Action::Deliver { subend: s, tick, .. } = a {
                (s.0 == subend).then_some(*tick)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn a_full_outbox_holds_deliveries_back_and_releases_them_in_order() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    for subend in [1, 2] {
        engine.handle(
            Millis(1),
            Input::SubendAttach { pubend: P, subend: SubendId(subend), start: Some(Tick(1)), durable: false },
            &mut out,
        );
    }
    engine.handle(Millis(2), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    for n in 1..=3 {
        engine.handle(Millis(2 + n), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    assert_eq!(delivered(&out, 1), vec![]);
    assert_eq!(delivered(&out, 2), vec![Tick(10), Tick(20), Tick(30)]);
    let acks: Vec<Tick> = sent(&out)
        .iter()
        .filter_map(|m| if let Message::Ack { ack_prefix, .. } = m { Some(*ack_prefix) } else { None })
        .collect();
    assert!(acks.iter().all(|&a| a < Tick(10)), "the held subend pins the acks: {acks:?}");
    out.clear();
    engine.handle(Millis(10), Input::OutboxReady { subend: SubendId(1) }, &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(10), Tick(20), Tick(30)]);
    engine.handle(Millis(11), data(40, 31, 1, false), &mut out);
    assert_eq!(
        delivered(&out, 1),
        vec![Tick(10), Tick(20), Tick(30), Tick(40)],
        "caught up: back on the shared pointer"
    );
}

#[test]
fn curiosity_is_forgotten_after_the_requested_forgetting_interval() {
    let (mut engine, mut out) = relay(vec![child()], vec![BrokerId(0)]);
    engine.handle(Millis(1), data(1000, 1, 1, false), &mut out);
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(1001), to: Tick(1500) }] };
    engine.handle(Millis(2), Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack }, &mut out);
    assert!(sent(&out).iter().any(|m| matches!(m, Message::Nack { .. })), "Q ticks are nacked upstream");
    let forget = engine.settings().requested_forgetting_ms;
    let later = Millis(3 + forget);
    engine.handle(later, Input::Tick, &mut out);
    out.clear();
    engine.handle(later, data(1200, 1001, 1, true), &mut out);
    assert!(
        sent(&out).iter().all(|m| !matches!(m, Message::Data { requested_only: true, .. })),
        "the mark was forgotten"
    );
}

#[test]
fn a_first_time_duplicate_of_a_final_tick_is_dropped() {
    let (mut engine, mut out) = relay(vec![child()], vec![BrokerId(0)]);
    engine.handle(Millis(1), data(1000, 1, 1, false), &mut out);
    out.clear();
    engine.handle(Millis(2), data(1000, 1, 1, false), &mut out);
    assert!(sent(&out).is_empty());
    assert_eq!(engine.counters().duplicates_dropped, 1);
}

#[test]
fn a_stream_stays_compact_over_a_million_ticks_when_acks_flow() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    engine.handle(
        Millis(1),
        Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(Tick(1)), durable: false },
        &mut out,
    );
    for n in 1..=100_000u64 {
        out.clear();
        engine.handle(Millis(n / 10), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.horizon(), Tick(1_000_001));
    assert!(view.runs() <= 2 && view.cached() <= 1, "runs {}, cached {}", view.runs(), view.cached());
}

#[test]
fn ticks_damaged_on_disk_stay_lost_under_silence_and_are_answered_as_lost() {
    let mut engine = Engine::new(Settings::default(), Byte0);
    let mut out = Vec::new();
    let route = StreamRoute { upstream: None, children: vec![child()] };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    let damaged = TickRange { from: Tick(3_000), to: Tick(3_005) };
    let recovered = Recovered { lease: Tick(4_000), lost: vec![damaged], ..Recovered::default() };
    engine.handle(Millis(1), Input::Store(StoreInput::Opened { pubend: P, recovered }), &mut out);
    engine.handle(Millis(3_000), Input::Tick, &mut out);
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.knowledge(Tick(2_999)), Some(crate::knowledge::Know::Final), "silence covers the rest");
    assert_eq!(view.knowledge(Tick(3_002)), Some(crate::knowledge::Know::Lost), "silence never turns L into F");
    out.clear();
    let nack = Message::Nack { pubend: P, ranges: vec![damaged] };
    engine.handle(Millis(3_001), Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack }, &mut out);
    let answered_lost = sent(&out).iter().any(|m| {
        matches!(m, Message::Silence { kind: crate::message::SilenceKind::Lost, ranges, .. }
            if ranges.iter().any(|r| r.from <= Tick(3_002) && Tick(3_002) <= r.to))
    });
    assert!(answered_lost, "a nack for damaged ticks is answered with L: {out:?}");
}

#[test]
fn a_record_found_damaged_by_a_read_becomes_lost_and_the_nack_is_answered_with_l() {
    let mut engine = Engine::new(Settings::default(), Byte0);
    let mut out = Vec::new();
    let route = StreamRoute { upstream: None, children: vec![child()] };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    let recovered = Recovered { lease: Tick(4_000), logged: vec![Tick(2_000)], ..Recovered::default() };
    engine.handle(Millis(1), Input::Store(StoreInput::Opened { pubend: P, recovered }), &mut out);
    let tick = TickRange::single(Tick(2_000));
    out.clear();
    let nack = Message::Nack { pubend: P, ranges: vec![tick] };
    engine.handle(Millis(5), Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack }, &mut out);
    let read = out.iter().find_map(|a| match a {
        Action::Store(StoreAction::ReadRange { range, .. }) => Some(*range),
        _ => None,
    });
    let read = read.unwrap_or_else(|| panic!("the nack for a logged tick reads the log: {out:?}"));
    out.clear();
    let done = StoreInput::ReadDone { pubend: P, range: read, records: Vec::new(), lost: vec![tick] };
    engine.handle(Millis(6), Input::Store(done), &mut out);
    let answered_lost = sent(&out).iter().any(|m| {
        matches!(m, Message::Silence { kind: crate::message::SilenceKind::Lost, ranges, .. }
            if ranges.iter().any(|r| r.from <= Tick(2_000) && Tick(2_000) <= r.to))
    });
    assert!(answered_lost, "the damaged tick is answered with L: {out:?}");
    assert_eq!(engine.inspect(P).unwrap().knowledge(Tick(2_000)), Some(crate::knowledge::Know::Lost));
    assert_eq!(engine.counters().damaged_ticks, 1);
}

#[test]
fn a_relay_told_l_for_a_data_tick_whose_payload_it_evicted_takes_the_loss() {
    let settings = Settings { payload_cache_bytes: 1, ..Settings::default() };
    let mut engine = Engine::new(settings, Byte0);
    let mut out = Vec::new();
    let route = StreamRoute {
        upstream: Some(UpstreamCell { cell: CellId(0), brokers: vec![BrokerId(0)] }),
        children: vec![child()],
    };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    engine.handle(Millis(2), data(5, 1, 1, false), &mut out);
    engine.handle(Millis(3), data(6, 6, 1, false), &mut out);
    engine.handle(Millis(3), data(7, 7, 1, false), &mut out);
    let lost = Message::Silence {
        pubend: P,
        ranges: vec![TickRange { from: Tick(5), to: Tick(7) }],
        kind: crate::message::SilenceKind::Lost,
        requested_only: true,
        tree: TreeTag(0),
    };
    engine.handle(Millis(4), Input::Received { from: BrokerId(0), from_cell: CellId(0), message: lost }, &mut out);
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.knowledge(Tick(5)), Some(crate::knowledge::Know::Lost), "the evicted payload is gone for good");
    assert_eq!(
        view.knowledge(Tick(7)),
        Some(crate::knowledge::Know::Data),
        "a payload still cached is kept and served"
    );
}

/// A pubend with one D tick (5000) told to cell 9 through broker 9.
fn pubend_with_one_message() -> (Engine<Byte0>, Vec<Action>) {
    let (mut engine, mut out) = pubend();
    engine.handle(Millis(1), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(1_000_000) }), &mut out);
    publish(&mut engine, 5, 1, &mut out);
    engine.handle(Millis(6), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: Tick(5000) }), &mut out);
    (engine, out)
}

fn ack_from(engine: &mut Engine<Byte0>, now: u64, broker: u32, tick: u64, out: &mut Vec<Action>) {
    let message = Message::Ack { pubend: P, ack_prefix: Tick(tick), release_prefix: Tick(tick) };
    engine.handle(Millis(now), Input::Received { from: BrokerId(broker), from_cell: CellId(9), message }, out);
    engine.handle(Millis(now + 1000), Input::Tick, out);
}

fn released(engine: &Engine<Byte0>) -> Tick {
    engine.inspect(P).and_then(|view| view.release()).unwrap_or(Tick(0))
}

/// Broker 8's ack for cell 9 releases nothing; broker 9's then releases tick 5000.
fn only_broker_9_releases(engine: &mut Engine<Byte0>, out: &mut Vec<Action>) {
    ack_from(engine, 20, 8, 5000, out);
    assert!(released(engine) < Tick(5000), "the subscribers behind broker 9 were not heard from");
    ack_from(engine, 2000, 9, 5000, out);
    assert!(released(engine) >= Tick(5000), "broker 9's own ack releases");
}

#[test]
fn an_ack_from_a_broker_that_is_not_the_cells_entry_does_not_release() {
    let (mut engine, mut out) = pubend_with_one_message();
    only_broker_9_releases(&mut engine, &mut out);
}

/// Released payloads go to the shell to free (hundreds of thousands at once during a
/// catch-up: freeing them in the engine held the broker's driver for 11-22 ms).
#[test]
fn a_release_hands_the_released_payloads_to_the_shell() {
    let (mut engine, mut out) = pubend_with_one_message();
    out.clear();
    ack_from(&mut engine, 20, 9, 5000, &mut out);
    assert!(released(&engine) >= Tick(5000));
    let freed: usize = out.iter().map(|a| if let Action::Free(r) = a { r.len() } else { 0 }).sum();
    assert_eq!(freed, 1, "the payload of tick 5000 is handed out once");
    assert_eq!(engine.inspect(P).map(|view| view.cached()), Some(0), "and the cache no longer holds it");
}

#[test]
fn a_cells_former_entry_broker_holds_the_release_until_it_acknowledges() {
    let (mut engine, mut out) = pubend_with_one_message();
    let moved = ChildLink { cell: CellId(9), broker: BrokerId(8), via: None };
    let route = StreamRoute { upstream: None, children: vec![moved] };
    engine.handle(Millis(10), Input::Route { pubend: P, route }, &mut out);
    only_broker_9_releases(&mut engine, &mut out);
}

/// A restarted entry broker acknowledges for the subtree it knows so far; the cells that hung
/// below its old incarnation may come back anywhere (simulator seed 920).
#[test]
fn a_restarted_entry_brokers_acks_release_nothing_its_old_incarnation_had_not_until_the_retention() {
    let (mut engine, mut out) = pubend_with_one_message();
    engine.handle(Millis(10), Input::PeerRestarted { broker: BrokerId(9) }, &mut out);
    ack_from(&mut engine, 20, 9, 5000, &mut out);
    assert!(released(&engine) < Tick(5000), "the old incarnation never acknowledged tick 5000");
    let retention = Settings::default().departed_retention_ms.unwrap();
    engine.handle(Millis(10 + retention), Input::Tick, &mut out);
    assert!(released(&engine) >= Tick(5000), "after the retention the new incarnation's ack releases");
}

/// The same when the entry broker restarts while out of the tree: the cell moved to broker 8,
/// broker 9 restarted, then came back as the cell's entry. Its new incarnation's acks must not
/// move the ostream its old one left (simulator seed 575, faults mode, with a confirmation's
/// pubends started in node order).
#[test]
fn an_entry_broker_that_restarts_out_of_the_tree_and_rejoins_releases_nothing_its_old_incarnation_had_not() {
    let (mut engine, mut out) = pubend_with_one_message();
    let entry = |broker| StreamRoute {
        upstream: None,
        children: vec![ChildLink { cell: CellId(9), broker: BrokerId(broker), via: None }],
    };
    engine.handle(Millis(10), Input::Route { pubend: P, route: entry(8) }, &mut out);
    ack_from(&mut engine, 20, 8, 5000, &mut out);
    assert!(released(&engine) < Tick(5000), "broker 9's subtree was not heard from");
    engine.handle(Millis(1030), Input::PeerRestarted { broker: BrokerId(9) }, &mut out);
    engine.handle(Millis(1031), Input::Route { pubend: P, route: entry(9) }, &mut out);
    ack_from(&mut engine, 1040, 9, 5000, &mut out);
    assert!(released(&engine) < Tick(5000), "the old incarnation of broker 9 never acknowledged tick 5000");
    let retention = Settings::default().departed_retention_ms.unwrap();
    engine.handle(Millis(1031 + retention), Input::Tick, &mut out);
    assert!(released(&engine) >= Tick(5000), "after the retention the new incarnation's ack releases");
}

#[test]
fn a_relay_without_consumers_acknowledges_what_it_holds_only_after_the_retention() {
    let settings = Settings { departed_retention_ms: Some(1_000), ..Settings::default() };
    let mut engine = Engine::new(settings, Byte0);
    let mut out = Vec::new();
    let route =
        StreamRoute { upstream: Some(UpstreamCell { cell: CellId(0), brokers: vec![BrokerId(0)] }), children: vec![] };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    engine.handle(Millis(2), data(1000, 1, 1, false), &mut out);
    let acked = |out: &[Action]| {
        sent(out)
            .iter()
            .filter_map(|m| if let Message::Ack { ack_prefix, .. } = m { Some(*ack_prefix) } else { None })
            .max()
    };
    engine.handle(Millis(500), Input::Tick, &mut out);
    assert!(acked(&out).is_none_or(|a| a < Tick(1000)), "a relay may briefly have no child while routes settle");
    engine.handle(Millis(1_100), Input::Tick, &mut out);
    assert!(acked(&out).is_some_and(|a| a >= Tick(1000)), "nobody behind it for the retention: all is acknowledged");
}

#[path = "tests_durable.rs"]
mod durable;

#[path = "tests_serve.rs"]
mod serve;

#[path = "tests_tree.rs"]
mod tree;

#[path = "tests_close.rs"]
mod close;

#[path = "tests_starts.rs"]
mod starts;

#[path = "tests_refetch.rs"]
mod refetch;

#[path = "tests_view.rs"]
mod view;

#[path = "tests_absent.rs"]
mod absent;

#[path = "tests_lease.rs"]
mod lease;

/// F is relative to the subtree it was judged for: after a reroute, a former upstream (here a
/// former entry broker of our own cell, cell 5) may still send F it judged for the old tree.
/// Only the D of its Data is taken; its silences wait for the current upstream (cell 0).
#[test]
fn final_silence_from_outside_the_upstream_cell_is_not_taken() {
    let (mut engine, mut out) = relay(vec![child()], vec![BrokerId(0)]);
    let from_former = |message| Input::Received { from: BrokerId(7), from_cell: CellId(5), message };
    engine.handle(Millis(2), from_former(final_silence(1, 999)), &mut out);
    let data = Message::Data {
        pubend: P,
        tick: Tick(1500),
        final_from: Tick(1000),
        final_to: Tick(1999),
        requested_only: false,
        tree: TreeTag(0),
        payload: Bytes::from_static(b"\x01"),
    };
    engine.handle(Millis(3), from_former(data), &mut out);
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.knowledge(Tick(500)), None, "a former upstream's F is not taken");
    assert_eq!(view.knowledge(Tick(1200)), None, "nor the F brackets of its Data");
    assert_eq!(view.knowledge(Tick(1500)), Some(crate::knowledge::Know::Data), "its D is true for everyone");
    assert_eq!(engine.counters().foreign_finals, 2, "the silence and the Data's brackets");
    let told_final = |out: &[Action]| {
        sent(out).iter().any(|m| match m {
            Message::Silence { ranges, .. } => ranges.iter().any(|r| r.from <= Tick(999)),
            Message::Data { final_from, .. } => *final_from <= Tick(1200),
            _ => false,
        })
    };
    assert!(!told_final(&out), "no F for those ticks reaches the child");
    engine.handle(
        Millis(4),
        Input::Received { from: BrokerId(0), from_cell: CellId(0), message: final_silence(1, 999) },
        &mut out,
    );
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.knowledge(Tick(500)), Some(crate::knowledge::Know::Final), "the upstream's F is taken");
}

/// A relay with one child, holding tick 1000 and F over 3000-4000 as of `Millis(20)`: ticks
/// 1001-2999 are a hole it is curious about.
fn relay_with_a_hole() -> (Engine<Byte0>, Vec<Action>) {
    let (mut engine, mut out) = relay(vec![child()], vec![BrokerId(0)]);
    engine.handle(Millis(10), data(1000, 1, 1, false), &mut out);
    let silence = final_silence(3000, 4000);
    engine.handle(Millis(20), Input::Received { from: BrokerId(0), from_cell: CellId(0), message: silence }, &mut out);
    (engine, out)
}

/// A relay with a child but no subscriber of its own is curious about holes in its istream
/// too: a child that is a leaf without subscribers never nacks, and the hole would hold every
/// ack below it (and the pubend's log) forever (simulator seed 535, pubend crashes).
#[test]
fn a_relay_without_subends_nacks_a_hole_its_children_do_not_ask_for() {
    let (mut engine, mut out) = relay_with_a_hole();
    out.clear();
    let gct = Settings::default().gap_curiosity_ms;
    engine.handle(Millis(20 + gct + 1), Input::Tick, &mut out);
    // The relay's only upstream broker is BrokerId(0): every nack goes there.
    assert_eq!(nacked(&out), vec![TickRange { from: Tick(1001), to: Tick(2999) }], "the hole is nacked upstream");
}

/// Every nack a broker sends is sorted and disjoint, even when the curiosity it gathers
/// overlaps: here the relay's own wants and a child's nack, re-sent together when the route
/// moves upstream. Unmerged, that nack was refused by the receiver as malformed, the link
/// closed, and the same frame went out again after every redial (issue 38, failure B).
#[test]
fn a_nack_gathered_from_overlapping_curiosity_is_sorted_and_disjoint() {
    let (mut engine, mut out) = relay_with_a_hole();
    let gct = Settings::default().gap_curiosity_ms;
    engine.handle(Millis(20 + gct + 1), Input::Tick, &mut out);
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(1500), to: Tick(2500) }] };
    engine.handle(
        Millis(30 + gct),
        Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack },
        &mut out,
    );
    out.clear();
    let moved = StreamRoute {
        upstream: Some(UpstreamCell { cell: CellId(5), brokers: vec![BrokerId(5)] }),
        children: vec![child()],
    };
    engine.handle(Millis(40 + gct), Input::Route { pubend: P, route: moved }, &mut out);
    let nacks: Vec<&Vec<TickRange>> = sent(&out)
        .into_iter()
        .filter_map(|m| if let Message::Nack { ranges, .. } = m { Some(ranges) } else { None })
        .collect();
    assert!(!nacks.is_empty(), "the outstanding curiosity is asked of the new upstream");
    for ranges in nacks {
        assert!(
            ranges.windows(2).all(|w| w[0].to.0.saturating_add(1) < w[1].from.0),
            "sorted and disjoint: {ranges:?}"
        );
    }
}

/// Normalizing sorts, merges overlapping and touching ranges, and keeps separate ones apart.
#[test]
fn normalized_ranges_are_sorted_merged_and_disjoint() {
    let r = |from, to| TickRange { from: Tick(from), to: Tick(to) };
    let mut ranges = vec![r(50, 60), r(1, 10), r(5, 20), r(21, 30), r(40, 45), r(41, 42)];
    TickRange::normalize(&mut ranges);
    assert_eq!(ranges, vec![r(1, 30), r(40, 45), r(50, 60)]);
}

/// A relay that starts (or restarts empty) on a stream far from tick 0 asks only for holes
/// above what it first heard, never for the whole history below it: real ticks are
/// microseconds since 1970, and a relay that nacked them all froze its broker (`bench
/// failures`, b1 restarted). A hole above is asked for, in a bounded number of ranges.
#[test]
fn a_relay_started_on_a_running_stream_nacks_only_holes_above_its_first_knowledge() {
    const NOW: u64 = 1_795_734_490_000_000;
    let (mut engine, mut out) = relay(vec![child()], vec![BrokerId(0)]);
    engine.handle(Millis(10), data(NOW, NOW - 500, 1, false), &mut out);
    // A hole of a whole day of ticks above it: far more than one nack's ranges.
    let day = 86_400_000_000;
    engine.handle(Millis(20), data(NOW + day, NOW + day, 2, false), &mut out);
    out.clear();
    let gct = Settings::default().gap_curiosity_ms;
    engine.handle(Millis(20 + gct + 1), Input::Tick, &mut out);
    let nacked = nacked(&out);
    assert!(!nacked.is_empty(), "the hole above is asked for");
    assert_eq!(nacked[0].from, Tick(NOW + 1), "nothing below the first knowledge: {:?}", nacked[0]);
    assert!(nacked.len() <= 256, "one nack holds a bounded number of ranges: {}", nacked.len());
}

/// A lease the store could not raise (a full disk) is asked for again: before, it stayed
/// asked forever, silence stopped at the old lease and nothing above it was ever delivered,
/// even once the disk had room again (`durable.rs`, the full-disk test, with the log writer's
/// linger changing which write met the full disk).
#[test]
fn a_lease_the_store_could_not_raise_is_asked_for_again() {
    let lease_raises = |out: &[Action]| {
        out.iter().filter(|a| matches!(a, Action::Store(crate::store::StoreAction::LeaseRaise { .. }))).count()
    };
    let (mut engine, mut out) = pubend();
    out.clear();
    engine.handle(Millis(1000), Input::Tick, &mut out);
    assert_eq!(lease_raises(&out), 1, "the lease is asked for");
    out.clear();
    engine.handle(Millis(1300), Input::Tick, &mut out);
    assert_eq!(lease_raises(&out), 0, "once at a time");
    engine.handle(Millis(1400), Input::Store(StoreInput::LeaseFailed { pubend: P }), &mut out);
    out.clear();
    engine.handle(Millis(1700), Input::Tick, &mut out);
    assert_eq!(lease_raises(&out), 1, "after a failure it is asked for again");
}

/// A pubend restarted on its log knows its records as D but holds none of their payloads: a
/// child whose walk stops at one is served from the log without waiting for a nack, which a
/// cell whose knowledge already reaches past the tick would never send (simulator seed 647,
/// pubend crashes: the stream stalled for good).
#[test]
fn a_walk_stopped_at_an_uncached_payload_reads_the_log_without_a_nack() {
    let recovered = Recovered { lease: Tick(9_000_000), logged: vec![Tick(2000), Tick(3000)], ..Recovered::default() };
    let (mut engine, mut out) = pubend_on(recovered, Millis(5000));
    let mut all = Vec::new();
    all.append(&mut out);
    engine.handle(Millis(5300), Input::Tick, &mut out);
    all.append(&mut out);
    let out = all;
    let reads: Vec<TickRange> = out
        .iter()
        .filter_map(|a| match a {
            Action::Store(crate::store::StoreAction::ReadRange { range, .. }) => Some(*range),
            _ => None,
        })
        .collect();
    assert!(
        reads.iter().any(|r| r.from <= Tick(2000) && Tick(2000) <= r.to),
        "the first logged payload is read for the child's walk: {out:?}"
    );
    assert!(nacked(&out).is_empty(), "no nack was needed");
}

/// A matcher whose child verdict a test switches, bumping the epoch as a router would when
/// a summary delta arrives.
struct Switch {
    passes: bool,
    epoch: u64,
}

impl Matcher for Switch {
    fn child(&self, _: PubendId, _: CellId, _: &Bytes) -> Verdict {
        if self.passes {
            Verdict::Data
        } else {
            Verdict::Final
        }
    }
    fn subends(&self, _: PubendId, _: &Bytes, _: &mut Vec<SubendId>) {}
    fn subend(&self, _: PubendId, _: SubendId, _: &Bytes) -> bool {
        false
    }
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

/// A pubend whose one child was judged F for its one message (tick 5000) at epoch 1, told
/// nothing yet: the silence interval is long, so the F run stays untold.
fn lazy_f_over_one_message() -> Engine<Switch> {
    let settings = Settings { silence_ms: 10_000, ..Settings::default() };
    let mut engine = Engine::new(settings, Switch { passes: false, epoch: 1 });
    let mut out = Vec::new();
    let route = StreamRoute { upstream: None, children: vec![child()] };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    engine.handle(Millis(1), Input::Store(StoreInput::Opened { pubend: P, recovered: Recovered::default() }), &mut out);
    engine.handle(Millis(1), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(100_000_000) }), &mut out);
    let input = Input::Publish { pubend: P, publisher: PublisherId(1), seq: 1, payload: Bytes::from_static(b"\x01m") };
    engine.handle(Millis(5), input, &mut out);
    engine.handle(Millis(6), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: Tick(5000) }), &mut out);
    engine.handle(Millis(100), Input::Tick, &mut out);
    assert!(sent(&out).iter().all(|m| !matches!(m, Message::Data { .. } | Message::Silence { .. })), "{out:?}");
    engine
}

/// The F judged for a tick when nobody behind the child wanted it is not told after the
/// child's interest arrived (the summaries moved before the lazy F run was told): the tick is
/// judged again and sent as Data, and the F before it still told. Without the rejudging the
/// timer told one Silence over the whole run, the message included (simulator seed 813).
#[test]
fn an_untold_f_is_judged_again_when_the_summaries_moved_before_it_is_told() {
    let mut engine = lazy_f_over_one_message();
    let mut out = Vec::new();
    assert_eq!(engine.counters().rejudged, 0);
    *engine.matcher_mut() = Switch { passes: true, epoch: 2 };
    engine.handle(Millis(20_000), Input::Tick, &mut out);
    let told = sent(&out);
    assert!(
        told.iter().any(|m| matches!(m, Message::Data { tick: Tick(5000), .. })),
        "the message is sent once it passes: {told:?}"
    );
    let claims_f_over_it = |m: &&Message| match m {
        Message::Silence { ranges, .. } => ranges.iter().any(|r| r.from <= Tick(5000) && Tick(5000) <= r.to),
        Message::Data { tick, final_from, final_to, .. } => {
            (*final_from..*tick).contains(&Tick(5000)) || (tick.next()..=*final_to).contains(&Tick(5000))
        }
        _ => false,
    };
    assert!(!told.iter().any(claims_f_over_it), "no F is claimed for it: {told:?}");
    assert_eq!(engine.counters().rejudged, 1);
}

/// With the summaries unchanged, the lazy F run is told as before, judged once.
#[test]
fn an_untold_f_run_is_told_as_judged_while_the_epoch_holds() {
    let mut engine = lazy_f_over_one_message();
    let mut out = Vec::new();
    engine.handle(Millis(20_000), Input::Tick, &mut out);
    let told = sent(&out);
    assert!(told.iter().all(|m| !matches!(m, Message::Data { .. })), "{told:?}");
    assert!(
        told.iter().any(|m| matches!(m, Message::Silence { ranges, .. } if ranges.iter().any(|r| r.from <= Tick(5000) && Tick(5000) <= r.to))),
        "the F run over the message is told: {told:?}"
    );
    assert_eq!(engine.counters().rejudged, 0);
}

/// A subscription whose barrier confirms a start below what the stream already delivered and
/// acknowledged starts after it, and is told the ticks between as a gap notice first: they
/// were lost without a word before (a plain subscription set up again after its broker's crash,
/// nemesis finding D).
#[test]
fn a_start_below_the_done_prefix_is_told_as_a_gap_not_skipped_silently() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    engine.handle(
        Millis(1),
        Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(Tick(1)), durable: false },
        &mut out,
    );
    engine.handle(Millis(2), data(100, 1, 1, false), &mut out);
    out.clear();
    engine.handle(
        Millis(3),
        Input::SubendAttach { pubend: P, subend: SubendId(2), start: Some(Tick(50)), durable: false },
        &mut out,
    );
    let gaps: Vec<(SubendId, TickRange)> = out
        .iter()
        .filter_map(|a| if let Action::GapNotice { subend, range, .. } = a { Some((*subend, *range)) } else { None })
        .collect();
    assert_eq!(gaps, [(SubendId(2), TickRange { from: Tick(50), to: Tick(100) })], "{out:?}");
}
