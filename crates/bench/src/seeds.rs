//! The seeds' own figures, transcribed from `../shared/seeds/`, drawn and tabulated beside
//! ours. These are the published numbers, not measurements of this machine.

/// Seed 003 / 000: subscribers, mean latency (µs) and dropped subscribers, per table.
pub struct LatencyTable {
    /// Which table.
    pub label: &'static str,
    /// Subscriber counts.
    pub subscribers: &'static [f64],
    /// Mean latency, µs.
    pub mean_us: &'static [f64],
    /// Standard deviation, µs (empty when the table has none).
    pub stdev_us: &'static [f64],
    /// Dropped subscribers.
    pub dropped: &'static [f64],
}

/// Seed 003, campus machine to campus machine (its Figure 3 table, one subscriber list).
pub const SEED_003_LAN: LatencyTable = LatencyTable {
    label: "seed 003 LAN (one list)",
    subscribers: &[10.0, 50.0, 100.0, 250.0, 500.0, 750.0, 1000.0],
    mean_us: &[765.0, 832.66, 8978.44, 34848.4, 64265.8, 100843.0, 128913.0],
    stdev_us: &[],
    dropped: &[0.0; 7],
};

/// Seed 003, off-campus VM to campus machine (its Figure 1 table).
pub const SEED_003_VM: LatencyTable = LatencyTable {
    label: "seed 003 VM (one list)",
    subscribers: &[10.0, 50.0, 100.0, 250.0, 500.0, 750.0, 1000.0],
    mean_us: &[18781.2, 29093.6, 30335.5, 33824.2, 79533.7, 101864.0, 152711.1],
    stdev_us: &[],
    dropped: &[0.0, 0.0, 0.0, 1.0, 1.0, 17.0, 199.0],
};

/// Seed 000 (per-topic lists), campus to campus (its Table 2), up to 10,000 subscribers.
pub const SEED_000_LAN: LatencyTable = LatencyTable {
    label: "seed 000 LAN (per-topic lists)",
    subscribers: &[10.0, 50.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 10000.0],
    mean_us: &[786.0, 843.32, 9991.47, 36815.612, 70309.902, 100300.1813, 137854.281, 1369857.456],
    stdev_us: &[9.626, 90.71, 9282.61, 11332.27, 15195.01, 20611.97, 28827.74, 270454.50],
    dropped: &[0.0; 8],
};

/// Seed 000, VM to campus (its Table 1).
pub const SEED_000_VM: LatencyTable = LatencyTable {
    label: "seed 000 VM (per-topic lists)",
    subscribers: &[10.0, 50.0, 100.0, 250.0, 500.0, 750.0, 1000.0],
    mean_us: &[16558.8, 19227.9, 18957.71, 29337.176, 70856.194, 105561.788, 135536.6412],
    stdev_us: &[779.10, 782.75, 1270.48, 6064.34, 14353.85, 21333.45, 26507.04],
    dropped: &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 150.0],
};

/// Every seed 003/000 table.
pub const LATENCY_TABLES: [&LatencyTable; 4] = [&SEED_003_LAN, &SEED_000_LAN, &SEED_003_VM, &SEED_000_VM];

impl LatencyTable {
    /// The row for `subscribers`, if the table has it: (mean µs, stdev µs, dropped).
    pub fn at(&self, subscribers: usize) -> Option<(f64, Option<f64>, f64)> {
        let i = self.subscribers.iter().position(|&n| n == subscribers as f64)?;
        Some((self.mean_us[i], self.stdev_us.get(i).copied(), self.dropped[i]))
    }
}

/// Seed 002's network ceiling, MB/s ("带宽瓶颈 ≈ 35 MB/s"); its size figure kept no values.
pub const SEED_002_CEILING_MB_S: f64 = 35.0;

/// A range of received rates, msg/s, that seed 002 gives in words.
#[derive(Debug, Clone, Copy)]
pub struct RateRange {
    /// Subscribers.
    pub subscribers: usize,
    /// Per-subscriber rate, low and high (msg/s).
    pub per_subscriber: (f64, f64),
    /// All subscribers together, low and high (msg/s); None when the seed gives none.
    pub aggregate: Option<(f64, f64)>,
}

