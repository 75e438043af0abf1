//! Durable subends (seed 004's persistent clients): acknowledged by checkpoint, pinned while
//! away, replayed from their checkpoint when back, a window of fetches at a time, and told
//! exactly what they lost when the log went on without them.

use super::*;

fn acks(out: &[Action]) -> Vec<Tick> {
    sent(out)
        .iter()
        .filter_map(|m| if let Message::Ack { ack_prefix, .. } = m { Some(*ack_prefix) } else { None })
        .collect()
}

fn attach(engine: &mut Engine<Byte0>, now: u64, subend: u64, start: Option<u64>, out: &mut Vec<Action>) {
    let input = Input::SubendAttach { pubend: P, subend: SubendId(subend), start: start.map(Tick), durable: true };
    engine.handle(Millis(now), input, out);
}

fn checkpoint(engine: &mut Engine<Byte0>, now: u64, tick: u64, out: &mut Vec<Action>) {
    engine.handle(Millis(now), Input::SubendCheckpoint { pubend: P, subend: SubendId(1), tick: Tick(tick) }, out);
}

/// A relay for `P` below upstream broker 0, with `settings`.
fn relay_with(settings: Settings) -> (Engine<Byte0>, Vec<Action>) {
    let mut engine = Engine::new(settings, Byte0);
    let mut out = Vec::new();
    let route =
        StreamRoute { upstream: Some(UpstreamCell { cell: CellId(0), brokers: vec![BrokerId(0)] }), children: vec![] };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    (engine, out)
}

