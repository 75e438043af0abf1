//! The foundation measurements, `tidings bench tput|latency|index`: one number each, with the
//! peer harness's methodology, printed with the median and min-max of the repetitions (and
//! written as typed JSON rows to `$TIDINGS_BENCH_JSON`). With `--nats`, NATS is measured point
//! by point beside tidings: each repetition runs tidings on a fresh broker, then NATS on a fresh
//! `nats-server` through the peer harness, with the same parameters and drain wait. The two
//! sides, [`Tidings`] here and [`Nats`] in [`super::peers`], also measure `request` and `queue`
//! ([`super::patterns`]), through [`with_peer`].

use std::time::Duration;

use tidings_client::Transport;

use super::measure::{
    beside, figures, interleaved, nats_tools, summarize, tidings_exe, About, AnyMeasurement, Common, Figures,
    Measurement, Row, Spec,
};
use super::peers::Nats;
use crate::acked::ScratchDir;
use crate::latency::{self, LatencySpec};
use crate::network::Network;
use crate::outln;
use crate::parse::{above_zero, at_least_one};
use crate::paths::dir_from;
use crate::queue;
use crate::request;
use crate::stats::Spread;
use crate::target::Target;
use crate::throughput::{self, Background, ThroughputSpec};

/// `tidings bench tput`.
#[derive(clap::Args)]
pub struct TputArgs {
    #[command(flatten)]
    common: Common,
    /// Payload bytes (at least 16: the message's number and schedule).
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    size: usize,
    /// Subscribers.
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<usize>)]
    subs: usize,
    /// Message cap per repetition.
    #[arg(long, default_value_t = 1_000_000)]
    max: u64,
    /// Subscribers connect here instead (another broker of a network started with
    /// `tidings net up`); the publisher uses --server.
    #[arg(long, value_name = "HOST:PORT", requires = "server")]
    subscribe_at: Option<String>,
}

/// `tidings bench latency`.
#[derive(clap::Args)]
pub struct LatencyArgs {
    #[command(flatten)]
    common: Common,
    /// Payload bytes.
    #[arg(long, default_value_t = 200, value_parser = at_least_one::<usize>)]
    size: usize,
    /// Subscribers.
    #[arg(long, default_value_t = 10, value_parser = at_least_one::<usize>)]
    subs: usize,
    /// Messages per second.
    #[arg(long, default_value_t = 1000.0, value_parser = above_zero)]
    rate: f64,
    /// Over UDP instead of TCP.
    #[arg(long)]
    udp: bool,
}

/// `tidings bench index`.
#[derive(clap::Args)]
pub struct IndexArgs {
    #[command(flatten)]
    common: Common,
    /// Non-matching subscriptions in the loaded case.
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one::<usize>)]
    subscriptions: usize,
    /// Make them selector subscriptions on the benchmark's own topic (as in the 22-broker experiment, never
    /// matching) instead of subscriptions on other topics; messages then carry six properties
    /// in both runs.
    #[arg(long)]
    selectors: bool,
    /// Payload bytes.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    size: usize,
    /// Message cap per repetition. High by default so that --duration bounds each run: with a
    /// low cap the fast empty case ends in a second and the ratio compares unequal windows.
    #[arg(long, default_value_t = 20_000_000)]
    max: u64,
}

/// The figures `tput` and `index` summarize, and `latency`'s.
pub(super) const TPUT: &[&str] =
    &["received_msg_s", "received_mb_s", "aggregate_deliveries_s", "publish_msg_s", "lost"];
const LATENCY: &[&str] = &["mean_us", "p50_us", "p99_us", "max_us", "send_p99_us", "achieved_rate", "lost"];

/// tidings at one point of a foundation measurement: on a fresh broker (or, for `request`
/// through 2, a fresh network) each repetition, or on `--server`'s.
pub(super) struct Tidings<'a> {
    server: Option<&'a str>,
    /// `--worker-threads` for the broker started (None: one per core).
    threads: Option<usize>,
    spec: Spec<'a>,
    point: &'a str,
}

