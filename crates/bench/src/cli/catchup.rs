//! `tidings bench catch-up`: a durable subscriber replaying a backlog ([`crate::catchup`]),
//! and the live guaranteed subscribers' latency alone and during it, repetition by
//! repetition on a fresh broker.

use std::path::PathBuf;
use std::time::Duration;

use super::acked::{FreshBroker, OnBroker};
use super::measure::{interleaved, summarize, Common};
use crate::catchup::CatchUpSpec;
use crate::parse::{above_zero, at_least_one};

/// `tidings bench catch-up`.
#[derive(clap::Args)]
pub struct CatchUpArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Backlog messages published while the durable subscriber is away.
    #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one::<u64>)]
    pub(super) backlog: u64,
    /// Payload bytes.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    pub(super) size: usize,
    /// Guaranteed publishes in flight while the backlog is made.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    pub(super) window: usize,
    /// Live guaranteed messages per second (one publisher, one subscriber).
    #[arg(long, default_value_t = 1000, value_parser = at_least_one::<u64>)]
    pub(super) live_rate: u64,
    /// Seconds of live latency measured alone before the catch-up.
    #[arg(long, default_value_t = 3.0, value_parser = above_zero)]
    pub(super) baseline: f64,
    /// Where the broker's data is created (removed afterwards).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(super) dir: PathBuf,
    /// A config file for the broker the bench starts (e.g. `[storage] linger = "0s"`), to
    /// measure other settings than the defaults.
    #[arg(long, value_name = "FILE")]
    pub(super) broker_config: Option<PathBuf>,
}

/// Every repetition on a fresh broker whose data is under `--dir`.
pub(super) async fn run(a: CatchUpArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(a.common.server.is_none(), "catch-up starts its own broker (its data goes under --dir)");
    let spec = CatchUpSpec {
        backlog: a.backlog,
        size: a.size,
        window: a.window,
        live_rate: a.live_rate,
        baseline: Duration::from_secs_f64(a.baseline),
    };
    let point = format!("catch-up backlog={} size={} live_rate={}", a.backlog, a.size, a.live_rate);
    let ours = FreshBroker::new(&a.dir, a.broker_config.as_deref(), &point, OnBroker::CatchUp(&spec))?;
    let rows = interleaved(a.common.reps, &[&ours]).await?;
    let latency = ["catchup_msg_s", "alone_p50_us", "alone_p99_us", "during_p50_us", "during_p99_us", "p99_ratio"];
    let figures = [&latency[..], &["alone_cpu_wait_ms_s", "during_cpu_wait_ms_s"]].concat();
    summarize(&point, "catchup_msg_s", &figures, &rows)?;
    Ok(serde_json::json!({ "point": point, "rows": rows }))
}
