//! The subscription index: every subscription of a broker, and the answer to "who wants this
//! message?".
//!
//! Layout: the [`TopicTrie`] maps each distinct pattern to a group; a group holds the
//! subscriptions to that pattern; the [`ResultCache`] maps a topic to the groups that match it.
//! A publish on a cached topic is a hash lookup and a copy of each matched group's subscribers.
//! Subscription ids are slots in a slab plus a generation, so a stale id never removes a later
//! subscription that reused the slot.

use tidings_wire::Property;

use crate::cache::ResultCache;
use crate::selector::Selector;
use crate::topic::Pattern;
use crate::trie::{GroupId, TopicTrie};

/// Topics remembered by [`SubscriptionIndex::new`]. nats-server keeps 1,024; a broker with many
/// active topics gains from more, and an entry costs about a topic's length plus a few words.
pub const DEFAULT_CACHE_CAPACITY: usize = 4096;

/// Names one subscription in an index, so that it can be removed. Opaque to callers apart from
/// being copyable, comparable and printable; never reused while the index lives (a generation in
/// the high 32 bits guards the reused slot in the low 32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubscriptionId(pub u64);

impl SubscriptionId {
    fn new(slot: u32, generation: u32) -> SubscriptionId {
        SubscriptionId(u64::from(generation) << 32 | u64::from(slot))
    }

