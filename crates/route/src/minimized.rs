//! [`Minimized`]: a multiset of filters kept reduced by covering as filters come and go, so that
//! one subscription change costs the filters it can affect, not every filter held.
//!
//! The kept set always equals [`minimize`](crate::filter::minimize) of the distinct inputs
//! (when `covers` is transitive, as a sound covering relation is): the inputs that no other
//! input *dominates*, where `a` dominates `b` if `a` covers `b` and either `b` does not cover
//! `a` or `a < b` (the smallest of equivalent filters is kept). Maintained invariants: every
//! kept filter is an input; no kept filter dominates another; every input that is not kept is
//! dominated by a kept one. These three pin the kept set down to the maximal inputs.
//!
//! Both the inputs and the kept set are grouped by [`Filter::covering_key`]. Whatever covers
//! `f` has a key that is a segment-prefix of `f`'s key, so "is `f` dominated?" looks only at
//! the groups of `f`'s key prefixes, and "what does `f` dominate?" only at the groups under
//! `f`'s key (a range of the sorted map). Filters without keys all share the empty key, which
//! makes both linear: the price of a filter type that cannot say more.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::filter::{key_prefixes, segments, Filter};

mod chunks;
use chunks::Chunks;

/// A multiset of filters and its minimized set, updated incrementally.
#[derive(Clone, Debug)]
pub(crate) struct Minimized<F> {
    /// Every distinct input, by covering key, in chunks shared between copies (see
    /// [`chunks`]): a new tree's advertised set starts as a copy of the local interest, and at
    /// 100,000 subscriptions a copy of plain maps held the router's lock for 90 ms (issue 46).
    /// Filters held inline: the broker's filter is one shared pointer (`matching::RouteFilter`).
    inputs: Chunks<BTreeSet<F>>,
    /// How many times each input beyond the first was inserted: apart, so that the inputs of
    /// a set fed once by each kept filter of another are that other's kept map, shared.
    repeats: BTreeMap<F, u32>,
    /// The inputs no other input dominates, by covering key.
    kept: Chunks<BTreeSet<F>>,
    /// Number of distinct inputs.
    distinct: usize,
    /// Number of kept filters.
    kept_len: usize,
}

impl<F> Default for Minimized<F> {
    fn default() -> Self {
        Self { inputs: Chunks::default(), repeats: BTreeMap::new(), kept: Chunks::default(), distinct: 0, kept_len: 0 }
    }
}

/// The net change of a kept set over one or more operations: a filter added and then removed
/// again appears in neither list.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Delta<F> {
    pub(crate) added: BTreeSet<F>,
    pub(crate) removed: BTreeSet<F>,
}

impl<F> Default for Delta<F> {
    fn default() -> Self {
        Self { added: BTreeSet::new(), removed: BTreeSet::new() }
    }
}

impl<F: Ord> Delta<F> {
    pub(crate) fn add(&mut self, filter: F) {
        if !self.removed.remove(&filter) {
            self.added.insert(filter);
        }
    }

