//! The experiment frame: an [`Experiment`] runs against a [`Context`] and returns an
//! [`Outcome`] (a table, a figure, a Markdown body and its internal [`Check`]s); the
//! [`runner`] writes `NAME.csv`, `NAME.png`, `NAME.svg` and the experiment's section of
//! `report.md`, and fails the command when a check failed.
//!
//! Experiments that need more than one broker start a [`Network`](crate::network::Network);
//! experiments that inject faults or read time series (guaranteed delivery, later) get the same
//! context and return the same outcome.

pub mod figure;
pub mod prelude;
pub mod report;
pub mod runner;
pub mod text;

/// CSV tables: in `tidings-nemesis`, whose report writes them too.
pub use tidings_nemesis::table;

use std::path::PathBuf;

use futures::future::BoxFuture;
use indicatif::ProgressBar;

use crate::peer::Peers;
use figure::Figure;
use table::Table;

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// The seed's parameters.
    Full,
    /// A small version that finishes in about a minute (labelled as such in the report).
    Quick,
}

impl Scale {
    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Scale::Full => "full (the seed's parameters)",
            Scale::Quick => "quick (`--quick`: a small version, not the seed's parameters)",
        }
    }

    /// How the report names it when the experiment's parameters were changed on the command
    /// line: not the seed's (nor the quick run's) parameters, whatever the scale.
    pub fn label_changed(self) -> &'static str {
        match self {
            Scale::Full => {
                "full scale with parameters changed on the command line (not the seed's; see the parameters)"
            }
            Scale::Quick => "quick with parameters changed on the command line (not the seed's; see the parameters)",
        }
    }
}

/// One internal check: a property of the run that must hold whatever the timing (every message
/// accounted for, nothing delivered out of order, nothing sent down a branch without interest).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Check {
    /// Short name.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// What was compared.
    pub detail: String,
}

impl Check {
    /// A check that held when `passed`.
    pub fn new(name: impl Into<String>, passed: bool, detail: impl Into<String>) -> Check {
        Check { name: name.into(), passed, detail: detail.into() }
    }
}

/// What an experiment produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every measured row (ours, NATS's, anchors), written as `NAME.csv`.
    pub table: Table,
    /// Written as `NAME.png` and `NAME.svg`.
    pub figure: Figure,
    /// Markdown: our figures beside the seed's and NATS's, and what to read into them.
    pub body: String,
    /// Internal checks; one failure fails the command.
    pub checks: Vec<Check>,
}

impl Outcome {
    /// Typed `rows` (one a CSV line) with their figure, body and checks.
    pub fn typed<T>(rows: &[T], figure: Figure, body: String, checks: Vec<Check>) -> anyhow::Result<Outcome>
    where
        T: serde::Serialize + Default,
    {
        Ok(Outcome { table: Table::typed(rows)?, figure, body, checks })
    }
}

/// What names an experiment in the files and the report: one value, so that an experiment
/// states who it is in one line rather than three methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    /// File and section name: `sizes`.
    pub name: &'static str,
    /// Section title.
    pub title: &'static str,
    /// Which seeds it reruns: "seed 002".
    pub seeds: &'static str,
}

