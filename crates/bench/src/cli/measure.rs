//! What the foundation measurements (`tput`, `latency`, `index`, `acked`, `catch-up`) share:
//! one [`Measurement`] trait, which tidings and its peer (NATS through the peer harness) each
//! implement per experiment, and one runner, [`interleaved`], that measures every side
//! repetition by repetition in turn, so a change in the machine's load falls on all of them.
//! The rows it returns are printed as they come and summarized as medians with min-max ranges.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use futures::future::LocalBoxFuture;
use serde::Serialize;

use crate::latency::LatencySpec;
use crate::outln;
use crate::parse::{above_zero, at_least_one};
use crate::paths::dir_from;
use crate::peer::NatsTools;
use crate::queue::QueueSpec;
use crate::request::RequestSpec;
use crate::stats::{load_average, Spread};
use crate::throughput::ThroughputSpec;

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
    /// Also measure NATS, interleaved repetition by repetition (tput, latency, acked, request,
    /// queue).
    #[arg(long)]
    pub(super) nats: bool,
    /// nats-server (default: on PATH).
    #[arg(long, value_name = "PATH")]
    nats_server: Option<PathBuf>,
    /// The peer harness binary (default: $TIDINGS_PEERBENCH, else built from PEERS/harness).
    #[arg(long, value_name = "PATH")]
    peerbench: Option<PathBuf>,
    /// The peer harness directory (default: $TIDINGS_PEERS, else the repository's bench/peers/).
    #[arg(long, value_name = "DIR")]
    peers: Option<PathBuf>,
    /// Threads for each server this starts (tidings' `--worker-threads`, NATS's GOMAXPROCS;
    /// default: one per core): how each scales with cores, the load generator left alone.
    #[arg(long, value_name = "N", value_parser = at_least_one::<usize>)]
    pub(super) server_threads: Option<usize>,
}

/// The NATS tools, when `--nats` asks for the peer (an error when they cannot be found, so a
/// comparison asked for is never silently skipped).
pub(super) fn nats_tools(common: &Common) -> anyhow::Result<Option<NatsTools>> {
    if !common.nats {
        return Ok(None);
    }
    let peers_dir = dir_from(&common.peers, "TIDINGS_PEERS", "bench/peers");
    let tools = NatsTools::find(common.nats_server.clone(), common.peerbench.clone(), &peers_dir)
        .map_err(|why| anyhow::anyhow!("--nats: {why}"))?;
    eprintln!("NATS: {} driven by {} ({})", tools.server_version, tools.peerbench.display(), tools.client_version);
    Ok(Some(NatsTools { server_threads: common.server_threads, ..tools }))
}

/// What one repetition of a foundation measurement measures, tidings and its peer alike.
#[derive(Clone, Copy)]
pub(super) enum Spec<'a> {
    /// `tput` (and `index`'s two sides).
    Tput(&'a ThroughputSpec),
    /// `latency`.
    Latency(&'a LatencySpec),
    /// `request`, through this many brokers (2: a fresh `two-brokers.toml` network each time).
    Request(&'a RequestSpec, u64),
    /// `queue`.
    Queue(&'a QueueSpec),
}

impl Spec<'_> {
    /// The figure the summary's ratio compares (and the row's `value`).
    pub(super) fn headline(self) -> &'static str {
        match self {
            Spec::Tput(_) => "received_msg_s",
            Spec::Latency(_) | Spec::Request(..) => "p99_us",
            Spec::Queue(_) => "delivered_msg_s",
        }
    }
}

/// Figures of one repetition, by name.
pub(super) type Figures = Vec<(String, f64)>;

/// `(name, value)` pairs as [`Figures`].
pub(super) fn named(pairs: &[(&str, f64)]) -> Figures {
    pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

/// A result `r`'s fields as [`Figures`]: each named as its field, or `name = value` where the
/// figure is named otherwise or derived, so that a figure's name is written once.
macro_rules! figures {
    ($r:ident: $($name:ident $(= $value:expr)?),* $(,)?) => {
        $crate::cli::measure::named(&[$((stringify!($name), figures!(@value $r, $name $(, $value)?))),*])
    };
    (@value $r:ident, $name:ident) => { $r.$name as f64 };
    (@value $r:ident, $name:ident, $value:expr) => { $value as f64 };
}
pub(super) use figures;

/// Which side is measured where, as the rows name it.
pub(super) struct About<'a> {
    /// `tidings` or `nats`.
    pub(super) system: &'static str,
    /// What is measured (`tput size=256 subs=1`).
    pub(super) point: &'a str,
    /// The figure the summary's ratio compares (and the row's `value`).
    pub(super) headline: &'static str,
}

/// One side of a foundation measurement (tidings, or its peer) at one point: what one
/// repetition measures, on a fresh server each time.
pub(super) trait Measurement {
    /// Which side, where.
    fn about(&self) -> About<'_>;
    /// One repetition's figures (a peer's blocking harness runs in `block_in_place`).
    async fn measure(&self) -> anyhow::Result<Figures>;
}

/// A [`Measurement`] as [`interleaved`] holds sides of different types in one list.
pub(super) trait AnyMeasurement {
    /// Which side, where.
    fn about(&self) -> About<'_>;
    /// One repetition's figures.
    fn measure(&self) -> LocalBoxFuture<'_, anyhow::Result<Figures>>;
}

impl<M: Measurement> AnyMeasurement for M {
    fn about(&self) -> About<'_> {
        Measurement::about(self)
    }
    fn measure(&self) -> LocalBoxFuture<'_, anyhow::Result<Figures>> {
        Box::pin(Measurement::measure(self))
    }
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
    pub figures: Figures,
    /// Load average before the repetition.
    pub load_before: Option<f64>,
    /// Load average after it.
    pub load_after: Option<f64>,
}

