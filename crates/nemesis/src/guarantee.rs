//! The guarantee checker (of the nemesis and the failures experiment): every acknowledged publish against every subscriber's output, from the
//! command-line tools' JSON lines only (`pub --guaranteed --json` acknowledgements, `sub --json`
//! deliveries and gap notices), as an outside observer would check them.
//!
//! A subscriber's expected set is every acknowledged publish whose topic matches its pattern
//! and whose properties pass its selector (evaluated by `tidings-matching`, the broker's own
//! evaluator), published while it was subscribed: for a durable subscriber everything (it was
//! created before publishing began); for a plain guaranteed one, per pubend, from the first tick
//! it received of that pubend (a plain subscription restarts after its broker's crash), or
//! everything of a pubend it received nothing from (it was confirmed before publishing began).
//! An expected publish not delivered is lost inside a gap when a gap notice of its pubend
//! covers its tick, lost silently otherwise. A second line with the same `(publisher, seq)` is a
//! duplicate, whether flagged `redelivered` or not; a seq lower than one already delivered from
//! the same publisher, or a tick lower than one already delivered from the same pubend, is a
//! reordering. Deliveries never acknowledged are fine (the acknowledgement may have been lost
//! with a crash): they are only counted.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use tidings_matching::{Pattern, Selector};
use tidings_wire::Property;

/// One acknowledged publish, from a `pub --guaranteed --json` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Ack {
    /// The publisher's id (16 hex digits).
    pub publisher: String,
    /// Its sequence number in the publisher's run.
    pub seq: u64,
    /// The pubend it was acknowledged on.
    pub pubend: String,
    /// The tick it was acknowledged with.
    pub tick: u64,
    /// Its topic.
    pub topic: String,
    /// Every property of the message (for the selector).
    pub properties: Vec<Property>,
}

impl Ack {
    /// Reads an acknowledgement line; `None` for anything else (a line cut short by a kill).
    /// Without `properties` (the NATS peer harness's lines) only a selector-less subscriber
    /// can be checked.
    pub fn parse(line: &Value) -> Option<Ack> {
        let properties = line["properties"]
            .as_object()
            .map(|props| props.iter().filter_map(|(k, v)| property(k, v)).collect())
            .unwrap_or_default();
        Some(Ack {
            publisher: line["publisher"].as_str()?.to_string(),
            seq: line["seq"].as_u64()?,
            pubend: line["pubend"].as_str()?.to_string(),
            tick: line["tick"].as_u64()?,
            topic: line["topic"].as_str()?.to_string(),
            properties,
        })
    }
}

/// A JSON property value back as the typed value the message carried.
fn property(key: &str, value: &Value) -> Option<Property> {
    use tidings_wire::Value as V;
    let value = match value {
        Value::String(s) => V::Str(s.clone()),
        Value::Bool(b) => V::Bool(*b),
        Value::Number(n) if n.is_i64() => V::Int(n.as_i64()?),
        Value::Number(n) => V::Float(n.as_f64()?),
        _ => return None,
    };
    Some(Property::new(key, value))
}

/// One line of `sub --json`, as the checker reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A delivery.
    Delivery {
        /// `(publisher, seq)` from its properties.
        id: (String, u64),
        /// Its pubend and tick.
        pubend: String,
        /// Its tick.
        tick: u64,
        /// When the subscriber received it (Unix µs).
        received_us: u64,
        /// Flagged as a redelivery by the client.
        redelivered: bool,
    },
    /// A gap notice: ticks `from..=to` of `pubend` may be missing.
    Gap {
        /// The pubend.
        pubend: String,
        /// First tick of the gap.
        from: u64,
        /// Last tick of the gap.
        to: u64,
    },
}

