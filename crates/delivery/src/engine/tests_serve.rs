//! Serve orders (`super::serve`): a durable subend catching up at the pubend's broker is served
//! by the shell's cursor; live ticks arriving meanwhile reach it once, after the order, in
//! order; a rewind cancels the order; an order stopped short is finished by the replay.

use super::*;
use crate::engine::{ServeOrder, ServeRun};

/// A pubend with no children whose catch-ups are served by orders of at most `messages`.
fn serving(messages: u64) -> (Engine<Byte0>, Vec<Action>) {
    let settings = Settings { serve_orders: true, serve_order_messages: messages, ..Settings::default() };
    let mut engine = Engine::new(settings, Byte0);
    let mut out = Vec::new();
    engine.handle(Millis(1), Input::Route { pubend: P, route: StreamRoute::default() }, &mut out);
    engine.handle(Millis(1), Input::Store(StoreInput::Opened { pubend: P, recovered: Recovered::default() }), &mut out);
    engine.handle(Millis(1), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(10_000_000) }), &mut out);
    (engine, out)
}

fn attach(engine: &mut Engine<Byte0>, now: u64, subend: u64, start: u64, durable: bool, out: &mut Vec<Action>) {
    let input = Input::SubendAttach { pubend: P, subend: SubendId(subend), start: Some(Tick(start)), durable };
    engine.handle(Millis(now), input, out);
}

/// Publishes at `now` (tick `now * 1000`) and syncs it.
fn publish_synced(engine: &mut Engine<Byte0>, now: u64, out: &mut Vec<Action>) {
    publish(engine, now, now, out);
    let done = StoreInput::AppendDone { pubend: P, synced_up_to: Tick(now * 1000) };
    engine.handle(Millis(now), Input::Store(done), out);
}

fn orders(out: &[Action]) -> Vec<ServeOrder> {
    out.iter().filter_map(|a| if let Action::Serve(order) = a { Some(order.clone()) } else { None }).collect()
}

/// What a cursor hands the subscriber for `order` (Byte0 passes every published message).
fn served(order: &ServeOrder) -> Vec<Tick> {
    let data = order.runs.iter().filter(|run| !run.lost);
    data.flat_map(|run| (run.range.from.0..=run.range.to.0).map(Tick)).collect()
}

fn report(engine: &mut Engine<Byte0>, now: u64, order: &ServeOrder, through: Tick, out: &mut Vec<Action>) {
    let input = Input::SubendServed { pubend: P, subend: order.subend, order: order.id, through, done: true };
    engine.handle(Millis(now), input, out);
}

