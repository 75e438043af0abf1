//! NATS beside the foundation measurements: one repetition of the peer harness against a fresh
//! `nats-server`, with the parameters and drain wait tidings got.

use std::time::Duration;

use super::classic::Row;
use crate::acked::{AckedSpec, ScratchDir};
use crate::latency::LatencySpec;
use crate::peer::nats::{self, Mode, PeerRun};
use crate::peer::{NatsServer, NatsTools};
use crate::stats::load_average;
use crate::throughput::ThroughputSpec;

/// What NATS measures at one point.
#[derive(Debug, Clone)]
pub struct NatsPoint {
    mode: Mode,
    size: usize,
    subs: usize,
    rate: u64,
    duration: Duration,
    max: u64,
    drain: Duration,
}

impl NatsPoint {
    /// The throughput point of `spec` (the harness waits 3 s without progress, as tidings does).
    pub fn of_tput(spec: &ThroughputSpec) -> NatsPoint {
        NatsPoint {
            mode: Mode::Throughput,
            size: spec.size,
            subs: spec.subscribers,
            rate: 0,
            duration: spec.duration,
            max: spec.max_messages,
            drain: spec.duration + spec.drain,
        }
    }

    /// The latency point of `spec` (the harness waits 5 s without progress, as tidings does).
    pub fn of_latency(spec: &LatencySpec) -> NatsPoint {
        NatsPoint {
            mode: Mode::Latency,
            size: spec.size,
            subs: spec.subscribers,
            rate: spec.rate.round() as u64,
            duration: spec.duration,
            max: (spec.rate * spec.duration.as_secs_f64()).round() as u64,
            drain: spec.drain,
        }
    }
}

/// Tput figures of a harness row, named as tidings names its own.
const TPUT: &[(&str, &str)] = &[
    ("sent", "sent"),
    ("publish_msg_s", "pub_msgs_s"),
    ("received_msg_s", "per_sub_median_msgs_s"),
    ("received_mb_s", "agg_recv_MB_s"),
    ("aggregate_deliveries_s", "agg_recv_msgs_s"),
    ("lost", "lost"),
    ("dropped_subscribers", "dropped_subs"),
];

/// Latency figures of a harness row, named as tidings names its own.
const LATENCY: &[(&str, &str)] = &[
    ("sent", "sent"),
    ("achieved_rate", "achieved_rate"),
    ("mean_us", "mean_us"),
    ("p50_us", "p50_us"),
    ("p99_us", "p99_us"),
    ("max_us", "max_us"),
    ("send_mean_us", "send_mean_us"),
    ("send_p50_us", "send_p50_us"),
    ("send_p99_us", "send_p99_us"),
    ("send_max_us", "send_max_us"),
    ("lost", "lost"),
    ("dropped_subscribers", "dropped_subs"),
];

/// One repetition against a fresh single `nats-server` (blocking).
pub fn nats_rep(tools: &NatsTools, point: &NatsPoint, label: &str, rep: usize) -> anyhow::Result<Row> {
    let scratch = std::env::temp_dir().join(format!("tidings-bench-nats-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let load_before = load_average();
    let server = NatsServer::single(tools, &scratch)?;
    let run = PeerRun {
        mode: point.mode,
        exp: "classic".into(),
        publisher: server.urls[0].clone(),
        subscriber: server.urls[0].clone(),
        size: point.size,
        subs: point.subs,
        rate: point.rate,
        reps: 1,
        duration: point.duration,
        max: point.max,
        drain: point.drain,
        hops: 1,
    };
    let rows = nats::run(tools, &run, &scratch)?;
    drop(server);
    let _ = std::fs::remove_dir_all(&scratch);
    let row = rows.first().ok_or_else(|| anyhow::anyhow!("the peer harness wrote no row"))?;
    let (names, headline) = match point.mode {
        Mode::Throughput => (TPUT, "received_msg_s"),
        Mode::Latency => (LATENCY, "p99_us"),
    };
    let figures: Vec<(String, f64)> =
        names.iter().map(|(ours, theirs)| (ours.to_string(), row.num(theirs).unwrap_or(f64::NAN))).collect();
    let value = figures.iter().find(|(n, _)| n == headline).map_or(f64::NAN, |(_, v)| *v);
    Ok(Row { system: "nats".into(), point: label.into(), rep, value, figures, load_before, load_after: load_average() })
}

/// JetStream figures of a harness row, named as `tidings bench acked` names its own.
const JETSTREAM: &[(&str, &str)] = &[
    ("published", "published"),
    ("acked", "acked"),
    ("errors", "errors"),
    ("secs", "secs"),
    ("acked_msg_s", "acked_msgs_s"),
    ("mean_us", "mean_us"),
    ("p50_us", "p50_us"),
    ("p99_us", "p99_us"),
    ("max_us", "max_us"),
];

/// One repetition of acknowledged publishing against a fresh JetStream server whose store is
/// under `parent` and syncs every write (blocking).
pub fn jetstream_rep(
    tools: &NatsTools,
    spec: &AckedSpec,
    parent: &std::path::Path,
    label: &str,
    rep: usize,
) -> anyhow::Result<Row> {
    let scratch = ScratchDir::new(parent, "jetstream")?;
    let store = scratch.0.join("store");
    let load_before = load_average();
    let server = NatsServer::jetstream_always(tools, &scratch.0, &store)?;
    let run = nats::JsRun {
        url: server.urls[0].clone(),
        size: spec.size,
        window: spec.window,
        duration: spec.duration,
        max: spec.max,
    };
    let row = nats::run_js(tools, &run, &scratch.0)?;
    drop(server);
    let figures: Vec<(String, f64)> =
        JETSTREAM.iter().map(|(ours, theirs)| (ours.to_string(), row.num(theirs).unwrap_or(f64::NAN))).collect();
    let value = row.num("acked_msgs_s").unwrap_or(f64::NAN);
    Ok(Row { system: "nats".into(), point: label.into(), rep, value, figures, load_before, load_after: load_average() })
}
