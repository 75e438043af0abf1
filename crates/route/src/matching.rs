//! The real subscription filter for routing (feature `matching`): a topic pattern and an
//! optional selector from `tidings-matching`, plugged into the route core's [`Filter`] trait.
//! It lives below the broker's shell so that every user of routing (the broker, the
//! simulator, benches) routes with the production matching code rather than a copy.
//!
//! Summaries travel between brokers, so a filter crosses the wire as text (the pattern and the
//! selector's canonical form) and is parsed again on receipt; a peer that sends a filter that
//! does not parse fails to decode, and its link is closed with that reason.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::filter::{Filter, FilterIndex};
use serde::{Deserialize, Serialize};
use tidings_matching::{FilterSet, Pattern, PatternLevel, Selector};
use tidings_wire::{Message, PropertiesRef};

/// A subscription's interest as routing sees it.
///
/// Equality and order are those of the texts (pattern, canonical selector), so equal filters
/// compare equal on every broker and summaries sort the same everywhere.
///
/// Shared, not copied: routing keeps a filter in several sets at once (what a peer told us,
/// child summaries and their indexes, what we advertise and what we sent, each with its
/// deltas), and a copy of the parsed pattern, selector and texts per set cost about ten
/// allocations per filter per summary message; a 1,024-filter message held the router 70-190
/// ms in a debug build (issue 46). A clone is now a reference count.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "FilterText", into = "FilterText")]
pub struct RouteFilter {
    parts: Arc<Parts>,
}

/// What a [`RouteFilter`] shares between its clones.
#[derive(Debug)]
struct Parts {
    filter: tidings_matching::Filter,
    text: FilterText,
    /// The pattern's literal levels before its first wildcard: what covering needs in common.
    key: String,
}

impl std::fmt::Debug for RouteFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Parts { filter, text, key } = &*self.parts;
        f.debug_struct("RouteFilter").field("filter", filter).field("text", text).field("key", key).finish()
    }
}

/// The wire and `/state` form of a [`RouteFilter`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterText {
    /// The topic pattern.
    pub pattern: String,
    /// The selector's canonical text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The queue group whose members stand behind the filter, if any: a broker advertises one
    /// entry per (group, filter), however many members share it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl RouteFilter {
    /// A filter from a parsed pattern and selector.
    pub fn new(pattern: Pattern, selector: Option<Selector>) -> RouteFilter {
        RouteFilter::grouped(pattern, selector, None)
    }

    /// A filter a queue group's members stand behind (`None`: a plain one).
    pub fn grouped(pattern: Pattern, selector: Option<Selector>, group: Option<String>) -> RouteFilter {
        let text =
            FilterText { pattern: pattern.to_string(), selector: selector.as_ref().map(ToString::to_string), group };
        let literals: Vec<&str> = pattern
            .levels()
            .map_while(|level| match level {
                PatternLevel::Literal(literal) => Some(literal),
                PatternLevel::OneLevel | PatternLevel::RestLevels => None,
            })
            .collect();
        let key = literals.join(".");
        RouteFilter { parts: Arc::new(Parts { filter: tidings_matching::Filter { pattern, selector }, text, key }) }
    }

    /// The filter's texts.
    pub fn text(&self) -> &FilterText {
        &self.parts.text
    }

    /// The parsed pattern and selector: what a broker's local index of its own subscriptions
    /// (`tidings_node::local`) is built from.
    pub fn filter(&self) -> &tidings_matching::Filter {
        &self.parts.filter
    }
}

impl TryFrom<FilterText> for RouteFilter {
    type Error = String;

    fn try_from(text: FilterText) -> Result<RouteFilter, String> {
        let pattern = Pattern::parse(&text.pattern).map_err(|e| format!("pattern {:?}: {e}", text.pattern))?;
        let selector = match &text.selector {
            Some(s) => Some(Selector::parse(s).map_err(|e| format!("selector {s:?}: {e}"))?),
            None => None,
        };
        if let Some(group) = &text.group {
            tidings_wire::check_group_name(group)?;
        }
        Ok(RouteFilter::grouped(pattern, selector, text.group))
    }
}

