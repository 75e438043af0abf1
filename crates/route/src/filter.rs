//! What a summary is made of. Routing is generic over [`Filter`] so that it does not depend on
//! the selector language: the broker plugs in (topic pattern, optional selector) from
//! `tidings-matching`; tests plug in something small.

use std::fmt::Debug;

/// One subscription's interest, as far as routing needs to know it.
///
/// `Ord` gives summaries a deterministic order (they are sets that travel on the wire and show up
/// in `/state`); `covers` lets a summary drop entries that another entry already implies.
pub trait Filter: Clone + Ord + Debug {
    /// The part of a data message the filter is evaluated against (for example its topic and
    /// properties); unsized so that `str` or a borrowed view can be used directly.
    type Message: ?Sized;

    /// Whether a message is of interest to this filter.
    fn matches(&self, message: &Self::Message) -> bool;

    /// Whether every message matching `other` also matches `self`. It may answer `false` when
    /// unsure: a missed covering only makes a summary larger, never wrong.
    fn covers(&self, other: &Self) -> bool;
}

/// Reduces a set of filters to the entries no other entry covers, so the result matches exactly
/// the same messages as the input. Among equivalent filters (each covers the other) the smallest
/// by `Ord` is kept, so every broker reduces the same set to the same summary.
///
/// Quadratic in the number of filters; summaries are expected to stay in the hundreds per link.
pub fn minimize<'a, F: Filter + 'a>(filters: impl IntoIterator<Item = &'a F>) -> Vec<F> {
    let mut sorted: Vec<&F> = filters.into_iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut kept: Vec<&F> = Vec::with_capacity(sorted.len());
    for filter in sorted {
        if kept.iter().any(|k| k.covers(filter)) {
            continue;
        }
        kept.retain(|k| !filter.covers(k));
        kept.push(filter);
    }
    let mut out: Vec<F> = kept.into_iter().cloned().collect();
    out.sort();
    out
}

/// Whether any filter of a summary matches the message: the per-link test of the data path.
pub fn any_matches<F: Filter>(summary: &[F], message: &F::Message) -> bool {
    summary.iter().any(|filter| filter.matches(message))
}

#[cfg(test)]
pub(crate) mod test_filter {
    //! Integer ranges: the smallest filter with a non-trivial covering relation.
    use super::Filter;

    /// Interest in the inclusive range `lo..=hi`.
    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Range(pub(crate) u32, pub(crate) u32);

    impl Filter for Range {
        type Message = u32;
        fn matches(&self, message: &u32) -> bool {
            (self.0..=self.1).contains(message)
        }
        fn covers(&self, other: &Self) -> bool {
            self.0 <= other.0 && other.1 <= self.1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_filter::Range;
    use super::*;

    #[test]
    fn covered_entries_are_removed_whatever_the_input_order() {
        let input = [Range(3, 4), Range(0, 10), Range(20, 30), Range(5, 5)];
        assert_eq!(minimize(&input), vec![Range(0, 10), Range(20, 30)]);
        let reversed: Vec<Range> = input.iter().rev().copied().collect();
        assert_eq!(minimize(&reversed), vec![Range(0, 10), Range(20, 30)]);
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
