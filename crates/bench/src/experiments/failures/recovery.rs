//! Recovery after a fault, at one subscriber, measured three ways from the fault's end (the link
//! healed, the broker restarted): until the first delivery of a message published after it,
//! until every publisher had one delivered (publishers reconnect on their own schedule), and
//! until the latency went back under twice its median before the fault (the first bin after
//! the end whose median is under, before the next fault or the end of the run).

use super::faults::Window;
use super::series::{Delivery, LatencyBin};
use crate::stats::median_if_any;

/// How one subscriber came through one fault.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Recovery {
    /// Median latency (ms) of the deliveries received in the baseline before the stall.
    pub baseline_ms: Option<f64>,
    /// The fault's end to the first delivery of a message published after it, ms.
    pub first_new_ms: Option<f64>,
    /// The fault's end to when every publisher had a message published after it delivered, ms.
    pub all_new_ms: Option<f64>,
    /// The fault's end to the start of the first bin after it whose median latency is under
    /// twice the baseline, ms (0 when the bin holding the end already is).
    pub back_ms: Option<f64>,
    /// Largest latency (ms) of a delivery received from the stall to the next fault.
    pub worst_ms: Option<f64>,
}

impl Recovery {
    /// Both measures were reached before the next fault.
    pub(super) fn recovered(&self) -> bool {
        self.all_new_ms.is_some() && self.back_ms.is_some()
    }
}

/// `ds` and `bins` are one subscriber's deliveries and latency bins (bin i starts at
/// `t0_us + i * bin_us`); `until_ms` is where the fault's aftermath ends (the next stall, or the
/// end of the run); `baseline_ms` is how long before the stall the baseline is taken.
pub(super) fn recovery(
    w: &Window,
    ds: &[Delivery],
    (bins, t0_us, bin_us): (&[LatencyBin], u64, u64),
    until_ms: u64,
    baseline_ms: u64,
) -> Recovery {
    let (stalled, ended, until) = (w.stalled_ms * 1000, w.ended_ms * 1000, until_ms * 1000);
    let before: Vec<f64> = ds
        .iter()
        .filter(|d| d.received_us < stalled && d.received_us + baseline_ms * 1000 >= stalled)
        .map(Delivery::latency_ms)
        .collect();
    let baseline = median_if_any(&before);
    let first_new = ds
        .iter()
        .filter(|d| d.sent_us >= ended && d.received_us < until)
        .map(|d| d.received_us)
        .min()
        .map(|r| (r - ended) as f64 / 1e3);
    let mut firsts: std::collections::BTreeMap<u64, Option<u64>> = ds.iter().map(|d| (d.publisher, None)).collect();
    for d in ds.iter().filter(|d| d.sent_us >= ended && d.received_us < until) {
        let first = firsts.entry(d.publisher).or_default();
        *first = Some(first.map_or(d.received_us, |f| f.min(d.received_us)));
    }
    let all_new = firsts.values().try_fold(ended, |m, f| f.map(|f| m.max(f))).map(|r| (r - ended) as f64 / 1e3);
    let worst = ds
        .iter()
        .filter(|d| d.received_us >= stalled && d.received_us < until)
        .map(Delivery::latency_ms)
        .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))));
    let back_ms = baseline.and_then(|b| {
        let start = |i: usize| t0_us + i as u64 * bin_us;
        let after: Vec<usize> = (0..bins.len()).filter(|&i| start(i) + bin_us > ended && start(i) < until).collect();
        let back = |i: &&usize| bins[**i].p50_ms.is_some_and(|p| p <= 2.0 * b);
        after.iter().find(back).map(|&i| start(i).saturating_sub(ended) as f64 / 1e3)
    });
    Recovery { baseline_ms: baseline, first_new_ms: first_new, all_new_ms: all_new, back_ms, worst_ms: worst }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_counts_from_the_faults_end() {
        let w = Window { label: "x", stalled_ms: 1000, failed_ms: 1500, ended_ms: 2000 };
        let d = |sent_ms: u64, received_ms: u64| Delivery {
            sent_us: sent_ms * 1000,
            received_us: received_ms * 1000,
            publisher: received_ms % 2,
        };
        // Baseline 10 ms; messages from the stall on arrive at 2300 ms; new ones at 2100 ms
        // (publisher 0) and 2511 ms (publisher 1).
        let ds = [d(900, 910), d(950, 960), d(1200, 2300), d(2050, 2100), d(2501, 2511)];
        let bin = |p: f64| LatencyBin { count: 1, p50_ms: Some(p), max_ms: Some(p) };
        let mut bins = vec![LatencyBin::default(); 30];
        bins[9] = bin(10.0);
        bins[23] = bin(1100.0);
        bins[24] = bin(10.0);
        bins[26] = bin(1100.0);
        let r = recovery(&w, &ds, (&bins, 0, 100_000), 3000, 500);
        assert_eq!(r.baseline_ms, Some(10.0));
        assert_eq!(r.first_new_ms, Some(100.0));
        assert_eq!(r.all_new_ms, Some(511.0));
        assert_eq!(r.back_ms, Some(400.0), "bin 24 (2.4 s) is the first under 20 ms");
        assert_eq!(r.worst_ms, Some(1100.0));
        assert!(r.recovered());
        let r = recovery(&w, &ds[..3], (&bins, 0, 100_000), 3000, 500);
        assert!(!r.recovered(), "nothing published after the fault arrived");
    }
}
