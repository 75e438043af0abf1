//! `tidings bench catch-up`: a durable subscriber replaying a backlog ([`crate::catchup`]),
//! and the live guaranteed subscribers' latency alone and during it, repetition by
//! repetition on a fresh broker.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::acked::fresh_broker_rep;
use super::classic::{print_row, summarize, Common};
use crate::catchup::{self, CatchUpResult, CatchUpSpec};
use crate::cli::parse::{above_zero, at_least_one};

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

fn figures(r: &CatchUpResult) -> Vec<(String, f64)> {
    [
        ("catchup_msg_s", r.catchup_rate),
        ("replayed", r.replayed as f64),
        ("secs", r.secs),
        ("live_alone", r.live_alone as f64),
        ("live_during", r.live_during as f64),
        ("alone_p50_us", r.alone_p50_us as f64),
        ("alone_p99_us", r.alone_p99_us as f64),
        ("during_p50_us", r.during_p50_us as f64),
        ("during_p99_us", r.during_p99_us as f64),
        ("p99_ratio", r.during_p99_us as f64 / r.alone_p99_us.max(1) as f64),
        ("alone_cpu_wait_ms_s", r.alone_cpu_wait_ms_s),
        ("during_cpu_wait_ms_s", r.during_cpu_wait_ms_s),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
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
    let exe = std::env::current_exe().context("cannot find the tidings binary")?;
    let mut rows = Vec::new();
    for rep in 1..=a.common.reps {
        let spec = &spec;
        let r = fresh_broker_rep(&exe, (&a.dir, a.broker_config.as_deref()), (&point, rep), |target| async move {
            catchup::run(&target, spec).await
        })
        .await?;
        let row = r.row(|r| (r.catchup_rate, figures(r)));
        print_row(&row);
        rows.push(row);
    }
    summarize(&point, "catchup_msg_s", &rows)?;
    Ok(serde_json::json!({ "point": point, "rows": rows }))
}
