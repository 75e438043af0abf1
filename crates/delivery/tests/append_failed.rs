//! A failed append (a full disk, say) is refused to its publisher, never becomes a data tick,
//! and a retry of the same `(publisher, seq)` is logged as a new publish.

#![allow(clippy::expect_used)]
use bytes::Bytes;
use tidings_delivery::{
    Action, CellId, Engine, Input, Matcher, Millis, PubendId, PublisherId, Recovered, Settings, StoreAction,
    StoreInput, SubendId, Tick, TreeTag, Verdict,
};

struct Everyone;

impl Matcher for Everyone {
    fn child(&self, _: PubendId, _: CellId, _: &Bytes) -> Verdict {
        Verdict::Data
    }
    fn subends(&self, _: PubendId, _: &Bytes, out: &mut Vec<SubendId>) {
        out.push(SubendId(1));
    }
    fn subend(&self, _: PubendId, _: SubendId, _: &Bytes) -> bool {
        true
    }
    fn epoch(&self) -> u64 {
        0
    }

    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

const P: PubendId = PubendId(7);
const ME: PublisherId = PublisherId(3);

fn publish(engine: &mut Engine<Everyone>, now: u64, seq: u64, out: &mut Vec<Action>) -> Tick {
    out.clear();
    let payload = Bytes::from(format!("m{seq}"));
    engine.handle(Millis(now), Input::Publish { pubend: P, publisher: ME, seq, payload }, out);
    out.iter()
        .find_map(|a| match a {
            Action::Store(StoreAction::Append { tick, .. }) => Some(*tick),
            _ => None,
        })
        .expect("an append")
}

fn opened_engine(out: &mut Vec<Action>) -> Engine<Everyone> {
    let mut engine = Engine::new(Settings::default(), Everyone);
    let recovered = Recovered { lease: Tick(1_000_000_000), ..Recovered::default() };
    engine.handle(Millis(1), Input::Store(StoreInput::Opened { pubend: P, recovered }), out);
    let start = engine.inspect(P).and_then(|view| view.next_tick()).expect("a hosted pubend has a next tick");
    engine.handle(
        Millis(1),
        Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(start), durable: false },
        out,
    );
    engine
}

#[test]
fn a_failed_append_is_refused_not_delivered_and_its_retry_is_a_new_publish() {
    let mut out = Vec::new();
    let mut engine = opened_engine(&mut out);
    let failed = publish(&mut engine, 10, 1, &mut out);
    let good = publish(&mut engine, 11, 2, &mut out);
    out.clear();
    engine.handle(Millis(12), Input::Store(StoreInput::AppendFailed { pubend: P, tick: failed }), &mut out);
    assert!(out.contains(&Action::PublishRefused { pubend: P, publisher: ME, seq: 1 }));
    out.clear();
    engine.handle(Millis(12), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: good }), &mut out);
    assert!(out.contains(&Action::PublishAcked { pubend: P, publisher: ME, seq: 2 }));
    assert!(!out.iter().any(|a| matches!(a, Action::PublishAcked { seq: 1, .. })));
    let delivered: Vec<Tick> = out
        .iter()
        .filter_map(|a| match a {
            Action::Deliver { tick, .. } => Some(*tick),
            _ => None,
        })
        .collect();
    assert!(!delivered.contains(&failed), "a tick whose append failed was delivered");
    let view = engine.inspect(P).expect("stream");
    assert_ne!(view.knowledge(failed), Some(tidings_delivery::Know::Data));
    // The retry is a new publish with a new tick, not a repeat acknowledged out of thin air.
    let retry = publish(&mut engine, 20, 1, &mut out);
    assert!(retry > good);
    out.clear();
    engine.handle(Millis(21), Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: retry }), &mut out);
    assert!(out.contains(&Action::PublishAcked { pubend: P, publisher: ME, seq: 1 }));
}

#[test]
fn the_next_tick_is_above_every_tick_already_assigned() {
    let mut out = Vec::new();
    let mut engine = opened_engine(&mut out);
    let tick = publish(&mut engine, 5, 1, &mut out);
    let next = engine.inspect(P).and_then(|view| view.next_tick()).expect("hosted");
    assert!(next > tick);
}
