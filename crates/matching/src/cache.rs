//! The result cache: from a topic to the groups the trie found for it.
//!
//! Why groups and not subscribers: the set of groups matching a topic only changes when a pattern
//! appears in or disappears from the index. Subscribing to, or unsubscribing from, a pattern that
//! other subscriptions keep alive changes a group's contents and leaves every cached entry valid,
//! so the common churn costs the cache nothing. When a pattern does appear or disappear, only the
//! entries it matches are dropped: one lookup for a literal pattern, a scan of the (bounded) cache
//! for a wildcard pattern, as nats-server does.
//!
//! Eviction is CLOCK (second chance): a hit marks its entry, and the hand sweeping for a victim
//! clears marks until it finds an unmarked entry. It approximates LRU without a linked list.
//! The mark is an atomic flag, so lookups need only shared access: many callers read the cache
//! at once, and only insertions and invalidations need the index to themselves.

use std::sync::atomic::{AtomicBool, Ordering};

use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;

use crate::topic::Pattern;
use crate::trie::GroupId;

/// One cached answer.
#[derive(Debug)]
struct Entry {
    /// Groups whose pattern matches the topic, as the trie returned them.
    groups: Box<[GroupId]>,
    /// Set by a hit; the clock hand spares a marked entry once.
    referenced: AtomicBool,
}

/// A bounded map from topic to matching groups.
#[derive(Debug)]
pub(crate) struct ResultCache {
    /// A fixed hasher keeps behaviour reproducible run to run; topics come from authenticated
    /// publishers and the map is bounded, so hash flooding can only slow one broker's cache.
    entries: IndexMap<Box<str>, Entry, FxBuildHasher>,
    capacity: usize,
    /// Position of the clock hand in `entries`.
    hand: usize,
}

impl ResultCache {
    /// A cache holding at most `capacity` topics; 0 disables it.
    pub(crate) fn new(capacity: usize) -> ResultCache {
        ResultCache { entries: IndexMap::default(), capacity, hand: 0 }
    }

    /// The cached groups for `topic`, marking the entry as recently used.
    pub(crate) fn get(&self, topic: &str) -> Option<&[GroupId]> {
        let entry = self.entries.get(topic)?;
        // Relaxed: the mark is a hint to the clock hand, ordered with nothing else.
        if !entry.referenced.load(Ordering::Relaxed) {
            entry.referenced.store(true, Ordering::Relaxed);
        }
        Some(&entry.groups)
    }

    /// Whether the cache remembers anything at all (capacity above 0).
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Remembers the groups for `topic`, evicting one entry first when full.
    pub(crate) fn insert(&mut self, topic: &str, groups: &[GroupId]) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() >= self.capacity {
            self.evict_one();
        }
        let entry = Entry { groups: groups.into(), referenced: AtomicBool::new(false) };
        self.entries.insert(topic.into(), entry);
    }

    /// Drops every entry whose topic `pattern` matches: those are the answers that a pattern
    /// appearing or disappearing can change.
    pub(crate) fn invalidate(&mut self, pattern: &Pattern) {
        if pattern.is_literal() {
            self.entries.swap_remove(pattern.as_str());
        } else {
            self.entries.retain(|topic, _| !pattern.matches(topic));
        }
    }

    /// Number of cached topics.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Sweeps the clock hand until an unmarked entry is found and removes it.
    fn evict_one(&mut self) {
        loop {
            if self.hand >= self.entries.len() {
                self.hand = 0;
            }
            let Some((_, entry)) = self.entries.get_index_mut(self.hand) else {
                return;
            };
            if *entry.referenced.get_mut() {
                *entry.referenced.get_mut() = false;
                self.hand += 1;
            } else {
                // The last entry moves into the hand's place; it gets its look next.
                self.entries.swap_remove_index(self.hand);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Pattern {
        Pattern::parse(text).unwrap()
    }

    #[test]
    fn a_zero_capacity_cache_remembers_nothing() {
        let mut cache = ResultCache::new(0);
        cache.insert("a", &[GroupId(1)]);
        assert_eq!(cache.get("a"), None);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_cache_never_grows_past_its_capacity_and_spares_recent_hits() {
        let mut cache = ResultCache::new(2);
        cache.insert("a", &[GroupId(1)]);
        cache.insert("b", &[GroupId(2)]);
        assert!(cache.get("a").is_some());
        cache.insert("c", &[GroupId(3)]);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("a"), Some(&[GroupId(1)][..]));
        assert_eq!(cache.get("b"), None);
        assert_eq!(cache.get("c"), Some(&[GroupId(3)][..]));
    }

    #[test]
    fn invalidation_drops_only_the_topics_a_pattern_matches() {
        let mut cache = ResultCache::new(10);
        for topic in ["a.b", "a.c", "b.c", "a"] {
            cache.insert(topic, &[]);
        }
        cache.invalidate(&pattern("a.*"));
        assert!(cache.get("a.b").is_none());
        assert!(cache.get("a.c").is_none());
        assert!(cache.get("b.c").is_some());
        assert!(cache.get("a").is_some());
        cache.invalidate(&pattern("a"));
        assert!(cache.get("a").is_none());
        assert_eq!(cache.len(), 1);
    }
}
