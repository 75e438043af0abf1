//! A cell's entry asking again for ticks its cell already acknowledged (nemesis seed 684, on
//! gryphon-fig3-double): the cell's brokers were killed together, the entry came back first
//! and acknowledged from where its own durable subscriptions stood, and a mate that came back
//! with a durable subscription further behind nacked the entry for the ticks between. The
//! entry fetched them from the relay above it, which held none of them: it asked its own
//! upstream, which answered, and then dropped every answer (no mark below the cell's ack) and
//! asked again every two seconds, for good. The mate's stream stopped there, and a plain
//! subscriber behind the same stream lost the rest of it silently.

use super::{data, nacked, relay, sent};
use crate::engine::{ChildLink, Input};
use crate::message::Message;
use crate::names::{BrokerId, CellId, Millis, Tick, TickRange};

const ENTRY: BrokerId = BrokerId(9);
const CELL: CellId = CellId(9);

fn from_cell(message: Message) -> Input {
    Input::Received { from: ENTRY, from_cell: CELL, message }
}

#[test]
fn a_relay_passes_on_what_it_fetched_for_a_cell_below_that_cells_ack() {
    // A second child that acknowledges nothing keeps the relay's own done prefix at 0, as the
    // relay's mate did in seed 684.
    let children = vec![
        ChildLink { cell: CELL, broker: ENTRY, via: None },
        ChildLink { cell: CellId(8), broker: BrokerId(8), via: None },
    ];
    let (mut engine, mut out) = relay(children, vec![BrokerId(0)]);
    let ack = Message::Ack { pubend: super::P, ack_prefix: Tick(5000), release_prefix: Tick(5000) };
    engine.handle(Millis(2), from_cell(ack), &mut out);
    out.clear();
    let nack = Message::Nack { pubend: super::P, ranges: vec![TickRange::single(Tick(2000))] };
    engine.handle(Millis(3), from_cell(nack), &mut out);
    assert!(
        nacked(&out).iter().any(|r| r.from <= Tick(2000) && Tick(2000) <= r.to),
        "the relay holds nothing of tick 2000 and asks upstream: {out:?}"
    );
    out.clear();
    engine.handle(Millis(4), data(2000, 1990, 1, true), &mut out);
    let passed = sent(&out).iter().any(|m| matches!(m, Message::Data { tick: Tick(2000), requested_only: true, .. }));
    assert!(passed, "the answer reaches the cell that asked: {out:?}");
}