impl From<RouteFilter> for FilterText {
    fn from(filter: RouteFilter) -> FilterText {
        filter.parts.text.clone()
    }
}

impl PartialEq for RouteFilter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.parts, &other.parts) || self.parts.text == other.parts.text
    }
}

impl Eq for RouteFilter {}

impl PartialOrd for RouteFilter {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RouteFilter {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.parts, &other.parts) {
            return Ordering::Equal;
        }
        self.parts.text.cmp(&other.parts.text)
    }
}

/// A message as the route core tests it: the topic, and the properties read in place from the
/// message buffer (no decoding, no allocation) by each selector that asks for them.
/// It holds a clone of the message (a reference count, not a copy of the bytes).
pub struct Probe {
    message: Message,
    /// A retained publish (`$retain`): every summary wants it, so it reaches every broker along
    /// the routing trees, each of which keeps every retained value for its new subscriptions.
    everywhere: bool,
}

impl Probe {
    /// Wraps a message for one routing decision.
    pub fn new(message: &Message) -> Probe {
        Probe { message: message.clone(), everywhere: message.is_retain() }
    }

    /// The message itself: a simulated broker matches its local subscriptions against it as
    /// the broker does against the message it decoded.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The message's topic.
    pub fn topic(&self) -> &str {
        self.message.topic()
    }

    /// The message's properties, as a view of its buffer.
    fn properties(&self) -> PropertiesRef<'_> {
        self.message.property_view()
    }
}

/// The route core's index of a link summary: the topic trie of `tidings-matching`, so a
/// publish costs the summary's filters whose pattern matches its topic, not the whole summary.
/// A retained publish is wanted by every summary, an empty one included (see [`Probe`]).
/// Queue groups' filters are kept apart, one trie per group: they ask for one copy per
/// message network-wide, which [`FilterIndex::any_match`] must not promise.
#[derive(Clone, Debug, Default)]
pub struct RouteIndex {
    set: FilterSet,
    groups: BTreeMap<String, FilterSet>,
}

impl RouteIndex {
    /// The trie a filter belongs in, made if `make`.
    fn set_of(&mut self, filter: &RouteFilter, make: bool) -> Option<&mut FilterSet> {
        match &filter.parts.text.group {
            None => Some(&mut self.set),
            Some(group) if make => Some(self.groups.entry(group.clone()).or_default()),
            Some(group) => self.groups.get_mut(group),
        }
    }
}

impl FilterIndex<RouteFilter> for RouteIndex {
    fn insert(&mut self, filter: &RouteFilter) {
        if let Some(set) = self.set_of(filter, true) {
            set.insert(&filter.parts.filter.pattern, filter.parts.filter.selector.as_ref());
        }
    }

    fn remove(&mut self, filter: &RouteFilter) {
        if let Some(set) = self.set_of(filter, false) {
            set.remove(&filter.parts.filter.pattern, filter.parts.filter.selector.as_ref());
        }
        if let Some(group) = &filter.parts.text.group {
            if self.groups.get(group).is_some_and(FilterSet::is_empty) {
                self.groups.remove(group);
            }
        }
    }

    fn any_match(&self, probe: &Probe) -> bool {
        if probe.everywhere {
            return true;
        }
        let properties = probe.properties();
        self.set.any_match(probe.message.topic(), || &properties)
    }

    fn matching_groups(&self, probe: &Probe, out: &mut Vec<String>) {
        if self.groups.is_empty() {
            return;
        }
        let properties = probe.properties();
        for (group, set) in &self.groups {
            if !out.contains(group) && set.any_match(probe.message.topic(), || &properties) {
                out.push(group.clone());
            }
        }
    }
}

impl Filter for RouteFilter {
    type Message = Probe;
    type Index = RouteIndex;