impl Row {
    /// A row of `system` at the point `p` for the tests, loads unknown.
    #[cfg(test)]
    pub(super) fn sample(system: &str, rep: usize, value: f64, figures: &[(&str, f64)]) -> Row {
        let (point, figures) = ("p".into(), named(figures));
        Row { system: system.into(), point, rep, value, figures, load_before: None, load_after: None }
    }

    pub(super) fn figure(&self, name: &str) -> f64 {
        self.figures.iter().find(|(n, _)| n == name).map_or(f64::NAN, |(_, v)| *v)
    }
}

/// Runs `reps` repetitions, each measuring every side, and prints every row as it comes (after
/// its point's name when the sides measure different points, as `index` does). Odd
/// repetitions take the sides in the order given, even ones in reverse: a side that always
/// went second ran right after the other's servers were stopped and their files removed, and an
/// A/A control showed the second side about 3 % slower for that alone (issue 43).
pub(super) async fn interleaved(reps: usize, sides: &[&dyn AnyMeasurement]) -> anyhow::Result<Vec<Row>> {
    let points_differ = sides.windows(2).any(|w| w[0].about().point != w[1].about().point);
    let mut rows = Vec::new();
    for rep in 1..=reps {
        let order: Vec<&&dyn AnyMeasurement> = match rep % 2 {
            1 => sides.iter().collect(),
            _ => sides.iter().rev().collect(),
        };
        for side in order {
            let load_before = load_average();
            let figures = side.measure().await?;
            let load_after = load_average();
            let about = side.about();
            let (system, point) = (about.system.to_string(), about.point.to_string());
            let mut row = Row { system, point, rep, value: f64::NAN, figures, load_before, load_after };
            row.value = row.figure(about.headline);
            if points_differ {
                eprintln!("{}:", row.point);
            }
            print_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// tidings' `ours` and, when measured, its peer's side, [`interleaved`].
pub(super) async fn beside<T: Measurement>(
    reps: usize,
    ours: &[&dyn AnyMeasurement],
    theirs: Option<&T>,
) -> anyhow::Result<Vec<Row>> {
    let theirs = theirs.map(|t| t as &dyn AnyMeasurement);
    interleaved(reps, &[ours, theirs.as_slice()].concat()).await
}

fn print_row(row: &Row) {
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

/// Prints the medians of `figures` with their ranges, per system, and the ratio tidings / NATS
/// of `headline`, which it returns.
pub(super) fn summarize(point: &str, headline: &str, figures: &[&str], rows: &[Row]) -> std::io::Result<f64> {
    let of = |system: &str, figure: &str| spread_of(rows, system, figure);
    for system in ["tidings", "nats"] {
        let reps = rows.iter().filter(|r| r.system == system).count();
        if reps == 0 {
            continue;
        }
        // A figure one side has no value for (the replicas' applied count, for NATS) is left out.
        let parts: Vec<String> = figures
            .iter()
            .filter(|f| rows.iter().any(|r| r.system == system && r.figure(f).is_finite()))
            .map(|f| format!("{f} {}", of(system, f).show(|v| format!("{v:.0}"))))
            .collect();
        outln!("{point} {system}: {} (median [min-max] of {reps})", parts.join(", "))?;
    }
    ratio(point, headline, rows)
}

/// The ratio tidings / NATS of the medians of `figure`, printed when there is one (NaN without
/// NATS rows).
pub(super) fn ratio(point: &str, figure: &str, rows: &[Row]) -> std::io::Result<f64> {
    let r = spread_of(rows, "tidings", figure).median / spread_of(rows, "nats", figure).median;
    if r.is_finite() {
        // Two decimals, or two significant digits below 0.1 (a takeover's ms against seconds).
        let digits = if r > 0.0 && r < 0.1 { (1.0 - r.log10().floor()) as usize } else { 2 };
        outln!("{point}: {figure} tidings / NATS = {r:.digits$}")?;
    }
    Ok(r)
}

/// The median and range of `figure` over `system`'s rows.
pub(super) fn spread_of<'a>(rows: impl IntoIterator<Item = &'a Row>, system: &str, figure: &str) -> Spread {
    let values: Vec<f64> = rows.into_iter().filter(|r| r.system == system).map(|r| r.figure(figure)).collect();
    Spread::of(&values)
}

/// Every figure of every repetition, one a line: `point,system,rep,figure,value,load_before,load_after`.
pub(super) fn csv(rows: &[Row]) -> String {
    let mut out = String::from("point,system,rep,figure,value,load_before,load_after\n");
    let load = |l: Option<f64>| l.map_or(String::new(), |l| format!("{l:.2}"));
    for row in rows {
        let (point, system, rep, before, after) =
            (&row.point, &row.system, row.rep, load(row.load_before), load(row.load_after));
        for (figure, value) in &row.figures {
            let _ = writeln!(out, "{point},{system},{rep},{figure},{value},{before},{after}");
        }
    }
    out
}

/// Writes a measurement's summary as JSON to `$TIDINGS_BENCH_JSON`, when set.
pub(super) fn write_json(summary: serde_json::Value) -> anyhow::Result<ExitCode> {
    if let Ok(path) = std::env::var("TIDINGS_BENCH_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&summary)?).with_context(|| format!("writing {path}"))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) use crate::target::tidings_exe;
