//! The subscription index: every subscription of a broker, and the answer to "who wants this
//! message?".
//!
//! Layout: the `TopicTrie` maps each distinct pattern to a group; a group holds the
//! subscriptions to that pattern, those without a selector in a plain vector and those with one
//! in a `ContentIndex`; the `ResultCache` maps a topic to the groups that match it. So the
//! topic narrows first, then the content index finds the selectors the message can satisfy. A
//! publish on a cached topic with no selectors is a hash lookup and a copy of each matched group's
//! subscribers. Subscription ids are slots in a slab plus a generation, so a stale id never
//! removes a later subscription that reused the slot.

use tidings_wire::PropertyLookup;

use crate::cache::ResultCache;
use crate::content::{AtomTable, ContentIndex, MessageView, Resolved, Vocabulary, Work};
use crate::selector::Selector;
use crate::stats::MatchStats;
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
enum Location {
    /// At this position of the group's `plain` and `plain_ids` vectors.
    Plain { group: GroupId, position: usize },
    /// In this slot of the group's content index.
    Content { group: GroupId, slot: u32 },
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
    /// Subscribers with a selector.
    content: ContentIndex<S>,
}

impl<S> Group<S> {
    fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.content.len() == 0
    }
}

/// What the content indexes of all groups share.
#[derive(Debug, Default)]
struct ContentState {
    vocabulary: Vocabulary,
    atoms: AtomTable,
}

/// Cache misses a caller remembers before it may write them into the shared cache.
const MAX_PENDING_MISSES: usize = 64;

/// Publishes a caller counts before it asks to fold its counters into the index's.
const COUNTS_PER_ABSORB: u64 = 1024;

/// One caller's working state for [`SubscriptionIndex::matches_shared`]: everything matching
/// writes, so the index itself is only read and many callers (a broker's sessions) match
/// through it at once. What the index should remember (topics that missed the cache) and count
/// waits here until the caller has the index to itself ([`SubscriptionIndex::absorb`]).
#[derive(Debug, Default)]
pub struct MatchScratch {
    /// Reused buffer for the groups of an uncached topic.
    found: Vec<GroupId>,
    /// The current message's properties by interned id (reused buffer).
    resolved: Resolved,
    work: Work,
    /// Counts messages that reached a content index; 0 is never a message's epoch.
    epoch: u64,
    /// Topics that missed the cache: the groups found, and the index generation they hold for.
    misses: Vec<(Box<str>, Box<[GroupId]>, u64)>,
    /// Counters not yet folded into the index's.
    counted: MatchStats,
}

impl MatchScratch {
    /// Whether [`SubscriptionIndex::absorb`] has something worth taking exclusive access for:
    /// cache entries to write, or a batch of counters.
    pub fn wants_absorb(&self) -> bool {
        !self.misses.is_empty() || self.counted.publishes >= COUNTS_PER_ABSORB
    }

