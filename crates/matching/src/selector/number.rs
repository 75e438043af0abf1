//! Numbers as selectors see them: integers and floats compared exactly, never through a lossy
//! cast, so that the index (which orders and hashes numbers) agrees with the evaluator.

use std::cmp::Ordering;

/// An integer or float property value or literal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
}

/// 2^63 as a float: the first float above every i64.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

impl Number {
    /// Exact comparison of the mathematical values; `None` when either is NaN.
    pub(crate) fn compare(self, other: Number) -> Option<Ordering> {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => Some(a.cmp(&b)),
            (Number::Float(a), Number::Float(b)) => a.partial_cmp(&b),
            (Number::Int(a), Number::Float(b)) => compare_int_float(a, b),
            (Number::Float(a), Number::Int(b)) => compare_int_float(b, a).map(Ordering::reverse),
        }
    }

    /// The hash key under which equal numbers meet: `5`, `5.0` and `-0.0`/`0` share a key.
    /// `None` for NaN, which equals nothing.
    pub(crate) fn key(self) -> Option<NumberKey> {
        match self {
            Number::Int(i) => Some(NumberKey::Int(i)),
            Number::Float(x) if x.is_nan() => None,
            Number::Float(x) if x.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&x) => {
                Some(NumberKey::Int(x as i64))
            }
            Number::Float(x) => Some(NumberKey::Float(x.to_bits())),
        }
    }

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(x) => x,
        }
    }
}

/// Compares an integer with a float without rounding the integer.
fn compare_int_float(int: i64, float: f64) -> Option<Ordering> {
    if float.is_nan() {
        return None;
    }
    if float >= TWO_POW_63 {
        return Some(Ordering::Less);
    }
    if float < -TWO_POW_63 {
        return Some(Ordering::Greater);
    }
    // In range, so truncation is exact and the fractional part decides ties.
    let whole = float.trunc() as i64;
    Some(int.cmp(&whole).then_with(|| 0.0f64.partial_cmp(&float.fract()).unwrap_or(Ordering::Equal)))
}

/// Hash key for numeric equality (see [`Number::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum NumberKey {
    /// Integers, and floats with an integral value in i64 range.
    Int(i64),
    /// Other floats, by bit pattern.
    Float(u64),
}

/// A number that is never NaN, with the total order of [`Number::compare`]; the range index sorts
/// its thresholds by it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderedNumber(Number);

impl OrderedNumber {
    /// `None` for NaN, which has no place in an order.
    pub(crate) fn new(number: Number) -> Option<OrderedNumber> {
        number.compare(number).map(|_| OrderedNumber(number))
    }
}

impl PartialEq for OrderedNumber {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for OrderedNumber {}

impl PartialOrd for OrderedNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        // Neither side is NaN by construction, so `compare` always answers.
        self.0.compare(other.0).unwrap_or(Ordering::Equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_floats_compare_exactly() {
        let big = (1i64 << 53) + 1;
        assert_eq!(Number::Int(big).compare(Number::Float((1i64 << 53) as f64)), Some(Ordering::Greater));
        assert_eq!(Number::Int(2).compare(Number::Float(2.0)), Some(Ordering::Equal));
        assert_eq!(Number::Int(2).compare(Number::Float(2.5)), Some(Ordering::Less));
        assert_eq!(Number::Int(-2).compare(Number::Float(-2.5)), Some(Ordering::Greater));
        assert_eq!(Number::Float(-0.5).compare(Number::Int(0)), Some(Ordering::Less));
        assert_eq!(Number::Int(i64::MAX).compare(Number::Float(TWO_POW_63)), Some(Ordering::Less));
        assert_eq!(Number::Int(i64::MIN).compare(Number::Float(-TWO_POW_63)), Some(Ordering::Equal));
        assert_eq!(Number::Int(0).compare(Number::Float(f64::INFINITY)), Some(Ordering::Less));
        assert_eq!(Number::Int(0).compare(Number::Float(f64::NAN)), None);
    }

    #[test]
    fn equal_numbers_share_a_hash_key() {
        assert_eq!(Number::Int(5).key(), Number::Float(5.0).key());
        assert_eq!(Number::Float(-0.0).key(), Number::Int(0).key());
        assert_ne!(Number::Float(5.5).key(), Number::Int(5).key());
        assert_eq!(Number::Float(f64::NAN).key(), None);
        assert_eq!(Number::Float(TWO_POW_63).key(), Some(NumberKey::Float(TWO_POW_63.to_bits())));
    }

    #[test]
    fn nan_has_no_place_in_the_order() {
        assert!(OrderedNumber::new(Number::Float(f64::NAN)).is_none());
        let one = OrderedNumber::new(Number::Int(1)).unwrap();
        let one_float = OrderedNumber::new(Number::Float(1.0)).unwrap();
        assert_eq!(one, one_float);
        assert!(OrderedNumber::new(Number::Float(0.5)).unwrap() < one);
    }
}