    pub(crate) fn remove(&mut self, filter: F) {
        if !self.added.remove(&filter) {
            self.removed.insert(filter);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

/// Whether `a` comes no later than `b` in the order [`Minimized::kept_after`] walks: a streamed
/// summary's cursor tells what the link already holds by this order alone.
pub(crate) fn in_kept_order<F: Filter>(a: &F, b: &F) -> bool {
    (a.covering_key(), a) <= (b.covering_key(), b)
}

/// Whether `a` pushes `b` out of a minimized set.
fn dominates<F: Filter>(a: &F, b: &F) -> bool {
    a != b && a.covers(b) && (a < b || !b.covers(a))
}

/// The keys a filter under `key` may be dominated from: its segment-prefixes and itself.
fn wider_keys(key: &str) -> impl Iterator<Item = &str> {
    key_prefixes(key).chain(std::iter::once(key))
}

/// The groups of `map` whose key is `key` or lies under it (`key` followed by `.`); all groups
/// for the empty key.
fn under<'m, V: Clone>(map: &'m Chunks<V>, key: &str) -> impl Iterator<Item = (&'m String, &'m V)> {
    let (same, deeper) = if key.is_empty() {
        (None, map.range(Bound::Unbounded, Bound::Unbounded))
    } else {
        // '/' is the character after '.', so this range is exactly the keys starting `key.`.
        let (start, end) = (format!("{key}."), format!("{key}/"));
        let deeper = map.range(Bound::Included(start.as_str()), Bound::Excluded(end.as_str()));
        (map.get_key_value(key), deeper)
    };
    same.into_iter().chain(deeper)
}

impl<F: Filter> Minimized<F> {
    /// A set built from `filters` at once (each counted once per occurrence).
    pub(crate) fn from_filters<'a>(filters: impl IntoIterator<Item = &'a F>) -> Self
    where
        F: 'a,
    {
        let mut set = Self::default();
        let mut ignored = Delta::default();
        for filter in filters {
            set.insert(filter, &mut ignored);
        }
        set
    }

    /// A set whose inputs are the kept filters of `other`, once each: what a derived set starts
    /// from when `other` feeds it. Both its maps are `other`'s kept map, shared chunk by chunk
    /// (the kept filters are minimal already, and each is input once), so a tree that appears
    /// beside 100,000 local subscriptions costs a pointer per chunk, not 100,000 insertions
    /// nor a copy; later changes of either set copy the chunks they touch.
    pub(crate) fn from_kept_of(other: &Self) -> Self {
        Self {
            inputs: other.kept.clone(),
            repeats: BTreeMap::new(),
            kept: other.kept.clone(),
            distinct: other.kept_len,
            kept_len: other.kept_len,
        }
    }

    /// The kept filters after `cursor` in kept order (by covering key, then by filter; see
    /// [`in_kept_order`]), all of them for `None`: where a link's first summary, streamed a
    /// slice at a time (`router/stream.rs`), resumes without copying what it already sent.
    pub(crate) fn kept_after<'s>(&'s self, cursor: Option<&'s F>) -> impl Iterator<Item = &'s F> + 's {
        let (first, rest) = match cursor {
            None => (None, self.kept.range(Bound::Unbounded, Bound::Unbounded)),
            Some(after) => {
                let key = after.covering_key();
                let first =
                    self.kept.get(key).map(|group| group.range::<F, _>((Bound::Excluded(after), Bound::Unbounded)));
                (first, self.kept.range(Bound::Excluded(key), Bound::Unbounded))
            }
        };
        first.into_iter().flatten().chain(rest.flat_map(|(_, group)| group.iter()))
    }

    /// Lets go of up to about `budget` filters (whole chunks of covering-key groups, at least
    /// one, or single repeats), kept and inputs alike; returns how many went. For a set nothing
    /// reads any more, freed a slice at a time (`router/garbage.rs`); a chunk another set
    /// shares is let go of without being copied or freed.
    pub(crate) fn shed(&mut self, budget: usize) -> usize {
        let mut shed = 0;
        while shed < budget.max(1) {
            if let Some(chunk) = self.inputs.pop_last_chunk() {
                let filters: usize = chunk.values().map(BTreeSet::len).sum();
                shed += filters;
                self.distinct -= filters;
            } else if self.repeats.pop_last().is_some() {
                shed += 1;
            } else if let Some(chunk) = self.kept.pop_last_chunk() {
                let filters: usize = chunk.values().map(BTreeSet::len).sum();
                shed += filters;
                self.kept_len -= filters;
            } else {
                break;
            }
        }
        shed
    }

    /// Whether [`Minimized::shed`] let go of everything.
    pub(crate) fn is_shed(&self) -> bool {
        self.inputs.is_empty() && self.repeats.is_empty() && self.kept.is_empty()
    }

    /// Whether `filter` is one of the kept filters.
    pub(crate) fn is_kept(&self, filter: &F) -> bool {
        self.kept.get(filter.covering_key()).is_some_and(|kept| kept.contains(filter))
    }

    /// The kept filters, grouped by covering key (not globally sorted).
    pub(crate) fn kept(&self) -> impl Iterator<Item = &F> {
        self.kept.values().flatten()
    }

    /// The kept filters, sorted.
    pub(crate) fn kept_sorted(&self) -> BTreeSet<F> {
        self.kept().cloned().collect()
    }

