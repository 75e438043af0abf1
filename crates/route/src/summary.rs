//! Summaries: what a broker tells each neighbour about the interest behind it.
//!
//! A summary is kept per *scope*:
//! - [`Scope::Tree`]`(root)` toward the parent cell in `root`'s tree: the interest of our cell's
//!   whole subtree there (local subscribers of every broker of the cell plus everything the
//!   child cells advertised), minimized by covering. Trees differ per root in a graph with
//!   cycles, so one summary per link would either over-deliver or never shrink.
//! - Toward a cell mate, [`Scope::Local`] is our own subscribers' interest and
//!   [`Scope::Tree`]`(root)` is only what our own links to child cells brought in. Mates need
//!   both: the first to decide whether to hand us a copy, the second so that each of them can
//!   advertise the interest reachable through any broker of the cell.
//!
//! Both ends remember the last state per link and scope; only differences travel, and a link
//! that comes up starts from empty on both sides, so the first update is the full summary.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::filter::Filter;
use crate::names::CellName;

/// Which summary of a link an update is about.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Scope {
    /// The sender's own local subscribers (sent to cell mates only).
    Local,
    /// Interest reachable through the sender in the tree rooted at this publishing cell.
    Tree(CellName),
}

/// One change to one or more scopes of a link's summary: the same filters were added to and
/// removed from each listed scope. Grouping scopes keeps a new subscription that matters to many
/// trees down to one entry.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SummaryDelta<F> {
    /// The scopes this change applies to, sorted.
    pub scopes: Vec<Scope>,
    /// Filters that are now part of each scope's summary.
    pub added: Vec<F>,
    /// Filters that are no longer part of each scope's summary.
    pub removed: Vec<F>,
}

impl<F> SummaryDelta<F> {
    /// The change that undoes this one (applied after it, in reverse order of a batch).
    pub(crate) fn inverse(self) -> Self {
        Self { scopes: self.scopes, added: self.removed, removed: self.added }
    }
}

/// A link's summary, one filter set per scope; empty scopes are absent.
pub(crate) type Scoped<F> = BTreeMap<Scope, BTreeSet<F>>;

/// The deltas that bring the listed scopes of `sent` to what `desired` says (absent means
/// empty), scopes with identical changes grouped together; `sent` is updated to match.
pub(crate) fn diff_scopes<'a, F: Filter + 'a>(
    sent: &mut Scoped<F>,
    scopes: BTreeSet<Scope>,
    desired: impl Fn(&Scope) -> Option<&'a BTreeSet<F>>,
) -> Vec<SummaryDelta<F>> {
    let empty = BTreeSet::new();
    let mut grouped: BTreeMap<(Vec<F>, Vec<F>), Vec<Scope>> = BTreeMap::new();
    for scope in scopes {
        let before = sent.get(&scope).unwrap_or(&empty);
        let after = desired(&scope).unwrap_or(&empty);
        if before == after {
            continue;
        }
        let added: Vec<F> = after.difference(before).cloned().collect();
        let removed: Vec<F> = before.difference(after).cloned().collect();
        if after.is_empty() {
            sent.remove(&scope);
        } else {
            sent.insert(scope.clone(), after.clone());
        }
        grouped.entry((added, removed)).or_default().push(scope);
    }
    grouped.into_iter().map(|((added, removed), scopes)| SummaryDelta { scopes, added, removed }).collect()
}

/// `deltas` as messages of at most `max` filters each (unchanged when they fit in one). Each
/// delta's additions go before its removals, so every prefix of the messages is a summary the
/// receiver accepts (it holds what is removed, and not what is added) and, meanwhile, covers
/// at least the interest before and after: a copy may go where it is no longer wanted, none is
/// kept from where it is.
pub(crate) fn split<F: Clone>(deltas: Vec<SummaryDelta<F>>, max: usize) -> Vec<Vec<SummaryDelta<F>>> {
    let total: usize = deltas.iter().map(|delta| delta.added.len() + delta.removed.len()).sum();
    if total <= max {
        return vec![deltas];
    }
    let max = max.max(1);
    let mut messages: Vec<Vec<SummaryDelta<F>>> = Vec::new();
    let mut room = 0;
    for delta in deltas {
        // Moved, not copied: a new link's first summary may be 100,000 filters.
        let added = chunks(delta.added, max).into_iter().map(|chunk| (chunk, Vec::new()));
        let removed = chunks(delta.removed, max).into_iter().map(|chunk| (Vec::new(), chunk));
        for (added, removed) in added.chain(removed) {
            let len = added.len() + removed.len();
            if len > room {
                messages.push(Vec::new());
                room = max;
            }
            room -= len;
            if let Some(message) = messages.last_mut() {
                message.push(SummaryDelta { scopes: delta.scopes.clone(), added, removed });
            }
        }
    }
    messages
}

/// `filters` cut into runs of at most `max` (`max` > 0), in order.
fn chunks<F>(filters: Vec<F>, max: usize) -> Vec<Vec<F>> {
    let mut runs = Vec::with_capacity(filters.len().div_ceil(max));
    let mut filters = filters.into_iter().peekable();
    while filters.peek().is_some() {
        runs.push(filters.by_ref().take(max).collect());
    }
    runs
}

/// Why a batch of deltas could not be applied: the two ends no longer agree on the summary.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct OutOfSync {
    pub(crate) scope: Scope,
}