/// One of the seed experiments, as each declares itself: who it is, its parameters, its
/// points and an `async fn run`; the runner holds them as [`Runnable`]s.
pub trait Experiment: Send + Sync {
    /// Its name, title and seeds.
    const ABOUT: About;
    /// The parameters in effect, for the report.
    fn parameters(&self) -> Vec<(&'static str, String)>;
    /// How many measurement points it will run (the progress bar's length).
    fn points(&self, ctx: &Context) -> u64;
    /// Runs it.
    fn run(&self, ctx: &Context) -> impl std::future::Future<Output = anyhow::Result<Outcome>> + Send;
}

/// An [`Experiment`] as the runner and the command line hold every experiment in one list
/// (`Box<dyn Runnable>`): the same methods, the run boxed.
pub trait Runnable: Send + Sync {
    /// Its name, title and seeds.
    fn about(&self) -> About;
    /// File and section name (the progress bar's, the files' and the summary's key).
    fn name(&self) -> &'static str {
        self.about().name
    }
    /// The parameters in effect, for the report.
    fn parameters(&self) -> Vec<(&'static str, String)>;
    /// How many measurement points it will run.
    fn points(&self, ctx: &Context) -> u64;
    /// Runs it.
    fn run<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, anyhow::Result<Outcome>>;
}

impl<E: Experiment> Runnable for E {
    fn about(&self) -> About {
        E::ABOUT
    }
    fn parameters(&self) -> Vec<(&'static str, String)> {
        Experiment::parameters(self)
    }
    fn points(&self, ctx: &Context) -> u64 {
        Experiment::points(self, ctx)
    }
    fn run<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, anyhow::Result<Outcome>> {
        Box::pin(Experiment::run(self, ctx))
    }
}

/// What every experiment may use.
pub struct Context {
    /// Full or quick.
    pub scale: Scale,
    /// Whether the experiment's parameters differ from the scale's defaults (set on the command
    /// line); the report's header then says so instead of naming the seed's parameters.
    pub changed: bool,
    /// Repetitions per point (the median is reported).
    pub reps: usize,
    /// The `tidings` binary that brokers and networks are started from.
    pub tidings: PathBuf,
    /// The directory with the seed topologies (`two-brokers.toml`, ...).
    pub topologies: PathBuf,
    /// NATS, when it is measured in this session, and the committed anchors.
    pub peers: Peers,
    /// Where outputs go.
    pub out: PathBuf,
    /// The current experiment's progress bar.
    pub bar: ProgressBar,
    /// How the broker links of the networks it starts behave.
    pub links: Links,
}

/// How broker links behave in the networks an experiment starts (`--links`): loopback as it is,
/// or shaped by each link's fault point (`net up --link-delay/--link-jitter/--link-rate`,
/// tidings-admin's `Shape`) like the real networks the seeds' experiments ran on (issue 45).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Links {
    /// Loopback, unshaped (and no fault point: nothing in the way).
    #[default]
    Loopback,
    /// A LAN: 100 µs one way, 1 Gbit/s.
    Lan,
    /// Sites joined by a WAN: 20 ms one way, up to 2 ms of jitter, 100 Mbit/s.
    Wan,
}

impl Links {
    /// The `net up` arguments that make them.
    pub fn net_up_args(self) -> &'static [&'static str] {
        match self {
            Links::Loopback => &[],
            Links::Lan => &["--link-delay", "100us", "--link-rate", "1000"],
            Links::Wan => &["--link-delay", "20ms", "--link-jitter", "2ms", "--link-rate", "100"],
        }
    }

    /// What the report says of them (nothing for loopback).
    pub fn note(self) -> String {
        match self {
            Links::Loopback => String::new(),
            other => format!(
                "; every broker link shaped like a {} (`net up {}`)",
                if other == Links::Lan { "LAN" } else { "WAN" },
                other.net_up_args().join(" ")
            ),
        }
    }
}

impl Context {
    /// Prints a line above the progress bars (stderr).
    pub fn log(&self, line: impl AsRef<str>) {
        if self.bar.is_hidden() {
            eprintln!("{}", line.as_ref());
        } else {
            self.bar.println(line.as_ref());
        }
    }

    /// The systems measured at each point: tidings, and NATS when it is measured in this
    /// session (a progress bar counts a point once for each).
    pub fn sides(&self) -> usize {
        1 + usize::from(self.peers.tools().is_some())
    }

    /// Marks one point done, with what it was.
    pub fn step(&self, what: impl Into<String>) {
        self.bar.set_message(what.into());
        self.bar.inc(1);
    }

    /// A scratch directory for this process (logs, network files), created empty; the
    /// runner removes it at the end.
    pub fn scratch(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = scratch_root().join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// Where [`Context::scratch`] directories live.
pub fn scratch_root() -> PathBuf {
    std::env::temp_dir().join(format!("tidings-bench-{}", std::process::id()))
}
