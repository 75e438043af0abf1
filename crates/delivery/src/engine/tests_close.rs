//! A pubend's log closed at a broker that lives on (`Input::CloseLog`): a deposed host of a
//! replicated pubend (docs/replication.md, "Takeover") must stop being the pubend, and may
//! reopen the same log later.

use super::*;
use crate::error::DeliveryError;
use crate::knowledge::Know;

fn child_nack(from: u64, to: u64) -> Input {
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(from), to: Tick(to) }] };
    Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack }
}

/// After the close the broker refuses what was pending, tells no knowledge past what it had
/// told, answers no nack for later ticks from its log, releases and appends nothing, and takes
/// no publish; the log it held reopens with every tick it gave still taken.
#[test]
fn a_closed_log_serves_nothing_more_and_reopens_where_it_was() {
    let (mut engine, mut out) = pubend();
    publish(&mut engine, 5, 1, &mut out);
    engine.handle(Millis(6), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: Tick(5000) }), &mut out);
    publish(&mut engine, 7, 2, &mut out);
    let holds = engine.log_holds(P).expect("hosted");
    assert_eq!(holds.logged, [Tick(5000), Tick(7000)], "the synced record and the pending one");
    assert_eq!(holds.publishers, [(PublisherId(1), 2)]);

    out.clear();
    engine.handle(Millis(8), Input::CloseLog { pubend: P }, &mut out);
    assert!(out.contains(&Action::PublishRefused { pubend: P, publisher: PublisherId(1), seq: 2 }), "{out:?}");
    assert_eq!(engine.log_holds(P), None, "no longer the pubend here");
    let view = engine.inspect(P).expect("the stream stays, as a relay");
    assert_eq!(view.knowledge(Tick(5000)), Some(Know::Data), "what it knew stays true");
    assert_eq!(view.knowledge(Tick(7000)), None, "the refused record never became D");

    // Time passes, the pending append lands, a child nacks past the old knowledge.
    out.clear();
    engine.handle(Millis(9), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: Tick(7000) }), &mut out);
    for now in (100..3_000).step_by(100) {
        engine.handle(Millis(now), Input::Tick, &mut out);
    }
    engine.handle(Millis(3_000), child_nack(6_000, 2_900_000), &mut out);
    let told: Vec<&Message> =
        sent(&out).into_iter().filter(|m| matches!(m, Message::Data { .. } | Message::Silence { .. })).collect();
    assert!(told.is_empty(), "a closed log told knowledge: {told:?}");
    let stored: Vec<&Action> = out.iter().filter(|a| matches!(a, Action::Store(_))).collect();
    assert!(stored.is_empty(), "a closed log wrote: {stored:?}");
    out.clear();
    let late = Input::Publish { pubend: P, publisher: PublisherId(1), seq: 3, payload: Bytes::from_static(b"\x01m") };
    engine.handle(Millis(3_001), late, &mut out);
    assert_eq!(out, [Action::Rejected { error: DeliveryError::PubendNotOpen { pubend: P } }]);

    // It leads again: the same log reopens (brought up to the group by the shell).
    out.clear();
    engine.handle(Millis(3_002), Input::Store(StoreInput::Opened { pubend: P, recovered: holds }), &mut out);
    publish(&mut engine, 3_003, 3, &mut out);
    let appended: Vec<Tick> = out
        .iter()
        .filter_map(|a| if let Action::Store(StoreAction::Append { tick, .. }) = a { Some(*tick) } else { None })
        .collect();
    assert_eq!(appended, [Tick(3_003_000)]);
    assert_eq!(engine.inspect(P).and_then(|v| v.knowledge(Tick(5000))), Some(Know::Data));
}

/// The highest tick any F told in `out` covers.
fn highest_silence(out: &[Action]) -> Option<Tick> {
    sent(out)
        .into_iter()
        .filter_map(|m| match m {
            Message::Silence { ranges, kind: crate::message::SilenceKind::Final, .. } => ranges.last().map(|r| r.to),
            _ => None,
        })
        .max()
}

/// A replicated pubend tells silence only as far as its group confirmed this broker's lead: a
/// host stalled past its term that wakes up tells nothing past its last confirmation, however
/// far its clock and its lease have gone (a successor may have logged there); each new
/// confirmation lets it go that far, and no further.
#[test]
fn silence_stops_where_the_group_last_confirmed_the_lead() {
    let mut engine = Engine::new(Settings::default(), Byte0);
    let mut out = Vec::new();
    engine.handle(Millis(1), Input::ConfirmSilence { pubend: P, up_to: Tick(1) }, &mut out);
    engine.handle(
        Millis(1),
        Input::Route { pubend: P, route: StreamRoute { upstream: None, children: vec![child()] } },
        &mut out,
    );
    engine.handle(Millis(1), Input::Store(StoreInput::Opened { pubend: P, recovered: Recovered::default() }), &mut out);
    engine.handle(Millis(2), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(60_000_000) }), &mut out);
    for now in (100..1_000).step_by(50) {
        engine.handle(Millis(now), Input::Tick, &mut out);
    }
    assert_eq!(highest_silence(&out), Some(Tick(1)), "no F past the first confirmation: {:?}", sent(&out));

    out.clear();
    engine.handle(Millis(1_000), Input::ConfirmSilence { pubend: P, up_to: Tick(400_000) }, &mut out);
    for now in (1_000..3_000).step_by(50) {
        engine.handle(Millis(now), Input::Tick, &mut out);
    }
    assert_eq!(highest_silence(&out), Some(Tick(400_000)), "F up to the confirmation, no further");

    out.clear();
    engine.handle(Millis(3_000), Input::ConfirmSilence { pubend: P, up_to: Tick(2_900_000) }, &mut out);
    engine.handle(Millis(3_050), Input::Tick, &mut out);
    assert_eq!(highest_silence(&out), Some(Tick(2_900_000)));

    // An unreplicated pubend is not capped: F follows the clock.
    let (mut free, mut out) = pubend();
    free.handle(Millis(2), Input::Store(StoreInput::LeaseDone { pubend: P, lease: Tick(60_000_000) }), &mut out);
    for now in (100..1_000).step_by(50) {
        free.handle(Millis(now), Input::Tick, &mut out);
    }
    assert!(highest_silence(&out) > Some(Tick(500_000)), "{:?}", highest_silence(&out));
}
