//! The guarantee, checked from the clients' own lines: every acknowledged publish reaches a
//! guaranteed subscriber exactly once, at the tick it was acknowledged with, and in each
//! publisher's order, with no gap notice.

use serde_json::Value;
use tidings_matching::Pattern;

use crate::guarantee::{check, Ack, Line, Subscriber};

/// What one subscriber got against what was acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Verdict {
    /// Acknowledged publishes.
    pub acked: usize,
    /// Deliveries.
    pub delivered: usize,
    /// Acknowledged and never delivered.
    pub missing: usize,
    /// Delivered more than once (each repeat counted).
    pub duplicates: usize,
    /// Delivered after a later publish of the same publisher.
    pub out_of_order: usize,
    /// Delivered at another tick than the one acknowledged.
    pub wrong_tick: usize,
    /// Delivered but never acknowledged (allowed: the acknowledgement may be lost in a crash).
    pub unacked: usize,
    /// Gap notices (messages declared lost).
    pub gaps: usize,
}

impl Verdict {
    /// Exactly once, in order, nothing lost.
    pub(super) fn held(&self) -> bool {
        self.acked > 0
            && self.missing == 0
            && self.duplicates == 0
            && self.out_of_order == 0
            && self.wrong_tick == 0
            && self.gaps == 0
    }

    /// The counts, for the report.
    pub(super) fn describe(&self) -> String {
        let Verdict { acked, delivered, missing, duplicates, out_of_order, wrong_tick, unacked, gaps } = self;
        format!(
            "{acked} acknowledged, {delivered} delivered: {missing} missing, {duplicates} duplicated, {out_of_order} \
             out of order, {wrong_tick} at another tick, {gaps} gap notices ({unacked} delivered without an \
             acknowledgement)"
        )
    }
}

/// Compares a subscriber's lines with every publisher's acknowledgements, through the
/// nemesis's checker: the subscriber was there before the first publish, so everything
/// acknowledged is expected.
pub(super) fn verify(acked: &[Value], got: &[Value]) -> anyhow::Result<Verdict> {
    let acks: Vec<Ack> = acked.iter().filter_map(Ack::parse).collect();
    let lines: Vec<Line> = got.iter().filter_map(Line::parse).collect();
    let everything = Subscriber {
        name: String::new(),
        pattern: Pattern::parse(">")?,
        selector: None,
        durable: true,
        relayed: false,
    };
    let v = check(&acks, &everything, &lines);
    Ok(Verdict {
        acked: acks.len(),
        delivered: v.delivered,
        missing: v.lost_silent + v.lost_in_gap,
        duplicates: v.duplicated,
        out_of_order: v.reordered,
        wrong_tick: v.wrong_tick,
        unacked: v.unacked,
        gaps: v.gaps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ack(p: &str, seq: u64) -> Value {
        json!({"publisher": p, "seq": seq, "tick": seq * 10, "pubend": p, "topic": "failures.x", "properties": {}})
    }

    fn got(p: &str, seq: u64) -> Value {
        json!({"properties": {"publisher": p, "seq": seq}, "pubend": p, "tick": seq * 10, "missed": 0})
    }

    #[test]
    fn everything_once_in_order_holds() {
        let acked = [ack("a", 1), ack("a", 2), ack("b", 1)];
        let v = verify(&acked, &[got("a", 1), got("b", 1), got("a", 2)]).unwrap();
        assert!(v.held(), "{v:?}");
    }

    #[test]
    fn loss_repeats_and_reordering_are_counted() {
        let acked = [ack("a", 1), ack("a", 2), ack("a", 3)];
        let v = verify(&acked, &[got("a", 2), got("a", 1), got("a", 1)]).unwrap();
        assert_eq!((v.missing, v.duplicates, v.out_of_order), (1, 1, 1));
        assert!(!v.held());
        let gap = json!({"gap": true, "pubend": "x", "from": 1, "to": 2});
        assert_eq!(verify(&acked, &[gap]).unwrap().gaps, 1);
    }
}
