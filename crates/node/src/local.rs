//! A broker's local guaranteed subscriptions as the delivery core's matcher asks about them:
//! which subends a message matches, and whether one subend that catches up alone matches it.
//! The broker's matcher and the simulator's both answer from this one index, with the
//! production matching code (`tidings-matching`), so the simulator judges the subends the
//! broker would pick, not a second reading of the filters.

use std::cell::RefCell;
use std::collections::BTreeMap;

use tidings_delivery::SubendId;
use tidings_matching::{Pattern, Selector, SubscriptionId, SubscriptionIndex};
use tidings_wire::Message;

/// One subend's filter, kept beside the index to test a single subend that catches up alone.
struct Filter {
    index_id: SubscriptionId,
    pattern: Pattern,
    selector: Option<Selector>,
}

/// The local subscriptions of one broker, keyed by subend. A message costs one index walk
/// however many subends do not match it. The index caches per topic and so needs `&mut` to
/// match; the core asks through `&self`, and an engine (with its matcher) lives on one thread
/// only, so a `RefCell` is enough.
#[derive(Default)]
pub struct LocalSubscriptions {
    index: RefCell<SubscriptionIndex<SubendId>>,
    filters: BTreeMap<SubendId, Filter>,
}

impl LocalSubscriptions {
    /// Adds a subend's filter (replacing one it had).
    pub fn insert(&mut self, subend: SubendId, pattern: Pattern, selector: Option<Selector>) {
        self.remove(subend);
        let index_id = self.index.get_mut().insert(pattern.clone(), selector.clone(), subend);
        self.filters.insert(subend, Filter { index_id, pattern, selector });
    }

    /// Removes a subend's filter.
    pub fn remove(&mut self, subend: SubendId) {
        if let Some(filter) = self.filters.remove(&subend) {
            self.index.get_mut().remove(filter.index_id);
        }
    }

    /// Appends the subends `message` matches to `out`, in order, each once.
    pub fn matching(&self, message: &Message, out: &mut Vec<SubendId>) {
        self.index.borrow_mut().matches(message.topic(), &message.property_view(), out);
        out.sort_unstable();
        out.dedup();
    }

    /// Whether `message` matches `subend` (false for a subend not here).
    pub fn matches(&self, subend: SubendId, message: &Message) -> bool {
        let Some(filter) = self.filters.get(&subend) else { return false };
        filter.pattern.matches(message.topic())
            && filter.selector.as_ref().is_none_or(|s| s.matches(&message.property_view()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tidings_wire::{Property, Value};

    fn message(topic: &str, n: i64) -> Message {
        let props = [Property { key: "n".into(), value: Value::Int(n) }];
        Message::new(topic, &props, Bytes::new(), 0).unwrap()
    }

    #[test]
    fn subends_are_found_by_pattern_and_selector_and_tested_one_by_one_alike() {
        let mut m = LocalSubscriptions::default();
        m.insert(SubendId(1), Pattern::parse("a.>").unwrap(), None);
        m.insert(SubendId(2), Pattern::parse("a.*").unwrap(), Some(Selector::parse("n > 5").unwrap()));
        let mut out = Vec::new();
        m.matching(&message("a.b", 9), &mut out);
        assert_eq!(out, vec![SubendId(1), SubendId(2)]);
        out.clear();
        m.matching(&message("a.b", 1), &mut out);
        assert_eq!(out, vec![SubendId(1)]);
        assert!(!m.matches(SubendId(2), &message("a.b", 1)));
        assert!(m.matches(SubendId(2), &message("a.b", 6)));
        m.remove(SubendId(1));
        out.clear();
        m.matching(&message("a.b.c", 9), &mut out);
        assert!(out.is_empty());
        m.insert(SubendId(2), Pattern::parse("b").unwrap(), None);
        m.matching(&message("a.b", 9), &mut out);
        assert!(out.is_empty(), "a filter inserted again replaces the old one");
    }
}
