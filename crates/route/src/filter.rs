//! What a summary is made of. Routing is generic over [`Filter`] so that it does not depend on
//! the selector language: the broker plugs in (topic pattern, optional selector) from
//! `tidings-matching`; tests plug in something small.
//!
//! Each filter type also names a [`FilterIndex`]: the structure the data path asks "does any
//! filter of this summary match the message?", kept up to date from summary changes. The broker
//! plugs in its topic trie, so a publish costs the filters that could match, not the summary's
//! size; [`LinearIndex`] is the plain scan for filter types without an index.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

/// One subscription's interest, as far as routing needs to know it.
///
/// `Ord` gives summaries a deterministic order (they are sets that travel on the wire and show up
/// in `/state`); `covers` lets a summary drop entries that another entry already implies.
pub trait Filter: Clone + Ord + Debug {
    /// The part of a data message the filter is evaluated against (for example its topic and
    /// properties); unsized so that `str` or a borrowed view can be used directly.
    type Message: ?Sized;

    /// How the data path finds whether any filter of a summary matches a message;
    /// [`LinearIndex`] when the filter type has nothing better.
    type Index: FilterIndex<Self>;

    /// Whether a message is of interest to this filter.
    fn matches(&self, message: &Self::Message) -> bool;

    /// Whether every message matching `other` also matches `self`. It may answer `false` when
    /// unsure: a missed covering only makes a summary larger, never wrong.
    fn covers(&self, other: &Self) -> bool;

    /// A necessary condition for covering, so that [`minimize`] need not compare every pair:
    /// the filter's fixed leading segments joined by `.` (for a topic pattern, its literal levels
    /// before the first wildcard). Contract: if `a.covers(b)`, then `a`'s key is empty, equal to
    /// `b`'s, or a prefix of `b`'s followed by a `.`. The default (empty for every filter) is
    /// always correct and makes `minimize` quadratic.
    fn covering_key(&self) -> &str {
        ""
    }

    /// The queue group whose members stand behind this filter, if any. A group's filter is
    /// not interest in every copy: it asks for one copy per message network-wide, which the
    /// router assigns to one branch (see [`FilterIndex::matching_groups`]).
    fn group(&self) -> Option<&str> {
        None
    }
}

/// Reduces a set of filters to the entries no other entry covers, so the result matches exactly
/// the same messages as the input. Among equivalent filters (each covers the other) the smallest
/// by `Ord` is kept, so every broker reduces the same set to the same summary.
///
/// Filters are grouped by [`Filter::covering_key`] and groups are visited from the fewest key
/// segments up, so a filter is compared only with the members of its own group and with the
/// survivors of the groups whose key is a prefix of its own: near-linear when keys spread the
/// filters out (distinct topic prefixes), quadratic when they do not.
pub fn minimize<'a, F: Filter + 'a>(filters: impl IntoIterator<Item = &'a F>) -> Vec<F> {
    let mut sorted: Vec<&F> = filters.into_iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut groups: BTreeMap<(usize, &str), Vec<&F>> = BTreeMap::new();
    for filter in sorted {
        let key = filter.covering_key();
        groups.entry((segments(key), key)).or_default().push(filter);
    }
    let mut kept: BTreeMap<&str, Vec<&F>> = BTreeMap::new();
    for ((_, key), members) in groups {
        let mut survivors: Vec<&F> = Vec::new();
        for filter in members {
            let covered_outside = key_prefixes(key)
                .any(|prefix| kept.get(prefix).is_some_and(|wider| wider.iter().any(|k| k.covers(filter))));
            if covered_outside || survivors.iter().any(|k| k.covers(filter)) {
                continue;
            }
            survivors.retain(|k| !filter.covers(k));
            survivors.push(filter);
        }
        if !survivors.is_empty() {
            kept.insert(key, survivors);
        }
    }
    let mut out: Vec<F> = kept.into_values().flatten().cloned().collect();
    out.sort();
    out
}

/// Number of `.`-separated segments of a covering key (0 for the empty key).
pub(crate) fn segments(key: &str) -> usize {
    if key.is_empty() {
        0
    } else {
        key.matches('.').count() + 1
    }
}

/// The proper prefixes of a key at segment boundaries, the empty key first.
pub(crate) fn key_prefixes(key: &str) -> impl Iterator<Item = &str> {
    let dots = key.match_indices('.').map(move |(at, _)| &key[..at]);
    std::iter::once("").filter(move |_| !key.is_empty()).chain(dots)
}

/// Whether any filter of a summary matches the message, by trying each in turn: the reference
/// every [`FilterIndex`] must agree with.
pub fn any_matches<F: Filter>(summary: &[F], message: &F::Message) -> bool {
    summary.iter().any(|filter| filter.group().is_none() && filter.matches(message))
}

/// A set of filters that answers, for a message, whether any of them matches. The router keeps
/// one per summary the data path tests (per child cell, per cell mate) and updates it with the
/// summary's changes, never rebuilding it for one change.
///
/// Contract: after any sequence of `insert` and `remove` (a filter is removed only after it
/// was inserted, and inserted again only after it was removed), `any_match` answers as
/// [`any_matches`] over the filters held.
pub trait FilterIndex<F: Filter>: Clone + Debug + Default {
    /// Adds a filter the index does not hold.
    fn insert(&mut self, filter: &F);

