//! `tidings bench store`: the pubend log's append path on this machine's disk. Keeps 1, 16 and
//! 256 appends of 256 B in flight against a fresh log, and prints acknowledged appends/s, ack
//! latency p50/p99, group sizes and syncs/s beside raw write + fdatasync, plus the load average
//! (the machine may be shared). The measurement lives in `tidings_store::measure`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::cmd::outln;
use anyhow::Context as _;
use tidings_bench::parse::{above_zero, at_least_one};
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
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || measure(&args)).await?
}

fn measure(args: &Args) -> anyhow::Result<ExitCode> {
    let load_before = load_average();
    let scratch = args.dir.join(format!("tidings-bench-store-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let result = points(args, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let rows = result?;
    outln!("fsync {}, {} B records, {} s per point", args.fsync, args.size, args.seconds)?;
    outln!("load average (1/5/15 min) before: {load_before}; after: {}", load_average())?;
    outln!("{}", Report::header())?;
    for row in rows {
        outln!("{}", row.row())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn points(args: &Args, scratch: &std::path::Path) -> anyhow::Result<Vec<Report>> {
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

/// The 1, 5 and 15 minute load averages: the machine may be shared, and the figures mean little
/// without them.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
