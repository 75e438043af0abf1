//! The time series of figure 6: per bin, the latency (p50, max) of the deliveries each
//! subscriber received in it, and the nacks and nack range (ms of the pubend's clock) each
//! watched broker sent, with the fault events that fell in it, and the acknowledgements the
//! publishers took in it (where a crash of their broker holds them up, and a takeover lets them
//! go on). Every delivery, acknowledgement and scrape counts; nothing is sampled away.

use serde_json::Value;

use super::faults::Window;
use super::sampler::{growth, Sample};
use crate::stats::quantile;
use crate::suite::table::{num, Table};

/// One delivery: when it was published and received (Unix µs, one machine's clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Delivery {
    /// `sent_us`.
    pub sent_us: u64,
    /// `received_us`.
    pub received_us: u64,
    /// The publisher id (16 hex digits as a number; 0 if absent).
    pub publisher: u64,
}

impl Delivery {
    /// Latency in ms.
    pub(super) fn latency_ms(&self) -> f64 {
        self.received_us.saturating_sub(self.sent_us) as f64 / 1e3
    }
}

/// The deliveries in a subscriber's lines, in arrival order.
pub(super) fn deliveries(lines: &[Value]) -> Vec<Delivery> {
    lines
        .iter()
        .filter_map(|l| {
            let publisher = l["properties"]["publisher"].as_str().and_then(|p| u64::from_str_radix(p, 16).ok());
            Some(Delivery {
                sent_us: l["sent_us"].as_u64()?,
                received_us: l["received_us"].as_u64()?,
                publisher: publisher.unwrap_or(0),
            })
        })
        .collect()
}

/// Latency of one bin at one subscriber.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct LatencyBin {
    /// Deliveries in the bin.
    pub count: usize,
    /// Median latency, ms (`None` without deliveries).
    pub p50_ms: Option<f64>,
    /// Largest latency, ms.
    pub max_ms: Option<f64>,
}

/// Nacks of one bin at one broker.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct NackBin {
    /// Nack messages sent.
    pub nacks: f64,
    /// Ticks nacked, as ms (1000 ticks per ms).
    pub range_ms: f64,
    /// Nacked ticks absorbed by consolidation, as ms.
    pub absorbed_ms: f64,
}

/// The whole series.
#[derive(Debug, Clone, Default)]
pub(super) struct Series {
    /// Bin starts, seconds from the start of publishing.
    pub t_s: Vec<f64>,
    /// Per subscriber, one entry per bin.
    pub latency: Vec<(String, Vec<LatencyBin>)>,
    /// Per watched broker, one entry per bin.
    pub nacks: Vec<(String, Vec<NackBin>)>,
    /// Fault events per bin ("stall b1-s1", ...).
    pub events: Vec<String>,
    /// Acknowledgements the publishers took per bin, all together.
    pub acks: Vec<usize>,
}

/// Bins `[t0, end)` into `bin_us` steps; `acked_us` holds when each acknowledgement was taken.
pub(super) fn bin(
    (t0_us, end_us, bin_us): (u64, u64, u64),
    subs: &[(String, Vec<Delivery>)],
    samples: &[(String, Vec<Sample>)],
    windows: &[Window],
    acked_us: &[u64],
) -> Series {
    let n = (end_us.saturating_sub(t0_us)).div_ceil(bin_us.max(1)) as usize;
    let index = |us: u64| us.checked_sub(t0_us).map(|d| (d / bin_us) as usize).filter(|&i| i < n);
    let t_s = (0..n).map(|i| (i as u64 * bin_us) as f64 / 1e6).collect();
    let latency = subs
        .iter()
        .map(|(name, ds)| {
            let mut per: Vec<Vec<u64>> = vec![Vec::new(); n];
            for d in ds {
                if let Some(i) = index(d.received_us) {
                    per[i].push(d.received_us.saturating_sub(d.sent_us));
                }
            }
            let bins = per
                .into_iter()
                .map(|mut v| {
                    v.sort_unstable();
                    let ms = |us: Option<u64>| us.map(|u| u as f64 / 1e3);
                    LatencyBin { count: v.len(), p50_ms: ms(quantile(&v, 0.5)), max_ms: ms(v.last().copied()) }
                })
                .collect();
            (name.clone(), bins)
        })
        .collect();
    let nacks = samples
        .iter()
        .map(|(name, ss)| {
            let mut bins = vec![NackBin::default(); n];
            for w in ss.windows(2) {
                if let Some(i) = index(w[1].unix_us) {
                    bins[i].nacks += growth(w[0].nacks, w[1].nacks);
                    bins[i].range_ms += growth(w[0].nack_ticks, w[1].nack_ticks) / 1e3;
                    bins[i].absorbed_ms += growth(w[0].absorbed_ticks, w[1].absorbed_ticks) / 1e3;
                }
            }
            (name.clone(), bins)
        })
        .collect();
    let mut events = vec![String::new(); n];
    for w in windows {
        for (ms, what) in [(w.stalled_ms, "stall"), (w.failed_ms, "fail"), (w.ended_ms, "end")] {
            if let Some(i) = index(ms * 1000) {
                let sep = if events[i].is_empty() { "" } else { "; " };
                events[i] = format!("{}{sep}{what}: {}", events[i], w.label);
            }
        }
    }
    let mut acks = vec![0; n];
    for i in acked_us.iter().filter_map(|&us| index(us)) {
        acks[i] += 1;
    }
    Series { t_s, latency, nacks, events, acks }
}