impl Line {
    /// Reads a `sub --json` line; `None` for a line the checker cannot use. The NATS peer
    /// harness's lines (one stream, no `pubend`, `redelivered` a count) read as well.
    pub fn parse(line: &Value) -> Option<Line> {
        if line["gap"].as_bool() == Some(true) {
            return Some(Line::Gap {
                pubend: line["pubend"].as_str()?.to_string(),
                from: line["from"].as_u64()?,
                to: line["to"].as_u64()?,
            });
        }
        let props = &line["properties"];
        Some(Line::Delivery {
            id: (props["publisher"].as_str()?.to_string(), props["seq"].as_u64()?),
            pubend: line["pubend"].as_str().unwrap_or_default().to_string(),
            tick: line["tick"].as_u64()?,
            received_us: line["received_us"].as_u64().unwrap_or(0),
            redelivered: line["redelivered"].as_bool().unwrap_or(line["redelivered"].as_u64().is_some_and(|n| n > 0)),
        })
    }
}

/// What a subscriber asked for.
#[derive(Debug, Clone)]
pub struct Subscriber {
    /// Its name in the report.
    pub name: String,
    /// Its topic pattern.
    pub pattern: Pattern,
    /// Its selector, if any.
    pub selector: Option<Selector>,
    /// Durable (expects everything since its creation) or plain guaranteed.
    pub durable: bool,
    /// Reads through its cell's relay (a durable subscription at a broker with `store =
    /// "cell"`): its deliveries carry the relay pubend's ticks, not those acknowledged to the
    /// publishers, so only their order is checked, not their value.
    pub relayed: bool,
}

impl Subscriber {
    /// Whether an acknowledged publish is one it subscribed to.
    pub fn wants(&self, ack: &Ack) -> bool {
        self.pattern.matches(&ack.topic) && self.selector.as_ref().is_none_or(|s| s.matches(&ack.properties[..]))
    }
}

/// One subscriber's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Acknowledged publishes it should have received.
    pub expected: usize,
    /// Delivery lines (repeats included).
    pub delivered: usize,
    /// Expected, not delivered, and no gap notice covers it.
    pub lost_silent: usize,
    /// Expected, not delivered, inside a gap notice.
    pub lost_in_gap: usize,
    /// Repeated `(publisher, seq)` lines (each repeat counted).
    pub duplicated: usize,
    /// Of the repeats and others, lines flagged `redelivered`.
    pub redelivered: usize,
    /// Lines whose seq or tick went backward.
    pub reordered: usize,
    /// Delivered at another tick than it was acknowledged with.
    pub wrong_tick: usize,
    /// Delivered but never acknowledged (allowed).
    pub unacked: usize,
    /// Gap notices.
    pub gaps: usize,
    /// A few of the silently lost, `publisher:seq@pubend/tick`, for the report.
    pub lost_examples: Vec<String>,
}

impl Verdict {
    /// Broke the guarantee: anything lost silently, repeated, reordered or at the wrong tick,
    /// or (a durable subscription survives its broker's crash) anything lost at all.
    pub fn failed(&self, durable: bool) -> bool {
        self.lost_silent + self.duplicated + self.reordered + self.wrong_tick > 0 || (durable && self.lost_in_gap > 0)
    }

    /// The counts in one line.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "expected {}, delivered {}: lost silently {}, lost in a gap {}, duplicated {} ({} flagged redelivered), \
             reordered {}, wrong tick {}, unacknowledged {}, gap notices {}",
            self.expected,
            self.delivered,
            self.lost_silent,
            self.lost_in_gap,
            self.duplicated,
            self.redelivered,
            self.reordered,
            self.wrong_tick,
            self.unacked,
            self.gaps
        );
        if !self.lost_examples.is_empty() {
            text.push_str(&format!("; lost e.g. {}", self.lost_examples.join(", ")));
        }
        text
    }
}

/// How many silently lost publishes a verdict names.
const EXAMPLES: usize = 5;

