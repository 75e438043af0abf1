//! Runs experiments one after another, writes their files, and says whether all checks held.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::report::{self, Machine};
use super::{table, About, Check, Context, Outcome, Runnable};

/// Section order in `report.md`.
pub const ORDER: &[&str] =
    &["subscribers", "sizes", "fanout", "proxy", "matching", "hops", "network", "overhead", "failures"];

/// How one experiment ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// Experiment name.
    pub experiment: String,
    /// Whether it ran to the end (its checks may still have failed).
    pub completed: bool,
    /// Why it did not, when it did not.
    pub error: Option<String>,
    /// Its checks.
    pub checks: Vec<Check>,
}

impl Status {
    /// Ran, and every check held.
    pub fn passed(&self) -> bool {
        self.completed && self.checks.iter().all(|c| c.passed)
    }
}

/// What the report says about the run as a whole, per section.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// UTC time the experiment started, RFC 3339.
    pub started: String,
    /// Scale label.
    pub scale: String,
    /// tidings version and build profile.
    pub tidings: String,
    /// What NATS figures the section holds and where they come from.
    pub nats: String,
    /// The command line that ran it.
    pub command: String,
    /// The machine's 1-minute load average when it started (other programs included).
    pub load: Option<f64>,
}

/// Runs `experiments` in order; writes outputs under `ctx.out`, `summary.json` at the end.
/// Returns every experiment's status; an experiment that errors does not stop the others.
pub async fn run(ctx: &mut Context, experiments: &[Box<dyn Runnable>]) -> anyhow::Result<Vec<Status>> {
    std::fs::create_dir_all(&ctx.out)?;
    let machine = Machine::current();
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {elapsed_precise} {wide_msg}")?
        .progress_chars("=> ");
    let mut statuses = Vec::new();
    for experiment in experiments {
        let bar = bars.add(ProgressBar::new(experiment.points(ctx)));
        bar.set_style(style.clone());
        bar.set_prefix(experiment.name());
        bar.enable_steady_tick(Duration::from_millis(500));
        ctx.bar = bar.clone();
        let info = RunInfo {
            started: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            scale: format!(
                "{}{}",
                if ctx.changed { ctx.scale.label_changed() } else { ctx.scale.label() },
                ctx.links.note()
            ),
            tidings: format!("tidings {} ({} build)", env!("CARGO_PKG_VERSION"), profile()),
            nats: ctx.peers.describe(),
            command: command_line(),
            load: crate::stats::load_average(),
        };
        let result = experiment.run(ctx).await;
        bar.finish();
        let (body, error, checks) = match result {
            Ok(outcome) => {
                write_outputs(ctx, experiment.as_ref(), &outcome)?;
                (section(experiment.as_ref(), &info, Ok(&outcome)), None, outcome.checks)
            }
            Err(e) => {
                let error = format!("{e:#}");
                (section(experiment.as_ref(), &info, Err(&error)), Some(error), Vec::new())
            }
        };
        write_section(ctx, &machine, experiment.name(), &body)?;
        let status = Status { experiment: experiment.name().into(), completed: error.is_none(), error, checks };
        print_status(&status);
        statuses.push(status);
    }
    let path = ctx.out.join("summary.json");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, merge_summary(&existing, &statuses)?)?;
    let _ = std::fs::remove_dir_all(super::scratch_root());
    Ok(statuses)
}

/// `summary.json` with this run's statuses replacing those of the same experiments, the others
/// kept, in report order (so that, like `report.md`, it covers every experiment run into the
/// directory).
pub fn merge_summary(existing: &str, statuses: &[Status]) -> anyhow::Result<String> {
    let name = |v: &serde_json::Value| v["experiment"].as_str().unwrap_or_default().to_string();
    let mut all: Vec<serde_json::Value> = serde_json::from_str::<Vec<serde_json::Value>>(existing)
        .unwrap_or_default()
        .into_iter()
        .filter(|old| !statuses.iter().any(|s| s.experiment == name(old)))
        .collect();
    for s in statuses {
        all.push(serde_json::to_value(s)?);
    }
    let rank = |v: &serde_json::Value| ORDER.iter().position(|o| *o == name(v)).unwrap_or(ORDER.len());
    all.sort_by_key(rank);
    Ok(serde_json::to_string_pretty(&all)?)
}

/// `tidings bench ...` as it was invoked: the program path shortened to its name, and absolute
/// paths shown as [`crate::paths::shown`] shows them (the report does not name this machine's
/// directories).
fn command_line() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(first) = args.first_mut() {
        *first = std::path::Path::new(first).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    }
    for arg in args.iter_mut().skip(1) {
        if std::path::Path::new(arg).is_absolute() {
            *arg = crate::paths::shown(std::path::Path::new(arg));
        }
    }
    args.join(" ")
}

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn write_outputs(ctx: &Context, experiment: &dyn Runnable, outcome: &Outcome) -> anyhow::Result<()> {
    let stem = ctx.out.join(experiment.name());
    std::fs::write(stem.with_extension("csv"), outcome.table.to_csv())?;
    outcome.figure.write(&stem)?;
    Ok(())
}

fn write_section(ctx: &Context, machine: &Machine, name: &str, body: &str) -> anyhow::Result<()> {
    let path = ctx.out.join("report.md");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, report::merge(&existing, &report::header(machine), name, body, ORDER))?;
    Ok(())
}

