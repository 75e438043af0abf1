//! Value parsers for the command line's numbers, shared by every `tidings` command: a count,
//! rate, size or repetition of zero (or less) is a usage error with one plain message, not a
//! run that divides by zero or silently does nothing.

use std::str::FromStr;

/// A number of at least 1 (counts, sizes, repetitions; for rates and durations: above 0).
pub fn at_least_one<T>(text: &str) -> Result<T, String>
where
    T: FromStr + PartialOrd + From<u8>,
{
    let value: T = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    if value < T::from(1) {
        return Err("must be at least 1".to_string());
    }
    Ok(value)
}

/// A number above zero that may be a fraction (rates in msg/s, durations in seconds).
pub fn above_zero(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !(value > 0.0 && value.is_finite()) {
        return Err("must be a number above 0".to_string());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_negative_and_junk_are_refused_with_a_plain_message() {
        assert_eq!(at_least_one::<u64>("0"), Err("must be at least 1".to_string()));
        assert_eq!(at_least_one::<usize>("3"), Ok(3));
        assert!(at_least_one::<u64>("-2").is_err());
        assert!(at_least_one::<u64>("ten").unwrap_err().contains("not a number"));
        assert_eq!(above_zero("0"), Err("must be a number above 0".to_string()));
        assert_eq!(above_zero("0.5"), Ok(0.5));
        assert!(above_zero("inf").is_err());
    }
}
