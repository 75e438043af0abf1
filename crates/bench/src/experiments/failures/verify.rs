//! The guarantee, checked from the clients' own lines: every acknowledged publish reaches a
//! guaranteed subscriber exactly once, at the tick it was acknowledged with, and in each
//! publisher's order, with no gap notice.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

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
        format!(
            "{} acknowledged, {} delivered: {} missing, {} duplicated, {} out of order, {} at another tick, {} gap \
             notices ({} delivered without an acknowledgement)",
            self.acked,
            self.delivered,
            self.missing,
            self.duplicates,
            self.out_of_order,
            self.wrong_tick,
            self.gaps,
            self.unacked
        )
    }
}

/// `(publisher, seq)` and tick of a line of either tool.
fn id(line: &Value) -> Option<((String, u64), u64)> {
    let source = line.get("properties").unwrap_or(line);
    let publisher = source["publisher"].as_str()?.to_string();
    Some(((publisher, source["seq"].as_u64()?), line["tick"].as_u64()?))
}

/// Compares a subscriber's lines with every publisher's acknowledgements.
pub(super) fn verify(acked: &[Value], got: &[Value]) -> Verdict {
    let want: BTreeMap<(String, u64), u64> = acked.iter().filter_map(id).collect();
    let mut v = Verdict { acked: want.len(), ..Verdict::default() };
    let mut seen = BTreeSet::new();
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for line in got {
        if line["gap"].as_bool() == Some(true) || line["missed"].as_u64().is_some_and(|m| m > 0) {
            v.gaps += 1;
        }
        let Some((key, tick)) = id(line) else { continue };
        v.delivered += 1;
        if !seen.insert(key.clone()) {
            v.duplicates += 1;
            continue;
        }
        match want.get(&key) {
            Some(&t) if t != tick => v.wrong_tick += 1,
            Some(_) => {}
            None => v.unacked += 1,
        }
        let previous = last.insert(key.0.clone(), key.1);
        if previous.is_some_and(|p| p > key.1) {
            v.out_of_order += 1;
        }
    }
    v.missing = want.keys().filter(|k| !seen.contains(*k)).count();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ack(p: &str, seq: u64) -> Value {
        json!({"publisher": p, "seq": seq, "tick": seq * 10})
    }

    fn got(p: &str, seq: u64) -> Value {
        json!({"properties": {"publisher": p, "seq": seq}, "tick": seq * 10, "missed": 0})
    }

    #[test]
    fn everything_once_in_order_holds() {
        let acked = [ack("a", 1), ack("a", 2), ack("b", 1)];
        let v = verify(&acked, &[got("a", 1), got("b", 1), got("a", 2)]);
        assert!(v.held(), "{v:?}");
    }

    #[test]
    fn loss_repeats_and_reordering_are_counted() {
        let acked = [ack("a", 1), ack("a", 2), ack("a", 3)];
        let v = verify(&acked, &[got("a", 2), got("a", 1), got("a", 1)]);
        assert_eq!((v.missing, v.duplicates, v.out_of_order), (1, 1, 1));
        assert!(!v.held());
        let gap = json!({"gap": true, "pubend": "x", "from": 1, "to": 2});
        assert_eq!(verify(&acked, &[gap]).gaps, 1);
    }
}
