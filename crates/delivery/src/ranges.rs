//! A map from ticks to values stored as coalesced runs, so that a stream stays a handful of
//! entries under long silences and long gaps (a 10-minute silence is one entry, not 600,000).
//!
//! Invariants: runs never overlap; two runs that touch (`a.to + 1 == b.from`) never hold equal
//! values (they would have been merged); every run has `from <= to`.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::names::{Tick, TickRange};

/// One run of equal values, as the map reports it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Run<V> {
    /// The ticks the run covers.
    pub range: TickRange,
    /// Their value.
    pub value: V,
}

/// Tick-indexed runs of values; absent ticks have no value (Q for knowledge, N for curiosity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeMap<V> {
    /// start tick -> (end tick inclusive, value).
    runs: BTreeMap<u64, (u64, V)>,
}

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        Self { runs: BTreeMap::new() }
    }
}

impl<V: Copy + Eq> RangeMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of runs held: the map's size, whatever the number of ticks covered.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// True when no tick has a value.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The value at `tick`, if any.
    pub fn get(&self, tick: Tick) -> Option<V> {
        self.run_at(tick).map(|run| run.value)
    }

    /// The run containing `tick`, if any.
    pub fn run_at(&self, tick: Tick) -> Option<Run<V>> {
        if self.is_beyond_last(tick.0) {
            return None;
        }
        let (&from, &(to, value)) = self.runs.range(..=tick.0).next_back()?;
        (to >= tick.0).then_some(Run { range: TickRange { from: Tick(from), to: Tick(to) }, value })
    }

    /// The highest tick holding a value.
    pub fn last_tick(&self) -> Option<Tick> {
        self.runs.values().next_back().map(|&(to, _)| Tick(to))
    }

    /// The lowest tick holding a value.
    pub fn first_tick(&self) -> Option<Tick> {
        self.runs.keys().next().map(|&from| Tick(from))
    }

    /// The first `max` spans of ticks holding a value (runs that touch are one span, whatever
    /// their values), and whether more follow: a bounded look at a map of any size, for a
    /// view that shows what is asked for without copying all of it.
    pub fn first_spans(&self, max: usize) -> (Vec<TickRange>, bool) {
        let mut spans: Vec<TickRange> = Vec::new();
        for (&from, &(to, _)) in &self.runs {
            let touching = spans.last_mut().filter(|last| from == last.to.0.saturating_add(1));
            if let Some(last) = touching {
                last.to = Tick(to);
            } else if spans.len() == max {
                return (spans, true);
            } else {
                spans.push(TickRange { from: Tick(from), to: Tick(to) });
            }
        }
        (spans, false)
    }

    /// The runs overlapping `range`, clipped to it, in tick order.
    pub fn runs(&self, range: TickRange) -> impl Iterator<Item = Run<V>> + '_ {
        let start = match self.run_at(range.from) {
            Some(run) => run.range.from.0,
            None => range.from.0,
        };
        self.runs.range(start..=range.to.0).map(move |(&from, &(to, value))| Run {
            range: TickRange { from: Tick(from.max(range.from.0)), to: Tick(to.min(range.to.0)) },
            value,
        })
    }

    /// The runs overlapping `range`, clipped, from the highest down.
    pub fn runs_rev(&self, range: TickRange) -> impl Iterator<Item = Run<V>> + '_ {
        let start = match self.run_at(range.from) {
            Some(run) => run.range.from.0,
            None => range.from.0,
        };
        self.runs.range(start..=range.to.0).rev().map(move |(&from, &(to, value))| Run {
            range: TickRange { from: Tick(from.max(range.from.0)), to: Tick(to.min(range.to.0)) },
            value,
        })
    }

    /// True when every run ends before `tick` (the common case of new ticks arriving at the
    /// end of a stream; it spares a tree search).
    fn is_beyond_last(&self, tick: u64) -> bool {
        self.runs.last_key_value().is_none_or(|(_, &(to, _))| tick > to)
    }

    /// The sub-ranges of `range` that hold no value, in tick order, appended to `out`.
    pub fn absent(&self, range: TickRange, out: &mut Vec<TickRange>) {
        if self.is_beyond_last(range.from.0) {
            out.push(range);
            return;
        }
        let mut next = range.from.0;
        for run in self.runs(range) {
            if run.range.from.0 > next {
                out.push(TickRange { from: Tick(next), to: run.range.from.prev() });
            }
            next = run.range.to.0.saturating_add(1);
            if run.range.to.0 == u64::MAX {
                return;
            }
        }
        if next <= range.to.0 {
            out.push(TickRange { from: Tick(next), to: range.to });
        }
    }

    /// The first tick `>= tick` with no value (`None` only if every tick up to `u64::MAX` has one).
    /// One tree search, then a walk over the touching runs that follow.
    pub fn first_absent_from(&self, tick: Tick) -> Option<Tick> {
        let Some(run) = self.run_at(tick) else { return Some(tick) };
        let mut at = run.range.to.0.checked_add(1)?;
        for (&from, &(to, _)) in self.runs.range(at..) {
            if from != at {
                break;
            }
            at = to.checked_add(1)?;
        }
        Some(Tick(at))
    }

    /// Sets every tick of `range` to `value`, replacing what was there.
    pub fn insert(&mut self, range: TickRange, value: V) {
        self.cut(range, |_| ());
        self.put(range.from.0, range.to.0, value);
    }

    /// Sets the ticks of `range` that hold no value to `value`; the ranges actually filled are
    /// appended to `filled`.
    pub fn fill(&mut self, range: TickRange, value: V, filled: &mut Vec<TickRange>) {
        let start = filled.len();
        self.absent(range, filled);
        for piece in &filled[start..] {
            self.put(piece.from.0, piece.to.0, value);
        }
    }

    /// Removes every value in `range`; the removed runs (clipped) go to `removed`.
    pub fn remove(&mut self, range: TickRange, removed: &mut Vec<Run<V>>) {
        self.cut(range, |run| removed.push(run));
    }

    /// Removes every value at or below `tick`. One split of the tree, not a removal per run: a
    /// released prefix can be a million runs (each message a D run beside an F run), and the
    /// stream's broker waits for this.
    pub fn clear_through(&mut self, tick: Tick) {
        if self.first_tick().is_none_or(|first| first > tick) {
            return;
        }
        if tick.0 == u64::MAX {
            self.runs.clear();
            return;
        }
        if let Some(run) = self.run_at(tick).filter(|run| run.range.to > tick) {
            self.runs.insert(tick.0 + 1, (run.range.to.0, run.value));
        }
        self.runs = self.runs.split_off(&tick.0.saturating_add(1));
    }

    /// Removes `range` from the map, splitting runs at its edges; `removed` sees each clipped run.
    fn cut(&mut self, range: TickRange, mut removed: impl FnMut(Run<V>)) {
        let (lo, hi) = (range.from.0, range.to.0);
        if let Some(run) = self.run_at(range.from) {
            if run.range.from.0 < lo {
                self.runs.insert(run.range.from.0, (lo - 1, run.value));
                self.runs.insert(lo, (run.range.to.0, run.value));
            }
        }
        if let Some(run) = self.run_at(range.to) {
            if run.range.to.0 > hi {
                self.runs.insert(run.range.from.0, (hi, run.value));
                self.runs.insert(hi + 1, (run.range.to.0, run.value));
            }
        }
        while let Some((&from, _)) = self.runs.range(lo..=hi).next() {
            if let Some((to, value)) = self.runs.remove(&from) {
                removed(Run { range: TickRange { from: Tick(from), to: Tick(to) }, value });
            }
        }
    }

    /// Inserts `[from, to] = value` into a hole, merging with equal neighbours.
    fn put(&mut self, mut from: u64, mut to: u64, value: V) {
        if from > 0 {
            if let Some((&prev_from, &(prev_to, prev_value))) = self.runs.range(..from).next_back() {
                if prev_to + 1 == from && prev_value == value {
                    self.runs.remove(&prev_from);
                    from = prev_from;
                }
            }
        }
        if to < u64::MAX && !self.is_beyond_last(to) {
            let next = self.runs.range((Bound::Excluded(to), Bound::Unbounded)).next().map(|(&f, &r)| (f, r));
            if let Some((next_from, (next_to, next_value))) = next {
                if next_from == to + 1 && next_value == value {
                    self.runs.remove(&next_from);
                    to = next_to;
                }
            }
        }
        self.runs.insert(from, (to, value));
    }

    /// Bytes held by the map's runs (an estimate from the node payload, for memory reports).
    pub fn approx_bytes(&self) -> usize {
        self.runs.len() * (std::mem::size_of::<u64>() * 2 + std::mem::size_of::<V>() + 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap as Naive;

    fn r(from: u64, to: u64) -> TickRange {
        TickRange { from: Tick(from), to: Tick(to) }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64, u8),
        Fill(u64, u64, u8),
        Remove(u64, u64),
        ClearThrough(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let range = (0u64..64, 0u64..8).prop_map(|(a, len)| (a, a + len));
        prop_oneof![
            (range.clone(), 0u8..3).prop_map(|((a, b), v)| Op::Insert(a, b, v)),
            (range.clone(), 0u8..3).prop_map(|((a, b), v)| Op::Fill(a, b, v)),
            range.prop_map(|(a, b)| Op::Remove(a, b)),
            (0u64..64).prop_map(Op::ClearThrough),
        ]
    }

    fn check_shape(map: &RangeMap<u8>) {
        let mut last: Option<(u64, u8)> = None;
        for (&from, &(to, value)) in &map.runs {
            assert!(from <= to);
            if let Some((last_to, last_value)) = last {
                assert!(from > last_to, "runs overlap");
                assert!(!(from == last_to + 1 && value == last_value), "touching equal runs not merged");
            }
            last = Some((to, value));
        }
    }

    proptest! {
        #[test]
        fn the_range_map_agrees_with_a_per_tick_map(ops in proptest::collection::vec(op(), 1..60)) {
            let mut map = RangeMap::new();
            let mut naive: Naive<u64, u8> = Naive::new();
            for op in ops {
                match op {
                    Op::Insert(a, b, v) => {
                        map.insert(r(a, b), v);
                        for t in a..=b { naive.insert(t, v); }
                    }
                    Op::Fill(a, b, v) => {
                        let mut filled = Vec::new();
                        map.fill(r(a, b), v, &mut filled);
                        let mut expected = Vec::new();
                        for t in a..=b {
                            if let std::collections::btree_map::Entry::Vacant(slot) = naive.entry(t) {
                                slot.insert(v);
                                expected.push(t);
                            }
                        }
                        let got: Vec<u64> = filled.iter().flat_map(|p| p.from.0..=p.to.0).collect();
                        prop_assert_eq!(got, expected);
                    }
                    Op::Remove(a, b) => {
                        let mut removed = Vec::new();
                        map.remove(r(a, b), &mut removed);
                        let got: Vec<(u64, u8)> =
                            removed.iter().flat_map(|run| (run.range.from.0..=run.range.to.0).map(move |t| (t, run.value))).collect();
                        let expected: Vec<(u64, u8)> = (a..=b).filter_map(|t| naive.remove(&t).map(|v| (t, v))).collect();
                        prop_assert_eq!(got, expected);
                    }
                    Op::ClearThrough(t) => {
                        map.clear_through(Tick(t));
                        naive.retain(|&k, _| k > t);
                    }
                }
                check_shape(&map);
                for t in 0..80 {
                    prop_assert_eq!(map.get(Tick(t)), naive.get(&t).copied());
                }
                let window = r(5, 70);
                let mut absent = Vec::new();
                map.absent(window, &mut absent);
                let got: Vec<u64> = absent.iter().flat_map(|p| p.from.0..=p.to.0).collect();
                let expected: Vec<u64> = (5..=70).filter(|t| !naive.contains_key(t)).collect();
                prop_assert_eq!(got, expected);
                let runs: Vec<(u64, u8)> =
                    map.runs(window).flat_map(|run| (run.range.from.0..=run.range.to.0).map(move |t| (t, run.value))).collect();
                let expected: Vec<(u64, u8)> = naive.range(5..=70).map(|(&t, &v)| (t, v)).collect();
                prop_assert_eq!(runs, expected);
                let first_absent = map.first_absent_from(Tick(10)).map(|t| t.0);
                let expected = (10..).find(|t| !naive.contains_key(t));
                prop_assert_eq!(first_absent, expected);
            }
        }
    }

    #[test]
    fn a_long_silence_is_one_run() {
        let mut map = RangeMap::new();
        let mut filled = Vec::new();
        for start in (0..1_000_000u64).step_by(1000) {
            map.fill(r(start, start + 999), 1u8, &mut filled);
        }
        assert_eq!(map.run_count(), 1);
        assert_eq!(map.get(Tick(999_999)), Some(1));
    }

    #[test]
    fn clear_through_splits_a_run() {
        let mut map = RangeMap::new();
        map.insert(r(10, 20), 1u8);
        map.clear_through(Tick(15));
        assert_eq!(map.get(Tick(15)), None);
        assert_eq!(map.get(Tick(16)), Some(1));
        assert_eq!(map.first_tick(), Some(Tick(16)));
    }

    /// A view of the first spans merges touching runs whatever their values, stops at `max`
    /// and says whether more follow.
    #[test]
    fn first_spans_merge_touching_runs_and_stop_at_the_bound() {
        let mut map = RangeMap::new();
        map.insert(r(1, 5), 1u8);
        map.insert(r(6, 9), 2);
        map.insert(r(20, 20), 1);
        map.insert(r(30, 40), 3);
        assert_eq!(map.first_spans(8), (vec![r(1, 9), r(20, 20), r(30, 40)], false));
        assert_eq!(map.first_spans(2), (vec![r(1, 9), r(20, 20)], true));
        assert_eq!(map.first_spans(3), (vec![r(1, 9), r(20, 20), r(30, 40)], false));
        assert_eq!(map.first_spans(0), (vec![], true));
        assert_eq!(RangeMap::<u8>::new().first_spans(8), (vec![], false));
    }
}
