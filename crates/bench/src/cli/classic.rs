//! The foundation measurements, `tidings bench tput|latency|index`: one number each, with the
//! peer harness's methodology, printed with the median and min-max of the repetitions (and
//! written as typed JSON rows to `$TIDINGS_BENCH_JSON`). With `--nats`, NATS is measured point
//! by point beside tidings: each repetition runs tidings on a fresh broker, then NATS on a fresh
//! `nats-server` through the peer harness, with the same parameters and drain wait.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tidings_client::Transport;

use super::peers::{self, NatsPoint};
use crate::cli::parse::{above_zero, at_least_one};
use crate::latency::{self, LatencySpec};
use crate::outln;
use crate::paths::dir_from;
use crate::peer::NatsTools;
use crate::stats::{load_average, Spread};
use crate::target::Target;
use crate::throughput::{self, Background, ThroughputSpec};

/// The foundation measurements.
pub enum Classic {
    /// 1 publisher -> N subscribers, as fast as possible.
    Tput(TputArgs),
    /// End-to-end latency at a fixed publish rate with N subscribers.
    Latency(LatencyArgs),
    /// Publish throughput with many non-matching subscriptions versus none.
    Index(IndexArgs),
    /// Acknowledged guaranteed publishing against NATS JetStream.
    Acked(super::acked::AckedArgs),
    /// A durable subscriber's catch-up and the live latency beside it.
    CatchUp(super::catchup::CatchUpArgs),
}

/// Options every measurement shares.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// Use this broker instead of starting one.
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) server: Option<String>,
    /// Repetitions; the median is reported with the min-max range.
    #[arg(long, default_value_t = 3, value_parser = at_least_one::<usize>)]
    pub(super) reps: usize,
    /// Seconds of publishing per repetition.
    #[arg(long, default_value_t = 5.0, value_parser = above_zero)]
    pub(super) duration: f64,
    /// Also measure NATS, interleaved repetition by repetition (tput and latency only).
    #[arg(long)]
    nats: bool,
    /// nats-server (default: on PATH).
    #[arg(long, value_name = "PATH")]
    nats_server: Option<PathBuf>,
    /// The peer harness binary (default: $TIDINGS_PEERBENCH, else built from PEERS/harness).
    #[arg(long, value_name = "PATH")]
    peerbench: Option<PathBuf>,
    /// The peer harness directory (default: $TIDINGS_PEERS, else the repository's bench/peers/).
    #[arg(long, value_name = "DIR")]
    peers: Option<PathBuf>,
}

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

/// One repetition of one system at one point: the typed row behind the printout and the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `tidings` or `nats`.
    pub system: String,
    /// What was measured (`tput size=256 subs=1`).
    pub point: String,
    /// Repetition, from 1.
    pub rep: usize,
    /// The headline figure: received msg/s (tput) or p99 µs from the intended send time (latency).
    pub value: f64,
    /// Every figure of the repetition, by name.
    pub figures: Vec<(String, f64)>,
    /// Load average before the repetition.
    pub load_before: Option<f64>,
    /// Load average after it.
    pub load_after: Option<f64>,
}

impl Row {
    fn figure(&self, name: &str) -> f64 {
        self.figures.iter().find(|(n, _)| n == name).map_or(f64::NAN, |(_, v)| *v)
    }
}

fn target(common: &Common) -> anyhow::Result<Target> {
    match &common.server {
        Some(addr) => Ok(Target::external(addr.clone())),
        None => {
            let exe = std::env::current_exe().context("cannot find the tidings binary")?;
            Target::spawn(&exe, &[])
        }
    }
}

pub(super) fn nats_tools(common: &Common) -> anyhow::Result<Option<NatsTools>> {
    if !common.nats {
        return Ok(None);
    }
    let peers_dir = dir_from(&common.peers, "TIDINGS_PEERS", "bench/peers");
    let tools = NatsTools::find(common.nats_server.clone(), common.peerbench.clone(), &peers_dir)
        .map_err(|why| anyhow::anyhow!("--nats: {why}"))?;
    eprintln!("NATS: {} driven by {} ({})", tools.server_version, tools.peerbench.display(), tools.client_version);
    Ok(Some(tools))
}