    /// Whether anything at all waits for [`SubscriptionIndex::absorb`].
    pub fn has_pending(&self) -> bool {
        !self.misses.is_empty() || self.counted.publishes > 0
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
    /// Bumped whenever a pattern appears or disappears: a cache miss found under an older
    /// generation may be stale and is not remembered.
    generation: u64,
    content: ContentState,
    stats: MatchStats,
    /// The scratch of [`SubscriptionIndex::matches`] (exclusive callers).
    scratch: MatchScratch,
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
            generation: 0,
            content: ContentState::default(),
            stats: MatchStats::default(),
            scratch: MatchScratch::default(),
        }
    }

    /// Adds a subscription and returns the id that removes it. Costs a trie walk of the pattern
    /// and, with a selector, work in proportion to the selector's size; never a rebuild. Only a
    /// pattern new to the index invalidates cached topics (those it matches).
    pub fn insert(&mut self, pattern: Pattern, selector: Option<Selector>, subscriber: S) -> SubscriptionId {
        let group_id = self.group_for(pattern);
        let id = self.allocate_id();
        let content = &mut self.content;
        let group = live_group(&mut self.groups, group_id);
        let location = match selector {
            None => {
                let position = group.plain.len();
                group.plain.push(subscriber);
                group.plain_ids.push(id);
                Location::Plain { group: group_id, position }
            }
            Some(selector) => {
                let before = group.content.unindexed_len();
                let slot = group.content.insert(&selector, subscriber, &mut content.vocabulary, &mut content.atoms);
                self.stats.unindexed_subscriptions += (group.content.unindexed_len() - before) as u64;
                self.stats.subscriptions_with_selector += 1;
                Location::Content { group: group_id, slot }
            }
        };
        self.records[id.slot()].location = Some(location);
        self.stats.subscriptions += 1;
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
        self.stats.subscriptions -= 1;
        let (group_id, subscriber) = match location {
            Location::Plain { group, position } => (group, self.remove_plain(group, position)?),
            Location::Content { group, slot } => (group, self.remove_content(group, slot)?),
        };
        if self.groups.get(group_id.0 as usize).and_then(Option::as_ref).is_some_and(Group::is_empty) {
            self.delete_group(group_id);
        }
        Some(subscriber)
    }

    fn remove_plain(&mut self, group: GroupId, position: usize) -> Option<S> {
        let group = self.groups.get_mut(group.0 as usize)?.as_mut()?;
        let subscriber = group.plain.swap_remove(position);
        group.plain_ids.swap_remove(position);
        if let Some(moved) = group.plain_ids.get(position) {
            if let Some(Location::Plain { position: moved_position, .. }) = &mut self.records[moved.slot()].location {
                *moved_position = position;
            }
        }
        Some(subscriber)
    }

    fn remove_content(&mut self, group: GroupId, slot: u32) -> Option<S> {
        let group = self.groups.get_mut(group.0 as usize)?.as_mut()?;
        let before = group.content.unindexed_len();
        let subscriber = group.content.remove(slot, &mut self.content.vocabulary, &mut self.content.atoms)?;
        self.stats.unindexed_subscriptions -= (before - group.content.unindexed_len()) as u64;
        self.stats.subscriptions_with_selector -= 1;
        Some(subscriber)
    }

    /// Appends every subscriber whose pattern matches `topic` and whose selector (if any) is TRUE
    /// for `properties`: a list, or (allocation-free) a view of an encoded message's. One entry
    /// per matching subscription (no dedupe). `topic` is a valid topic.
    pub fn matches<L: PropertyLookup + ?Sized>(&mut self, topic: &str, properties: &L, out: &mut Vec<S>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.matches_shared(topic, properties, &mut scratch, out);
        self.absorb(&mut scratch);
        self.scratch = scratch;
    }

    /// [`SubscriptionIndex::matches`] through shared access: the index is only read, and what
    /// matching writes goes to the caller's `scratch`. Callers that share the index behind a
    /// read-write lock match at once under the read side, and call
    /// [`SubscriptionIndex::absorb`] under the write side when
    /// [`MatchScratch::wants_absorb`] says so (a topic missed the cache, or counters piled up),
    /// so one expensive message never stops the others' matching.
    pub fn matches_shared<L: PropertyLookup + ?Sized>(
        &self,
        topic: &str,
        properties: &L,
        scratch: &mut MatchScratch,
        out: &mut Vec<S>,
    ) {
        // A reference is sized, so it can stand behind the `dyn` the content index reads through.
        let properties: &dyn PropertyLookup = &properties;
        scratch.counted.publishes += 1;
        let before = out.len();
        if let Some(groups) = self.cache.get(topic) {
            scratch.counted.cache_hits += 1;
            deliver(groups, &self.groups, &self.content, properties, scratch, out);
        } else {
            scratch.counted.cache_misses += 1;
            let mut found = std::mem::take(&mut scratch.found);
            found.clear();
            self.trie.collect(topic, &mut found);
            if self.cache.enabled() && scratch.misses.len() < MAX_PENDING_MISSES {
                scratch.misses.push((topic.into(), found.as_slice().into(), self.generation));
            }
            deliver(&found, &self.groups, &self.content, properties, scratch, out);
            scratch.found = found;
        }
        scratch.counted.deliveries += (out.len() - before) as u64;
    }

    /// Writes what `scratch` found into the cache (each miss still current: no pattern came or
    /// went since) and folds its counters into the index's.
    pub fn absorb(&mut self, scratch: &mut MatchScratch) {
        for (topic, groups, generation) in scratch.misses.drain(..) {
            if generation == self.generation && self.cache.get(&topic).is_none() {
                self.cache.insert(&topic, &groups);
            }
        }
        let counted = std::mem::take(&mut scratch.counted);
        let stats = &mut self.stats;
        stats.publishes += counted.publishes;
        stats.cache_hits += counted.cache_hits;
        stats.cache_misses += counted.cache_misses;
        stats.deliveries += counted.deliveries;
        stats.index_hits += counted.index_hits;
        stats.unindexed_checks += counted.unindexed_checks;
        stats.selector_evaluations += counted.selector_evaluations;
    }

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.stats.subscriptions as usize
    }

    /// True when there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.stats.subscriptions == 0
    }

    /// Number of topics the result cache currently remembers (also in [`SubscriptionIndex::stats`]).
    pub fn cached_topics(&self) -> usize {
        self.cache.len()
    }

    /// True when some subscription has a selector; when false, properties are never read.
    pub fn has_selectors(&self) -> bool {
        self.stats.subscriptions_with_selector > 0
    }

    /// Counters and gauges for the broker's metrics; a copy of a few words, cheap to call.
    pub fn stats(&self) -> MatchStats {
        MatchStats {
            patterns: (self.groups.len() - self.free_groups.len()) as u64,
            cached_topics: self.cache.len() as u64,
            interned_properties: self.content.vocabulary.len() as u64,
            interned_predicates: self.content.atoms.len() as u64,
            ..self.stats
        }
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
        self.generation += 1;
        let group = Group { pattern, plain: Vec::new(), plain_ids: Vec::new(), content: ContentIndex::default() };
        self.groups[id.0 as usize] = Some(group);
        id
    }

    /// Deletes an emptied group from the trie, the cache and the slab.
    fn delete_group(&mut self, id: GroupId) {
        let Some(group) = self.groups.get_mut(id.0 as usize).and_then(Option::take) else {
            return;
        };
        self.trie.remove(&group.pattern);
        self.cache.invalidate(&group.pattern);
        self.generation += 1;
        self.free_groups.push(id);
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

/// The group `id`, which the caller knows is live (it just came from `group_for`).
fn live_group<S>(groups: &mut [Option<Group<S>>], id: GroupId) -> &mut Group<S> {
    match groups[id.0 as usize] {
        Some(ref mut group) => group,
        None => unreachable!("group_for returns live groups"),
    }
}

/// Appends the matches of the groups `ids` (all live; the cache and trie only name live groups).
/// The message's properties are resolved once, and only if some group has selectors.
fn deliver<S: Clone>(
    ids: &[GroupId],
    groups: &[Option<Group<S>>],
    content: &ContentState,
    properties: &dyn PropertyLookup,
    scratch: &mut MatchScratch,
    out: &mut Vec<S>,
) {
    let mut resolved = false;
    for id in ids {
        let Some(Some(group)) = groups.get(id.0 as usize) else { continue };
        out.extend_from_slice(&group.plain);
        if group.content.len() == 0 {
            continue;
        }
        if !resolved {
            scratch.epoch += 1;
            MessageView::resolve_into(properties, &content.vocabulary, &mut scratch.resolved);
            resolved = true;
        }
        let view = MessageView { properties, resolved: &scratch.resolved, epoch: scratch.epoch };
        group.content.deliver(&view, &content.atoms, &mut scratch.work, out);
    }
    let work = &mut scratch.work;
    let counted = &mut scratch.counted;
    counted.index_hits += std::mem::take(&mut work.index_hits);
    counted.unindexed_checks += std::mem::take(&mut work.unindexed_checks);
    counted.selector_evaluations += std::mem::take(&mut work.selector_evaluations);
}

#[cfg(test)]
mod tests {
    use tidings_wire::Property;

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

    fn selector(text: &str) -> Option<Selector> {
        Some(Selector::parse(text).unwrap())
    }

    fn matched_with(index: &mut SubscriptionIndex<u32>, topic: &str, properties: &[Property]) -> Vec<u32> {
        let mut out = Vec::new();
        index.matches(topic, properties, &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn selectors_filter_within_the_matching_patterns() {
        for mut index in indexes() {
            index.insert(pattern("quotes.*"), selector("price > 100"), 1);
            index.insert(pattern("quotes.ibm"), selector("price > 200"), 2);
            index.insert(pattern("quotes.>"), None, 3);
            assert!(index.has_selectors());
            let cheap = [Property::new("price", 150i64)];
            assert_eq!(matched_with(&mut index, "quotes.ibm", &cheap), [1, 3]);
            let dear = [Property::new("price", 250.0)];
            assert_eq!(matched_with(&mut index, "quotes.ibm", &dear), [1, 2, 3]);
            assert_eq!(matched_with(&mut index, "quotes.hp", &dear), [1, 3]);
            assert_eq!(matched_with(&mut index, "quotes.ibm", &[]), [3]);
        }
    }

    #[test]
    fn removing_the_last_selector_clears_has_selectors() {
        for mut index in indexes() {
            let id = index.insert(pattern("a"), selector("x = 1"), 1);
            index.insert(pattern("a"), None, 2);
            assert!(index.has_selectors());
            assert_eq!(index.remove(id), Some(1));
            assert!(!index.has_selectors());
            assert_eq!(matched_with(&mut index, "a", &[Property::new("x", 1i64)]), [2]);
        }
    }

    #[test]
    fn stats_count_the_work_done() {
        let mut index = SubscriptionIndex::new();
        index.insert(pattern("t"), selector("a = 1 AND b = 2"), 1);
        index.insert(pattern("t"), selector("c <> 3"), 2);
        index.insert(pattern("t.*"), None, 3);
        let properties = [Property::new("a", 1i64), Property::new("b", 2i64)];
        matched_with(&mut index, "t", &properties);
        matched_with(&mut index, "t", &properties);
        matched_with(&mut index, "t.x", &[]);
        let stats = index.stats();
        assert_eq!(stats.publishes, 3);
        assert_eq!((stats.cache_hits, stats.cache_misses), (1, 2));
        assert_eq!(stats.deliveries, 3);
        assert_eq!(stats.index_hits, 2);
        assert_eq!(stats.unindexed_checks, 2);
        assert_eq!(stats.selector_evaluations, 4);
        assert_eq!((stats.subscriptions, stats.subscriptions_with_selector), (3, 2));
        assert_eq!(stats.unindexed_subscriptions, 1);
        assert_eq!((stats.patterns, stats.cached_topics), (2, 2));
        assert_eq!(stats.interned_properties, 3);
        assert_eq!(stats.interned_predicates, 2, "b = 2 and c <> 3");
    }

    #[test]
    fn callers_sharing_the_index_match_at_once_and_alike() {
        let mut index = SubscriptionIndex::new();
        index.insert(pattern("a.>"), None, 1);
        index.insert(pattern("a.*"), Some(Selector::parse("n > 5").unwrap()), 2);
        index.insert(pattern("a.b"), Some(Selector::parse("n = 7 AND k <> 'x'").unwrap()), 3);
        let props = |n: i64| [Property::new("n", n), Property::new("k", "y")];
        let index = &index;
        std::thread::scope(|scope| {
            for worker in 0..4 {
                scope.spawn(move || {
                    let mut scratch = MatchScratch::default();
                    for round in 0..500i64 {
                        let n = (round + worker) % 10;
                        let mut out = Vec::new();
                        index.matches_shared("a.b", &props(n), &mut scratch, &mut out);
                        out.sort_unstable();
                        let mut expected = vec![1];
                        expected.extend((n > 5).then_some(2));
                        expected.extend((n == 7).then_some(3));
                        assert_eq!(out, expected, "n = {n}");
                    }
                });
            }
        });
    }

    #[test]
    fn a_shared_callers_cache_miss_is_remembered_only_while_no_pattern_came_or_went() {
        let mut index = SubscriptionIndex::new();
        index.insert(pattern("a.*"), None, 1);
        let mut scratch = MatchScratch::default();
        let mut out = Vec::new();
        index.matches_shared("a.b", &[], &mut scratch, &mut out);
        assert!(scratch.wants_absorb(), "a miss waits to be written into the cache");
        index.absorb(&mut scratch);
        assert_eq!(index.cached_topics(), 1);
        assert!(!scratch.wants_absorb());
        assert_eq!(index.stats().publishes, 1);

        // A miss found before a new pattern arrived would be stale: it is not remembered.
        let mut other = MatchScratch::default();
        index.matches_shared("a.c", &[], &mut other, &mut out);
        index.insert(pattern("a.c"), None, 2);
        index.absorb(&mut other);
        let mut found = Vec::new();
        index.matches_shared("a.c", &[], &mut other, &mut found);
        found.sort_unstable();
        assert_eq!(found, [1, 2]);
    }
}
