//! Starts of local subscriptions confirmed by barriers out of order: the floor the shell
//! raises a later barrier's lower start to ([`crate::StreamView::start_floor`]).

use super::{relay, Byte0, P};
use crate::engine::{Action, Input};
use crate::names::{BrokerId, Millis, SubendId, Tick};

fn rejected_or_gap(out: &[Action]) -> bool {
    out.iter().any(|a| matches!(a, Action::Rejected { .. } | Action::GapNotice { .. }))
}

/// Two subscriptions wait on their barriers; the later one's barrier carries a lower start
/// than the earlier one, which already started the stream (census seed 319 of the full mode:
/// it was refused and told a gap). From the floor the stream reports, it starts without one.
#[test]
fn a_later_barrier_with_a_lower_start_starts_at_the_streams_floor() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    for subend in [SubendId(1), SubendId(2)] {
        engine.handle(Millis(1), Input::SubendAttach { pubend: P, subend, start: None, durable: false }, &mut out);
    }
    let floor = |engine: &crate::Engine<Byte0>, subend| engine.inspect(P).and_then(|v| v.start_floor(subend));
    assert_eq!(floor(&engine, SubendId(2)), Some(Tick(1)), "nothing started the stream yet");
    engine.handle(Millis(2), Input::SubendStart { pubend: P, subend: SubendId(1), start: Tick(1405) }, &mut out);
    assert!(!rejected_or_gap(&out), "{out:?}");
    assert_eq!(floor(&engine, SubendId(2)), Some(Tick(1405)), "the first start raised the waiting one's pin");
    let start = Tick(1367).max(floor(&engine, SubendId(2)).unwrap_or(Tick(1367)));
    out.clear();
    engine.handle(Millis(3), Input::SubendStart { pubend: P, subend: SubendId(2), start }, &mut out);
    assert!(!rejected_or_gap(&out), "{out:?}");
    // As fed before the floor: refused, and told a gap it was never owed.
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    for subend in [SubendId(1), SubendId(2)] {
        engine.handle(Millis(1), Input::SubendAttach { pubend: P, subend, start: None, durable: false }, &mut out);
    }
    engine.handle(Millis(2), Input::SubendStart { pubend: P, subend: SubendId(1), start: Tick(1405) }, &mut out);
    engine.handle(Millis(3), Input::SubendStart { pubend: P, subend: SubendId(2), start: Tick(1367) }, &mut out);
    assert!(rejected_or_gap(&out), "{out:?}");
}
