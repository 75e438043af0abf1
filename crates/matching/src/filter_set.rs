//! [`FilterSet`]: a set of filters (pattern, optional selector) that answers one question
//! through `&self`: does any of them accept this message? The route core asks it per message
//! and per link summary, on a shared router, so unlike [`crate::SubscriptionIndex`] it has no
//! result cache and no per-message scratch to mutate.
//!
//! It walks the same topic trie, stopping at the first group that accepts: a group with a
//! filter without selector accepts outright, and only the selectors of groups whose pattern
//! matches the topic are evaluated, so the cost follows the patterns that could match, not the
//! number of filters held.

use tidings_wire::PropertyLookup;

use crate::selector::Selector;
use crate::topic::Pattern;
use crate::trie::{GroupId, TopicTrie};

/// Every filter of one pattern.
///
/// Invariant: a live group holds at least one filter; the last removal frees it.
#[derive(Debug, Clone)]
struct Group {
    pattern: Pattern,
    /// Filters without selector (each accepts every message on a matching topic).
    plain: u32,
    /// Selectors of the filters with one, in insertion order.
    selectors: Vec<Selector>,
}

/// A set of filters asked whether any accepts a message; see the module doc.
#[derive(Debug, Clone, Default)]
pub struct FilterSet {
    trie: TopicTrie,
    /// Slab of groups; `None` slots are listed in `free`.
    groups: Vec<Option<Group>>,
    free: Vec<GroupId>,
    len: usize,
}

impl FilterSet {
    /// An empty set.
    pub fn new() -> FilterSet {
        FilterSet::default()
    }

    /// Adds a filter (a filter added twice is held twice). Costs a trie walk of the pattern.
    pub fn insert(&mut self, pattern: &Pattern, selector: Option<&Selector>) {
        let id = match self.trie.get(pattern) {
            Some(id) => id,
            None => {
                let id = self.free.pop().unwrap_or_else(|| {
                    self.groups.push(None);
                    GroupId(self.groups.len() as u32 - 1)
                });
                self.trie.insert(pattern, id);
                self.groups[id.0 as usize] = Some(Group { pattern: pattern.clone(), plain: 0, selectors: Vec::new() });
                id
            }
        };
        let Some(Some(group)) = self.groups.get_mut(id.0 as usize) else { return };
        match selector {
            None => group.plain += 1,
            Some(selector) => group.selectors.push(selector.clone()),
        }
        self.len += 1;
    }

    /// Removes one occurrence of a filter; `false` if the set does not hold it. Costs a trie walk
    /// and, with a selector, a scan of the selectors on the same pattern.
    pub fn remove(&mut self, pattern: &Pattern, selector: Option<&Selector>) -> bool {
        let Some(id) = self.trie.get(pattern) else { return false };
        let Some(Some(group)) = self.groups.get_mut(id.0 as usize) else { return false };
        match selector {
            None if group.plain > 0 => group.plain -= 1,
            None => return false,
            Some(selector) => match group.selectors.iter().position(|held| held == selector) {
                Some(position) => {
                    group.selectors.swap_remove(position);
                }
                None => return false,
            },
        }
        self.len -= 1;
        if group.plain == 0 && group.selectors.is_empty() {
            self.trie.remove(&group.pattern);
            self.groups[id.0 as usize] = None;
            self.free.push(id);
        }
        true
    }

    /// Whether some filter accepts a message on `topic` (a valid topic) with the properties
    /// `properties` returns (a list, or a view of an encoded message's); it is called only if a
    /// selector has to be evaluated, so a caller can decode properties lazily.
    pub fn any_match<'p, L: PropertyLookup + ?Sized + 'p>(&self, topic: &str, properties: impl Fn() -> &'p L) -> bool {
        self.trie.any(topic, &mut |id| {
            let Some(Some(group)) = self.groups.get(id.0 as usize) else { return false };
            group.plain > 0 || group.selectors.iter().any(|selector| selector.matches(properties()))
        })
    }

    /// Number of filters held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no filter is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use tidings_wire::Property;

    use super::*;
    use crate::covering::Filter;

    fn filter(pattern: &str, selector: Option<&str>) -> Filter {
        Filter { pattern: Pattern::parse(pattern).unwrap(), selector: selector.map(|s| Selector::parse(s).unwrap()) }
    }

    fn naive(filters: &[Filter], topic: &str, properties: &[Property]) -> bool {
        filters.iter().any(|f| f.pattern.matches(topic) && f.selector.as_ref().is_none_or(|s| s.matches(properties)))
    }

    #[test]
    fn any_match_agrees_with_trying_every_filter() {
        let filters = [
            filter("a.b", None),
            filter("a.*", Some("x > 1")),
            filter("a.>", Some("y = 'k'")),
            filter("*.c", None),
            filter("a.b", Some("x = 5")),
            filter(">", Some("z")),
        ];
        let messages: [(&str, Vec<Property>); 6] = [
            ("a.b", vec![]),
            ("a.c", vec![]),
            ("a.d", vec![Property::new("x", 2i64)]),
            ("a.d.e", vec![Property::new("y", "k")]),
            ("q.r", vec![Property::new("z", true)]),
            ("q.r", vec![Property::new("z", false)]),
        ];
        let mut set = FilterSet::new();
        for (count, added) in filters.iter().enumerate() {
            set.insert(&added.pattern, added.selector.as_ref());
            for (topic, properties) in &messages {
                let expected = naive(&filters[..=count], topic, properties);
                assert_eq!(set.any_match(topic, || properties), expected, "{topic} with {count}");
            }
        }
        for (count, removed) in filters.iter().enumerate() {
            assert!(set.remove(&removed.pattern, removed.selector.as_ref()));
            for (topic, properties) in &messages {
                let expected = naive(&filters[count + 1..], topic, properties);
                assert_eq!(set.any_match(topic, || properties), expected, "{topic} without {count}");
            }
        }
        assert!(set.is_empty());
        assert!(!set.remove(&filters[0].pattern, None), "nothing left to remove");
    }

    #[test]
    fn properties_are_asked_for_only_when_a_selector_is_evaluated() {
        let mut set = FilterSet::new();
        let plain = filter("a.b", None);
        let with_selector = filter("c.*", Some("x = 1"));
        set.insert(&plain.pattern, None);
        set.insert(&with_selector.pattern, with_selector.selector.as_ref());
        let asked = std::cell::Cell::new(0);
        let properties = [Property::new("x", 1i64)];
        let probe = || {
            asked.set(asked.get() + 1);
            &properties[..]
        };
        assert!(set.any_match("a.b", probe));
        assert!(!set.any_match("z", probe));
        assert_eq!(asked.get(), 0);
        assert!(set.any_match("c.d", probe));
        assert_eq!(asked.get(), 1);
    }
}