/// Checks one subscriber's lines against every acknowledged publish.
pub fn check(acks: &[Ack], sub: &Subscriber, lines: &[Line]) -> Verdict {
    let mut v = Verdict::default();
    let acked: BTreeMap<(&str, u64), &Ack> = acks.iter().map(|a| ((a.publisher.as_str(), a.seq), a)).collect();
    let mut seen: BTreeSet<(String, u64)> = BTreeSet::new();
    let mut first_tick: BTreeMap<&str, u64> = BTreeMap::new();
    let mut last_seq: BTreeMap<&str, u64> = BTreeMap::new();
    let mut last_tick: BTreeMap<&str, u64> = BTreeMap::new();
    let mut gaps: Vec<(&str, u64, u64)> = Vec::new();
    for line in lines {
        match line {
            Line::Gap { pubend, from, to } => {
                v.gaps += 1;
                gaps.push((pubend, *from, *to));
            }
            Line::Delivery { id, pubend, tick, redelivered, .. } => {
                v.delivered += 1;
                v.redelivered += usize::from(*redelivered);
                first_tick.entry(pubend).or_insert(*tick);
                if !seen.insert(id.clone()) {
                    v.duplicated += 1;
                    continue;
                }
                match acked.get(&(id.0.as_str(), id.1)) {
                    Some(a) if a.tick != *tick && !sub.relayed => v.wrong_tick += 1,
                    Some(_) => {}
                    None => v.unacked += 1,
                }
                let seq_back = last_seq.insert(&id.0, id.1).is_some_and(|s| s > id.1);
                let tick_back = last_tick.insert(pubend, *tick).is_some_and(|t| t > *tick);
                v.reordered += usize::from(seq_back || tick_back);
            }
        }
    }
    for a in acks.iter().filter(|a| sub.wants(a)) {
        let from = if sub.durable { 0 } else { first_tick.get(a.pubend.as_str()).copied().unwrap_or(0) };
        if a.tick < from {
            continue;
        }
        v.expected += 1;
        if seen.contains(&(a.publisher.clone(), a.seq)) {
            continue;
        }
        if gaps.iter().any(|(p, lo, hi)| *p == a.pubend && (*lo..=*hi).contains(&a.tick)) {
            v.lost_in_gap += 1;
        } else {
            v.lost_silent += 1;
            if v.lost_examples.len() < EXAMPLES {
                v.lost_examples.push(format!("{}:{}@{}/{}", a.publisher, a.seq, a.pubend, a.tick));
            }
        }
    }
    v
}

