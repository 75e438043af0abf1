//! Per-property predicate buckets: equality by hash, ranges by ordered thresholds.
//!
//! A subscription sits in the bucket of each key of its access predicate. For a message, each of
//! its properties reaches exactly the buckets whose predicate it satisfies: one hash lookup for
//! equality, and for ranges an ordered walk over exactly the thresholds the value passes. So the
//! work per message follows the number of satisfied access predicates, never the number of
//! subscriptions.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use tidings_wire::ValueRef;

use super::shared::PropertyId;
use crate::selector::{Number, NumberKey, OrderedNumber};

/// A value an equality predicate can name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum EqualKey {
    Str(Box<str>),
    Number(NumberKey),
    Bool(bool),
}

/// Whether a range threshold itself satisfies the predicate (`>=`, `<=`) or not (`>`, `<`).
/// Ordered `Strict` first, so that `(t, Strict) < (t, Inclusive)` in the range maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Inclusion {
    Strict,
    Inclusive,
}

/// What an access predicate asks of its property.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeyKind {
    /// `property = value`.
    Equal(EqualKey),
    /// `property > threshold` or `>=`: a lower bound.
    Above(OrderedNumber, Inclusion),
    /// `property < threshold` or `<=`: an upper bound.
    Below(OrderedNumber, Inclusion),
}

/// One key under which a subscription is filed: a property and what it must satisfy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AccessKey {
    pub(crate) property: PropertyId,
    pub(crate) kind: KeyKind,
}

/// A subscription in a bucket: its slot, and which of its access keys put it here (to fix up its
/// recorded position when a swap-removal moves it).
#[derive(Debug, Clone)]
pub(crate) struct Member<S> {
    pub(crate) slot: u32,
    pub(crate) link: u32,
    /// What delivery needs, copied here when the subscription has a single access key and a
    /// residue of shared atoms only (the content index's `Direct`). Delivery then never touches
    /// the entry: one cache miss fewer per candidate on a large index, and a range that reaches
    /// thousands of subscriptions stays one sequential walk.
    pub(crate) direct: Option<S>,
}

/// Which member a swap-removal moved, so its entry can record its new position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) slot: u32,
    pub(crate) link: u32,
}

/// The members filed under one key. Most equality keys of a selective workload hold a single
/// subscription, so one member is stored inline: a message reaching it costs no extra pointer
/// chase (one cache miss fewer per candidate on a large index).
#[derive(Debug)]
pub(crate) enum Members<S> {
    One(Member<S>),
    Many(Vec<Member<S>>),
}

impl<S> Default for Members<S> {
    fn default() -> Self {
        Members::Many(Vec::new())
    }
}

