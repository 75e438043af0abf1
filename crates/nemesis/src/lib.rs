//! `tidings bench nemesis`: random, seeded fault schedules against real broker processes, each
//! checked from the command-line tools' own JSON lines (issue 38). A schedule starts the
//! topology with `tidings net up --faults`, three guaranteed publishers and four subscribers
//! (plain, with a selector, durable, durable with a selector), stalls, kills, power-cuts and
//! empties brokers and stalls, cuts and partitions links with `tidings net fault` while they
//! run, heals everything, drains, and compares every acknowledged publish with every
//! subscriber's output ([`guarantee::check`]). A failing schedule is reported with its seed and the command
//! that replays it, and its logs are kept.
//!
//! - [`schedule`]: what a seed decides. [`clients`]: the clients' own fault points
//!   (`--client-faults`). [`run`](mod@run): one schedule against processes. [`recovery`]:
//!   the time from a heal to an affected subscriber's next delivery.
//! - [`guarantee`]: the checker. [`report`]: the CSV, the recovery times and `summary.md`.
//! - What it drives, and the experiment suite (`tidings-bench`) drives too: [`network`]
//!   (`tidings net up`), [`tools`] (the command-line clients as processes), [`metrics`]
//!   (Prometheus text), [`topology`] (the topology files), [`paths`] (where they ship),
//!   [`table`] (CSV), [`parse`] (the command line's numbers).
//!
//! # Why a crate of its own
//!
//! The nemesis is its own idea (fault schedules and an exactly-once checker over real
//! processes), not an experiment: it shares no frame, figure or report with the suite. What it
//! shares with the suite is the layer under both (networks, tools, the checker, tables), which
//! lives here so the dependency runs one way: `tidings-bench` depends on this crate and
//! re-exports those modules; this crate knows nothing of the bench.

pub mod clients;
pub mod guarantee;
pub mod metrics;
pub mod network;
pub mod parse;
pub mod paths;
mod pause;
pub mod recovery;
pub mod report;
pub mod run;
pub mod schedule;
pub mod stuck;
pub mod table;
pub mod tools;
pub mod topology;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::topology::Topology;

/// `tidings bench nemesis` arguments.
#[derive(clap::Args, Clone)]
#[command(after_help = "Examples:
  tidings bench nemesis --topology topologies/chain-3.toml --schedules 20 --duration 60s --seed 1
  tidings bench nemesis --topology topologies/gryphon-fig3.toml --schedules 1 --seed 42 --duration 20s  # replay one
  tidings bench nemesis --topology topologies/gryphon-fig3-replicated.toml --publishers-cell PHB --schedules 20 --duration 30s")]
pub struct NemesisArgs {
    /// The topology file to start (`tidings net up --faults FILE`).
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,
    /// How many schedules to run, with seeds SEED, SEED+1, ...
    #[arg(long, default_value_t = 1, value_parser = crate::parse::at_least_one::<u64>)]
    pub schedules: u64,
    /// How long each schedule publishes (faults happen within it).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// The first schedule's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Each publisher's rate, msg/s.
    #[arg(long, default_value_t = 40.0, value_parser = crate::parse::above_zero)]
    pub rate: f64,
    /// Output directory: nemesis.csv, recovery.csv, summary.md, and seed-N/ with the logs of
    /// each failing schedule.
    #[arg(long, value_name = "DIR", default_value = "nemesis-results")]
    pub out: PathBuf,
    /// Keep every schedule's logs in DIR/seed-N/, not only the failing ones'.
    #[arg(long)]
    pub keep: bool,
    /// Put the publishers at this cell's brokers, each given all of them (`pub --server`), so
    /// the cell's replicated logs are what the faults test: a broker of it may be wiped (once
    /// per schedule) and the whole cell killed at once.
    #[arg(long, value_name = "CELL")]
    pub publishers_cell: Option<String>,
    /// Put the subscribers at this cell's brokers; with the topology's `store = "cell"` for it
    /// (`topologies/gryphon-fig3-double.toml`), each durable subscription is relayed into the
    /// cell's replicated logs (seed 004's double replication), so the faults test those too,
    /// and the whole cell may be killed at once.
    #[arg(long, value_name = "CELL")]
    pub subscribers_cell: Option<String>,
    /// Put every client behind a fault point of its own (a publisher with several servers: its
    /// first) and add a third fault track, `client-stall` and `client-cut` of one client's
    /// connection. Off by default: a seed's schedule is then what it always was.
    #[arg(long)]
    pub client_faults: bool,
    /// Every broker's `[storage] replica_compact_bytes`: a small trigger (say 16384) makes the
    /// replicated logs compact, save their snapshots and checkpoint many times within a
    /// schedule, so the faults strike those too. Unset: the default (8 MiB, which a schedule's
    /// publishes may never reach).
    #[arg(long, value_name = "BYTES")]
    pub compact_bytes: Option<u64>,
}