fn tput_figures(r: &throughput::ThroughputResult) -> Vec<(String, f64)> {
    [
        ("sent", r.sent as f64),
        ("publish_msg_s", r.publish_rate),
        ("received_msg_s", r.received_rate),
        ("received_mb_s", r.received_mb_s),
        ("aggregate_deliveries_s", r.aggregate_rate),
        ("lost", r.lost as f64),
        ("duplicates", r.accounting.duplicates as f64),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

fn latency_figures(r: &latency::LatencyResult) -> Vec<(String, f64)> {
    [
        ("sent", r.sent as f64),
        ("achieved_rate", r.achieved_rate),
        ("mean_us", r.mean_us),
        ("p50_us", r.p50_us as f64),
        ("p99_us", r.p99_us as f64),
        ("max_us", r.max_us as f64),
        ("send_mean_us", r.send_mean_us),
        ("send_p50_us", r.send_p50_us as f64),
        ("send_p99_us", r.send_p99_us as f64),
        ("send_max_us", r.send_max_us as f64),
        ("lost", r.lost as f64),
        ("dropped_subscribers", r.dropped_subscribers as f64),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// What one repetition of tidings measures.
enum Measure<'a> {
    Tput(&'a ThroughputSpec),
    Latency(&'a LatencySpec),
}

async fn tidings_rep(common: &Common, measure: &Measure<'_>, point: &str, rep: usize) -> anyhow::Result<Row> {
    let load_before = load_average();
    let t = target(common)?;
    let (value, figures) = match measure {
        Measure::Tput(spec) => {
            let r = throughput::run(&t, spec).await?;
            (r.received_rate, tput_figures(&r))
        }
        Measure::Latency(spec) => {
            let r = latency::run(&t, spec).await?;
            (r.p99_us as f64, latency_figures(&r))
        }
    };
    drop(t);
    Ok(Row {
        system: "tidings".into(),
        point: point.into(),
        rep,
        value,
        figures,
        load_before,
        load_after: load_average(),
    })
}

/// Runs the repetitions, tidings then NATS in each, and prints every row as it comes.
async fn interleaved(
    common: &Common,
    measure: Measure<'_>,
    point: &str,
    nats: Option<(&NatsTools, NatsPoint)>,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for rep in 1..=common.reps {
        let row = tidings_rep(common, &measure, point, rep).await?;
        print_row(&row);
        rows.push(row);
        if let Some((tools, nats_point)) = &nats {
            let row = tokio::task::block_in_place(|| peers::nats_rep(tools, nats_point, point, rep))?;
            print_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

pub(super) fn print_row(row: &Row) {
    let figures: Vec<String> = row.figures.iter().map(|(n, v)| format!("{n} {v:.0}")).collect();
    let load = |l: Option<f64>| l.map_or("?".to_string(), |l| format!("{l:.2}"));
    eprintln!(
        "  {} rep {}: {} (load {} -> {})",
        row.system,
        row.rep,
        figures.join(", "),
        load(row.load_before),
        load(row.load_after)
    );
}

/// Prints the medians with their ranges, per system, and the ratio tidings / NATS.
pub(super) fn summarize(point: &str, headline: &str, rows: &[Row]) -> std::io::Result<()> {
    let of = |system: &str, figure: &str| -> Spread {
        let values: Vec<f64> = rows.iter().filter(|r| r.system == system).map(|r| r.figure(figure)).collect();
        Spread::of(&values)
    };
    let figures: Vec<String> = match headline {
        "acked_msg_s" => vec!["acked_msg_s", "mean_us", "p50_us", "p99_us", "max_us", "acked", "errors"],
        "catchup_msg_s" => {
            vec![
                "catchup_msg_s",
                "alone_p50_us",
                "alone_p99_us",
                "during_p50_us",
                "during_p99_us",
                "p99_ratio",
                "alone_cpu_wait_ms_s",
                "during_cpu_wait_ms_s",
            ]
        }
        "p99_us" => vec!["mean_us", "p50_us", "p99_us", "max_us", "send_p99_us", "achieved_rate", "lost"],
        _ => vec!["received_msg_s", "received_mb_s", "aggregate_deliveries_s", "publish_msg_s", "lost"],
    }
    .into_iter()
    .map(String::from)
    .collect();
    for system in ["tidings", "nats"] {
        if !rows.iter().any(|r| r.system == system) {
            continue;
        }
        let parts: Vec<String> =
            figures.iter().map(|f| format!("{f} {}", of(system, f).show(|v| format!("{v:.0}")))).collect();
        let reps = rows.iter().filter(|r| r.system == system).count();
        outln!("{point} {system}: {} (median [min-max] of {reps})", parts.join(", "))?;
    }
    let (ours, theirs) = (of("tidings", headline).median, of("nats", headline).median);
    if theirs.is_finite() && theirs > 0.0 {
        outln!("{point}: {headline} tidings / NATS = {:.2}", ours / theirs)?;
    }
    Ok(())
}

/// Runs one of the foundation measurements and prints its summary.
pub async fn run(which: Classic) -> anyhow::Result<ExitCode> {
    let summary = match which {
        Classic::Tput(a) => tput(a).await?,
        Classic::Index(a) => index(a).await?,
        Classic::Latency(a) => latency(a).await?,
        Classic::Acked(a) => super::acked::run(a).await?,
        Classic::CatchUp(a) => super::catchup::run(a).await?,
    };
    if let Ok(path) = std::env::var("TIDINGS_BENCH_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&summary)?).with_context(|| format!("writing {path}"))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn tput(a: TputArgs) -> anyhow::Result<serde_json::Value> {
    let spec = ThroughputSpec {
        size: a.size,
        subscribers: a.subs,
        duration: Duration::from_secs_f64(a.common.duration),
        max_messages: a.max,
        subscribe_at: a.subscribe_at.clone(),
        ..ThroughputSpec::default()
    };
    anyhow::ensure!(!(a.common.nats && a.subscribe_at.is_some()), "--nats measures one broker, not --subscribe-at");
    let tools = nats_tools(&a.common)?;
    let point = format!("tput size={} subs={}", a.size, a.subs);
    let nats = tools.as_ref().map(|t| (t, NatsPoint::of_tput(&spec)));
    let rows = interleaved(&a.common, Measure::Tput(&spec), &point, nats).await?;
    summarize(&point, "received_msg_s", &rows)?;
    Ok(serde_json::json!({ "point": point, "nats": tools.map(|t| t.server_version), "rows": rows }))
}

async fn latency(a: LatencyArgs) -> anyhow::Result<serde_json::Value> {
    let spec = LatencySpec {
        size: a.size,
        subscribers: a.subs,
        rate: a.rate,
        duration: Duration::from_secs_f64(a.common.duration),
        transport: if a.udp { Transport::Udp } else { Transport::Tcp },
        ..LatencySpec::default()
    };
    anyhow::ensure!(!(a.common.nats && a.udp), "--nats compares TCP only (NATS has no UDP clients)");
    let tools = nats_tools(&a.common)?;
    let point = format!("latency subs={} rate={} size={}", a.subs, a.rate, a.size);
    let nats = tools.as_ref().map(|t| (t, NatsPoint::of_latency(&spec)));
    let rows = interleaved(&a.common, Measure::Latency(&spec), &point, nats).await?;
    summarize(&point, "p99_us", &rows)?;
    Ok(serde_json::json!({ "point": point, "nats": tools.map(|t| t.server_version), "rows": rows }))
}

async fn index(a: IndexArgs) -> anyhow::Result<serde_json::Value> {
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
    // Repetition by repetition, empty then loaded, so a change in the machine's load falls on
    // both sides of each ratio.
    let (mut empty, mut many) = (Vec::new(), Vec::new());
    for rep in 1..=a.common.reps {
        for (spec, point, rows) in [(&base, &empty_point, &mut empty), (&loaded, &loaded_point, &mut many)] {
            let row = tidings_rep(&a.common, &Measure::Tput(spec), point, rep).await?;
            eprintln!("{point}:");
            print_row(&row);
            rows.push(row);
        }
    }
    summarize(&empty_point, "received_msg_s", &empty)?;
    summarize(&loaded_point, "received_msg_s", &many)?;
    let ratios = Spread::of(&paired_ratios(&empty, &many));
    let reps = a.common.reps;
    let (median, min, max) = (ratios.median, ratios.min, ratios.max);
    outln!("index: loaded / empty = {median:.3} [{min:.3}-{max:.3}] (median [min-max] of {reps} interleaved pairs)")?;
    Ok(serde_json::json!({
        "empty": empty, "loaded": many, "ratio": median, "ratio_min": min, "ratio_max": max, "pairs": reps,
    }))
}

/// Each repetition's loaded / empty throughput, the two measured one right after the other.
fn paired_ratios(empty: &[Row], loaded: &[Row]) -> Vec<f64> {
    empty.iter().zip(loaded).map(|(e, l)| l.value / e.value).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rep: usize, value: f64) -> Row {
        Row {
            system: "tidings".into(),
            point: "index".into(),
            rep,
            value,
            figures: Vec::new(),
            load_before: None,
            load_after: None,
        }
    }

    #[test]
    fn the_index_ratio_is_taken_pair_by_pair_not_from_two_medians() {
        let empty = [row(1, 100.0), row(2, 200.0), row(3, 300.0)];
        let loaded = [row(1, 50.0), row(2, 180.0), row(3, 150.0)];
        let ratios = paired_ratios(&empty, &loaded);
        assert_eq!(ratios, vec![0.5, 0.9, 0.5]);
        let spread = Spread::of(&ratios);
        // The ratio of the two medians would be 180 / 200 = 0.9: two runs apart in time.
        assert_eq!((spread.median, spread.min, spread.max), (0.5, 0.5, 0.9));
    }
}