/// Subend 1 (durable) and 2 (live) get ticks 10k..40k; 1 goes away after a checkpoint at 20k;
/// 50k..70k are published without it.
fn away_with_a_backlog(messages: u64) -> (Engine<Byte0>, Vec<Action>) {
    let (mut engine, mut out) = serving(messages);
    attach(&mut engine, 2, 1, 1, true, &mut out);
    attach(&mut engine, 2, 2, 1, false, &mut out);
    for now in [10, 20, 30, 40] {
        publish_synced(&mut engine, now, &mut out);
    }
    assert_eq!(delivered(&out, 1), [10, 20, 30, 40].map(|t| Tick(t * 1000)));
    engine.handle(Millis(41), Input::SubendCheckpoint { pubend: P, subend: SubendId(1), tick: Tick(20_000) }, &mut out);
    engine.handle(Millis(42), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    for now in [50, 60, 70] {
        publish_synced(&mut engine, now, &mut out);
    }
    out.clear();
    (engine, out)
}

#[test]
fn live_ticks_during_a_served_catch_up_reach_the_subend_once_after_it_in_order() {
    let (mut engine, mut out) = away_with_a_backlog(2);
    attach(&mut engine, 100, 1, 20_001, true, &mut out);
    let mut got = Vec::new();
    let mut now = 100;
    // The seam: one live publish while each order runs; the cursor serves each in full.
    loop {
        assert!(delivered(&out, 1).is_empty(), "nothing of the stream is replayed by the engine: {out:?}");
        let running = orders(&out);
        out.clear();
        let Some(order) = running.first() else { break };
        assert_eq!(running.len(), 1);
        assert!(served(order).len() <= 2, "an order holds at most its messages");
        now += 10;
        if now <= 130 {
            publish_synced(&mut engine, now, &mut out);
            assert_eq!(delivered(&out, 2), vec![Tick(now * 1000)], "the live subend gets it at once");
            assert!(delivered(&out, 1).is_empty(), "not the one being served");
            out.clear();
        }
        got.extend(served(order));
        let position = engine.inspect(P).unwrap().subend_position(SubendId(1));
        assert_eq!(position, Some(order.from.prev()), "the pointer waits for the report");
        report(&mut engine, now, order, order.to, &mut out);
        got.extend(delivered(&out, 1));
    }
    publish_synced(&mut engine, 200, &mut out);
    got.extend(delivered(&out, 1));
    let want: Vec<Tick> = [30, 40, 50, 60, 70, 110, 120, 130, 200].map(|t| Tick(t * 1000)).to_vec();
    assert_eq!(got, want, "every tick after the checkpoint once, in order, live again at the end");
}

#[test]
fn an_order_below_the_knowledge_stays_final_while_it_runs() {
    let (mut engine, mut out) = away_with_a_backlog(100);
    attach(&mut engine, 100, 1, 20_001, true, &mut out);
    let order = orders(&out).remove(0);
    let before: Vec<_> = (order.from.0..=order.to.0).map(|t| engine.inspect(P).unwrap().knowledge(Tick(t))).collect();
    assert!(before.iter().all(Option::is_some), "an order covers final ticks only");
    for now in [110, 120] {
        publish_synced(&mut engine, now, &mut out);
    }
    engine.handle(Millis(900), Input::Tick, &mut out);
    let after: Vec<_> = (order.from.0..=order.to.0).map(|t| engine.inspect(P).unwrap().knowledge(Tick(t))).collect();
    assert_eq!(before, after);
    assert!(!out.iter().any(|a| matches!(a, Action::Rejected { .. })));
}

#[test]
fn a_rewind_cancels_the_running_order_and_its_late_report_moves_nothing() {
    let (mut engine, mut out) = away_with_a_backlog(100);
    attach(&mut engine, 100, 1, 20_001, true, &mut out);
    let first = orders(&out).remove(0);
    assert_eq!(served(&first), [30, 40, 50, 60, 70].map(|t| Tick(t * 1000)));
    // The client goes away mid-order and comes back: the order is cancelled, a new one issued.
    engine.handle(Millis(101), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    out.clear();
    attach(&mut engine, 102, 1, 20_001, true, &mut out);
    let cancelled =
        out.iter().position(|a| *a == Action::ServeCancel { pubend: P, subend: SubendId(1), order: first.id });
    let second = out.iter().position(|a| matches!(a, Action::Serve(_)));
    assert!(cancelled.is_some_and(|c| second.is_some_and(|s| c < s)), "cancelled before the next order: {out:?}");
    let second = orders(&out).remove(0);
    report(&mut engine, 103, &first, first.to, &mut out);
    assert_eq!(
        engine.inspect(P).unwrap().subend_position(SubendId(1)),
        Some(Tick(20_000)),
        "a stale report is ignored"
    );
    out.clear();
    report(&mut engine, 104, &second, second.to, &mut out);
    assert_eq!(engine.inspect(P).unwrap().subend_position(SubendId(1)), Some(Tick(70_000)));
    publish_synced(&mut engine, 110, &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(110_000)], "caught up: live");
}

#[test]
fn an_order_stopped_short_is_finished_by_the_replay_from_where_it_stopped() {
    let (mut engine, mut out) = away_with_a_backlog(100);
    attach(&mut engine, 100, 1, 20_001, true, &mut out);
    let order = orders(&out).remove(0);
    out.clear();
    report(&mut engine, 101, &order, Tick(40_000), &mut out);
    assert!(orders(&out).is_empty(), "no second order after one stopped short");
    assert_eq!(delivered(&out, 1), [50, 60, 70].map(|t| Tick(t * 1000)), "the rest, replayed from the cache");
}

#[test]
fn f_ticks_are_left_out_of_an_order() {
    let (mut engine, mut out) = away_with_a_backlog(100);
    engine.handle(Millis(80), Input::Tick, &mut out);
    attach(&mut engine, 100, 1, 20_001, true, &mut out);
    let order = orders(&out).remove(0);
    let kinds: Vec<(u64, bool)> = order.runs.iter().map(|run: &ServeRun| (run.range.from.0, run.lost)).collect();
    assert_eq!(kinds, [30_000, 40_000, 50_000, 60_000, 70_000].map(|t| (t, false)));
    assert!(order.runs.iter().all(|run| run.range.len() == 1), "F between the messages is not listed");
}

#[test]
fn ticks_released_early_are_told_as_a_gap_before_the_order() {
    let (mut engine, mut out) = away_with_a_backlog(100);
    engine.handle(Millis(80), Input::Tick, &mut out);
    engine.handle(Millis(800), Input::EarlyRelease { pubend: P, up_to: Tick(50_000) }, &mut out);
    out.clear();
    attach(&mut engine, 900, 1, 20_001, true, &mut out);
    let gap = out.iter().position(|a| matches!(a, Action::GapNotice { range, .. } if *range == TickRange { from: Tick(20_001), to: Tick(50_000) }));
    let order = out.iter().position(|a| matches!(a, Action::Serve(_)));
    assert!(gap.is_some_and(|g| order.is_some_and(|o| g < o)), "the gap first, then the order: {out:?}");
    assert_eq!(served(&orders(&out)[0]), vec![Tick(60_000), Tick(70_000)]);
}