#[test]
fn a_durable_subend_is_acknowledged_upstream_only_by_its_checkpoint() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    attach(&mut engine, 1, 1, Some(1), &mut out);
    for n in 1..=3 {
        engine.handle(Millis(n * 200), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    assert_eq!(delivered(&out, 1), vec![Tick(10), Tick(20), Tick(30)], "delivered at once");
    assert!(acks(&out).iter().all(|&a| a < Tick(10)), "not acknowledged by delivery: {:?}", acks(&out));
    checkpoint(&mut engine, 1000, 20, &mut out);
    engine.handle(Millis(1200), Input::Tick, &mut out);
    let last = acks(&out).last().copied();
    assert!(last.is_some_and(|a| (Tick(20)..Tick(30)).contains(&a)), "the checkpoint is the ack: {last:?}");
}

#[test]
fn a_durable_subend_back_after_an_absence_gets_everything_after_its_checkpoint_in_order() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    attach(&mut engine, 1, 1, Some(1), &mut out);
    for n in 1..=3 {
        engine.handle(Millis(n * 200), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    checkpoint(&mut engine, 700, 10, &mut out);
    // The client goes away: its subend is blocked, and stays attached.
    engine.handle(Millis(800), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    for n in 4..=5 {
        engine.handle(Millis(n * 200), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    engine.handle(Millis(1500), Input::Tick, &mut out);
    assert!(acks(&out).iter().all(|&a| a < Tick(20)), "away, it pins the acks: {:?}", acks(&out));
    out.clear();
    // Back; its client had acknowledged up to 20 (not yet durable here: the checkpoint stays 10).
    attach(&mut engine, 1600, 1, Some(21), &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(30), Tick(40), Tick(50)]);
    engine.handle(Millis(1800), Input::Tick, &mut out);
    assert!(acks(&out).iter().all(|&a| a < Tick(20)), "still pinned at the durable checkpoint: {:?}", acks(&out));
    out.clear();
    engine.handle(Millis(1900), data(60, 51, 1, false), &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(60)], "caught up: live again");
}

#[test]
fn a_durable_subend_missing_payloads_fetches_a_window_at_a_time() {
    let settings = Settings { payload_cache_bytes: 1, catch_up_window: 2, ..Settings::default() };
    let (mut engine, mut out) = relay_with(settings);
    attach(&mut engine, 1, 1, Some(1), &mut out);
    engine.handle(Millis(2), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    // A second, live subend keeps the stream moving while the durable one is away.
    engine.handle(
        Millis(2),
        Input::SubendAttach { pubend: P, subend: SubendId(2), start: Some(Tick(1)), durable: false },
        &mut out,
    );
    for n in 1..=5 {
        engine.handle(Millis(2 + n), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    out.clear();
    attach(&mut engine, 100, 1, Some(1), &mut out);
    let nacks: Vec<Vec<TickRange>> = sent(&out)
        .iter()
        .filter_map(|m| if let Message::Nack { ranges, .. } = m { Some(ranges.clone()) } else { None })
        .collect();
    assert_eq!(nacks, vec![vec![TickRange { from: Tick(10), to: Tick(20) }]], "two messages' worth, one range");
}

#[test]
fn a_durable_subend_behind_an_early_release_is_told_the_exact_range_it_lost() {
    let (mut engine, mut out) = pubend();
    engine.handle(Millis(1), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(1_000_000) }), &mut out);
    attach(&mut engine, 1, 1, Some(1), &mut out);
    for seq in 1..=4 {
        publish(&mut engine, 10 * seq, seq, &mut out);
    }
    engine.handle(Millis(50), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: Tick(40_000) }), &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(10_000), Tick(20_000), Tick(30_000), Tick(40_000)]);
    checkpoint(&mut engine, 60, 10_000, &mut out);
    engine.handle(Millis(61), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    engine.handle(Millis(700), Input::Tick, &mut out);
    let view = engine.inspect(P).unwrap();
    assert!(view.release().is_some_and(|r| r <= Tick(10_000)), "the log is pinned: {:?}", view.release());
    engine.handle(Millis(800), Input::EarlyRelease { pubend: P, up_to: Tick(30_000) }, &mut out);
    out.clear();
    attach(&mut engine, 900, 1, Some(10_001), &mut out);
    let gaps: Vec<TickRange> =
        out.iter().filter_map(|a| if let Action::GapNotice { range, .. } = a { Some(*range) } else { None }).collect();
    assert_eq!(gaps, vec![TickRange { from: Tick(10_001), to: Tick(30_000) }]);
    assert_eq!(delivered(&out, 1), vec![Tick(40_000)], "then what is still there");
}

#[test]
fn a_durable_subend_restored_after_a_restart_is_replayed_from_the_log() {
    let mut engine = Engine::new(Settings::default(), Byte0);
    let mut out = Vec::new();
    let recovered = Recovered {
        lease: Tick(5_000_000),
        release: Tick(0),
        logged: vec![Tick(1000), Tick(2000), Tick(3000)],
        publishers: vec![(PublisherId(1), 3)],
        lost: vec![],
    };
    engine.handle(Millis(4000), Input::Store(StoreInput::Opened { pubend: P, recovered }), &mut out);
    engine.handle(Millis(4000), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(9_000_000) }), &mut out);
    // Restored away, then back.
    attach(&mut engine, 4000, 1, Some(1001), &mut out);
    engine.handle(Millis(4000), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    attach(&mut engine, 4100, 1, Some(1001), &mut out);
    engine.handle(Millis(4200), Input::Tick, &mut out);
    let reads: Vec<TickRange> = out
        .iter()
        .filter_map(|a| if let Action::Store(StoreAction::ReadRange { range, .. }) = a { Some(*range) } else { None })
        .collect();
    assert!(!reads.is_empty(), "the log is read: {out:?}");
    out.clear();
    for range in reads {
        let records = [2000, 3000]
            .into_iter()
            .filter(|&t| range.from.0 <= t && t <= range.to.0)
            .map(|t| (Tick(t), Bytes::from_static(b"\x01")))
            .collect();
        engine.handle(
            Millis(4200),
            Input::Store(StoreInput::ReadDone { pubend: P, range, records, lost: vec![] }),
            &mut out,
        );
    }
    assert_eq!(delivered(&out, 1), vec![Tick(2000), Tick(3000)]);
}

/// A relay with durable subend 1 attached at tick 1 and away (its outbox full) while `messages`
/// D ticks (10, 20, ...) pass; the actions so far are cleared.
fn away_with_backlog(settings: Settings, messages: u64) -> (Engine<Byte0>, Vec<Action>) {
    let (mut engine, mut out) = relay_with(settings);
    attach(&mut engine, 1, 1, Some(1), &mut out);
    engine.handle(Millis(1), Input::OutboxFull { subend: SubendId(1) }, &mut out);
    for n in 1..=messages {
        engine.handle(Millis(1 + n), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    out.clear();
    (engine, out)
}

#[test]
fn a_long_catch_up_takes_turns_a_window_per_input() {
    let (mut engine, mut out) = away_with_backlog(Settings { catch_up_turn: 2, ..Settings::default() }, 5);
    attach(&mut engine, 10, 1, Some(1), &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(10), Tick(20)], "one window");
    assert_eq!(engine.next_deadline(), Some(Millis(10)), "the rest is due at once");
    engine.handle(Millis(10), Input::Tick, &mut out);
    engine.handle(Millis(11), Input::Tick, &mut out);
    assert_eq!(delivered(&out, 1), vec![Tick(10), Tick(20), Tick(30), Tick(40), Tick(50)]);
}

/// The simulator's SHB crashes (seed 18 of its durable sweep): a fresh engine takes the first
/// durable subend restored as the stream's start and acknowledges up to its checkpoint at once,
/// so a subend restored after it with a lower checkpoint found its ticks folded away (a gap
/// notice). The contract (lib.rs, step 4) restores them lowest checkpoint first; then each is
/// replayed from its own checkpoint and the acks stay at the lowest.
#[test]
fn durable_subends_restored_lowest_checkpoint_first_are_each_replayed_from_their_checkpoint() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    attach(&mut engine, 1, 1, Some(11), &mut out);
    attach(&mut engine, 1, 2, Some(31), &mut out);
    for subend in [1, 2] {
        engine.handle(Millis(1), Input::OutboxFull { subend: SubendId(subend) }, &mut out);
    }
    assert!(acks(&out).iter().all(|&a| a <= Tick(10)), "pinned at the lowest checkpoint: {:?}", acks(&out));
    for n in 2..=4 {
        engine.handle(Millis(n * 100), data(n * 10, n * 10 - 9, 1, false), &mut out);
    }
    out.clear();
    for subend in [1, 2] {
        engine.handle(Millis(500), Input::OutboxReady { subend: SubendId(subend) }, &mut out);
    }
    assert!(!out.iter().any(|a| matches!(a, Action::GapNotice { .. })), "no gap: {out:?}");
    assert_eq!(delivered(&out, 1), vec![Tick(20), Tick(30), Tick(40)]);
    assert_eq!(delivered(&out, 2), vec![Tick(40)]);
    engine.handle(Millis(700), Input::Tick, &mut out);
    assert!(acks(&out).iter().all(|&a| a <= Tick(10)), "still at the lowest checkpoint: {:?}", acks(&out));
}

#[test]
fn a_rate_bound_spreads_a_catch_up_over_time_and_it_still_ends() {
    // Turns of 4, 2 messages per ms, at most 4 turns (16 messages) saved up: 50 messages take
    // 16 at once and the other 34 at 2 per ms, about 17 ms.
    let settings = Settings { catch_up_turn: 4, catch_up_rate: 2000, ..Settings::default() };
    let (mut engine, mut out) = away_with_backlog(settings, 50);
    attach(&mut engine, 100, 1, Some(1), &mut out);
    let mut now = 100;
    let mut live = 51;
    while delivered(&out, 1).len() < 50 {
        assert!(now < 200, "the catch-up ended: {:?}", delivered(&out, 1));
        let due = engine.next_deadline().expect("a catch-up under way has a turn due");
        assert!(due.0 <= now + 2, "a turn is at most two milliseconds away at 2 per ms: {due:?} at {now}");
        if due.0 > now {
            // Live traffic in between does not put the turn off.
            now += 1;
            engine.handle(Millis(now), data(live * 10, live * 10 - 9, 1, false), &mut out);
            live += 1;
            continue;
        }
        engine.handle(Millis(now), Input::Tick, &mut out);
    }
    assert_eq!(delivered(&out, 1)[..50], (1..=50).map(|n| Tick(n * 10)).collect::<Vec<_>>());
    assert!((115..=120).contains(&now), "34 messages at 2 per ms after the first 16: ended at {now}");
}
