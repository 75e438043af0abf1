//! What a stream's view says of its nacks ([`crate::StreamView::wanted`] and
//! [`crate::StreamView::asked`]): the ranges the web view and `/state` show for each broker.

use super::{relay_with_a_hole, P};
use crate::engine::Input;
use crate::message::Message;
use crate::names::{BrokerId, CellId, Millis, Tick, TickRange};
use crate::settings::Settings;

fn r(from: u64, to: u64) -> TickRange {
    TickRange { from: Tick(from), to: Tick(to) }
}

/// A relay missing ticks 1001-2999 wants them from upstream; its child asks for 1500-2500,
/// which the relay cannot answer yet: the view lists both, each bounded, and forgets each once
/// answered.
#[test]
fn the_view_lists_what_this_broker_wants_and_what_each_child_asked_for() {
    let (mut engine, mut out) = relay_with_a_hole();
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.wanted(8), (vec![r(1001, 2999)], false), "the hole is wanted at once");
    assert!(view.asked(8).is_empty(), "no child asked for anything");

    let gct = Settings::default().gap_curiosity_ms;
    engine.handle(Millis(20 + gct + 1), Input::Tick, &mut out);
    let nack = Message::Nack { pubend: P, ranges: vec![r(1500, 1600), r(2000, 2500)] };
    engine.handle(
        Millis(30 + gct),
        Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack },
        &mut out,
    );
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.wanted(8), (vec![r(1001, 2999)], false), "nacked upstream, still wanted");
    assert_eq!(view.asked(8), vec![(BrokerId(9), vec![r(1500, 1600), r(2000, 2500)], false)]);
    assert_eq!(view.asked(1), vec![(BrokerId(9), vec![r(1500, 1600)], true)], "bounded, saying more follow");

    // The upstream answers: F over the hole. Nothing is wanted or asked for any more.
    let answer = Message::Silence {
        pubend: P,
        ranges: vec![r(1001, 2999)],
        kind: crate::message::SilenceKind::Final,
        requested_only: true,
        tree: crate::names::TreeTag(0),
    };
    engine.handle(
        Millis(40 + gct),
        Input::Received { from: BrokerId(0), from_cell: CellId(0), message: answer },
        &mut out,
    );
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.wanted(8), (vec![], false));
    assert!(view.asked(8).is_empty(), "the child's nack was answered: {:?}", view.asked(8));
}