/// The JSON lines of a file's text (a line cut short by a kill is skipped).
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks(text: &str) -> Vec<Ack> {
        json_lines(text).iter().filter_map(Ack::parse).collect()
    }

    fn lines(text: &str) -> Vec<Line> {
        json_lines(text).iter().filter_map(Line::parse).collect()
    }

    fn sub(selector: Option<&str>, durable: bool) -> Subscriber {
        Subscriber {
            name: "s".into(),
            pattern: Pattern::parse("nem.>").unwrap(),
            selector: selector.map(|s| Selector::parse(s).unwrap()),
            durable,
            relayed: false,
        }
    }

    /// Five acknowledged publishes of publisher `a` on pubend `P`, ticks 10..=50, `shade` 1 or 2.
    const ACKS: &str = r#"{"pubend":"P","tick":10,"seq":1,"publisher":"a","topic":"nem.t","properties":{"seq":1,"publisher":"a","shade":1}}
{"pubend":"P","tick":20,"seq":2,"publisher":"a","topic":"nem.t","properties":{"seq":2,"publisher":"a","shade":2}}
{"pubend":"P","tick":30,"seq":3,"publisher":"a","topic":"nem.t","properties":{"seq":3,"publisher":"a","shade":1}}
{"pubend":"P","tick":40,"seq":4,"publisher":"a","topic":"nem.t","properties":{"seq":4,"publisher":"a","shade":2}}
{"pubend":"P","tick":50,"seq":5,"publisher":"a","topic":"other","properties":{"seq":5,"publisher":"a","shade":1}}"#;

    fn got(seq: u64, tick: u64, extra: &str) -> String {
        format!(
            r#"{{"topic":"nem.t","properties":{{"seq":{seq},"publisher":"a"}},"pubend":"P","tick":{tick},"received_us":1,"missed":0{extra}}}"#
        )
    }

    #[test]
    fn everything_once_in_order_passes() {
        let text = [got(1, 10, ""), got(2, 20, ""), got(3, 30, ""), got(4, 40, "")].join("\n");
        let v = check(&acks(ACKS), &sub(None, true), &lines(&text));
        assert_eq!((v.expected, v.delivered), (4, 4), "seq 5 is on another topic: {v:?}");
        assert!(!v.failed(true), "{v:?}");
    }

    #[test]
    fn a_relayed_subscriber_is_checked_on_order_not_on_the_publishers_ticks() {
        // Delivered from the relay pubend R at its own ticks 1..=4.
        let text = [1, 2, 3, 4].map(|n| got(n, n, "").replace(r#""pubend":"P""#, r#""pubend":"R""#)).join("\n");
        let relayed = Subscriber { relayed: true, ..sub(None, true) };
        let v = check(&acks(ACKS), &relayed, &lines(&text));
        assert_eq!((v.expected, v.wrong_tick, v.reordered), (4, 0, 0));
        assert!(!v.failed(true), "{v:?}");
        assert_eq!(check(&acks(ACKS), &sub(None, true), &lines(&text)).wrong_tick, 4, "read directly, the ticks count");
        let back = [1, 3, 2, 4].map(|n| got(n, n, "").replace(r#""pubend":"P""#, r#""pubend":"R""#)).join("\n");
        assert!(check(&acks(ACKS), &relayed, &lines(&back)).reordered > 0);
    }

    #[test]
    fn a_lost_a_duplicated_and_a_reordered_message_are_each_reported() {
        // seq 2 lost, seq 4 before seq 3, seq 1 twice (once flagged a redelivery).
        let text = [got(1, 10, ""), got(4, 40, ""), got(3, 30, ""), got(1, 10, r#","redelivered":true"#)].join("\n");
        let v = check(&acks(ACKS), &sub(None, true), &lines(&text));
        assert_eq!((v.lost_silent, v.lost_in_gap, v.duplicated, v.redelivered, v.reordered), (1, 0, 1, 1, 1));
        assert_eq!(v.lost_examples, ["a:2@P/20"]);
        assert!(v.failed(false));
    }

    #[test]
    fn loss_inside_a_gap_notice_is_told_apart_and_fails_only_a_durable_subscriber() {
        let gap = r#"{"gap":true,"pubend":"P","from":15,"to":25,"subscription":1}"#;
        let text = [got(1, 10, ""), gap.to_string(), got(3, 30, ""), got(4, 40, "")].join("\n");
        let v = check(&acks(ACKS), &sub(None, false), &lines(&text));
        assert_eq!((v.lost_silent, v.lost_in_gap, v.gaps), (0, 1, 1));
        assert!(!v.failed(false) && v.failed(true));
    }

    #[test]
    fn the_selector_decides_what_is_expected_and_a_plain_subscriber_starts_at_its_first_tick() {
        // shade = 2: seqs 2 and 4. A plain subscriber whose first line is tick 40 expects seq 4 only.
        let v = check(&acks(ACKS), &sub(Some("shade = 2"), false), &lines(&got(4, 40, "")));
        assert_eq!((v.expected, v.lost_silent), (1, 0));
        let v = check(&acks(ACKS), &sub(Some("shade = 2"), true), &lines(&got(4, 40, "")));
        assert_eq!((v.expected, v.lost_silent), (2, 1), "durable: from its creation");
        let v = check(&acks(ACKS), &sub(Some("shade = 2"), false), &[]);
        assert_eq!(v.lost_silent, 2, "nothing received of a pubend: everything of it is expected");
    }

    #[test]
    fn an_unacknowledged_delivery_is_counted_not_failed() {
        let text = [got(1, 10, ""), got(2, 20, ""), got(3, 30, ""), got(4, 40, ""), got(9, 90, "")].join("\n");
        let v = check(&acks(ACKS), &sub(None, true), &lines(&text));
        assert_eq!(v.unacked, 1);
        assert!(!v.failed(true), "{v:?}");
    }
}