impl<S> Members<S> {
    pub(crate) fn as_slice(&self) -> &[Member<S>] {
        match self {
            Members::One(member) => std::slice::from_ref(member),
            Members::Many(members) => members,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Appends `member`; returns its position.
    fn push(&mut self, member: Member<S>) -> u32 {
        match self {
            Members::Many(members) if members.is_empty() => *self = Members::One(member),
            Members::Many(members) => members.push(member),
            Members::One(_) => {
                if let Members::One(first) = std::mem::take(self) {
                    *self = Members::Many(vec![first, member]);
                }
            }
        }
        self.len() as u32 - 1
    }

    /// Removes the member at `position`; returns the member moved into its place, if any.
    fn swap_remove(&mut self, position: usize) -> Option<Moved> {
        match self {
            Members::One(_) if position == 0 => {
                *self = Members::default();
                None
            }
            Members::One(_) => None,
            Members::Many(members) if position < members.len() => {
                members.swap_remove(position);
                let moved = members.get(position).map(|m| Moved { slot: m.slot, link: m.link });
                if members.len() == 1 {
                    // Back to inline; the remaining member is at position 0 either way.
                    if let Some(only) = members.pop() {
                        *self = Members::One(only);
                    }
                }
                moved
            }
            Members::Many(_) => None,
        }
    }
}

/// The range thresholds of one property, kept apart (boxed, created on first use) because most
/// properties have none, and an unused part should cost a pointer, not two maps.
#[derive(Debug)]
struct Ranges<S> {
    /// Lower bounds: `property > threshold` (strict) and `property >= threshold` (inclusive).
    above: BTreeMap<(OrderedNumber, Inclusion), Members<S>>,
    /// Upper bounds: `property < threshold` and `property <= threshold`.
    below: BTreeMap<(OrderedNumber, Inclusion), Members<S>>,
    /// Members in `above` and `below`, for cost estimates.
    above_len: usize,
    below_len: usize,
}

impl<S> Default for Ranges<S> {
    fn default() -> Self {
        Ranges { above: BTreeMap::new(), below: BTreeMap::new(), above_len: 0, below_len: 0 }
    }
}

/// All buckets for one property.
///
/// Invariant: no map holds an empty bucket, and `booleans` / `ranges` are `None` when empty.
#[derive(Debug)]
pub(crate) struct PropertyIndex<S> {
    strings: FxHashMap<Box<str>, Members<S>>,
    numbers: FxHashMap<NumberKey, Members<S>>,
    /// `property = FALSE`, `property = TRUE` (and a bare boolean `property`).
    booleans: Option<Box<[Members<S>; 2]>>,
    ranges: Option<Box<Ranges<S>>>,
    len: usize,
}

impl<S> Default for PropertyIndex<S> {
    fn default() -> Self {
        PropertyIndex {
            strings: FxHashMap::default(),
            numbers: FxHashMap::default(),
            booleans: None,
            ranges: None,
            len: 0,
        }
    }
}

impl<S> PropertyIndex<S> {
    /// Files `member` under `key`; returns its position in the bucket.
    pub(crate) fn add(&mut self, key: &KeyKind, member: Member<S>) -> u32 {
        self.len += 1;
        let position = self.bucket_mut(key).push(member);
        if let Some(ranges) = self.ranges.as_deref_mut() {
            match key {
                KeyKind::Above(..) => ranges.above_len += 1,
                KeyKind::Below(..) => ranges.below_len += 1,
                KeyKind::Equal(..) => {}
            }
        }
        position
    }

    /// Removes the member at `position` under `key`; returns the member moved into its place.
    pub(crate) fn remove(&mut self, key: &KeyKind, position: u32) -> Option<Moved> {
        self.len -= 1;
        if let Some(ranges) = self.ranges.as_deref_mut() {
            match key {
                KeyKind::Above(..) => ranges.above_len -= 1,
                KeyKind::Below(..) => ranges.below_len -= 1,
                KeyKind::Equal(..) => {}
            }
        }
        let bucket = self.bucket_mut(key);
        let moved = bucket.swap_remove(position as usize);
        let now_empty = bucket.is_empty();
        if now_empty {
            self.prune(key);
        }
        moved
    }

    /// True when no subscription is filed here.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Roughly how many members a message would reach through `key`: the bucket size for
    /// equality, half the property's bounds of that direction for ranges.
    pub(crate) fn cost(&self, key: &KeyKind) -> usize {
        match key {
            KeyKind::Equal(EqualKey::Str(text)) => self.strings.get(text).map_or(0, |m| m.len()),
            KeyKind::Equal(EqualKey::Number(number)) => self.numbers.get(number).map_or(0, |m| m.len()),
            KeyKind::Equal(EqualKey::Bool(value)) => self.booleans.as_ref().map_or(0, |b| b[usize::from(*value)].len()),
            KeyKind::Above(..) => self.ranges.as_ref().map_or(0, |r| r.above_len / 2),
            KeyKind::Below(..) => self.ranges.as_ref().map_or(0, |r| r.below_len / 2),
        }
    }

    /// Calls `visit` on every member whose predicate `value` satisfies.
    pub(crate) fn for_each_satisfied(&self, value: ValueRef<'_>, visit: &mut impl FnMut(&Member<S>)) {
        let mut visit_all = |members: &Members<S>| members.as_slice().iter().for_each(&mut *visit);
        let number = match value {
            ValueRef::Str(text) => {
                if let Some(bucket) = self.strings.get(text) {
                    visit_all(bucket);
                }
                return;
            }
            ValueRef::Bool(flag) => {
                if let Some(booleans) = &self.booleans {
                    visit_all(&booleans[usize::from(flag)]);
                }
                return;
            }
            ValueRef::Int(i) => Number::Int(i),
            ValueRef::Float(x) => Number::Float(x),
        };
        if let Some(bucket) = number.key().and_then(|key| self.numbers.get(&key)) {
            visit_all(bucket);
        }
        let (Some(ranges), Some(value)) = (self.ranges.as_deref(), OrderedNumber::new(number)) else { return };
        // A threshold equal to the value admits it only when inclusive.
        let admits = |threshold: &OrderedNumber, inclusion: &Inclusion| {
            *threshold != value || *inclusion == Inclusion::Inclusive
        };
        for ((threshold, inclusion), members) in ranges.above.range(..=(value, Inclusion::Inclusive)) {
            if admits(threshold, inclusion) {
                visit_all(members);
            }
        }
        for ((threshold, inclusion), members) in ranges.below.range((value, Inclusion::Strict)..) {
            if admits(threshold, inclusion) {
                visit_all(members);
            }
        }
    }

    fn bucket_mut(&mut self, key: &KeyKind) -> &mut Members<S> {
        match key {
            KeyKind::Equal(EqualKey::Str(text)) => self.strings.entry(text.clone()).or_default(),
            KeyKind::Equal(EqualKey::Number(number)) => self.numbers.entry(*number).or_default(),
            KeyKind::Equal(EqualKey::Bool(value)) => {
                let booleans = self.booleans.get_or_insert_with(|| Box::new([Members::default(), Members::default()]));
                &mut booleans[usize::from(*value)]
            }
            KeyKind::Above(threshold, inclusion) => {
                self.ranges.get_or_insert_with(Box::default).above.entry((*threshold, *inclusion)).or_default()
            }
            KeyKind::Below(threshold, inclusion) => {
                self.ranges.get_or_insert_with(Box::default).below.entry((*threshold, *inclusion)).or_default()
            }
        }
    }

    /// Drops the emptied bucket of `key`, so maps hold only live keys.
    fn prune(&mut self, key: &KeyKind) {
        match key {
            KeyKind::Equal(EqualKey::Str(text)) => {
                self.strings.remove(text);
            }
            KeyKind::Equal(EqualKey::Number(number)) => {
                self.numbers.remove(number);
            }
            KeyKind::Equal(EqualKey::Bool(_)) => {
                if self.booleans.as_ref().is_some_and(|b| b.iter().all(Members::is_empty)) {
                    self.booleans = None;
                }
            }
            KeyKind::Above(threshold, inclusion) | KeyKind::Below(threshold, inclusion) => {
                if let Some(ranges) = self.ranges.as_deref_mut() {
                    let side = if matches!(key, KeyKind::Above(..)) { &mut ranges.above } else { &mut ranges.below };
                    side.remove(&(*threshold, *inclusion));
                }
                if self.ranges.as_ref().is_some_and(|r| r.above.is_empty() && r.below.is_empty()) {
                    self.ranges = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tidings_wire::Value;

    use super::*;

    fn member(slot: u32) -> Member<u32> {
        Member { slot, link: 0, direct: None }
    }

    fn threshold(number: Number) -> OrderedNumber {
        OrderedNumber::new(number).unwrap()
    }

    fn satisfied(index: &PropertyIndex<u32>, value: Value) -> Vec<u32> {
        let mut slots = Vec::new();
        index.for_each_satisfied(value.borrowed(), &mut |m| slots.push(m.slot));
        slots.sort_unstable();
        slots
    }

    #[test]
    fn one_member_is_inline_and_more_spill_to_a_vector() {
        let mut members: Members<u32> = Members::default();
        assert!(members.is_empty());
        assert_eq!(members.push(member(1)), 0);
        assert!(matches!(members, Members::One(_)));
        assert_eq!(members.push(member(2)), 1);
        assert_eq!(members.push(member(3)), 2);
        assert_eq!(members.swap_remove(0).map(|m| m.slot), Some(3));
        assert_eq!(members.swap_remove(1).map(|m| m.slot), None);
        assert!(matches!(members, Members::One(Member { slot: 3, .. })));
        assert_eq!(members.swap_remove(0).map(|m| m.slot), None);
        assert!(members.is_empty());
    }

    #[test]
    fn thresholds_admit_their_own_value_only_when_inclusive() {
        let mut index: PropertyIndex<u32> = PropertyIndex::default();
        let five = threshold(Number::Int(5));
        index.add(&KeyKind::Above(five, Inclusion::Strict), member(1));
        index.add(&KeyKind::Above(five, Inclusion::Inclusive), member(2));
        index.add(&KeyKind::Below(five, Inclusion::Strict), member(3));
        index.add(&KeyKind::Below(five, Inclusion::Inclusive), member(4));
        assert_eq!(satisfied(&index, Value::Int(5)), [2, 4]);
        assert_eq!(satisfied(&index, Value::Float(5.5)), [1, 2]);
        assert_eq!(satisfied(&index, Value::Float(4.5)), [3, 4]);
        assert_eq!(satisfied(&index, Value::Float(f64::NAN)), [] as [u32; 0]);
        assert_eq!(satisfied(&index, Value::from("5")), [] as [u32; 0]);
    }

    #[test]
    fn removing_a_bound_leaves_the_opposite_bound_at_the_same_threshold() {
        let mut index: PropertyIndex<u32> = PropertyIndex::default();
        let five = threshold(Number::Int(5));
        let above = KeyKind::Above(five, Inclusion::Strict);
        let below = KeyKind::Below(five, Inclusion::Strict);
        index.add(&above, member(1));
        index.add(&below, member(2));
        index.remove(&above, 0);
        assert_eq!(satisfied(&index, Value::Int(4)), [2]);
        assert_eq!(satisfied(&index, Value::Int(6)), [] as [u32; 0]);
        assert_eq!(index.cost(&above), 0);
        index.remove(&below, 0);
        assert!(index.is_empty());
        assert!(index.ranges.is_none(), "an emptied range part is dropped");
    }

    #[test]
    fn equal_numbers_of_either_type_reach_the_same_bucket() {
        let mut index: PropertyIndex<u32> = PropertyIndex::default();
        let key = KeyKind::Equal(EqualKey::Number(Number::Float(2.0).key().unwrap()));
        index.add(&key, member(1));
        index.add(&KeyKind::Equal(EqualKey::Bool(true)), member(2));
        assert_eq!(satisfied(&index, Value::Int(2)), [1]);
        assert_eq!(satisfied(&index, Value::Float(2.0)), [1]);
        assert_eq!(satisfied(&index, Value::Bool(true)), [2]);
        assert_eq!(index.cost(&key), 1);
        assert_eq!(index.remove(&key, 0).map(|m| m.slot), None);
        assert_eq!(satisfied(&index, Value::Int(2)), [] as [u32; 0]);
        assert!(!index.is_empty());
    }
}