impl Measurement for Tidings<'_> {
    fn about(&self) -> About<'_> {
        About { system: "tidings", point: self.point, headline: self.spec.headline() }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        if let Spec::Request(spec, 2) = self.spec {
            let scratch = ScratchDir::new(&std::env::temp_dir(), "request-net")?;
            let file = dir_from(&None, "TIDINGS_TOPOLOGIES", "topologies").join("two-brokers.toml");
            let net = Network::up(&tidings_exe()?, &file, &scratch.0, Duration::from_secs(60)).await?;
            let (phb, shb) = (net.broker("phb")?.tcp.clone(), net.broker("shb")?.tcp.clone());
            return Ok(request_figures(&request::run(&phb, &shb, spec).await?));
        }
        let target = match self.server {
            Some(addr) => Target::external(addr.to_string()),
            None => {
                let threads = self.threads.map(|n| n.to_string());
                let args: Vec<&str> = threads.iter().flat_map(|n| ["--worker-threads", n.as_str()]).collect();
                Target::spawn(&tidings_exe()?, &args)?
            }
        };
        match self.spec {
            Spec::Tput(spec) => Ok(tput_figures(&throughput::run(&target, spec).await?)),
            Spec::Latency(spec) => Ok(latency_figures(&latency::run(&target, spec).await?)),
            Spec::Request(spec, _) => Ok(request_figures(&request::run(&target.tcp, &target.tcp, spec).await?)),
            Spec::Queue(spec) => Ok(queue_figures(&queue::run(&target.tcp, spec).await?)),
        }
    }
}

/// tidings at `point`, and NATS beside it when `--nats` asks, interleaved repetition by
/// repetition, [`summarize`]d over `figures`: the rows and NATS's version.
pub(super) async fn with_peer(
    common: &Common,
    spec: Spec<'_>,
    point: &str,
    figures: &[&str],
) -> anyhow::Result<(Vec<Row>, Option<String>)> {
    let tools = nats_tools(common)?;
    let ours = Tidings { server: common.server.as_deref(), threads: common.server_threads, spec, point };
    let theirs = tools.as_ref().map(|tools| Nats { tools, spec, point });
    let rows = beside(common.reps, &[&ours], theirs.as_ref()).await?;
    summarize(point, spec.headline(), figures, &rows)?;
    Ok((rows, tools.map(|t| t.server_version)))
}

/// `tidings bench tput`: the summary for `$TIDINGS_BENCH_JSON`.
pub(super) async fn tput(a: TputArgs) -> anyhow::Result<serde_json::Value> {
    let spec = ThroughputSpec {
        size: a.size,
        subscribers: a.subs,
        duration: Duration::from_secs_f64(a.common.duration),
        max_messages: a.max,
        subscribe_at: a.subscribe_at.clone(),
        ..ThroughputSpec::default()
    };
    anyhow::ensure!(!(a.common.nats && a.subscribe_at.is_some()), "--nats measures one broker, not --subscribe-at");
    let point = format!("tput size={} subs={}{}", a.size, a.subs, threads_label(&a.common));
    let (rows, nats) = with_peer(&a.common, Spec::Tput(&spec), &point, TPUT).await?;
    Ok(serde_json::json!({ "point": point, "nats": nats, "rows": rows }))
}

/// `tidings bench latency`.
pub(super) async fn latency(a: LatencyArgs) -> anyhow::Result<serde_json::Value> {
    let spec = LatencySpec {
        size: a.size,
        subscribers: a.subs,
        rate: a.rate,
        duration: Duration::from_secs_f64(a.common.duration),
        transport: if a.udp { Transport::Udp } else { Transport::Tcp },
        ..LatencySpec::default()
    };
    anyhow::ensure!(!(a.common.nats && a.udp), "--nats compares TCP only (NATS has no UDP clients)");
    let point = format!("latency subs={} rate={} size={}{}", a.subs, a.rate, a.size, threads_label(&a.common));
    let (rows, nats) = with_peer(&a.common, Spec::Latency(&spec), &point, LATENCY).await?;
    Ok(serde_json::json!({ "point": point, "nats": nats, "rows": rows }))
}

/// `tidings bench index`.
pub(super) async fn index(a: IndexArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(!a.common.nats, "--nats is for tput and latency");
    let (background, properties) = if a.selectors {
        (Background::Selectors(a.subscriptions), throughput::seed004_properties())
    } else {
        (Background::Topics(a.subscriptions), Vec::new())
    };
    let base = ThroughputSpec {
        size: a.size,
        duration: Duration::from_secs_f64(a.common.duration),
        max_messages: a.max,
        properties,
        ..ThroughputSpec::default()
    };
    let loaded = ThroughputSpec { background, ..base.clone() };
    let kind = if a.selectors { "non-matching selector" } else { "other-topic" };
    let (empty_point, loaded_point) =
        ("index: no other subscriptions".to_string(), format!("index: {} {kind} subscriptions", a.subscriptions));
    // Repetition by repetition, empty and loaded (in turns of order), so a change in the
    // machine's load falls on both sides of each ratio.
    let server = a.common.server.as_deref();
    let sides = [
        Tidings { server, threads: a.common.server_threads, spec: Spec::Tput(&base), point: &empty_point },
        Tidings { server, threads: a.common.server_threads, spec: Spec::Tput(&loaded), point: &loaded_point },
    ];
    let (empty, many, ratio) = paired(a.common.reps, [&sides[0], &sides[1]], "index: loaded / empty").await?;
    Ok(serde_json::json!({
        "empty": empty, "loaded": many, "ratio": ratio.median, "ratio_min": ratio.min, "ratio_max": ratio.max,
        "pairs": a.common.reps,
    }))
}

