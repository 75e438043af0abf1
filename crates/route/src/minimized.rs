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

/// A multiset of filters and its minimized set, updated incrementally.
#[derive(Clone, Debug)]
pub(crate) struct Minimized<F> {
    /// Every distinct input with how many times it was inserted, by covering key. Held
    /// inline: the broker's filter is one shared pointer (`matching::RouteFilter`), so a B-tree
    /// node of eleven is small; boxed, as a filter of several strings once had to be (5.5 KB
    /// per subscription at 100,000), each copy of a set cost an allocation more per filter,
    /// and a new tree's advertised set copied from the local interest is 100,000 of them under
    /// the router's lock (issue 46).
    inputs: BTreeMap<String, BTreeMap<F, u32>>,
    /// The inputs no other input dominates, by covering key.
    kept: BTreeMap<String, BTreeSet<F>>,
    /// Number of distinct inputs.
    distinct: usize,
}

impl<F> Default for Minimized<F> {
    fn default() -> Self {
        Self { inputs: BTreeMap::new(), kept: BTreeMap::new(), distinct: 0 }
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
fn under<'m, V>(map: &'m BTreeMap<String, V>, key: &str) -> impl Iterator<Item = (&'m String, &'m V)> {
    let (same, deeper) = if key.is_empty() {
        (None, map.range::<str, _>(..))
    } else {
        // '/' is the character after '.', so this range is exactly the keys starting `key.`.
        let (start, end) = (format!("{key}."), format!("{key}/"));
        let deeper = map.range::<str, _>((Bound::Included(start.as_str()), Bound::Excluded(end.as_str())));
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
    /// from when `other` feeds it, copied without a covering check per filter (they are
    /// minimal already), so a tree that appears beside 100,000 local subscriptions costs a copy
    /// rather than 100,000 insertions.
    pub(crate) fn from_kept_of(other: &Self) -> Self {
        let inputs: BTreeMap<String, BTreeMap<F, u32>> = other
            .kept
            .iter()
            .map(|(key, kept)| (key.clone(), kept.iter().map(|filter| (filter.clone(), 1)).collect()))
            .collect();
        let distinct = inputs.values().map(BTreeMap::len).sum();
        Self { inputs, kept: other.kept.clone(), distinct }
    }

    /// The kept filters after `cursor` in kept order (by covering key, then by filter; see
    /// [`in_kept_order`]), all of them for `None`: where a link's first summary, streamed a
    /// slice at a time (`router/stream.rs`), resumes without copying what it already sent.
    pub(crate) fn kept_after<'s>(&'s self, cursor: Option<&'s F>) -> impl Iterator<Item = &'s F> + 's {
        let (first, rest) = match cursor {
            None => (None, self.kept.range::<str, _>(..)),
            Some(after) => {
                let key = after.covering_key();
                let first =
                    self.kept.get(key).map(|group| group.range::<F, _>((Bound::Excluded(after), Bound::Unbounded)));
                (first, self.kept.range::<str, _>((Bound::Excluded(key), Bound::Unbounded)))
            }
        };
        first.into_iter().flatten().chain(rest.flat_map(|(_, group)| group.iter()))
    }

    /// Lets go of up to about `budget` filters (whole covering-key groups, at least one), kept
    /// and inputs alike; returns how many went. For a set nothing reads any more, freed a
    /// slice at a time (`router/garbage.rs`).
    pub(crate) fn shed(&mut self, budget: usize) -> usize {
        let mut shed = 0;
        while shed < budget.max(1) {
            if let Some((_, group)) = self.inputs.pop_last() {
                shed += group.len();
                self.distinct -= group.len();
            } else if let Some((_, group)) = self.kept.pop_last() {
                shed += group.len();
            } else {
                break;
            }
        }
        shed
    }

    /// Whether [`Minimized::shed`] let go of everything.
    pub(crate) fn is_shed(&self) -> bool {
        self.inputs.is_empty() && self.kept.is_empty()
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
        let group = match self.inputs.get_mut(key) {
            Some(group) => group,
            None => self.inputs.entry(key.to_string()).or_default(),
        };
        if let Some(count) = group.get_mut(filter) {
            *count += 1;
            return;
        }
        group.insert(filter.clone(), 1);
        self.distinct += 1;
        if !self.is_dominated(filter) {
            self.keep(filter, delta);
        }
    }

    /// Counts one occurrence of `filter` less; `false` (and no change) if it was not an input.
    pub(crate) fn remove(&mut self, filter: &F, delta: &mut Delta<F>) -> bool {
        let key = filter.covering_key();
        let Some(group) = self.inputs.get_mut(key) else { return false };
        let Some(count) = group.get_mut(filter) else { return false };
        *count -= 1;
        if *count > 0 {
            return true;
        }
        group.remove(filter);
        if group.is_empty() {
            self.inputs.remove(key);
        }
        self.distinct -= 1;
        let was_kept = self.kept.get_mut(key).is_some_and(|kept| kept.remove(filter));
        if !was_kept {
            // Something kept dominates it, and that is still an input.
            return true;
        }
        if self.kept.get(key).is_some_and(BTreeSet::is_empty) {
            self.kept.remove(key);
        }
        delta.remove(filter.clone());
        self.uncover(key, delta);
        true
    }

    /// After a kept filter under `key` left: every input under `key` that nothing kept now
    /// dominates is kept, broadest keys first so that narrower ones are mostly found covered.
    fn uncover(&mut self, key: &str, delta: &mut Delta<F>) {
        let mut candidates: Vec<(usize, &String, &F)> = under(&self.inputs, key)
            .flat_map(|(group_key, group)| group.keys().map(move |filter| (segments(group_key), group_key, filter)))
            .filter(|(_, group_key, filter)| !self.kept.get(*group_key).is_some_and(|kept| kept.contains(*filter)))
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
            if let Some(kept) = self.kept.get_mut(&group_key) {
                kept.remove(&narrow);
                if kept.is_empty() {
                    self.kept.remove(&group_key);
                }
            }
            delta.remove(narrow);
        }
        match self.kept.get_mut(key) {
            Some(kept) => kept.insert(filter.clone()),
            None => self.kept.entry(key.to_string()).or_default().insert(filter.clone()),
        };
        delta.add(filter.clone());
    }
}

#[cfg(test)]
mod tests;