    /// Number of distinct inputs.
    pub(crate) fn distinct_inputs(&self) -> usize {
        self.distinct
    }

    /// Counts one more occurrence of `filter`; changes to the kept set go to `delta`.
    pub(crate) fn insert(&mut self, filter: &F, delta: &mut Delta<F>) {
        let key = filter.covering_key();
        if self.inputs.get(key).is_some_and(|group| group.contains(filter)) {
            *self.repeats.entry(filter.clone()).or_default() += 1;
            return;
        }
        match self.inputs.get_mut(key) {
            Some(group) => {
                group.insert(filter.clone());
            }
            None => self.inputs.insert(key.to_string(), BTreeSet::from([filter.clone()])),
        }
        self.distinct += 1;
        if !self.is_dominated(filter) {
            self.keep(filter, delta);
        }
    }

    /// Counts one occurrence of `filter` less; `false` (and no change) if it was not an input.
    pub(crate) fn remove(&mut self, filter: &F, delta: &mut Delta<F>) -> bool {
        let key = filter.covering_key();
        if !self.inputs.get(key).is_some_and(|group| group.contains(filter)) {
            return false;
        }
        if let Some(count) = self.repeats.get_mut(filter) {
            *count -= 1;
            if *count == 0 {
                self.repeats.remove(filter);
            }
            return true;
        }
        if self.inputs.get_mut(key).is_some_and(|group| group.remove(filter) && group.is_empty()) {
            self.inputs.remove(key);
        }
        self.distinct -= 1;
        if !self.kept.get(key).is_some_and(|kept| kept.contains(filter)) {
            // Something kept dominates it, and that is still an input.
            return true;
        }
        if self.kept.get_mut(key).is_some_and(|kept| kept.remove(filter) && kept.is_empty()) {
            self.kept.remove(key);
        }
        self.kept_len -= 1;
        delta.remove(filter.clone());
        self.uncover(key, delta);
        true
    }

    /// After a kept filter under `key` left: every input under `key` that nothing kept now
    /// dominates is kept, broadest keys first so that narrower ones are mostly found covered.
    fn uncover(&mut self, key: &str, delta: &mut Delta<F>) {
        let mut candidates: Vec<(usize, &String, &F)> = under(&self.inputs, key)
            .flat_map(|(group_key, group)| group.iter().map(move |filter| (segments(group_key), group_key, filter)))
            .filter(|(_, group_key, filter)| !self.kept.get(group_key).is_some_and(|kept| kept.contains(*filter)))
            .collect();
        candidates.sort();
        let candidates: Vec<F> = candidates.into_iter().map(|(_, _, filter)| filter.clone()).collect();
        for candidate in candidates {
            if !self.is_dominated(&candidate) {
                self.keep(&candidate, delta);
            }
        }
    }

    /// Whether some kept filter dominates `filter`.
    fn is_dominated(&self, filter: &F) -> bool {
        wider_keys(filter.covering_key())
            .filter_map(|key| self.kept.get(key))
            .any(|kept| kept.iter().any(|wider| dominates(wider, filter)))
    }

    /// Keeps `filter` (not dominated) and drops the kept filters it dominates.
    fn keep(&mut self, filter: &F, delta: &mut Delta<F>) {
        let key = filter.covering_key();
        let dominated: Vec<(String, F)> = under(&self.kept, key)
            .flat_map(|(group_key, kept)| kept.iter().map(move |narrow| (group_key, narrow)))
            .filter(|(_, narrow)| dominates(filter, narrow))
            .map(|(group_key, narrow)| (group_key.clone(), narrow.clone()))
            .collect();
        for (group_key, narrow) in dominated {
            if self.kept.get_mut(&group_key).is_some_and(|kept| kept.remove(&narrow) && kept.is_empty()) {
                self.kept.remove(&group_key);
            }
            self.kept_len -= 1;
            delta.remove(narrow);
        }
        match self.kept.get_mut(key) {
            Some(kept) => {
                kept.insert(filter.clone());
            }
            None => self.kept.insert(key.to_string(), BTreeSet::from([filter.clone()])),
        }
        self.kept_len += 1;
        delta.add(filter.clone());
    }
}

#[cfg(test)]
mod tests;
