use super::*;
use bytes::Bytes;
use tidings_delivery::{CellId, Settings, TreeTag, Verdict};

/// No subend matches anything: the engine holds no stream, so no checkpoint passes ticks.
/// (Its children are unsure, hence sent everything: `replicated`'s tests use it so.)
pub(crate) struct Nothing;

impl Matcher for Nothing {
    fn child(&self, _: PubendId, _: CellId, _: &Bytes) -> Verdict {
        Verdict::Unsure
    }
    fn subends(&self, _: PubendId, _: &Bytes, _: &mut Vec<SubendId>) {}
    fn subend(&self, _: PubendId, _: SubendId, _: &Bytes) -> bool {
        false
    }
    fn epoch(&self) -> u64 {
        0
    }
    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

const S: SubendId = SubendId(3);
const P: PubendId = PubendId(1);

fn checkpoint(inputs: &[Input]) -> Vec<Tick> {
    inputs
        .iter()
        .filter_map(|i| if let Input::SubendCheckpoint { tick, .. } = i { Some(*tick) } else { None })
        .collect()
}

#[test]
fn a_checkpoint_reaches_the_core_only_once_written_one_write_at_a_time() {
    let engine = Engine::new(Settings::default(), Nothing);
    let mut c = Checkpoints::default();
    c.create(S);
    c.started(S, P, Tick(10));
    assert_eq!(c.start(S, P), Some(Tick(10)), "a start is held before anything is acknowledged");
    c.ack(S, P, Tick(12));
    let batch = c.flush(Millis(0), &engine).unwrap();
    assert_eq!(batch, vec![(S, P, Tick(12))]);
    c.ack(S, P, Tick(14));
    assert_eq!(c.flush(Millis(1), &engine), None, "one write in flight at a time");
    assert_eq!(checkpoint(&c.written(Millis(5), batch, true)), vec![Tick(12)]);
    assert_eq!(c.flush(Millis(50), &engine), None, "the interval holds the next write");
    assert_eq!(c.due(), Some(Millis(5 + CHECKPOINT_EVERY_MS)));
    let batch = c.flush(Millis(5 + CHECKPOINT_EVERY_MS), &engine).unwrap();
    assert_eq!(batch, vec![(S, P, Tick(14))]);
    c.ack(S, P, Tick(13));
    assert_eq!(c.start(S, P), Some(Tick(15)), "a late older acknowledgement moves nothing back");
}

#[test]
fn a_failed_write_is_retried_later_and_a_client_leaving_writes_at_once() {
    let engine = Engine::new(Settings::default(), Nothing);
    let mut c = Checkpoints::default();
    c.restore(S, BTreeMap::from([(P, Tick(20))]));
    assert!(!c.is_held(S));
    assert_eq!(c.start(S, P), Some(Tick(21)), "a restored subscription resumes one past its checkpoint");
    c.hold(S);
    c.ack(S, P, Tick(22));
    let batch = c.flush(Millis(0), &engine).unwrap();
    assert!(c.written(Millis(1), batch, false).is_empty(), "nothing is acknowledged upstream after a failure");
    assert_eq!(c.flush(Millis(500), &engine), None);
    let batch = c.flush(Millis(1 + RETRY_MS), &engine).unwrap();
    assert_eq!(checkpoint(&c.written(Millis(1 + RETRY_MS), batch, true)), vec![Tick(22)]);
    c.ack(S, P, Tick(23));
    c.away(S);
    assert_eq!(c.due(), Some(Millis(0)), "a client that left has its acknowledgements written at once");
    c.remove(S);
    assert_eq!(c.flush(Millis(0), &engine), None, "a deleted subscription writes nothing");
}

#[test]
fn subends_attach_lowest_start_first_and_pending_last() {
    let a = |subend, start: Option<u64>| Attach { subend: SubendId(subend), start: start.map(Tick), durable: true };
    let order = attach_order(vec![a(1, None), a(2, Some(9)), a(3, Some(4)), a(4, Some(4))]);
    assert_eq!(order, vec![a(3, Some(4)), a(4, Some(4)), a(2, Some(9)), a(1, None)]);
}
