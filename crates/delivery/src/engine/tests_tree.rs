//! F and the routing tree it was judged under ([`TreeTag`]): taken only under the same tree,
//! and held F made suspect when the tree moves at a relay.

use std::cell::Cell;

use bytes::Bytes;

use super::{child, nacked, sent, P};
use crate::engine::types::{Matcher, StreamRoute, UpstreamCell, Verdict};
use crate::engine::{Action, Engine, Input};
use crate::message::{Message, SilenceKind};
use crate::names::{BrokerId, CellId, Millis, PubendId, SubendId, Tick, TickRange, TreeTag};
use crate::settings::Settings;

/// Everything passes every edge; the tree is whatever the test sets.
struct OnTree(Cell<u64>);

impl Matcher for OnTree {
    fn child(&self, _: PubendId, _: CellId, _: &Bytes) -> Verdict {
        Verdict::Data
    }
    fn subends(&self, _: PubendId, _: &Bytes, _: &mut Vec<SubendId>) {}
    fn subend(&self, _: PubendId, _: SubendId, _: &Bytes) -> bool {
        false
    }
    fn epoch(&self) -> u64 {
        self.0.get()
    }
    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(self.0.get())
    }
}

fn relay_on(tree: u64) -> (Engine<OnTree>, Vec<Action>) {
    let mut engine = Engine::new(Settings::default(), OnTree(Cell::new(tree)));
    let mut out = Vec::new();
    let route = StreamRoute {
        upstream: Some(UpstreamCell { cell: CellId(0), brokers: vec![BrokerId(0)] }),
        children: vec![child()],
    };
    engine.handle(Millis(1), Input::Route { pubend: P, route }, &mut out);
    (engine, out)
}

fn upstream(message: Message) -> Input {
    Input::Received { from: BrokerId(0), from_cell: CellId(0), message }
}

fn silence(from: u64, to: u64, tree: u64) -> Message {
    let ranges = vec![TickRange { from: Tick(from), to: Tick(to) }];
    Message::Silence { pubend: P, ranges, kind: SilenceKind::Final, requested_only: false, tree: TreeTag(tree) }
}

fn data(tick: u64, final_from: u64, tree: u64) -> Message {
    Message::Data {
        pubend: P,
        tick: Tick(tick),
        final_from: Tick(final_from),
        final_to: Tick(tick),
        requested_only: false,
        tree: TreeTag(tree),
        payload: Bytes::from_static(b"\x01"),
    }
}

/// Seed 443's hop: the upstream judged F for our cell under its tree, ours has moved since
/// (a cell joined below us): the F is not taken, the D is, and the F sent on is ours.
#[test]
fn final_judged_under_another_tree_is_not_taken() {
    let (mut engine, mut out) = relay_on(7);
    engine.handle(Millis(2), upstream(silence(1, 999, 8)), &mut out);
    engine.handle(Millis(3), upstream(data(1500, 1000, 8)), &mut out);
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.knowledge(Tick(500)), None, "F judged under tree 8 is not taken under tree 7");
    assert_eq!(view.knowledge(Tick(1200)), None, "nor the brackets of a Data judged under it");
    assert_eq!(view.knowledge(Tick(1500)), Some(crate::knowledge::Know::Data), "the D is true under any tree");
    assert_eq!(engine.counters().stale_tree_finals, 2);

    engine.handle(Millis(4), upstream(silence(1, 999, 7)), &mut out);
    let view = engine.inspect(P).unwrap();
    assert_eq!(view.knowledge(Tick(500)), Some(crate::knowledge::Know::Final), "F under our own tree is taken");
    let stamped: Vec<TreeTag> = sent(&out)
        .iter()
        .filter_map(|m| match m {
            Message::Data { tree, .. } | Message::Silence { tree, .. } => Some(*tree),
            _ => None,
        })
        .collect();
    assert!(
        !stamped.is_empty() && stamped.iter().all(|t| *t == TreeTag(7)),
        "what we tell carries our tree: {stamped:?}"
    );
}

/// Seed 940's hop: a relay took F under one tree and told it; the tree moves (a cell joined
/// below its child) and the child, fetching for the newcomer, nacks those ticks. The relay's
/// F proves nothing for the new tree: it asks upstream instead of answering from it.
#[test]
fn a_tree_move_makes_held_final_a_question_for_upstream() {
    let (mut engine, mut out) = relay_on(7);
    engine.handle(Millis(2), upstream(silence(1, 999, 7)), &mut out);
    engine.handle(Millis(3), upstream(data(1000, 1000, 7)), &mut out);
    out.clear();
    engine.matcher().0.set(9);
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(100), to: Tick(200) }] };
    engine.handle(Millis(4), Input::Received { from: BrokerId(9), from_cell: CellId(9), message: nack }, &mut out);
    let answered = sent(&out).iter().any(|m| match m {
        Message::Silence { ranges, kind: SilenceKind::Final, .. } => {
            ranges.iter().any(|r| r.from <= Tick(200) && r.to >= Tick(100))
        }
        _ => false,
    });
    assert!(!answered, "F held from the old tree is no answer: {out:?}");
    assert!(
        nacked(&out).iter().any(|r| r.from <= Tick(100) && r.to >= Tick(200)),
        "the ticks are asked upstream: {out:?}"
    );

    out.clear();
    let mut answer = silence(100, 200, 9);
    if let Message::Silence { requested_only, .. } = &mut answer {
        *requested_only = true;
    }
    engine.handle(Millis(5), upstream(answer), &mut out);
    let passed = sent(&out).iter().any(|m| match m {
        Message::Silence { ranges, tree, .. } => *tree == TreeTag(9) && ranges.iter().any(|r| r.from == Tick(100)),
        _ => false,
    });
    assert!(passed, "upstream's answer under the new tree is passed on: {out:?}");
}
