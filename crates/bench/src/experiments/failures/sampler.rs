//! Scrapes the nack counters of the watched brokers' `/metrics` on a fixed period, one thread
//! per broker: a stalled broker holds its own scrape (up to the HTTP timeout) without delaying
//! the others', and a killed one simply has no samples until it is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tidings_client::now_us;

use crate::metrics::{self, GD_NACKS_SENT, GD_NACK_TICKS_ABSORBED, GD_NACK_TICKS_SENT};

/// One scrape of one broker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sample {
    /// When it was taken (Unix µs).
    pub unix_us: u64,
    /// Nack messages sent upstream so far.
    pub nacks: f64,
    /// Ticks nacked upstream so far.
    pub nack_ticks: f64,
    /// Nacked ticks absorbed by consolidation so far.
    pub absorbed_ticks: f64,
}

/// The sampling threads.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    threads: Vec<(String, JoinHandle<Vec<Sample>>)>,
}

impl Sampler {
    /// Starts scraping `(name, admin address)` every `period`.
    pub(super) fn start(brokers: Vec<(String, String)>, period: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = brokers
            .into_iter()
            .map(|(name, admin)| {
                let stop = Arc::clone(&stop);
                (name, std::thread::spawn(move || sample(&admin, period, &stop)))
            })
            .collect();
        Sampler { stop, threads }
    }

    /// Stops and returns every broker's samples, in time order.
    pub(super) fn finish(self) -> Vec<(String, Vec<Sample>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|(name, t)| (name, t.join().unwrap_or_default())).collect()
    }
}

fn sample(admin: &str, period: Duration, stop: &AtomicBool) -> Vec<Sample> {
    let mut out = Vec::new();
    let start = std::time::Instant::now();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(s) = metrics::scrape(admin) {
            out.push(Sample {
                unix_us: now_us(),
                nacks: s.sum(GD_NACKS_SENT),
                nack_ticks: s.sum(GD_NACK_TICKS_SENT),
                absorbed_ticks: s.sum(GD_NACK_TICKS_ABSORBED),
            });
        }
        n += 1;
        let next = start + period * n;
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    out
}

/// How much a counter grew from `before` to `after`; a counter that went down was reset by a
/// restart of its broker, so all of `after` is new.
pub(super) fn growth(before: f64, after: f64) -> f64 {
    if after >= before {
        after - before
    } else {
        after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_counter_counts_from_zero() {
        assert_eq!(growth(5.0, 8.0), 3.0);
        assert_eq!(growth(50.0, 2.0), 2.0);
    }
}
