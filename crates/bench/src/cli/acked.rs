//! `tidings bench acked`: guaranteed publishing acknowledged after the sync ([`crate::acked`]),
//! beside NATS JetStream with `sync_interval: always` in the same run, repetition by
//! repetition, each on a fresh server and the same disk.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::classic::{nats_tools, print_row, summarize, Common, Row};
use super::peers;
use crate::acked::{self, AckedResult, AckedSpec};
use crate::cli::parse::at_least_one;
use crate::stats::load_average;

/// `tidings bench acked`.
#[derive(clap::Args)]
pub struct AckedArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Payload bytes.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    pub(super) size: usize,
    /// Publishes in flight (tidings' guaranteed window; JetStream's PublishAsyncMaxPending).
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    pub(super) window: usize,
    /// Publish cap per repetition.
    #[arg(long, default_value_t = 2_000_000)]
    pub(super) max: u64,
    /// Where the broker's pubend log and JetStream's store are created (default: the working
    /// directory, so the disk measured is the one a broker started here would use). Removed
    /// afterwards.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(super) dir: PathBuf,
    /// A config file for the broker the bench starts (e.g. `[storage] linger = "0s"`), to
    /// measure other settings than the defaults.
    #[arg(long, value_name = "FILE")]
    pub(super) broker_config: Option<PathBuf>,
}

fn acked_figures(r: &AckedResult) -> Vec<(String, f64)> {
    [
        ("published", r.published as f64),
        ("acked", r.acked as f64),
        ("errors", r.errors as f64),
        ("secs", r.secs),
        ("acked_msg_s", r.acked_rate),
        ("mean_us", r.mean_us),
        ("p50_us", r.p50_us as f64),
        ("p99_us", r.p99_us as f64),
        ("max_us", r.max_us as f64),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// Guaranteed publishing, acknowledged after the sync, against JetStream with `sync_interval:
/// always`; each repetition a fresh broker then a fresh nats-server, on the same disk.
pub(super) async fn run(a: AckedArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(a.common.server.is_none(), "acked starts its own broker (its log goes under --dir)");
    let spec =
        AckedSpec { size: a.size, window: a.window, duration: Duration::from_secs_f64(a.common.duration), max: a.max };
    let tools = nats_tools(&a.common)?;
    let point = format!("acked size={} window={} fsync=always", a.size, a.window);
    let exe = std::env::current_exe().context("cannot find the tidings binary")?;
    let mut rows = Vec::new();
    for rep in 1..=a.common.reps {
        let spec_ref = &spec;
        let r = fresh_broker_rep(&exe, (&a.dir, a.broker_config.as_deref()), (&point, rep), |target| async move {
            acked::run(&target, spec_ref).await
        })
        .await?;
        let row = r.row(|r| (r.acked_rate, acked_figures(r)));
        print_row(&row);
        rows.push(row);
        if let Some(tools) = &tools {
            let row = tokio::task::block_in_place(|| peers::jetstream_rep(tools, &spec, &a.dir, &point, rep))?;
            print_row(&row);
            rows.push(row);
        }
    }
    summarize(&point, "acked_msg_s", &rows)?;
    Ok(serde_json::json!({ "point": point, "nats": tools.map(|t| t.server_version), "rows": rows }))
}

/// One repetition of a measurement on a fresh broker with its data under `dir`, and the load
/// average around it.
pub(super) struct Rep<R> {
    result: R,
    point: String,
    rep: usize,
    load_before: Option<f64>,
    load_after: Option<f64>,
}

impl<R> Rep<R> {
    /// The row: `figures` gives the headline and every figure.
    pub(super) fn row(&self, figures: impl FnOnce(&R) -> (f64, Vec<(String, f64)>)) -> Row {
        let (value, figures) = figures(&self.result);
        Row {
            system: "tidings".into(),
            point: self.point.clone(),
            rep: self.rep,
            value,
            figures,
            load_before: self.load_before,
            load_after: self.load_after,
        }
    }
}

/// Starts a fresh broker (data under `dir`, removed after), runs `measure` against it, stops it.
pub(super) async fn fresh_broker_rep<R, F, Fut>(
    exe: &std::path::Path,
    (dir, config): (&std::path::Path, Option<&std::path::Path>),
    (point, rep): (&str, usize),
    measure: F,
) -> anyhow::Result<Rep<R>>
where
    F: FnOnce(std::sync::Arc<crate::target::Target>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<R>>,
{
    let load_before = load_average();
    let (target, data) = acked::spawn_broker(exe, dir, config)?;
    let target = std::sync::Arc::new(target);
    let result = measure(std::sync::Arc::clone(&target)).await;
    drop(target);
    drop(data);
    Ok(Rep { result: result?, point: point.to_string(), rep, load_before, load_after: load_average() })
}