impl NemesisArgs {
    /// The command line that runs schedule `seed` alone.
    pub fn replay(&self, seed: u64) -> String {
        let cell = self.publishers_cell.as_ref().map(|c| format!(" --publishers-cell {c}")).unwrap_or_default();
        let subs = self.subscribers_cell.as_ref().map(|c| format!(" --subscribers-cell {c}")).unwrap_or_default();
        let clients = if self.client_faults { " --client-faults" } else { "" };
        let compact = self.compact_bytes.map(|b| format!(" --compact-bytes {b}")).unwrap_or_default();
        format!(
            "tidings bench nemesis --topology {}{cell}{subs}{clients}{compact} --schedules 1 --seed {seed} --duration {}ms --rate {} --out {}",
            self.topology.display(),
            self.duration.as_millis(),
            self.rate,
            self.out.display()
        )
    }
}

/// Runs the schedules; exit status 1 if any failed.
pub async fn run(args: NemesisArgs) -> anyhow::Result<ExitCode> {
    let topology = Topology::load(&args.topology)?;
    let cell = |named: &Option<String>| match named {
        None => Ok(Vec::new()),
        Some(name) => match topology.cell(name) {
            brokers if brokers.is_empty() => anyhow::bail!("{} has no cell {name}", args.topology.display()),
            brokers => Ok(brokers),
        },
    };
    let cells =
        schedule::Cells { publishers: cell(&args.publishers_cell)?, subscribers: cell(&args.subscribers_cell)? };
    if cells.publishers.iter().any(|b| cells.subscribers.contains(b)) {
        anyhow::bail!("the publishers' and the subscribers' cells must differ");
    }
    let setup = run::Setup {
        tidings: std::env::current_exe().context("cannot find the tidings binary")?,
        topology: args.topology.clone(),
        duration: args.duration,
        rate: args.rate,
        client_faults: args.client_faults,
        compact_bytes: args.compact_bytes,
        relaying: topology.relaying.clone(),
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let scratch = std::env::temp_dir().join(format!("tidings-nemesis-{}", std::process::id()));
    let bar = ProgressBar::new(args.schedules);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} schedules, {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut stop = Stop::install()?;
    let mut rows = Vec::new();
    for i in 0..args.schedules {
        let seed = args.seed.wrapping_add(i);
        let s = schedule::generate(seed, &topology, args.duration, &cells, args.client_faults);
        bar.set_message(format!("seed {seed}: {} faults", s.faults.len()));
        let dir = scratch.join(format!("seed-{seed}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // The schedule's future is dropped before a signal is answered: its network, tools and
        // fault commands are stopped by then.
        let outcome = tokio::select! {
            outcome = run::run(&setup, &s, &dir) => Ok(outcome),
            signal = stop.received() => Err(signal),
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err((name, status)) => {
                bar.finish_and_clear();
                let _ = std::fs::remove_dir_all(&scratch);
                eprintln!("stopped by {name} during seed {seed}; its brokers, proxies and clients are stopped");
                return Ok(ExitCode::from(status));
            }
        };
        let row = report::Row::new(&topology.name, &s, &outcome);
        let keep = args.out.join(format!("seed-{seed}"));
        if row.failed || args.keep {
            report::keep(&dir, &keep);
        }
        if row.failed {
            bar.suspend(|| {
                eprintln!(
                    "FAILED seed {seed}: {}\n  kept in {}\n  replay: {}",
                    row.why,
                    keep.display(),
                    args.replay(seed)
                )
            });
        }
        let _ = std::fs::remove_dir_all(&dir);
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let _ = std::fs::remove_dir_all(&scratch);
    let summary = report::write(&args, &rows)?;
    print!("{summary}");
    Ok(if rows.iter().any(|r| r.failed) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// SIGTERM and SIGINT (Ctrl-C), caught while schedules run rather than left to end the process
/// at once: the brokers `net up` starts sit in their own process group and outlive a killed
/// bench, so a signal must unwind the schedule, whose drops stop its processes.
struct Stop {
    term: Signal,
    int: Signal,
}

impl Stop {
    fn install() -> anyhow::Result<Stop> {
        let term = signal(SignalKind::terminate()).context("cannot catch SIGTERM")?;
        let int = signal(SignalKind::interrupt()).context("cannot catch SIGINT")?;
        Ok(Stop { term, int })
    }

    /// The next signal's name and the exit status a shell gives a process it ended (128 + its
    /// number).
    async fn received(&mut self) -> (&'static str, u8) {
        tokio::select! {
            _ = self.term.recv() => ("SIGTERM", 143),
            _ = self.int.recv() => ("SIGINT", 130),
        }
    }
}
