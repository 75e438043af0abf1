//! Subscriptions made while their broker was absent from a stream (nemesis findings with client
//! faults, 2026-12-01): what became final meanwhile was judged without them, so it is told as
//! a gap, never handed to them as silence.

use super::{data, relay};
use crate::engine::{Action, Input};
use crate::names::{BrokerId, Millis, SubendId, Tick, TickRange};

fn gaps(out: &[Action]) -> Vec<(SubendId, TickRange)> {
    let gap = |a: &Action| if let Action::GapNotice { subend, range, .. } = a { Some((*subend, *range)) } else { None };
    out.iter().filter_map(gap).collect()
}

/// The only subscription of a relay's stream leaves; the stream settles ticks 101-200 while
/// nobody is attached (F judged upstream without this broker's interest). A plain subscription
/// made later, confirmed at a start set back below them (a late start), is told them as a gap
/// (seed 502: it was handed them as silence, 138 publishes missed without a word).
#[test]
fn a_subscription_made_after_the_stream_settled_ticks_with_nobody_attached_is_told_them_as_a_gap() {
    let (mut engine, mut out) = relay(vec![], vec![BrokerId(0)]);
    let attach = |subend, start| Input::SubendAttach { pubend: super::P, subend, start: Some(start), durable: false };
    engine.handle(Millis(1), attach(SubendId(1), Tick(1)), &mut out);
    engine.handle(Millis(2), data(100, 1, 1, false), &mut out);
    engine.handle(Millis(3), Input::SubendDetach { pubend: super::P, subend: SubendId(1) }, &mut out);
    engine.handle(Millis(4), data(200, 101, 2, false), &mut out);
    out.clear();
    engine.handle(Millis(5), attach(SubendId(2), Tick(150)), &mut out);
    assert_eq!(gaps(&out), [(SubendId(2), TickRange { from: Tick(150), to: Tick(200) })], "{out:?}");
}
