//! NATS beside the foundation measurements: one repetition of the peer harness against a fresh
//! `nats-server`, with the parameters and drain wait tidings got.

use std::path::Path;

use super::measure::{About, Figures, Measurement, Spec};
use crate::acked::{AckedSpec, ScratchDir};
use crate::latency::LatencySpec;
use crate::peer::nats::{self, Mode, PeerRun};
use crate::peer::{columns, patterns, NatsTools, PeerRow, PeerServer};
use crate::throughput::ThroughputSpec;

/// The harness's run at the throughput point of `spec` on a fresh server (it waits 3 s without
/// progress, as tidings does).
pub(super) fn tput_run(spec: &ThroughputSpec) -> PeerRun {
    PeerRun {
        mode: Mode::Throughput,
        exp: "classic".into(),
        size: spec.size,
        subs: spec.subscribers,
        reps: 1,
        duration: spec.duration,
        max: spec.max_messages,
        drain: spec.duration + spec.drain,
        hops: 1,
        ..PeerRun::default()
    }
}

/// The harness's run at the latency point of `spec` on a fresh server (it waits 5 s without
/// progress, as tidings does).
fn latency_run(spec: &LatencySpec) -> PeerRun {
    PeerRun {
        mode: Mode::Latency,
        exp: "classic".into(),
        size: spec.size,
        subs: spec.subscribers,
        rate: spec.rate.round() as u64,
        reps: 1,
        duration: spec.duration,
        max: (spec.rate * spec.duration.as_secs_f64()).round() as u64,
        drain: spec.drain,
        hops: 1,
        ..PeerRun::default()
    }
}

/// Tput figures of a harness row, named as tidings names its own.
const TPUT: &[(&str, &str)] = &columns! {
    sent, publish_msg_s = pub_msgs_s, received_msg_s = per_sub_median_msgs_s, aggregate_deliveries_s = agg_recv_msgs_s,
    lost, dropped_subscribers = dropped_subs,
};

/// Latency figures of a harness row, named as tidings names its own.
const LATENCY: &[(&str, &str)] = &columns! {
    sent, achieved_rate, mean_us, p50_us, p99_us, max_us, send_mean_us, send_p50_us, send_p99_us, send_max_us, lost,
    dropped_subscribers = dropped_subs,
};

/// Request/reply figures of a harness row, named as tidings names its own.
const REQUEST: &[(&str, &str)] = &columns! {
    sequential, mean_us, p50_us, p99_us, max_us, concurrent, requests_s, timeouts, errors,
};

/// Queue figures of a harness row, named as tidings names its own.
const QUEUE: &[(&str, &str)] = &columns! {
    sent, publish_msg_s = pub_msgs_s, delivered, delivered_msg_s = delivered_msgs_s, lost, duplicates, member_min,
    member_max, slow_consumer_events,
};

/// NATS at one point of a foundation measurement, through the peer harness, each repetition
/// on fresh servers.
pub(super) struct Nats<'a> {
    /// The server and the harness.
    pub(super) tools: &'a NatsTools,
    /// What tidings measures.
    pub(super) spec: Spec<'a>,
    /// The point's label, the same as tidings'.
    pub(super) point: &'a str,
}

impl Measurement for Nats<'_> {
    fn about(&self) -> About<'_> {
        About { system: "nats", point: self.point, headline: self.spec.headline() }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        let (run, size) = match self.spec {
            Spec::Tput(spec) => (tput_run(spec), spec.size),
            Spec::Latency(spec) => (latency_run(spec), spec.size),
            Spec::Request(spec, hops) => {
                return self.blocking(REQUEST, |tools, dir| patterns::run_req(tools, spec, hops, dir));
            }
            Spec::Queue(spec) => return self.blocking(QUEUE, |tools, dir| patterns::run_queue(tools, spec, dir)),
        };
        let scratch = ScratchDir::new(&std::env::temp_dir(), "nats")?;
        let row = nats::run_async(self.tools, run.clone(), &scratch.0)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("the peer harness wrote no row"))?;
        if run.mode != Mode::Throughput {
            return Ok(renamed(&row, LATENCY));
        }
        Ok(tput_figures(&row, size))
    }
}

impl Nats<'_> {
    /// One harness run off the async threads, in a scratch directory of its own: its row under
    /// tidings' `names`.
    fn blocking(
        &self,
        names: &[(&str, &str)],
        run: impl FnOnce(&NatsTools, &Path) -> anyhow::Result<PeerRow>,
    ) -> anyhow::Result<Figures> {
        let scratch = ScratchDir::new(&std::env::temp_dir(), "nats-patterns")?;
        tokio::task::block_in_place(|| Ok(renamed(&run(self.tools, &scratch.0)?, names)))
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
const JETSTREAM: &[(&str, &str)] = &columns! {
    published, acked, errors, secs, acked_msg_s = acked_msgs_s, mean_us, p50_us, p99_us, max_us,
};

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

    async fn measure(&self) -> anyhow::Result<Figures> {
        tokio::task::block_in_place(|| self.blocking())
    }
}

impl JetStream<'_> {
    fn blocking(&self) -> anyhow::Result<Figures> {
        let scratch = ScratchDir::new(self.parent, "jetstream")?;
        let store = scratch.0.join("store");
        let server = match self.replicas {
            1 => PeerServer::jetstream_always(self.tools, &scratch.0, &store)?,
            nodes => PeerServer::jetstream_cluster(self.tools, &scratch.0, nodes)?,
        };
        let row = nats::run_js(self.tools, self.spec, &server.urls[0], self.replicas, &scratch.0)?;
        drop(server);
        Ok(renamed(&row, JETSTREAM))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_rows_are_renamed_and_a_missing_column_is_nan() {
        let mut cells = std::collections::BTreeMap::new();
        cells.insert("delivered_msgs_s".to_string(), "1234".to_string());
        let figures = renamed(&PeerRow(cells), QUEUE);
        let get = |name: &str| figures.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        assert_eq!(get("delivered_msg_s"), Some(1234.0));
        assert!(get("lost").is_some_and(f64::is_nan));
    }
}
