//! `tidings bench takeover` (issue 40's takeover figure): a replicated pubend's leader SIGKILLed
//! kill after kill, from each kill to the publisher's first acknowledgement by the successor
//! ([`crate::takeover`]), beside NATS JetStream R3 doing the same ([`crate::peer::jstakeover`]),
//! repetition by repetition in turn. A repetition is one fresh cell (or cluster) through
//! `--kills` kills; the summary gives each repetition's median and worst kill, then the median
//! and the worst over every kill of each system, the figure the issue names.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::path::PathBuf;

use super::measure::{beside, named, nats_tools, summarize, About, Common, Figures, Measurement};
use crate::outln;
use crate::parse::at_least_one;
use crate::peer::NatsTools;
use crate::stats::Spread;
use crate::takeover::{TakeoverResult, TakeoverSpec};

/// `tidings bench takeover`.
#[derive(clap::Args)]
pub struct TakeoverArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Leaders SIGKILLed per repetition.
    #[arg(long, default_value_t = 10, value_parser = at_least_one::<usize>)]
    kills: usize,
    /// The publisher's rate, msg/s.
    #[arg(long, default_value_t = 50, value_parser = at_least_one::<u64>)]
    rate: u64,
    /// tidings' publishes in flight (JetStream's publisher is synchronous, as in `failures`).
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<usize>)]
    window: usize,
    /// Payload bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Where the brokers' data directories and JetStream's stores are created (removed after).
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Also write every kill here, one a line: `system,rep,kill,killed,took_ms`.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

/// The figures of one repetition.
const FIGURES: &[&str] = &["median_ms", "max_ms", "min_ms", "kills", "acked"];

/// One side: tidings' cell, or JetStream's cluster (`tools`).
struct Side<'a> {
    point: &'a str,
    spec: &'a TakeoverSpec,
    dir: &'a std::path::Path,
    tools: Option<&'a NatsTools>,
    /// Every repetition's run, in order.
    runs: RefCell<Vec<TakeoverResult>>,
}

impl Side<'_> {
    fn system(&self) -> &'static str {
        if self.tools.is_some() {
            "nats"
        } else {
            "tidings"
        }
    }
}

impl Measurement for Side<'_> {
    fn about(&self) -> About<'_> {
        About { system: self.system(), point: self.point, headline: "median_ms" }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        let result = tokio::task::block_in_place(|| match self.tools {
            None => crate::takeover::run_tidings(self.dir, self.spec),
            Some(tools) => crate::peer::jstakeover::run(tools, self.dir, self.spec),
        })?;
        let took = Spread::of(&result.took_ms);
        let figures = named(&[
            ("median_ms", took.median),
            ("max_ms", took.max),
            ("min_ms", took.min),
            ("kills", result.took_ms.len() as f64),
            ("acked", result.acked as f64),
        ]);
        self.runs.borrow_mut().push(result);
        Ok(figures)
    }
}

/// Runs the measurement: tidings, and JetStream with `--nats`, in turn.
pub(super) async fn run(a: TakeoverArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(a.common.server.is_none(), "takeover starts its own brokers (their data go under --dir)");
    let spec = TakeoverSpec { kills: a.kills, rate: a.rate, window: a.window, size: a.size };
    let tools = nats_tools(&a.common)?;
    let point = format!("takeover kills={} rate={} size={}", a.kills, a.rate, a.size);
    let side = |tools| Side { point: &point, spec: &spec, dir: &a.dir, tools, runs: RefCell::new(Vec::new()) };
    let ours = side(None);
    let theirs = tools.as_ref().map(|t| side(Some(t)));
    let rows = beside(a.common.reps, &[&ours], theirs.as_ref()).await?;
    summarize(&point, "median_ms", FIGURES, &rows)?;
    let mut every = serde_json::Map::new();
    let mut csv = String::from("system,rep,kill,killed,took_ms\n");
    for side in std::iter::once(&ours).chain(theirs.as_ref()) {
        let runs = side.runs.borrow();
        let all: Vec<f64> = runs.iter().flat_map(|r| r.took_ms.iter().copied()).collect();
        let pooled = Spread::of(&all);
        outln!(
            "{point} {}: over all {} kills, median {:.0} ms, max {:.0} ms",
            side.system(),
            all.len(),
            pooled.median,
            pooled.max
        )?;
        every.insert(
            side.system().into(),
            serde_json::json!({ "kills": all.len(), "median_ms": pooled.median, "max_ms": pooled.max }),
        );
        for (rep, run) in runs.iter().enumerate() {
            for (kill, (took, killed)) in run.took_ms.iter().zip(&run.killed).enumerate() {
                let _ = writeln!(csv, "{},{},{},{killed},{took:.1}", side.system(), rep + 1, kill + 1);
            }
        }
    }
    if let Some(path) = &a.csv {
        std::fs::write(path, csv)?;
    }
    Ok(serde_json::json!({ "point": point, "nats": tools.map(|t| t.server_version), "pooled": every, "rows": rows }))
}
