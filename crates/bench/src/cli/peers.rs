//! NATS beside the foundation measurements: one repetition of the peer harness against a fresh
//! `nats-server`, with the parameters and drain wait tidings got.

use std::time::Duration;

use futures::future::LocalBoxFuture;

use super::measure::{About, Figures, Measurement};
use crate::acked::{AckedSpec, ScratchDir};
use crate::latency::LatencySpec;
use crate::peer::nats::{self, Mode, PeerRun};
use crate::peer::{NatsServer, NatsTools, PeerRow};
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

impl NatsPoint {
    /// One repetition of the harness at this point, labelled `exp`, on a server not chosen yet.
    pub(super) fn run(&self, exp: &str) -> PeerRun {
        PeerRun {
            mode: self.mode,
            exp: exp.into(),
            publisher: String::new(),
            subscriber: String::new(),
            size: self.size,
            subs: self.subs,
            rate: self.rate,
            reps: 1,
            duration: self.duration,
            max: self.max,
            drain: self.drain,
            hops: 1,
        }
    }
}

/// Tput figures of a harness row, named as tidings names its own.
const TPUT: &[(&str, &str)] = &[
    ("sent", "sent"),
    ("publish_msg_s", "pub_msgs_s"),
    ("received_msg_s", "per_sub_median_msgs_s"),
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

/// NATS at one point of `tput` or `latency`: each repetition on a fresh single `nats-server`.
pub(super) struct Nats<'a> {
    /// The server and the harness.
    pub(super) tools: &'a NatsTools,
    /// What the harness measures.
    pub(super) at: NatsPoint,
    /// The point's label, the same as tidings'.
    pub(super) point: &'a str,
}

impl Measurement for Nats<'_> {
    fn about(&self) -> About<'_> {
        let headline = match self.at.mode {
            Mode::Throughput => "received_msg_s",
            Mode::Latency => "p99_us",
        };
        About { system: "nats", point: self.point, headline }
    }

    fn measure(&self) -> LocalBoxFuture<'_, anyhow::Result<Figures>> {
        Box::pin(async move {
            let point = &self.at;
            let scratch = std::env::temp_dir().join(format!("tidings-bench-nats-{}", std::process::id()));
            std::fs::create_dir_all(&scratch)?;
            let run = point.run("classic");
            let rows = nats::run_async(self.tools, run, &scratch).await;
            let _ = std::fs::remove_dir_all(&scratch);
            let row = rows?.into_iter().next().ok_or_else(|| anyhow::anyhow!("the peer harness wrote no row"))?;
            if point.mode != Mode::Throughput {
                return Ok(renamed(&row, LATENCY));
            }
            Ok(tput_figures(&row, point.size))
        })
    }
}

/// A throughput row's figures under tidings' names, with `received_mb_s` per subscriber, as
/// tidings' own (the harness's MB/s is the aggregate over every subscriber, which read 10x too
/// high beside ours at 10).
pub(super) fn tput_figures(row: &PeerRow, size: usize) -> Figures {
    let mut figures = renamed(row, TPUT);
    let per_sub = figures.iter().find(|(name, _)| name == "received_msg_s").map(|(_, v)| *v);
    figures.push(("received_mb_s".into(), per_sub.map_or(f64::NAN, |r| r * size as f64 / 1e6)));
    figures
}

/// A harness row's figures under the names tidings gives its own (NaN where it has none).
pub(super) fn renamed(row: &PeerRow, names: &[(&str, &str)]) -> Figures {
    names.iter().map(|(ours, theirs)| (ours.to_string(), row.num(theirs).unwrap_or(f64::NAN))).collect()
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

/// NATS JetStream beside `tidings bench acked`: each repetition on a fresh server whose store
/// is under `parent` (the disk tidings' log is on) and syncs every write.
pub(super) struct JetStream<'a> {
    /// The server and the harness.
    pub(super) tools: &'a NatsTools,
    /// What tidings measures.
    pub(super) spec: &'a AckedSpec,
    /// Where the store goes.
    pub(super) parent: &'a std::path::Path,
    /// The point's label, the same as tidings'.
    pub(super) point: &'a str,
    /// The stream's replicas: above 1, on a cluster of that many nodes, the publisher on the
    /// first.
    pub(super) replicas: usize,
}

impl Measurement for JetStream<'_> {
    fn about(&self) -> About<'_> {
        About { system: "nats", point: self.point, headline: "acked_msg_s" }
    }

    fn measure(&self) -> LocalBoxFuture<'_, anyhow::Result<Figures>> {
        Box::pin(async move { tokio::task::block_in_place(|| self.blocking()) })
    }
}

impl JetStream<'_> {
    fn blocking(&self) -> anyhow::Result<Figures> {
        let scratch = ScratchDir::new(self.parent, "jetstream")?;
        let store = scratch.0.join("store");
        let server = match self.replicas {
            1 => NatsServer::jetstream_always(self.tools, &scratch.0, &store)?,
            nodes => NatsServer::jetstream_cluster(self.tools, &scratch.0, nodes)?,
        };
        let spec = self.spec;
        let run = nats::JsRun {
            url: server.urls[0].clone(),
            size: spec.size,
            window: spec.window,
            duration: spec.duration,
            max: spec.max,
            replicas: self.replicas,
        };
        let row = nats::run_js(self.tools, &run, &scratch.0)?;
        drop(server);
        Ok(renamed(&row, JETSTREAM))
    }
}