    fn slot(self) -> usize {
        (self.0 & u64::from(u32::MAX)) as usize
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// Where a live subscription is kept.
#[derive(Debug, Clone, Copy)]
struct Location {
    group: GroupId,
    /// Position in the group's `plain` and `plain_ids` vectors.
    position: usize,
}

/// One slab slot for subscription ids.
#[derive(Debug, Default)]
struct Record {
    /// Bumped when the slot is freed, so the old id stops resolving.
    generation: u32,
    /// `None` while the slot is free.
    location: Option<Location>,
}

/// All subscriptions to one pattern.
///
/// Invariant: a group in the index holds at least one subscription; the last removal deletes it
/// from the trie and the cache.
#[derive(Debug)]
struct Group<S> {
    pattern: Pattern,
    /// Subscribers without a selector, contiguous so delivering them is one slice copy.
    plain: Vec<S>,
    /// `plain_ids[i]` is the subscription of `plain[i]`; needed to fix up a swap-removal.
    plain_ids: Vec<SubscriptionId>,
}

impl<S: Clone> Group<S> {
    fn deliver(&self, _properties: &[Property], out: &mut Vec<S>) {
        out.extend_from_slice(&self.plain);
    }
}

/// Every subscription of a broker, indexed for matching published messages.
///
/// `S` is whatever the broker wants back for a match (a session handle, a queue sender); it is
/// cloned once per matching subscription.
#[derive(Debug)]
pub struct SubscriptionIndex<S> {
    trie: TopicTrie,
    /// Slab of groups; `None` slots are listed in `free_groups`.
    groups: Vec<Option<Group<S>>>,
    free_groups: Vec<GroupId>,
    /// Slab of subscription ids; free slots are listed in `free_records`.
    records: Vec<Record>,
    free_records: Vec<u32>,
    cache: ResultCache,
    /// Reused buffer for the groups of an uncached topic.
    found: Vec<GroupId>,
    len: usize,
    with_selector: usize,
}

impl<S: Clone> Default for SubscriptionIndex<S> {
    fn default() -> Self {
        SubscriptionIndex::new()
    }
}

impl<S: Clone> SubscriptionIndex<S> {
    /// An empty index with a cache of [`DEFAULT_CACHE_CAPACITY`] topics.
    pub fn new() -> Self {
        SubscriptionIndex::with_cache_capacity(DEFAULT_CACHE_CAPACITY)
    }

    /// An empty index whose cache holds at most `entries` topics; 0 disables the cache (every
    /// publish walks the trie), which tests use to check that caching changes no answer.
    pub fn with_cache_capacity(entries: usize) -> Self {
        SubscriptionIndex {
            trie: TopicTrie::default(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            records: Vec::new(),
            free_records: Vec::new(),
            cache: ResultCache::new(entries),
            found: Vec::new(),
            len: 0,
            with_selector: 0,
        }
    }

    /// Adds a subscription and returns the id that removes it. Costs a trie walk of the pattern;
    /// only a pattern new to the index invalidates cached topics (those it matches).
    pub fn insert(&mut self, pattern: Pattern, selector: Option<Selector>, subscriber: S) -> SubscriptionId {
        if let Some(selector) = selector {
            selector.absurd();
        }
        let group_id = self.group_for(pattern);
        let id = self.allocate_id();
        let group = self.live_group(group_id);
        let position = group.plain.len();
        group.plain.push(subscriber);
        group.plain_ids.push(id);
        self.records[id.slot()].location = Some(Location { group: group_id, position });
        self.len += 1;
        id
    }

    /// Removes a subscription and hands back its subscriber; `None` if `id` is not (or no longer)
    /// in the index.
    pub fn remove(&mut self, id: SubscriptionId) -> Option<S> {
        let record = self.records.get_mut(id.slot())?;
        if record.generation != id.generation() {
            return None;
        }
        let location = record.location.take()?;
        record.generation = record.generation.wrapping_add(1);
        self.free_records.push(id.slot() as u32);
        self.len -= 1;

        let group = self.group_mut(location.group)?;
        let subscriber = group.plain.swap_remove(location.position);
        group.plain_ids.swap_remove(location.position);
        let moved = group.plain_ids.get(location.position).copied();
        let now_empty = group.plain.is_empty();
        if let Some(moved) = moved {
            if let Some(moved_location) = &mut self.records[moved.slot()].location {
                moved_location.position = location.position;
            }
        }
        if now_empty {
            self.delete_group(location.group);
        }
        Some(subscriber)
    }

    /// Appends every subscriber whose pattern matches `topic` and whose selector (if any) is TRUE
    /// for `properties`. One entry per matching subscription (no dedupe). `topic` is a valid
    /// topic.
    pub fn matches(&mut self, topic: &str, properties: &[Property], out: &mut Vec<S>) {
        if let Some(groups) = self.cache.get(topic) {
            for group in groups {
                if let Some(Some(group)) = self.groups.get(group.0 as usize) {
                    group.deliver(properties, out);
                }
            }
            return;
        }
        let mut found = std::mem::take(&mut self.found);
        found.clear();
        self.trie.collect(topic, &mut found);
        self.cache.insert(topic, &found);
        for group in &found {
            if let Some(Some(group)) = self.groups.get(group.0 as usize) {
                group.deliver(properties, out);
            }
        }
        self.found = found;
    }

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of topics the result cache currently remembers (a gauge for the broker's metrics).
    pub fn cached_topics(&self) -> usize {
        self.cache.len()
    }

    /// True when some subscription has a selector; when false, a broker can skip decoding a
    /// message's properties and pass an empty slice.
    pub fn has_selectors(&self) -> bool {
        self.with_selector > 0
    }

    /// The group for `pattern`, created (and the cache invalidated) if the pattern is new.
    fn group_for(&mut self, pattern: Pattern) -> GroupId {
        if let Some(group) = self.trie.get(&pattern) {
            return group;
        }
        let id = match self.free_groups.pop() {
            Some(id) => id,
            None => {
                self.groups.push(None);
                GroupId(self.groups.len() as u32 - 1)
            }
        };
        self.trie.insert(&pattern, id);
        self.cache.invalidate(&pattern);
        self.groups[id.0 as usize] = Some(Group { pattern, plain: Vec::new(), plain_ids: Vec::new() });
        id
    }

    /// Deletes an emptied group from the trie, the cache and the slab.
    fn delete_group(&mut self, id: GroupId) {
        let Some(group) = self.groups.get_mut(id.0 as usize).and_then(Option::take) else {
            return;
        };
        self.trie.remove(&group.pattern);
        self.cache.invalidate(&group.pattern);
        self.free_groups.push(id);
    }

    fn group_mut(&mut self, id: GroupId) -> Option<&mut Group<S>> {
        self.groups.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    /// The group `id`, which the caller knows is live (it just came from `group_for`).
    fn live_group(&mut self, id: GroupId) -> &mut Group<S> {
        match self.groups[id.0 as usize] {
            Some(ref mut group) => group,
            None => unreachable!("group_for returns live groups"),
        }
    }

    /// A fresh id, reusing a freed slot when there is one.
    fn allocate_id(&mut self) -> SubscriptionId {
        if let Some(slot) = self.free_records.pop() {
            return SubscriptionId::new(slot, self.records[slot as usize].generation);
        }
        self.records.push(Record::default());
        SubscriptionId::new(self.records.len() as u32 - 1, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every test runs against an index without a cache and one with a cache, as nats-server's
    /// sublist tests do: the cache must never change an answer.
    fn indexes() -> [SubscriptionIndex<u32>; 2] {
        [SubscriptionIndex::with_cache_capacity(0), SubscriptionIndex::new()]
    }

    fn pattern(text: &str) -> Pattern {
        Pattern::parse(text).unwrap()
    }

    fn matched(index: &mut SubscriptionIndex<u32>, topic: &str) -> Vec<u32> {
        let mut out = Vec::new();
        index.matches(topic, &[], &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn one_level_wildcard_does_not_reach_deeper_topics() {
        for mut index in indexes() {
            index.insert(pattern("a.*"), None, 1);
            assert_eq!(matched(&mut index, "a.b"), [1]);
            assert_eq!(matched(&mut index, "a.b.c"), [] as [u32; 0]);
            assert_eq!(matched(&mut index, "a"), [] as [u32; 0]);
        }
    }

    #[test]
    fn rest_wildcard_needs_at_least_one_more_level() {
        for mut index in indexes() {
            index.insert(pattern("a.>"), None, 1);
            assert_eq!(matched(&mut index, "a"), [] as [u32; 0]);
            assert_eq!(matched(&mut index, "a.b"), [1]);
            assert_eq!(matched(&mut index, "a.b.c"), [1]);
        }
    }

    #[test]
    fn a_lone_rest_wildcard_matches_every_topic() {
        for mut index in indexes() {
            index.insert(pattern(">"), None, 7);
            for topic in ["a", "a.b", "x.y.z.w"] {
                assert_eq!(matched(&mut index, topic), [7]);
            }
        }
    }

    #[test]
    fn every_matching_subscription_is_returned_once_even_for_one_subscriber() {
        for mut index in indexes() {
            index.insert(pattern("a.b"), None, 1);
            index.insert(pattern("a.b"), None, 1);
            index.insert(pattern("a.*"), None, 1);
            index.insert(pattern("*.b"), None, 2);
            index.insert(pattern("b.>"), None, 3);
            assert_eq!(matched(&mut index, "a.b"), [1, 1, 1, 2]);
            assert_eq!(index.len(), 5);
            assert!(!index.has_selectors());
        }
    }

    #[test]
    fn removal_returns_the_subscriber_once_and_stale_ids_do_nothing() {
        for mut index in indexes() {
            let first = index.insert(pattern("a.b"), None, 1);
            let second = index.insert(pattern("a.b"), None, 2);
            assert_eq!(matched(&mut index, "a.b"), [1, 2]);
            assert_eq!(index.remove(first), Some(1));
            assert_eq!(index.remove(first), None);
            assert_eq!(matched(&mut index, "a.b"), [2]);
            let third = index.insert(pattern("a.*"), None, 3);
            assert_ne!(third, first, "a reused slot gets a new generation");
            assert_eq!(index.remove(first), None);
            assert_eq!(matched(&mut index, "a.b"), [2, 3]);
            assert_eq!(index.remove(second), Some(2));
            assert_eq!(index.remove(third), Some(3));
            assert!(index.is_empty());
            assert_eq!(matched(&mut index, "a.b"), [] as [u32; 0]);
            assert_eq!(index.remove(SubscriptionId(u64::MAX)), None);
        }
    }

    #[test]
    fn new_and_vanished_patterns_are_seen_by_cached_topics() {
        for mut index in indexes() {
            index.insert(pattern("a.b"), None, 1);
            assert_eq!(matched(&mut index, "a.b"), [1]);
            assert_eq!(matched(&mut index, "a.c"), [] as [u32; 0]);
            let wide = index.insert(pattern("a.*"), None, 2);
            assert_eq!(matched(&mut index, "a.b"), [1, 2]);
            assert_eq!(matched(&mut index, "a.c"), [2]);
            index.remove(wide);
            assert_eq!(matched(&mut index, "a.b"), [1]);
            assert_eq!(matched(&mut index, "a.c"), [] as [u32; 0]);
        }
    }

    #[test]
    fn churn_on_a_live_pattern_keeps_cached_topics() {
        let mut index = SubscriptionIndex::new();
        index.insert(pattern("a.*"), None, 1);
        assert_eq!(matched(&mut index, "a.b"), [1]);
        assert_eq!(index.cached_topics(), 1);
        let extra = index.insert(pattern("a.*"), None, 2);
        assert_eq!(index.cached_topics(), 1);
        assert_eq!(matched(&mut index, "a.b"), [1, 2]);
        index.remove(extra);
        assert_eq!(matched(&mut index, "a.b"), [1]);
        assert_eq!(index.cached_topics(), 1);
    }
}