fn print_status(status: &Status) {
    match &status.error {
        Some(e) => eprintln!("{}: did not run: {e}", status.experiment),
        None => {
            for c in &status.checks {
                let verdict = if c.passed { "ok" } else { "FAILED" };
                eprintln!("{}: check {} {verdict}: {}", status.experiment, c.name, c.detail);
            }
        }
    }
}

/// The experiment's section of `report.md`.
pub fn section(experiment: &dyn Runnable, info: &RunInfo, outcome: Result<&Outcome, &String>) -> String {
    let mut out = String::new();
    let About { name, title, seeds } = experiment.about();
    let _ = writeln!(out, "## `{name}`: {title} ({seeds})\n");
    let _ =
        writeln!(out, "Run {}, {}; {}. {}.\n", info.started, info.scale, info.tidings, info.nats.trim_end_matches('.'));
    let _ = writeln!(out, "Command: `{}`\n", info.command);
    if let Some(load) = info.load {
        let _ = writeln!(
            out,
            "Load average (1 min) when it started: {load:.2}, everything on this machine included; \
             a load above the CPU count means other programs competed for them.\n"
        );
    }
    table::md_head(&mut out, &["parameter", "value"]);
    for (k, v) in experiment.parameters() {
        table::md_row(&mut out, [k.to_string(), v]);
    }
    out.push('\n');
    match outcome {
        Err(error) => {
            let _ = writeln!(out, "**Did not run:** {error}");
        }
        Ok(outcome) => {
            let _ = writeln!(out, "![{name}]({name}.png)\n\n[SVG]({name}.svg) · [CSV]({name}.csv)\n");
            let _ = writeln!(out, "{}\n", outcome.body.trim());
            let passed = outcome.checks.iter().filter(|c| c.passed).count();
            let _ = writeln!(out, "Internal checks ({passed} of {} held):\n", outcome.checks.len());
            for c in &outcome.checks {
                let verdict = if c.passed { "held" } else { "**FAILED**" };
                let _ = writeln!(out, "- {}: {verdict}. {}", c.name, c.detail);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::table::Table;
    use crate::suite::Experiment;

    struct Fake;

    impl Experiment for Fake {
        const ABOUT: About = About { name: "fake", title: "a fake", seeds: "seed 999" };
        fn parameters(&self) -> Vec<(&'static str, String)> {
            vec![("size", "10 B".into())]
        }
        fn points(&self, _: &Context) -> u64 {
            1
        }
        async fn run(&self, _: &Context) -> anyhow::Result<Outcome> {
            Ok(Outcome::default())
        }
    }

    fn info() -> RunInfo {
        RunInfo {
            started: "T".into(),
            scale: "quick".into(),
            tidings: "tidings 0".into(),
            nats: "NATS: no.".into(),
            command: "tidings bench fake".into(),
            load: Some(0.5),
        }
    }

    #[test]
    fn a_section_states_run_parameters_body_and_checks() {
        let outcome = Outcome {
            table: Table::default(),
            figure: Default::default(),
            body: "our figures".into(),
            checks: vec![Check::new("order", true, "in order"), Check::new("loss", false, "3 lost")],
        };
        let s = section(&Fake, &info(), Ok(&outcome));
        assert!(s.starts_with("## `fake`: a fake (seed 999)"));
        assert!(s.contains("Run T, quick; tidings 0. NATS: no."));
        assert!(s.contains("Command: `tidings bench fake`"));
        assert!(s.contains("Load average (1 min) when it started: 0.50"));
        assert!(s.contains("| size | 10 B |"));
        assert!(s.contains("![fake](fake.png)"));
        assert!(s.contains("Internal checks (1 of 2 held)"));
        assert!(s.contains("- loss: **FAILED**. 3 lost"));
    }

    #[test]
    fn the_summary_keeps_other_experiments_and_replaces_this_ones() {
        let status = |name: &str, passed: bool| Status {
            experiment: name.into(),
            completed: true,
            error: None,
            checks: vec![Check::new("c", passed, "")],
        };
        let first = merge_summary("", &[status("sizes", false), status("hops", true)]).unwrap();
        let second = merge_summary(&first, &[status("sizes", true), status("subscribers", true)]).unwrap();
        let v: Vec<serde_json::Value> = serde_json::from_str(&second).unwrap();
        let names: Vec<&str> = v.iter().map(|s| s["experiment"].as_str().unwrap()).collect();
        assert_eq!(names, ["subscribers", "sizes", "hops"]);
        assert_eq!(v[1]["checks"][0]["passed"], true);
    }

    #[test]
    fn an_experiment_that_did_not_run_says_why() {
        let s = section(&Fake, &info(), Err(&"needs the broker network".to_string()));
        assert!(s.contains("**Did not run:** needs the broker network"));
        assert!(!s.contains(".png"));
    }

    #[test]
    fn status_passes_only_when_complete_and_every_check_held() {
        let ok =
            Status { experiment: "a".into(), completed: true, error: None, checks: vec![Check::new("x", true, "")] };
        assert!(ok.passed());
        let failed = Status { checks: vec![Check::new("x", false, "")], ..ok.clone() };
        assert!(!failed.passed());
        let errored = Status { completed: false, error: Some("e".into()), ..ok };
        assert!(!errored.passed());
    }
}
