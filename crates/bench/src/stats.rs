//! Small statistics shared by the benchmarks, and seed 002's windowed rates.

/// Lives with the tables (`tidings-nemesis`), which the nemesis's recovery times use as well.
pub use tidings_nemesis::table::median;

/// The median, or `None` for an empty sample: a report cell or plotted point with no
/// repetition behind it shows as missing, never as a 0.
pub fn median_if_any(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| median(values))
}

/// Seed 002's median: "sort ascending, take the N/2-th element; when there are two middle
/// elements, take the smaller". `None` for an empty sample.
pub fn lower_median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v[(v.len() - 1) / 2])
}

/// (max - min) / median: how far repetitions disagree, as the peer harness reports it.
pub fn spread(values: &[f64]) -> f64 {
    let m = median(values);
    if m == 0.0 {
        return 0.0;
    }
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    let min = values.iter().copied().fold(f64::MAX, f64::min);
    (max - min) / m
}

/// Seed 002's throughput while message n passes: `M / (T[n] - T[n-M])`, for every n ≥ M
/// where both times are known. `times[n]` is the time in seconds at which message n was sent
/// (STn) or received (RTn), NaN when it never was. Two equal times give an infinite rate,
/// kept as such: the median decides whether it matters.
pub fn window_rates(times: &[f64], m: usize) -> Vec<f64> {
    if m == 0 {
        return Vec::new();
    }
    times
        .iter()
        .skip(m)
        .zip(times.iter())
        .filter(|(now, before)| now.is_finite() && before.is_finite())
        .map(|(now, before)| m as f64 / (now - before))
        .collect()
}

/// Block medians of a windowed-rate series, for plotting a long series as one point per
/// `block` values (every value counts in its block; none is left out).
pub fn block_medians(values: &[f64], block: usize) -> Vec<(usize, f64)> {
    if block == 0 {
        return Vec::new();
    }
    values
        .chunks(block)
        .enumerate()
        .filter_map(|(i, chunk)| lower_median(chunk).map(|m| (i * block + chunk.len() / 2, m)))
        .collect()
}

/// The value at quantile `q` (0 to 1) of a sample, by the nearest rank on the sorted values;
/// `None` for an empty sample.
pub fn quantile(values: &[u64], q: f64) -> Option<u64> {
    let mut v = values.to_vec();
    v.sort_unstable();
    let last = v.len().checked_sub(1)?;
    v.get((last as f64 * q.clamp(0.0, 1.0)).round() as usize).copied()
}

/// Repetitions of one figure: the median with the min-max range beside it, and whether the
/// repetitions disagree by more than [`Spread::FLAG`] of the median (flagged in reports).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest repetition.
    pub min: f64,
    /// Largest repetition.
    pub max: f64,
    /// (max - min) / median.
    pub spread: f64,
    /// `spread` > [`Spread::FLAG`].
    pub flagged: bool,
}

impl Spread {
    /// The spread above which a point is flagged.
    pub const FLAG: f64 = 0.25;

    /// The spread of `values` (NaN figures when empty).
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN, spread: f64::NAN, flagged: false };
        }
        let spread = spread(values);
        Spread {
            median: median(values),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            spread,
            flagged: spread > Spread::FLAG,
        }
    }

    /// `median [min-max]`, with ` (spread N %!)` when flagged.
    pub fn show(&self, format: impl Fn(f64) -> String) -> String {
        let flag = if self.flagged { format!(" (spread {:.0} %!)", self.spread * 100.0) } else { String::new() };
        format!("{} [{}-{}]{flag}", format(self.median), format(self.min), format(self.max))
    }
}

/// The machine's 1-minute load average now (Linux `/proc/loadavg`), other programs included.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_over_a_quarter_of_the_median_is_flagged() {
        let s = Spread::of(&[100.0, 110.0, 130.0]);
        assert_eq!((s.median, s.min, s.max, s.flagged), (110.0, 100.0, 130.0, true));
        assert!(!Spread::of(&[100.0, 110.0, 120.0]).flagged);
        assert_eq!(Spread::of(&[1.0, 2.0, 3.0]).show(|v| format!("{v:.0}")), "2 [1-3] (spread 100 %!)");
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v = [5, 1, 4, 2, 3];
        assert_eq!(quantile(&v, 0.5), Some(3));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&v, 1.0), Some(5));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn lower_median_takes_the_smaller_middle_element() {
        assert_eq!(lower_median(&[4.0, 1.0, 2.0, 3.0]), Some(2.0));
        assert_eq!(lower_median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(lower_median(&[]), None);
    }

    #[test]
    fn spread_is_range_over_median() {
        assert_eq!(spread(&[9.0, 10.0, 11.0]), 0.2);
    }

    #[test]
    fn window_rates_follow_the_seed_formula() {
        // One message every 10 ms: M = 2 gives 2 / 0.02 = 100 msg/s at every n >= 2.
        let times: Vec<f64> = (0..6).map(|n| n as f64 * 0.01).collect();
        let rates = window_rates(&times, 2);
        assert_eq!(rates.len(), 4);
        for r in rates {
            assert!((r - 100.0).abs() < 1e-9, "{r}");
        }
    }

    #[test]
    fn window_rates_skip_messages_that_never_arrived() {
        let times = [0.0, 0.1, f64::NAN, 0.3, 0.4];
        // Pairs (n, n-1): (1,0) ok, (2,1) missing, (3,2) missing, (4,3) ok.
        assert_eq!(window_rates(&times, 1).len(), 2);
        assert!(window_rates(&times, 0).is_empty());
        assert!(window_rates(&times[..1], 5).is_empty());
    }

    #[test]
    fn equal_times_give_an_infinite_rate_that_the_median_can_outvote() {
        let times = [0.0, 0.0, 1.0, 2.0];
        let rates = window_rates(&times, 1);
        assert_eq!(rates, vec![f64::INFINITY, 1.0, 1.0]);
        assert_eq!(lower_median(&rates), Some(1.0));
    }

    #[test]
    fn block_medians_cover_every_value() {
        let v: Vec<f64> = (0..10).map(f64::from).collect();
        assert_eq!(block_medians(&v, 4), vec![(2, 1.0), (6, 5.0), (9, 8.0)]);
    }
}