impl Series {
    /// The CSV columns: t_s, per subscriber and watched broker its own, then `faults`,
    /// `publisher_acks` and `rep`.
    pub(super) fn columns(&self) -> Vec<String> {
        let mut columns = vec!["t_s".to_string()];
        for (s, _) in &self.latency {
            columns.extend(["deliveries", "latency_p50_ms", "latency_max_ms"].map(|c| format!("{s}_{c}")));
        }
        for (b, _) in &self.nacks {
            columns.extend(["nacks_sent", "nack_range_ms", "nack_absorbed_ms"].map(|c| format!("{b}_{c}")));
        }
        columns.extend(["faults", "publisher_acks", "rep"].map(String::from));
        columns
    }

    /// Appends this series' rows, repetition `rep`, to `table` (of [`Series::columns`]).
    pub(super) fn rows(&self, rep: usize, table: &mut Table) -> anyhow::Result<()> {
        let opt = |v: Option<f64>| v.map(num).unwrap_or_default();
        for (i, t) in self.t_s.iter().enumerate() {
            let mut row = vec![format!("{t:.1}")];
            for (_, bins) in &self.latency {
                row.extend([bins[i].count.to_string(), opt(bins[i].p50_ms), opt(bins[i].max_ms)]);
            }
            for (_, bins) in &self.nacks {
                row.extend([num(bins[i].nacks), num(bins[i].range_ms), num(bins[i].absorbed_ms)]);
            }
            row.extend([self.events[i].clone(), self.acks[i].to_string(), rep.to_string()]);
            table.push(row)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_and_scrapes_fall_into_their_bins() {
        let d = |sent: u64, received: u64| Delivery { sent_us: sent, received_us: received, publisher: 1 };
        let subs = vec![("s1".to_string(), vec![d(0, 1_000), d(50_000, 52_000), d(100_000, 400_000)])];
        let s = |us: u64, nacks: f64, ticks: f64| Sample { unix_us: us, nacks, nack_ticks: ticks, absorbed_ticks: 0.0 };
        let samples = vec![("b1".to_string(), vec![s(0, 0.0, 0.0), s(150_000, 2.0, 4000.0), s(250_000, 1.0, 500.0)])];
        let w = Window { label: "x", stalled_ms: 100, failed_ms: 200, ended_ms: 250 };
        let series = bin((0, 500_000, 100_000), &subs, &samples, &[w], &[10, 120_000, 130_000, 600_000]);
        assert_eq!(series.t_s.len(), 5);
        let lat = &series.latency[0].1;
        assert_eq!((lat[0].count, lat[0].max_ms), (2, Some(2.0)));
        assert_eq!((lat[4].count, lat[4].p50_ms), (1, Some(300.0)));
        let nacks = &series.nacks[0].1;
        assert_eq!((nacks[1].nacks, nacks[1].range_ms), (2.0, 4.0));
        assert_eq!(nacks[2].nacks, 1.0, "the broker restarted: its counter begins again");
        assert_eq!(series.events[2], "fail: x; end: x");
        assert_eq!(series.acks, [1, 2, 0, 0, 0], "an acknowledgement after the end is outside");
        let mut table = Table::new(&series.columns().iter().map(String::as_str).collect::<Vec<_>>());
        series.rows(2, &mut table).unwrap();
        assert_eq!(table.rows().len(), 5);
        let csv = table.to_csv();
        assert!(csv.starts_with("t_s,s1_deliveries,s1_latency_p50_ms"));
        assert!(csv.lines().next().unwrap().ends_with(",faults,publisher_acks,rep"), "{csv}");
        assert!(csv.lines().nth(2).unwrap().ends_with(",2,2"), "{csv}");
    }
}
