//! Counters the index keeps for the broker's metrics.

/// A snapshot of the index's counters (monotonic, since the index was created) and gauges
/// (current sizes). A plain struct so that the broker can export it however it likes; the
/// counters are bumped on the hot path with plain additions, so reading them is free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchStats {
    /// Counter: calls to `matches`.
    pub publishes: u64,
    /// Counter: publishes whose topic was in the result cache.
    pub cache_hits: u64,
    /// Counter: publishes that walked the topic trie.
    pub cache_misses: u64,
    /// Counter: subscribers appended to `out` (matches delivered).
    pub deliveries: u64,
    /// Counter: selector subscriptions reached through an equality or range predicate index.
    pub index_hits: u64,
    /// Counter: selector subscriptions checked because they have no indexable predicate. If
    /// this grows like `publishes` times the subscriptions, selectors defeat the index.
    pub unindexed_checks: u64,
    /// Counter: selector residues evaluated (index hits whose access predicate was not the whole
    /// selector, plus unindexed checks).
    pub selector_evaluations: u64,
    /// Gauge: live subscriptions.
    pub subscriptions: u64,
    /// Gauge: live subscriptions with a selector.
    pub subscriptions_with_selector: u64,
    /// Gauge: live selector subscriptions with no indexable predicate.
    pub unindexed_subscriptions: u64,
    /// Gauge: distinct patterns (trie entries).
    pub patterns: u64,
    /// Gauge: topics in the result cache.
    pub cached_topics: u64,
    /// Gauge: distinct property names used by selectors.
    pub interned_properties: u64,
    /// Gauge: distinct `property op literal` predicates shared between residues.
    pub interned_predicates: u64,
}