    fn matches(&self, probe: &Probe) -> bool {
        if !self.parts.filter.pattern.matches(probe.message.topic()) {
            return false;
        }
        match &self.parts.filter.selector {
            None => true,
            Some(selector) => selector.matches(&probe.properties()),
        }
    }

    fn covers(&self, other: &Self) -> bool {
        // A group's entry stands for one copy to that group: it neither covers nor is covered
        // by a plain filter or another group's.
        self.parts.text.group == other.parts.text.group
            && tidings_matching::covers(&self.parts.filter, &other.parts.filter)
    }

    fn covering_key(&self) -> &str {
        &self.parts.key
    }

    fn group(&self) -> Option<&str> {
        self.parts.text.group.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use tidings_wire::Property;

    use super::*;

    fn filter(pattern: &str, selector: Option<&str>) -> RouteFilter {
        RouteFilter::new(Pattern::parse(pattern).unwrap(), selector.map(|s| Selector::parse(s).unwrap()))
    }

    #[test]
    fn the_covering_key_is_the_literal_prefix_of_the_pattern() {
        assert_eq!(filter("a.b.>", None).covering_key(), "a.b");
        assert_eq!(filter("a.*.c", None).covering_key(), "a");
        assert_eq!(filter(">", None).covering_key(), "");
        assert_eq!(filter("a.b", Some("k = 1")).covering_key(), "a.b");
    }

    #[test]
    fn summaries_drop_covered_filters_across_key_groups() {
        let filters = [filter("a.b.c", None), filter("a.>", None), filter("a.b.>", Some("k > 1")), filter("b.c", None)];
        let kept = crate::filter::minimize(&filters);
        assert_eq!(kept, vec![filter("a.>", None), filter("b.c", None)]);
    }

    #[test]
    fn the_index_answers_as_trying_every_filter_of_the_summary() {
        let filters = [
            filter("a.b", None),
            filter("a.*", Some("x > 1")),
            filter("a.>", Some("y = 'k'")),
            filter("*.c", None),
            filter("q.r", Some("x = 5")),
        ];
        let messages = [
            ("a.b", vec![]),
            ("a.d", vec![Property::new("x", 2i64)]),
            ("a.d", vec![Property::new("x", 1i64)]),
            ("a.d.e", vec![Property::new("y", "k")]),
            ("z.c", vec![]),
            ("q.r", vec![Property::new("x", 5i64)]),
            ("q.s", vec![Property::new("x", 5i64)]),
        ];
        let mut index = RouteIndex::default();
        for count in 0..=filters.len() {
            if count > 0 {
                index.insert(&filters[count - 1]);
            }
            for (topic, properties) in &messages {
                let message = Message::new(topic, properties, bytes::Bytes::new(), 0).unwrap();
                let probe = Probe::new(&message);
                let expected = crate::filter::any_matches(&filters[..count], &probe);
                assert_eq!(index.any_match(&probe), expected, "{topic} {properties:?} over {count} filters");
            }
        }
        for removed in &filters {
            index.remove(removed);
        }
        let message = Message::new("a.b", &[], bytes::Bytes::new(), 0).unwrap();
        assert!(!index.any_match(&Probe::new(&message)));
    }

    #[test]
    fn a_retained_publish_is_wanted_by_every_summary() {
        let retained = [Property::new(tidings_wire::RETAIN, true)];
        let message = Message::new("a.b", &retained, bytes::Bytes::new(), 0).unwrap();
        let mut index = RouteIndex::default();
        assert!(index.any_match(&Probe::new(&message)), "an empty summary");
        index.insert(&filter("x.y", None));
        assert!(index.any_match(&Probe::new(&message)), "a summary that does not match its topic");
        let not_retained = [Property::new(tidings_wire::RETAIN, false)];
        let message = Message::new("a.b", &not_retained, bytes::Bytes::new(), 0).unwrap();
        assert!(!index.any_match(&Probe::new(&message)), "only when it asks to be retained");
    }
}