/// Two throughput sides measured in interleaved pairs (`index`'s empty and loaded broker,
/// `security`'s one rule and many), each summarized, and the ratio second / first taken pair by
/// pair, printed as `what = median [min-max]`: each side's rows and the ratios.
pub(super) async fn paired(
    reps: usize,
    sides: [&dyn AnyMeasurement; 2],
    what: &str,
) -> anyhow::Result<(Vec<Row>, Vec<Row>, Spread)> {
    let rows = interleaved(reps, &sides).await?;
    let (first, second) = (sides[0].about().point, sides[1].about().point);
    let (one, other): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| r.point == first);
    summarize(first, "received_msg_s", TPUT, &one)?;
    summarize(second, "received_msg_s", TPUT, &other)?;
    let ratio = Spread::of(&paired_ratios(&one, &other));
    let (median, min, max, pairs) = (ratio.median, ratio.min, ratio.max, one.len());
    outln!("{what} = {median:.3} [{min:.3}-{max:.3}] (median [min-max] of {pairs} interleaved pairs)")?;
    Ok((one, other, ratio))
}

/// ` threads=N` when `--server-threads` sets the servers' threads, so a point says how it ran.
fn threads_label(common: &Common) -> String {
    common.server_threads.map(|n| format!(" threads={n}")).unwrap_or_default()
}

pub(super) fn tput_figures(r: &throughput::ThroughputResult) -> Figures {
    figures!(r: sent, publish_msg_s = r.publish_rate, received_msg_s = r.received_rate, received_mb_s,
        aggregate_deliveries_s = r.aggregate_rate, lost, duplicates = r.accounting.duplicates)
}

fn latency_figures(r: &latency::LatencyResult) -> Figures {
    figures!(r: sent, achieved_rate, mean_us, p50_us, p99_us, max_us, send_mean_us, send_p50_us, send_p99_us,
        send_max_us, lost, dropped_subscribers)
}

fn request_figures(r: &request::RequestResult) -> Figures {
    figures!(r: sequential, mean_us, p50_us, p99_us, max_us, concurrent, requests_s, timeouts, errors)
}

fn queue_figures(r: &queue::QueueResult) -> Figures {
    figures!(r: sent, publish_msg_s = r.publish_rate, delivered, delivered_msg_s = r.delivered_rate, lost, duplicates,
        member_min, member_max, missed)
}

/// Each repetition's loaded / empty throughput, the two measured one right after the other.
pub(super) fn paired_ratios(empty: &[Row], loaded: &[Row]) -> Vec<f64> {
    empty.iter().zip(loaded).map(|(e, l)| l.value / e.value).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_named_as_their_fields_or_as_given() {
        struct Result {
            sent: u64,
            rate: f64,
        }
        let r = Result { sent: 3, rate: 1.5 };
        assert_eq!(
            figures!(r: sent, msg_s = r.rate * 2.0),
            super::super::measure::named(&[("sent", 3.0), ("msg_s", 3.0)])
        );
    }

    #[test]
    fn the_index_ratio_is_taken_pair_by_pair_not_from_two_medians() {
        let row = |rep, value| Row::sample("tidings", rep, value, &[]);
        let empty = [row(1, 100.0), row(2, 200.0), row(3, 300.0)];
        let loaded = [row(1, 50.0), row(2, 180.0), row(3, 150.0)];
        let ratios = paired_ratios(&empty, &loaded);
        assert_eq!(ratios, vec![0.5, 0.9, 0.5]);
        let spread = Spread::of(&ratios);
        // The ratio of the two medians would be 180 / 200 = 0.9: two runs apart in time.
        assert_eq!((spread.median, spread.min, spread.max), (0.5, 0.5, 0.9));
    }
}