/// Applies a batch of deltas, all or nothing: on an inconsistency `held` is left untouched.
/// The batch is checked first against `held` and its own earlier entries, then applied, so the
/// cost follows the batch, not the summary.
pub(crate) fn apply<F: Filter>(held: &mut Scoped<F>, deltas: &[SummaryDelta<F>]) -> Result<(), OutOfSync> {
    let mut pending: BTreeMap<(&Scope, &F), bool> = BTreeMap::new();
    for delta in deltas {
        for scope in &delta.scopes {
            for filter in &delta.removed {
                check(&mut pending, held, scope, filter, false)?;
            }
            for filter in &delta.added {
                check(&mut pending, held, scope, filter, true)?;
            }
        }
    }
    for delta in deltas {
        for scope in &delta.scopes {
            let set = held.entry(scope.clone()).or_default();
            for filter in &delta.removed {
                set.remove(filter);
            }
            set.extend(delta.added.iter().cloned());
            if set.is_empty() {
                held.remove(scope);
            }
        }
    }
    Ok(())
}

/// Checks that `filter` is in (for `present == false`, a removal) or not in (an addition)
/// `scope` as `held` and the batch so far have it, and records the change.
fn check<'a, F: Filter>(
    pending: &mut BTreeMap<(&'a Scope, &'a F), bool>,
    held: &Scoped<F>,
    scope: &'a Scope,
    filter: &'a F,
    present: bool,
) -> Result<(), OutOfSync> {
    let now = match pending.get(&(scope, filter)) {
        Some(now) => *now,
        None => held.get(scope).is_some_and(|set| set.contains(filter)),
    };
    if now == present {
        return Err(OutOfSync { scope: scope.clone() });
    }
    pending.insert((scope, filter), present);
    Ok(())
}

/// Number of filters over all scopes: the summary size the metrics report.
pub(crate) fn size<F>(summary: &Scoped<F>) -> usize {
    summary.values().map(BTreeSet::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::test_filter::Range;

    fn scoped(entries: &[(Scope, &[Range])]) -> Scoped<Range> {
        entries.iter().map(|(scope, filters)| (scope.clone(), filters.iter().copied().collect())).collect()
    }

    fn tree(root: &str) -> Scope {
        Scope::Tree(root.into())
    }

    /// All scopes of either side, brought to `desired`.
    fn diff(sent: &Scoped<Range>, desired: &Scoped<Range>) -> Vec<SummaryDelta<Range>> {
        let mut sent = sent.clone();
        let scopes = sent.keys().chain(desired.keys()).cloned().collect();
        let deltas = diff_scopes(&mut sent, scopes, |scope| desired.get(scope));
        assert_eq!(&sent, desired);
        deltas
    }

    #[test]
    fn a_change_common_to_many_trees_travels_as_one_delta() {
        let sent = scoped(&[(tree("A"), &[Range(0, 1)]), (tree("B"), &[Range(0, 1)])]);
        let desired = scoped(&[(tree("A"), &[Range(0, 1), Range(5, 6)]), (tree("B"), &[Range(0, 1), Range(5, 6)])]);
        let deltas = diff(&sent, &desired);
        assert_eq!(deltas.len(), 1);
        assert_eq!(deltas[0].scopes, vec![tree("A"), tree("B")]);
        assert_eq!(deltas[0].added, vec![Range(5, 6)]);
    }

    #[test]
    fn a_large_summary_goes_in_messages_each_applied_in_turn_to_the_same_end() {
        let scope = tree("c");
        let before: BTreeSet<Range> = (0..2500).map(|i| Range(i, i)).collect();
        let mut held: Scoped<Range> = BTreeMap::from([(scope.clone(), before.clone())]);
        let delta = SummaryDelta {
            scopes: vec![scope.clone()],
            added: (10_000..13_000).map(|i| Range(i, i)).collect(),
            removed: before.iter().copied().collect(),
        };
        let small = SummaryDelta { scopes: vec![Scope::Local], added: vec![Range(0, 1)], removed: vec![] };
        let messages = split(vec![delta.clone(), small.clone()], 1024);
        assert_eq!(messages.len(), 6, "5,501 filters in messages of 1,024");
        for message in &messages {
            let filters: usize = message.iter().map(|d| d.added.len() + d.removed.len()).sum();
            assert!(filters <= 1024, "{filters} filters in one message");
            apply(&mut held, message).expect("every prefix applies");
            let kept = held.get(&scope).map_or(0, BTreeSet::len);
            assert!(kept >= 2500, "the interest held shrank below either end's: {kept}");
        }
        let mut whole: Scoped<Range> = BTreeMap::from([(scope.clone(), before)]);
        apply(&mut whole, &[delta.clone(), small.clone()]).unwrap();
        assert_eq!(held, whole);
        assert_eq!(split(vec![small.clone()], 1024), vec![vec![small]], "a message that fits is sent as it is");
    }

    #[test]
    fn applying_the_diff_reproduces_the_desired_summary() {
        let sent = scoped(&[(Scope::Local, &[Range(0, 1)]), (tree("A"), &[Range(2, 3)])]);
        let desired = scoped(&[(tree("A"), &[Range(4, 4)]), (tree("C"), &[Range(1, 9)])]);
        let mut held = sent.clone();
        apply(&mut held, &diff(&sent, &desired)).unwrap();
        assert_eq!(held, desired);
    }

    #[test]
    fn removing_what_was_never_added_is_refused_and_changes_nothing() {
        let mut held = scoped(&[(tree("A"), &[Range(0, 1)])]);
        let before = held.clone();
        let bad = [
            SummaryDelta { scopes: vec![tree("A")], added: vec![Range(7, 7)], removed: vec![] },
            SummaryDelta { scopes: vec![tree("B")], added: vec![], removed: vec![Range(0, 1)] },
        ];
        assert_eq!(apply(&mut held, &bad), Err(OutOfSync { scope: tree("B") }));
        assert_eq!(held, before);
    }

    #[test]
    fn no_change_means_no_delta() {
        let same = scoped(&[(tree("A"), &[Range(0, 1)])]);
        assert!(diff(&same, &same).is_empty());
    }
}
