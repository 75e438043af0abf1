//! Per-property predicate buckets: equality by hash, ranges by ordered thresholds.
//!
//! A subscription sits in the bucket of each key of its access predicate. For a message, each of
//! its properties reaches exactly the buckets whose predicate it satisfies: one hash lookup for
//! equality, and for ranges an ordered walk over exactly the thresholds the value passes. So the
//! work per message follows the number of satisfied access predicates, never the number of
//! subscriptions.

use std::collections::BTreeMap;
use std::ops::Bound;

use rustc_hash::FxHashMap;
use tidings_wire::Value;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy)]
pub(crate) struct Member {
    pub(crate) slot: u32,
    pub(crate) link: u32,
}

/// Members at one range threshold.
#[derive(Debug, Default)]
struct RangeBucket {
    strict: Vec<Member>,
    inclusive: Vec<Member>,
}

impl RangeBucket {
    fn side(&mut self, inclusion: Inclusion) -> &mut Vec<Member> {
        match inclusion {
            Inclusion::Strict => &mut self.strict,
            Inclusion::Inclusive => &mut self.inclusive,
        }
    }

    fn is_empty(&self) -> bool {
        self.strict.is_empty() && self.inclusive.is_empty()
    }
}

/// All buckets for one property.
#[derive(Debug, Default)]
pub(crate) struct PropertyIndex {
    strings: FxHashMap<Box<str>, Vec<Member>>,
    numbers: FxHashMap<NumberKey, Vec<Member>>,
    booleans: [Vec<Member>; 2],
    above: BTreeMap<OrderedNumber, RangeBucket>,
    below: BTreeMap<OrderedNumber, RangeBucket>,
    /// Members in `above` and `below`, for cost estimates.
    above_len: usize,
    below_len: usize,
    len: usize,
}

impl PropertyIndex {
    /// Files `member` under `key`; returns its position in the bucket.
    pub(crate) fn add(&mut self, key: &KeyKind, member: Member) -> u32 {
        self.len += 1;
        match key {
            KeyKind::Above(..) => self.above_len += 1,
            KeyKind::Below(..) => self.below_len += 1,
            KeyKind::Equal(..) => {}
        }
        let bucket = self.bucket_mut(key);
        bucket.push(member);
        bucket.len() as u32 - 1
    }

    /// Removes the member at `position` under `key`; returns the member moved into its place.
    pub(crate) fn remove(&mut self, key: &KeyKind, position: u32) -> Option<Member> {
        self.len -= 1;
        match key {
            KeyKind::Above(..) => self.above_len -= 1,
            KeyKind::Below(..) => self.below_len -= 1,
            KeyKind::Equal(..) => {}
        }
        let bucket = self.bucket_mut(key);
        let position = position as usize;
        if position >= bucket.len() {
            return None;
        }
        bucket.swap_remove(position);
        let moved = bucket.get(position).copied();
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
            KeyKind::Equal(EqualKey::Str(text)) => self.strings.get(text).map_or(0, Vec::len),
            KeyKind::Equal(EqualKey::Number(number)) => self.numbers.get(number).map_or(0, Vec::len),
            KeyKind::Equal(EqualKey::Bool(value)) => self.booleans[usize::from(*value)].len(),
            KeyKind::Above(..) => self.above_len / 2,
            KeyKind::Below(..) => self.below_len / 2,
        }
    }

    /// Calls `visit` on every member whose predicate `value` satisfies.
    pub(crate) fn for_each_satisfied(&self, value: &Value, visit: &mut impl FnMut(Member)) {
        let mut visit_all = |members: &[Member]| members.iter().for_each(|m| visit(*m));
        let number = match value {
            Value::Str(text) => return self.strings.get(text.as_str()).into_iter().for_each(|b| visit_all(b)),
            Value::Bool(flag) => return visit_all(&self.booleans[usize::from(*flag)]),
            Value::Int(i) => Number::Int(*i),
            Value::Float(x) => Number::Float(*x),
        };
        if let Some(bucket) = number.key().and_then(|key| self.numbers.get(&key)) {
            visit_all(bucket);
        }
        let Some(value) = OrderedNumber::new(number) else { return };
        for (threshold, bucket) in self.above.range(..=value) {
            if *threshold != value {
                visit_all(&bucket.strict);
            }
            visit_all(&bucket.inclusive);
        }
        for (threshold, bucket) in self.below.range((Bound::Included(value), Bound::Unbounded)) {
            if *threshold != value {
                visit_all(&bucket.strict);
            }
            visit_all(&bucket.inclusive);
        }
    }

    fn bucket_mut(&mut self, key: &KeyKind) -> &mut Vec<Member> {
        match key {
            KeyKind::Equal(EqualKey::Str(text)) => self.strings.entry(text.clone()).or_default(),
            KeyKind::Equal(EqualKey::Number(number)) => self.numbers.entry(*number).or_default(),
            KeyKind::Equal(EqualKey::Bool(value)) => &mut self.booleans[usize::from(*value)],
            KeyKind::Above(threshold, inclusion) => self.above.entry(*threshold).or_default().side(*inclusion),
            KeyKind::Below(threshold, inclusion) => self.below.entry(*threshold).or_default().side(*inclusion),
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
            KeyKind::Equal(EqualKey::Bool(_)) => {}
            KeyKind::Above(threshold, _) => {
                if self.above.get(threshold).is_some_and(RangeBucket::is_empty) {
                    self.above.remove(threshold);
                }
            }
            KeyKind::Below(threshold, _) => {
                if self.below.get(threshold).is_some_and(RangeBucket::is_empty) {
                    self.below.remove(threshold);
                }
            }
        }
    }
}
