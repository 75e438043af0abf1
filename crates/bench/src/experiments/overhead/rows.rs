//! The typed rows of `overhead`: one per repetition of one mode at one subscriber count, the
//! CSV, the figure and the report's table are made from them.

use hdrhistogram::Histogram;

use super::point::{Load, Measured};

/// One measured repetition. CPU as % of one core over the publishing; latencies in µs from
/// the scheduled send time.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Row {
    /// `best-effort` or `guaranteed`.
    pub mode: String,
    /// Subscribers at the subscribers' broker (remote).
    pub subscribers: usize,
    /// Subscribers at the publisher's broker (local).
    pub local_subscribers: usize,
    /// Topics the traffic is spread over (each subscriber takes one).
    pub groups: usize,
    /// Repetition, from 1.
    pub rep: usize,
    /// Publish rate asked for, msg/s.
    pub rate_msg_s: f64,
    /// Publish rate achieved, msg/s.
    pub achieved_rate_msg_s: f64,
    /// Payload bytes.
    pub size_b: usize,
    /// Messages published.
    pub sent: u64,
    /// Guaranteed publishes acknowledged (0 for best effort).
    pub acked: u64,
    /// Guaranteed publishes refused, failed or not acknowledged within 30 s.
    pub ack_failed: u64,
    /// CPU of the publisher's broker.
    pub phb_cpu_pct: f64,
    /// Of which its pubend log's writer thread (writes and syncs; tidings only, empty for NATS).
    pub phb_log_writer_cpu_pct: Option<f64>,
    /// CPU of the subscribers' broker.
    pub shb_cpu_pct: f64,
    /// CPU of this process (publisher and every subscriber's client).
    pub clients_cpu_pct: f64,
    /// Wall-clock seconds the CPU was read over.
    pub cpu_wall_s: f64,
    /// Median latency at the publisher's broker.
    pub local_p50_us: u64,
    /// Its 99th percentile.
    pub local_p99_us: u64,
    /// Deliveries behind the local figures.
    pub local_samples: u64,
    /// Median latency at the subscribers' broker.
    pub remote_p50_us: u64,
    /// Its 99th percentile.
    pub remote_p99_us: u64,
    /// Deliveries behind the remote figures.
    pub remote_samples: u64,
    /// (subscriber, message) pairs of a subscriber's share that never arrived, all subscribers.
    pub lost: u64,
    /// Second copies.
    pub duplicates: u64,
    /// Deliveries out of order.
    pub out_of_order: u64,
    /// Subscribers whose stream ended early.
    pub ended: usize,
    /// Seconds to connect and subscribe everyone.
    pub setup_s: f64,
    /// Load average before the point.
    pub load_before: Option<f64>,
    /// Load average after it.
    pub load_after: Option<f64>,
}

/// The mode's name in rows and legends.
pub(super) fn mode(guaranteed: bool) -> &'static str {
    if guaranteed {
        "guaranteed"
    } else {
        "best-effort"
    }
}

/// The row of one repetition.
pub(super) fn row(load: &Load, rep: usize, m: &Measured, load_avg: [Option<f64>; 2]) -> Row {
    let pct = |name: &str| {
        let secs = m.cpu.by_process.get(name).copied().unwrap_or(0.0);
        if m.cpu.wall_secs > 0.0 {
            100.0 * secs / m.cpu.wall_secs
        } else {
            0.0
        }
    };
    let q = |h: &Histogram<u64>, q: f64| if h.is_empty() { 0 } else { h.value_at_quantile(q) };
    let [local, remote] = &m.latency;
    let [la, ra] = &m.accounting;
    Row {
        mode: mode(load.guaranteed).into(),
        subscribers: load.remote,
        local_subscribers: load.local,
        groups: load.groups,
        rep,
        rate_msg_s: load.rate,
        achieved_rate_msg_s: m.achieved_rate,
        size_b: load.size,
        sent: m.sent,
        acked: m.acked.0,
        ack_failed: m.acked.1,
        phb_cpu_pct: pct("phb"),
        phb_log_writer_cpu_pct: Some(pct("phb_log_writer")),
        shb_cpu_pct: pct("shb"),
        clients_cpu_pct: pct("clients"),
        cpu_wall_s: m.cpu.wall_secs,
        local_p50_us: q(local, 0.5),
        local_p99_us: q(local, 0.99),
        local_samples: local.len(),
        remote_p50_us: q(remote, 0.5),
        remote_p99_us: q(remote, 0.99),
        remote_samples: remote.len(),
        lost: la.lost + ra.lost,
        duplicates: la.duplicates + ra.duplicates,
        out_of_order: la.out_of_order + ra.out_of_order,
        ended: la.ended + ra.ended,
        setup_s: m.setup_secs,
        load_before: load_avg[0],
        load_after: load_avg[1],
    }
}
