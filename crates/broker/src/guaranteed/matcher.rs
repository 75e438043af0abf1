//! The delivery core's [`Matcher`] over this broker's local guaranteed subscriptions: the index
//! the simulator runs too ([`LocalSubscriptions`], the production matching code keyed by
//! subend), over messages decoded from the payload. Downstream cells are judged by routing's
//! summaries ([`Edges`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use tidings_delivery::{CellId, Matcher, PubendId, SubendId, TreeTag, Verdict};
use tidings_matching::{Pattern, Selector};
use tidings_node::local::LocalSubscriptions;
use tidings_wire::Message;

use super::edges::Edges;
use super::relay::RELAY_TOPIC;

/// Local guaranteed subscriptions and the downstream edges' verdicts.
#[derive(Default)]
pub(crate) struct LocalMatcher {
    local: LocalSubscriptions,
    /// Verdicts for downstream cells; `None` (a broker without a network) judges none.
    edges: Option<Edges>,
    /// Relay pubend to its reader (`super::relay`): the one subend a relayed topic matches.
    readers: BTreeMap<PubendId, SubendId>,
}

impl LocalMatcher {
    /// A matcher whose downstream edges `edges` judges.
    pub(crate) fn with_edges(edges: Edges) -> LocalMatcher {
        LocalMatcher { edges: Some(edges), ..LocalMatcher::default() }
    }

    /// Adds a subend's filter.
    pub(crate) fn insert(&mut self, subend: SubendId, pattern: Pattern, selector: Option<Selector>) {
        self.local.insert(subend, pattern, selector);
    }

    /// Adds a relay's reader: every relayed message of `pubend` matches it, nothing else does
    /// (its relay applied its filter already).
    pub(crate) fn insert_reader(&mut self, subend: SubendId, pubend: PubendId) {
        self.local.remove(subend);
        self.readers.insert(pubend, subend);
    }

    /// Removes a subend's filter.
    pub(crate) fn remove(&mut self, subend: SubendId) {
        self.local.remove(subend);
        self.readers.retain(|_, reader| *reader != subend);
    }

    /// The subend a message under the relays' reserved topic matches on `pubend`: its reader's
    /// on its relay pubend, none anywhere else (`None`: not a relayed topic).
    fn relayed(&self, pubend: PubendId, message: &Message) -> Option<Option<SubendId>> {
        message.topic().starts_with(RELAY_TOPIC).then(|| self.readers.get(&pubend).copied())
    }
}

impl Matcher for LocalMatcher {
    /// Routing's summaries judge (see [`Edges`]); without them every downstream is `Unsure`.
    fn child(&self, pubend: PubendId, cell: CellId, payload: &Bytes) -> Verdict {
        match &self.edges {
            Some(edges) => edges.verdict(pubend, cell, payload),
            None => Verdict::Unsure,
        }
    }

    fn subends(&self, pubend: PubendId, payload: &Bytes, out: &mut Vec<SubendId>) {
        let Ok(message) = Message::decode(payload.clone()) else { return };
        match self.relayed(pubend, &message) {
            Some(reader) => out.extend(reader),
            None => self.local.matching(&message, out),
        }
    }

    fn subend(&self, pubend: PubendId, subend: SubendId, payload: &Bytes) -> bool {
        Message::decode(payload.clone()).is_ok_and(|message| match self.relayed(pubend, &message) {
            Some(reader) => reader == Some(subend),
            None => self.local.matches(subend, &message),
        })
    }

    fn epoch(&self) -> u64 {
        self.edges.as_ref().map_or(0, Edges::epoch)
    }

    fn tree(&self, pubend: PubendId) -> TreeTag {
        self.edges.as_ref().map_or(TreeTag(0), |edges| edges.tree(pubend))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidings_wire::{Property, Value};

    fn payload(topic: &str, n: i64) -> Bytes {
        let props = [Property { key: "n".into(), value: Value::Int(n) }];
        Message::new(topic, &props, Bytes::new(), 0).unwrap().as_bytes().clone()
    }

    #[test]
    fn subends_are_found_by_pattern_and_selector_and_tested_one_by_one_alike() {
        let mut m = LocalMatcher::default();
        m.insert(SubendId(1), Pattern::parse("a.>").unwrap(), None);
        m.insert(SubendId(2), Pattern::parse("a.*").unwrap(), Some(Selector::parse("n > 5").unwrap()));
        let p = PubendId(1);
        let mut out = Vec::new();
        m.subends(p, &payload("a.b", 9), &mut out);
        assert_eq!(out, vec![SubendId(1), SubendId(2)]);
        out.clear();
        m.subends(p, &payload("a.b", 1), &mut out);
        assert_eq!(out, vec![SubendId(1)]);
        assert!(!m.subend(p, SubendId(2), &payload("a.b", 1)));
        assert!(m.subend(p, SubendId(2), &payload("a.b", 6)));
        m.remove(SubendId(1));
        out.clear();
        m.subends(p, &payload("a.b.c", 9), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_relayed_topic_matches_only_its_reader_and_only_on_its_relay_pubend() {
        let mut m = LocalMatcher::default();
        m.insert(SubendId(1), Pattern::parse(">").unwrap(), None);
        m.insert_reader(SubendId(2), PubendId(9));
        let mut out = Vec::new();
        m.subends(PubendId(9), &payload("$relay.a.b", 1), &mut out);
        assert_eq!(out, vec![SubendId(2)], "'>' does not take a relayed topic");
        assert!(!m.subend(PubendId(9), SubendId(1), &payload("$relay.a.b", 1)));
        assert!(m.subend(PubendId(9), SubendId(2), &payload("$relay.a.b", 1)));
        out.clear();
        m.subends(PubendId(8), &payload("$relay.a.b", 1), &mut out);
        assert!(out.is_empty(), "a relayed topic on another pubend matches nothing");
        m.subends(PubendId(9), &payload("a.b", 1), &mut out);
        assert_eq!(out, vec![SubendId(1)], "the reader takes only relayed topics");
        m.remove(SubendId(2));
        out.clear();
        m.subends(PubendId(9), &payload("$relay.a.b", 1), &mut out);
        assert!(out.is_empty());
    }
}
