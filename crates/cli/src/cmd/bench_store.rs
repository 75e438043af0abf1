//! `tidings bench store`: the pubend log's append path on this machine's disk. Keeps 1, 16 and
//! 256 appends of 256 B in flight against a fresh log, and prints acknowledged appends/s, ack
//! latency p50/p99, group sizes and syncs/s beside raw write + fdatasync, plus the load average
//! (the machine may be shared). The measurement lives in `tidings_store::measure`. With `--out`
//! the printed rows are also written as CSV, so a figure quoted in the docs has its rows beside it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use crate::cmd::outln;
use anyhow::Context as _;
use tidings_bench::parse::{above_zero, at_least_one};
use tidings_bench::suite::table::{num, Table};
use tidings_store::measure::{raw_fdatasync, store_appends, Report, Workload};
use tidings_store::FsyncPolicy;

/// Options of `tidings bench store`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Where to create the scratch logs (default: the working directory, so the disk measured
    /// is the one a broker started here would use). Removed afterwards.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Appends kept in flight, one point each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256", value_parser = at_least_one::<usize>)]
    in_flight: Vec<usize>,
    /// Payload bytes per record.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    size: usize,
    /// Seconds per point.
    #[arg(long, default_value_t = 3.0, value_parser = above_zero)]
    seconds: f64,
    /// The fsync policy: always, batch (10 ms), batch:<N>ms, never.
    #[arg(long, default_value = "always")]
    fsync: FsyncPolicy,
    /// Raw write + fdatasync repetitions for the reference row.
    #[arg(long, default_value_t = 2000)]
    raw_count: u64,
    /// Also write the printed rows to this CSV file, each with the run's start time, policy,
    /// size and load: a figure the docs quote needs its rows committed beside it.
    #[arg(long, value_name = "FILE.csv")]
    out: Option<PathBuf>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || measure(&args)).await?
}

fn measure(args: &Args) -> anyhow::Result<ExitCode> {
    if let Some(dir) = args.out.as_deref().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty()) {
        // Refused before measuring, not after: a run of minutes is not lost to a typo.
        anyhow::ensure!(dir.is_dir(), "--out: {} is not a directory", dir.display());
    }
    let started = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let load_before = load_average();
    let scratch = args.dir.join(format!("tidings-bench-store-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let result = points(args, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let rows = result?;
    let load_after = load_average();
    outln!("fsync {}, {} B records, {} s per point", args.fsync, args.size, args.seconds)?;
    outln!("load average (1/5/15 min) before: {load_before}; after: {load_after}")?;
    outln!("{}", Report::header())?;
    for row in &rows {
        outln!("{}", row.row())?;
    }
    if let Some(path) = &args.out {
        let run = Run { started: &started, args, load_before: &load_before, load_after: &load_after };
        write_csv(path, &run, &rows)?;
        outln!("rows written to {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What was constant over one run: written on every CSV row so a row read alone still says how
/// and under what load it was measured.
struct Run<'a> {
    started: &'a str,
    args: &'a Args,
    load_before: &'a str,
    load_after: &'a str,
}

/// The CSV's columns: the run's constants, then the printed table's columns in its order (with
/// the counts behind the rates, so a rate can be checked against its duration).
const COLUMNS: &[&str] = &[
    "started_utc",
    "fsync",
    "size_b",
    "seconds_per_point",
    "load_before",
    "load_after",
    "engine",
    "in_flight",
    "acked",
    "seconds",
    "acked_per_s",
    "p50_us",
    "p99_us",
    "max_us",
    "groups",
    "mean_group",
    "max_group",
    "syncs",
    "syncs_per_s",
];

fn write_csv(path: &Path, run: &Run<'_>, rows: &[Report]) -> anyhow::Result<()> {
    let mut table = Table::new(COLUMNS);
    for row in rows {
        table.push(vec![
            run.started.to_owned(),
            run.args.fsync.to_string(),
            run.args.size.to_string(),
            run.args.seconds.to_string(),
            one_minute(run.load_before),
            one_minute(run.load_after),
            row.label.clone(),
            row.in_flight.to_string(),
            row.acked.to_string(),
            num(row.seconds),
            format!("{:.0}", row.acked_per_s),
            row.p50_us.to_string(),
            row.p99_us.to_string(),
            row.max_us.to_string(),
            row.groups.to_string(),
            format!("{:.1}", row.mean_group),
            row.max_group.to_string(),
            row.syncs.to_string(),
            format!("{:.0}", row.syncs as f64 / row.seconds.max(f64::EPSILON)),
        ])?;
    }
    std::fs::write(path, table.to_csv()).with_context(|| format!("writing {}", path.display()))
}

fn points(args: &Args, scratch: &Path) -> anyhow::Result<Vec<Report>> {
    let mut rows = vec![raw_fdatasync(scratch, args.size, args.raw_count)?];
    for (index, in_flight) in args.in_flight.iter().enumerate() {
        let workload = Workload {
            in_flight: *in_flight,
            payload: args.size,
            duration: Duration::from_secs_f64(args.seconds),
            max_appends: u64::MAX,
            fsync: args.fsync,
        };
        let dir = scratch.join(format!("point-{index}"));
        rows.push(store_appends(&dir, &workload)?);
    }
    Ok(rows)
}

/// The 1-minute figure of [`load_average`]'s three: the other CSVs under `docs/results/` carry
/// that one, so loads compare across them.
fn one_minute(loads: &str) -> String {
    loads.split_whitespace().next().unwrap_or_default().to_owned()
}

/// The 1, 5 and 15 minute load averages: the machine may be shared, and the figures mean little
/// without them.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
