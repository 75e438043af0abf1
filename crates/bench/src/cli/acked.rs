//! `tidings bench acked`: guaranteed publishing acknowledged after the sync ([`crate::acked`]),
//! beside NATS JetStream with `sync_interval: always` in the same run, repetition by
//! repetition, each on a fresh server and the same disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::measure::{
    beside, csv, figures, named, nats_tools, summarize, tidings_exe, About, Common, Figures, Measurement,
};
use super::peers::JetStream;
use crate::acked::{self, AckedResult, AckedSpec};
use crate::catchup::{self, CatchUpResult, CatchUpSpec};
use crate::cell;
use crate::parse::at_least_one;

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
    /// Replicas of the pubend's log (issue 40): with N > 1, tidings runs a cell of N brokers
    /// (`[storage] replicas = N`, the publisher on the first) and NATS an N-node JetStream
    /// cluster with an R`N` stream (the publisher on the first node).
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<usize>)]
    pub(super) replicas: usize,
    /// Best-effort publishes instead, each followed by a PING barrier, one at a time: the
    /// round trip a guaranteed publish at `--window 1` is compared with (issue 45, part 3).
    #[arg(long, conflicts_with_all = ["replicas", "nats"])]
    pub(super) best_effort: bool,
    /// Also write every figure of every repetition here, one a line.
    #[arg(long, value_name = "FILE")]
    pub(super) csv: Option<PathBuf>,
}

/// The figures `acked` summarizes (then the context switches, and the replicas' when there are).
const ACKED: &[&str] = &["acked_msg_s", "mean_us", "p50_us", "p99_us", "max_us", "acked", "errors"];

fn acked_figures(r: &AckedResult) -> Figures {
    figures!(r: published, acked, errors, secs, acked_msg_s = r.acked_rate, mean_us, p50_us, p99_us, max_us,
        broker_switches_per_1k = per_thousand(r.broker_switches, r.acked),
        client_switches_per_1k = per_thousand(Some(r.client_switches), r.acked))
}

/// Context switches per thousand answered publishes (NaN when unknown or none answered).
fn per_thousand(switches: Option<u64>, answered: u64) -> f64 {
    match switches {
        Some(s) if answered > 0 => s as f64 * 1000.0 / answered as f64,
        _ => f64::NAN,
    }
}

/// Guaranteed publishing, acknowledged after the sync, against JetStream with `sync_interval:
/// always`; each repetition a fresh broker then a fresh nats-server, on the same disk.
pub(super) async fn run(a: AckedArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(a.common.server.is_none(), "acked starts its own broker (its log goes under --dir)");
    let spec = AckedSpec {
        size: a.size,
        window: a.window,
        duration: Duration::from_secs_f64(a.common.duration),
        max: a.max,
        best_effort: a.best_effort,
    };
    let tools = nats_tools(&a.common)?;
    let mut point = match a.best_effort {
        true => format!("best-effort+ping size={}", a.size),
        false => format!("acked size={} window={} fsync=always", a.size, a.window),
    };
    if a.replicas > 1 {
        point.push_str(&format!(" replicas={}", a.replicas));
    }
    let mut ours = FreshBroker::new(&a.dir, a.broker_config.as_deref(), &point, OnBroker::Acked(&spec))?;
    ours.replicas = a.replicas;
    let theirs = tools.as_ref().map(|tools| JetStream {
        tools,
        spec: &spec,
        parent: &a.dir,
        point: &point,
        replicas: a.replicas,
    });
    let rows = beside(a.common.reps, &[&ours], theirs.as_ref()).await?;
    let mut figures = [ACKED, &["broker_switches_per_1k", "client_switches_per_1k"]].concat();
    if a.replicas > 1 {
        figures.extend(["replica_applied", "replica_extra_entries"]);
    }
    summarize(&point, "acked_msg_s", &figures, &rows)?;
    if let Some(path) = &a.csv {
        std::fs::write(path, csv(&rows))?;
    }
    Ok(serde_json::json!({ "point": point, "nats": tools.map(|t| t.server_version), "rows": rows }))
}

/// What a [`FreshBroker`] measures on its broker.
pub(super) enum OnBroker<'a> {
    /// Acknowledged guaranteed publishing.
    Acked(&'a AckedSpec),
    /// A durable subscriber's catch-up.
    CatchUp(&'a CatchUpSpec),
}

/// tidings measured on a fresh broker each repetition, with its data under `dir` (removed
/// after): `acked` and `catch-up`, whose brokers' logs are on the disk being measured.
pub(super) struct FreshBroker<'a> {
    exe: PathBuf,
    dir: &'a Path,
    config: Option<&'a Path>,
    point: &'a str,
    on: OnBroker<'a>,
    /// Brokers in the cell, each holding a replica of the pubend's log (1: one broker alone).
    pub(super) replicas: usize,
}

impl<'a> FreshBroker<'a> {
    /// tidings at `point`, measuring `on`.
    pub(super) fn new(
        dir: &'a Path,
        config: Option<&'a Path>,
        point: &'a str,
        on: OnBroker<'a>,
    ) -> anyhow::Result<FreshBroker<'a>> {
        Ok(FreshBroker { exe: tidings_exe()?, dir, config, point, on, replicas: 1 })
    }
}

impl Measurement for FreshBroker<'_> {
    fn about(&self) -> About<'_> {
        let headline = match self.on {
            OnBroker::Acked(_) => "acked_msg_s",
            OnBroker::CatchUp(_) => "catchup_msg_s",
        };
        About { system: "tidings", point: self.point, headline }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        if self.replicas > 1 {
            return self.replicated().await;
        }
        let (target, data) = acked::spawn_broker(&self.exe, self.dir, self.config)?;
        let figures = match self.on {
            OnBroker::Acked(spec) => acked::run(&target, spec).await.map(|r| acked_figures(&r)),
            OnBroker::CatchUp(spec) => catchup::run(&target, spec).await.map(|r| catchup_figures(&r)),
        };
        drop(target);
        drop(data);
        figures
    }
}

impl FreshBroker<'_> {
    /// Acknowledged publishing at the first broker of a fresh replicated cell, then the check
    /// that every replica applied what was acknowledged.
    async fn replicated(&self) -> anyhow::Result<Figures> {
        let OnBroker::Acked(spec) = self.on else { anyhow::bail!("only acked runs on a replicated cell") };
        let cell = tokio::task::block_in_place(|| cell::spawn_cell(&self.exe, self.dir, self.config, self.replicas))?;
        cell::warm_up(&cell.brokers[0]).await?;
        let result = acked::run(&cell.brokers[0], spec).await?;
        // The warm-up publish is in the log too.
        let replicated = cell::check_replicated(&cell, result.acked + 1).await?;
        let mut figures = acked_figures(&result);
        figures.extend(named(&[
            ("replica_applied", replicated.applied as f64),
            ("replica_extra_entries", replicated.extra_entries as f64),
        ]));
        Ok(figures)
    }
}

fn catchup_figures(r: &CatchUpResult) -> Figures {
    figures!(r: catchup_msg_s = r.catchup_rate, replayed, secs, live_alone, live_during, alone_p50_us, alone_p99_us,
        during_p50_us, during_p99_us, p99_ratio = r.during_p99_us as f64 / r.alone_p99_us.max(1) as f64,
        alone_cpu_wait_ms_s, during_cpu_wait_ms_s)
}