/// Seed 002 experiment 3: 1 publisher, 10 subscribers, 2000 B.
pub const SEED_002_FANOUT_10: RateRange =
    RateRange { subscribers: 10, per_subscriber: (500.0, 3000.0), aggregate: Some((5000.0, 23000.0)) };

/// Seed 002 experiments 4 and 5: through a proxy, 2000 B, 1, 5, 7 and 10 subscribers.
pub const SEED_002_PROXY: [RateRange; 4] = [
    RateRange { subscribers: 1, per_subscriber: (2700.0, 6000.0), aggregate: None },
    RateRange { subscribers: 5, per_subscriber: (500.0, 2500.0), aggregate: Some((3000.0, 11000.0)) },
    RateRange { subscribers: 7, per_subscriber: (300.0, 2500.0), aggregate: Some((3000.0, 14000.0)) },
    RateRange { subscribers: 10, per_subscriber: (200.0, 2000.0), aggregate: Some((3000.0, 16000.0)) },
];

/// A point seed 004 quotes: matching rate, publish rate, size, mean latency (ms), variance.
#[derive(Debug, Clone, Copy)]
pub struct NaradaPoint {
    /// Matching rate, percent.
    pub matching: u32,
    /// Publish rate, msg/s.
    pub rate: f64,
    /// Message size, bytes.
    pub size: usize,
    /// Mean latency at the measuring subscriber (10 hops), ms.
    pub mean_ms: f64,
    /// Variance, ms².
    pub variance_ms2: f64,
}

/// Seed 004 section 8.3.1: the lowest and highest mean latency quoted for each matching rate.
pub const SEED_004_POINTS: [NaradaPoint; 8] = [
    NaradaPoint { matching: 100, rate: 1.0, size: 50, mean_ms: 15.54, variance_ms2: 2.3684 },
    NaradaPoint { matching: 100, rate: 952.0, size: 450, mean_ms: 391.85, variance_ms2: 69713.93 },
    NaradaPoint { matching: 50, rate: 20.0, size: 50, mean_ms: 13.02, variance_ms2: 56.8196 },
    NaradaPoint { matching: 50, rate: 952.0, size: 350, mean_ms: 178.66, variance_ms2: 14634.0 },
    NaradaPoint { matching: 25, rate: 20.0, size: 50, mean_ms: 14.40, variance_ms2: 0.24 },
    NaradaPoint { matching: 25, rate: 961.0, size: 400, mean_ms: 66.6, variance_ms2: 587.04 },
    NaradaPoint { matching: 10, rate: 20.0, size: 50, mean_ms: 14.40, variance_ms2: 0.44 },
    NaradaPoint { matching: 10, rate: 952.0, size: 400, mean_ms: 52.0, variance_ms2: 103.0 },
];

/// Seed 004 section 8.3.2: the highest throughput at the measuring subscriber, msg/s, at
/// 100 % matching (492 msg/s published, 75 B), and 78 msg/s received at 952 msg/s, 450 B.
pub const SEED_004_THROUGHPUT: [(f64, usize, f64); 3] = [(1.0, 50, 1.0), (492.0, 75, 480.76), (952.0, 450, 78.0)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_rectangular() {
        for t in LATENCY_TABLES {
            assert_eq!(t.subscribers.len(), t.mean_us.len(), "{}", t.label);
            assert_eq!(t.subscribers.len(), t.dropped.len(), "{}", t.label);
            assert!(t.stdev_us.is_empty() || t.stdev_us.len() == t.subscribers.len(), "{}", t.label);
        }
    }

    #[test]
    fn rows_are_found_by_subscriber_count() {
        assert_eq!(SEED_000_LAN.at(10000).map(|r| r.0), Some(1369857.456));
        assert_eq!(SEED_003_VM.at(1000).map(|r| r.2), Some(199.0));
        assert!(SEED_003_LAN.at(10000).is_none());
    }
}
