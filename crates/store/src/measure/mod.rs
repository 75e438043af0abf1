//! The append benchmark: a closed loop that keeps N appends in flight against the store (or,
//! with the `engines` feature, against fjall or redb behind the same group-commit shape) and
//! reports acknowledged appends per second, ack latency percentiles and group sizes, beside raw
//! `write + fdatasync` of one record. Used by `tidings bench store` and the criterion benches.

#[cfg(feature = "engines")]
pub mod engines;

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;

use crate::{
    Completion, FsyncPolicy, Options, PubendId, PublisherId, PublisherSeq, Record, Store, StoreError, Tick, Token,
};

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Appends kept in flight (submitted, not yet acknowledged).
    pub in_flight: usize,
    /// Payload bytes per record.
    pub payload: usize,
    /// How long to keep submitting.
    pub duration: Duration,
    /// Stop submitting after this many appends, even before `duration`.
    pub max_appends: u64,
    /// The store's fsync policy.
    pub fsync: FsyncPolicy,
}

/// One measured point.
#[derive(Clone, Debug)]
pub struct Report {
    /// What was measured.
    pub label: String,
    /// Appends in flight.
    pub in_flight: usize,
    /// Appends acknowledged.
    pub acked: u64,
    /// Wall time of the appends: from just after the store (or file) was opened to the last
    /// acknowledgement; opening and closing it are not in it (the criterion bench times this).
    pub seconds: f64,
    /// Acknowledged appends per second.
    pub acked_per_s: f64,
    /// Median submit-to-ack latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// Worst latency, µs.
    pub max_us: u64,
    /// Groups (writes) and syncs.
    pub groups: u64,
    /// Mean records per group.
    pub mean_group: f64,
    /// Largest group.
    pub max_group: u64,
    /// fdatasync calls.
    pub syncs: u64,
}

impl Report {
    /// The Markdown table header matching [`Report::row`].
    pub fn header() -> &'static str {
        "| engine | in flight | acked/s | p50 µs | p99 µs | max µs | mean group | max group | syncs/s |\n|---|---|---|---|---|---|---|---|---|"
    }

    /// One Markdown table row.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {:.0} | {} | {} | {} | {:.1} | {} | {:.0} |",
            self.label,
            self.in_flight,
            self.acked_per_s,
            self.p50_us,
            self.p99_us,
            self.max_us,
            self.mean_group,
            self.max_group,
            self.syncs as f64 / self.seconds.max(f64::EPSILON),
        )
    }
}

/// Latencies and counts of one closed-loop run.
pub(crate) struct Tally {
    started: Instant,
    latency: Histogram<u64>,
    acked: u64,
}

impl Tally {
    pub(crate) fn new() -> Self {
        // 3 significant figures up to an hour in µs; creation cannot fail with these bounds.
        let latency = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant figures are valid")));
        Tally { started: Instant::now(), latency, acked: 0 }
    }

    pub(crate) fn ack(&mut self, submitted: Instant) {
        let micros = submitted.elapsed().as_micros().max(1) as u64;
        let _ = self.latency.record(micros.min(self.latency.high()));
        self.acked += 1;
    }

    pub(crate) fn report(&self, label: &str, in_flight: usize, groups: u64, max_group: u64, syncs: u64) -> Report {
        let seconds = self.started.elapsed().as_secs_f64();
        Report {
            label: label.to_owned(),
            in_flight,
            acked: self.acked,
            seconds,
            acked_per_s: self.acked as f64 / seconds,
            p50_us: self.latency.value_at_quantile(0.5),
            p99_us: self.latency.value_at_quantile(0.99),
            max_us: self.latency.max(),
            groups,
            mean_group: self.acked as f64 / groups.max(1) as f64,
            max_group,
            syncs,
        }
    }
}

fn test_record(tick: u64, payload: &Bytes) -> Record {
    Record {
        pubend: PubendId(1),
        tick: Tick(tick),
        publisher: PublisherId(1),
        seq: PublisherSeq(tick),
        payload: payload.clone(),
    }
}

/// The next group's completions; any failure fails the run.
fn next_group(done: &Receiver<Vec<Completion>>) -> Result<usize, StoreError> {
    let group = done.recv_timeout(Duration::from_secs(60)).map_err(|_| StoreError::Closed)?;
    for completion in &group {
        completion.result.clone()?;
    }
    Ok(group.len())
}

/// Runs the closed loop against a fresh [`Store`] in `dir` (which should be empty).
pub fn store_appends(dir: &Path, workload: &Workload) -> Result<Report, StoreError> {
    // One message per group, as a broker's shell would take them: the loop then refills the
    // whole window at once, like publishers answering a batch of acks.
    let (tx, done) = channel();
    let sink = move |group: Vec<Completion>| {
        let _ = tx.send(group);
    };
    let options = Options { fsync: workload.fsync, ..Options::default() };
    let (store, _) = Store::open(dir, options, sink)?;
    let payload = Bytes::from(vec![0x5a; workload.payload]);
    let mut submitted = VecDeque::with_capacity(workload.in_flight);
    let mut tally = Tally::new();
    let mut tick = 0;
    let more = |tick: u64, tally: &Tally| tick < workload.max_appends && tally.started.elapsed() < workload.duration;
    while more(tick, &tally) || !submitted.is_empty() {
        let submitting = more(tick, &tally);
        if submitting {
            // Refill the window in one submission, as publishers answering a batch of acks.
            let room = (workload.in_flight - submitted.len()) as u64;
            let batch = room.min(workload.max_appends - tick);
            let first = tick + 1;
            tick += batch;
            store.append_many((first..=tick).map(|t| (Token(t), test_record(t, &payload))))?;
            let now = Instant::now();
            submitted.extend((0..batch).map(|_| now));
        }
        let acked = next_group(&done)?;
        for at in submitted.drain(..acked.min(submitted.len())) {
            tally.ack(at);
        }
    }
    let stats = store.stats();
    let label = format!("segment log ({})", workload.fsync);
    Ok(tally.report(&label, workload.in_flight, stats.groups, stats.max_group, stats.syncs))
}

/// Raw disk cost: `count` times, write `payload` bytes at the end of a file and `fdatasync` it
/// (what the raw fdatasync figures in `bench/peers/RESULTS.md` measures).
pub fn raw_fdatasync(dir: &Path, payload: usize, count: u64) -> std::io::Result<Report> {
    let path = dir.join("fdatasync.bin");
    let mut file = OpenOptions::new().create(true).append(true).truncate(false).open(&path)?;
    let bytes = vec![0x5a; payload];
    let mut tally = Tally::new();
    for _ in 0..count {
        let started = Instant::now();
        file.write_all(&bytes)?;
        file.sync_data()?;
        tally.ack(started);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(tally.report("raw write+fdatasync", 1, count, 1, count))
}
