//! The delivery core's [`Matcher`] over this broker's local guaranteed subscriptions: the
//! production matching index (`tidings-matching`), keyed by subend, so a message costs one index
//! walk however many subends do not match it. Downstream cells are judged by routing's
//! summaries ([`Edges`]).

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;
use tidings_delivery::{CellId, Matcher, PubendId, SubendId, TreeTag, Verdict};
use tidings_matching::{Pattern, Selector, SubscriptionId, SubscriptionIndex};
use tidings_wire::Message;

use super::edges::Edges;

/// One subend's filter, kept beside the index to test a single subend that catches up alone.
struct Filter {
    index_id: SubscriptionId,
    pattern: Pattern,
    selector: Option<Selector>,
}

/// Local guaranteed subscriptions. The index caches per topic and so needs `&mut` to match; the
/// core asks through `&self`, and the engine (with its matcher) lives in one task only, so a
/// `RefCell` is enough.
#[derive(Default)]
pub(crate) struct LocalMatcher {
    index: RefCell<SubscriptionIndex<SubendId>>,
    filters: BTreeMap<SubendId, Filter>,
    /// Verdicts for downstream cells; `None` (a broker without a network) judges none.
    edges: Option<Edges>,
}

impl LocalMatcher {
    /// A matcher whose downstream edges `edges` judges.
    pub(crate) fn with_edges(edges: Edges) -> LocalMatcher {
        LocalMatcher { edges: Some(edges), ..LocalMatcher::default() }
    }

    /// Adds a subend's filter.
    pub(crate) fn insert(&mut self, subend: SubendId, pattern: Pattern, selector: Option<Selector>) {
        let index_id = self.index.get_mut().insert(pattern.clone(), selector.clone(), subend);
        self.filters.insert(subend, Filter { index_id, pattern, selector });
    }

    /// Removes a subend's filter.
    pub(crate) fn remove(&mut self, subend: SubendId) {
        if let Some(filter) = self.filters.remove(&subend) {
            self.index.get_mut().remove(filter.index_id);
        }
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

    fn subends(&self, _: PubendId, payload: &Bytes, out: &mut Vec<SubendId>) {
        let Ok(message) = Message::decode(payload.clone()) else { return };
        self.index.borrow_mut().matches(message.topic(), &message.property_view(), out);
        out.sort_unstable();
        out.dedup();
    }

    fn subend(&self, _: PubendId, subend: SubendId, payload: &Bytes) -> bool {
        let (Some(filter), Ok(message)) = (self.filters.get(&subend), Message::decode(payload.clone())) else {
            return false;
        };
        filter.pattern.matches(message.topic())
            && filter.selector.as_ref().is_none_or(|s| s.matches(&message.property_view()))
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
}