    /// Removes a filter the index holds.
    fn remove(&mut self, filter: &F);

    /// Whether any filter held that belongs to no queue group matches the message. Takes
    /// `&self` because routing a message does not change the router.
    fn any_match(&self, message: &F::Message) -> bool;

    /// Adds to `out` (without repeating one already there) each queue group with a filter held
    /// that matches the message: the groups a copy sent this way could serve. The default,
    /// for filter types that never name a group, adds nothing.
    fn matching_groups(&self, message: &F::Message, out: &mut Vec<String>) {
        let _ = (message, out);
    }
}

/// The index of filter types with no better one: a sorted set scanned in full per message.
#[derive(Clone, Debug)]
pub struct LinearIndex<F> {
    filters: BTreeSet<F>,
}

impl<F> Default for LinearIndex<F> {
    fn default() -> Self {
        Self { filters: BTreeSet::new() }
    }
}

impl<F: Filter> FilterIndex<F> for LinearIndex<F> {
    fn insert(&mut self, filter: &F) {
        self.filters.insert(filter.clone());
    }

    fn remove(&mut self, filter: &F) {
        self.filters.remove(filter);
    }

    fn any_match(&self, message: &F::Message) -> bool {
        self.filters.iter().any(|filter| filter.group().is_none() && filter.matches(message))
    }

    fn matching_groups(&self, message: &F::Message, out: &mut Vec<String>) {
        for filter in &self.filters {
            if let Some(group) = filter.group().filter(|group| !out.iter().any(|held| held == group)) {
                if filter.matches(message) {
                    out.push(group.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod test_filter {
    //! Integer ranges, the smallest filter with a non-trivial covering relation, and dotted
    //! paths, the smallest with covering keys.
    use super::{Filter, LinearIndex};

    /// A small seeded generator (xorshift), so a failing random sequence replays.
    pub(crate) struct Rng(pub(crate) u64);

    impl Rng {
        /// The next number below `bound`.
        pub(crate) fn below(&mut self, bound: u32) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % u64::from(bound)) as u32
        }
    }

    /// Interest in the inclusive range `lo..=hi`.
    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Range(pub(crate) u32, pub(crate) u32);

    impl Filter for Range {
        type Message = u32;
        type Index = LinearIndex<Self>;
        fn matches(&self, message: &u32) -> bool {
            (self.0..=self.1).contains(message)
        }
        fn covers(&self, other: &Self) -> bool {
            self.0 <= other.0 && other.1 <= self.1
        }
    }

    /// Dotted paths with an optional trailing wildcard: `a.b.>` covers everything under `a.b`.
    #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
    pub(crate) struct Path(pub(crate) String, pub(crate) bool);

    impl Filter for Path {
        type Message = str;
        type Index = LinearIndex<Self>;
        fn matches(&self, message: &str) -> bool {
            if self.1 {
                message.starts_with(&format!("{}.", self.0))
            } else {
                message == self.0
            }
        }
        fn covers(&self, other: &Self) -> bool {
            (self.1 && other.0.starts_with(&format!("{}.", self.0))) || (self == other)
        }
        fn covering_key(&self) -> &str {
            &self.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_filter::{Path, Range};
    use super::*;

    #[test]
    fn covered_entries_are_removed_whatever_the_input_order() {
        let input = [Range(3, 4), Range(0, 10), Range(20, 30), Range(5, 5)];
        assert_eq!(minimize(&input), vec![Range(0, 10), Range(20, 30)]);
        let reversed: Vec<Range> = input.iter().rev().copied().collect();
        assert_eq!(minimize(&reversed), vec![Range(0, 10), Range(20, 30)]);
    }

    #[test]
    fn keyed_minimize_agrees_with_comparing_every_pair() {
        let names = ["a", "a.b", "a.b.c", "a.c", "b", "b.a", "ab", "ab.c"];
        let mut filters = Vec::new();
        for (index, name) in names.iter().enumerate() {
            filters.push(Path((*name).to_string(), index % 2 == 0));
            filters.push(Path((*name).to_string(), index % 3 == 0));
        }
        let keyed = minimize(&filters);
        let pairwise: Vec<Path> = {
            let mut kept: Vec<Path> = Vec::new();
            let mut sorted = filters.clone();
            sorted.sort();
            sorted.dedup();
            for f in sorted {
                if !kept.iter().any(|k| k.covers(&f)) {
                    kept.retain(|k| !f.covers(k));
                    kept.push(f);
                }
            }
            kept.sort();
            kept
        };
        assert_eq!(keyed, pairwise);
        assert!(keyed.contains(&Path("a".into(), true)) && !keyed.contains(&Path("a.b.c".into(), true)));
        assert!(keyed.contains(&Path("ab".into(), true)), "ab is not under a");
    }

    #[test]
    fn duplicates_collapse_to_one_entry() {
        assert_eq!(minimize(&[Range(1, 2), Range(1, 2)]), vec![Range(1, 2)]);
    }

    #[test]
    fn a_minimized_summary_matches_exactly_what_the_input_matched() {
        let input = [Range(3, 9), Range(0, 4), Range(8, 12), Range(4, 5), Range(15, 15)];
        let summary = minimize(&input);
        for message in 0..20 {
            assert_eq!(any_matches(&summary, &message), any_matches(&input, &message));
        }
    }
}
