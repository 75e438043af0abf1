//! `Minimized` against `minimize` over random insert/remove sequences.

use super::*;
use crate::filter::minimize;
use crate::filter::test_filter::{Path, Range, Rng};
use crate::filter::LinearIndex;

/// A range with a tag that covering ignores: tags make distinct but equivalent filters, so the
/// tie-break (smallest kept) is exercised.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Tagged(Range, u8);

impl Filter for Tagged {
    type Message = u32;
    type Index = LinearIndex<Self>;
    fn matches(&self, message: &u32) -> bool {
        self.0.matches(message)
    }
    fn covers(&self, other: &Self) -> bool {
        self.0.covers(&other.0)
    }
}

/// Runs `steps` random inserts and removes of filters drawn by `draw`, checking after each that
/// the kept set is `minimize` of the inputs and that the reported delta is the kept set's change.
fn agrees_with_minimize<F: Filter>(seed: u64, steps: usize, mut draw: impl FnMut(&mut Rng) -> F) {
    let mut rng = Rng(seed);
    let mut set = Minimized::default();
    let mut model: BTreeMap<F, u32> = BTreeMap::new();
    for step in 0..steps {
        let mut delta = Delta::default();
        let before = set.kept_sorted();
        let held: Vec<F> = model.keys().cloned().collect();
        if !held.is_empty() && rng.below(5) < 2 {
            let filter = held[rng.below(held.len() as u32) as usize].clone();
            assert!(set.remove(&filter, &mut delta));
            let count = model.get_mut(&filter).unwrap();
            *count -= 1;
            if *count == 0 {
                model.remove(&filter);
            }
        } else {
            let filter = draw(&mut rng);
            set.insert(&filter, &mut delta);
            *model.entry(filter).or_insert(0) += 1;
        }
        let expected: BTreeSet<F> = minimize(model.keys()).into_iter().collect();
        assert_eq!(set.kept_sorted(), expected, "seed {seed} step {step}");
        assert_eq!(set.distinct_inputs(), model.len());
        let mut applied = before;
        for filter in &delta.removed {
            assert!(applied.remove(filter), "seed {seed} step {step}: removed {filter:?} was not kept");
        }
        for filter in &delta.added {
            assert!(applied.insert(filter.clone()), "seed {seed} step {step}: added {filter:?} was kept");
        }
        assert_eq!(applied, expected, "seed {seed} step {step}: delta");
    }
}

#[test]
fn ranges_without_keys_stay_minimized_through_random_changes() {
    for seed in 1..=40 {
        agrees_with_minimize(seed, 200, |rng| {
            let lo = rng.below(12);
            Range(lo, lo + rng.below(6))
        });
    }
}

#[test]
fn equivalent_filters_keep_the_smallest_through_random_changes() {
    for seed in 1..=40 {
        agrees_with_minimize(seed, 200, |rng| {
            let lo = rng.below(6);
            Tagged(Range(lo, lo + rng.below(4)), rng.below(3) as u8)
        });
    }
}

#[test]
fn keyed_paths_stay_minimized_through_random_changes() {
    let names = ["a", "a.b", "a.b.c", "a.c", "a.b.d", "b", "b.a", "ab", "ab.c", "a.bc"];
    for seed in 1..=40 {
        agrees_with_minimize(seed, 300, |rng| {
            Path(names[rng.below(names.len() as u32) as usize].to_string(), rng.below(2) == 0)
        });
    }
}

#[test]
fn removing_a_wide_filter_brings_back_what_it_covered() {
    let mut set = Minimized::default();
    let mut delta = Delta::default();
    for filter in [Path("a.b".into(), false), Path("a.c".into(), true), Path("a".into(), true)] {
        set.insert(&filter, &mut delta);
    }
    assert_eq!(delta.added, [Path("a".into(), true)].into_iter().collect());
    let mut delta = Delta::default();
    assert!(set.remove(&Path("a".into(), true), &mut delta));
    assert_eq!(delta.removed, [Path("a".into(), true)].into_iter().collect());
    assert_eq!(delta.added, [Path("a.b".into(), false), Path("a.c".into(), true)].into_iter().collect());
    assert!(!set.remove(&Path("a".into(), true), &mut delta), "no longer an input");
}

/// A set copied from another's kept filters behaves as one built by inserting them: the same
/// kept set, and the same deltas for whatever comes next (each copied filter counted once).
#[test]
fn a_set_copied_from_kept_filters_behaves_as_one_built_by_inserting_them() {
    let names = ["a", "a.b", "a.b.c", "a.c", "b", "b.a"];
    for seed in 1..=20u64 {
        let mut rng = Rng(seed);
        let draw = |rng: &mut Rng| Path(names[rng.below(names.len() as u32) as usize].to_string(), rng.below(2) == 0);
        let mut source = Minimized::default();
        for _ in 0..12 {
            source.insert(&draw(&mut rng), &mut Delta::default());
        }
        let mut copied = Minimized::from_kept_of(&source);
        let mut inserted = Minimized::from_filters(source.kept());
        assert_eq!(copied.kept_sorted(), inserted.kept_sorted());
        assert_eq!(copied.distinct_inputs(), inserted.distinct_inputs());
        for _ in 0..40 {
            let filter = draw(&mut rng);
            let (mut a, mut b) = (Delta::default(), Delta::default());
            if rng.below(2) == 0 {
                copied.insert(&filter, &mut a);
                inserted.insert(&filter, &mut b);
            } else {
                assert_eq!(copied.remove(&filter, &mut a), inserted.remove(&filter, &mut b));
            }
            assert_eq!(a, b, "seed {seed}: {filter:?}");
            assert_eq!(copied.kept_sorted(), inserted.kept_sorted());
            for kept in inserted.kept() {
                assert!(copied.is_kept(kept));
            }
            assert!(!copied.is_kept(&Path("zz".into(), false)));
        }
    }
}
