//! The engine bake-off behind docs/store.md: the segment log, fjall and redb under the same
//! closed loop (256 B records, 1 / 16 / 256 in flight, durable before ack), beside raw
//! write + fdatasync. Prints a Markdown table.
//!
//! `cargo bench -p tidings-store --features engines --bench bakeoff`
//! (`BAKEOFF_SECONDS`, default 3, per point; `BAKEOFF_REPS`, default 3 passes;
//! `BAKEOFF_IN_FLIGHT`, default `1,16,256`; `BAKEOFF_DIR` for the directory, default a
//! temporary one next to the target directory, i.e. on the same disk as the repository).

#![allow(clippy::expect_used)]

use std::time::Duration;

use tidings_store::measure::engines::{engine_appends, Engine, Fjall, Redb};
use tidings_store::measure::{raw_fdatasync, store_appends, Report, Workload};
use tidings_store::FsyncPolicy;

fn scratch() -> tempfile::TempDir {
    match std::env::var_os("BAKEOFF_DIR") {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")),
    }
    .expect("a scratch directory")
}

type Opener = fn(&std::path::Path) -> Result<Box<dyn Engine>, String>;

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// One pass over every point: raw fdatasync, then per window size the three engines.
fn pass(seconds: f64, windows: &[usize]) -> Vec<Report> {
    let mut rows = vec![raw_fdatasync(scratch().path(), 256, 2000).expect("the disk syncs")];
    for &in_flight in windows {
        let workload = Workload {
            in_flight,
            payload: 256,
            duration: Duration::from_secs_f64(seconds),
            max_appends: u64::MAX,
            fsync: FsyncPolicy::Always,
        };
        rows.push(store_appends(scratch().path(), &workload).expect("the segment log runs"));
        let engines: [Opener; 2] = [
            |dir| Fjall::open(dir).map(|e| Box::new(e) as Box<dyn Engine>),
            |dir| Redb::open(dir).map(|e| Box::new(e) as Box<dyn Engine>),
        ];
        for open in engines {
            let dir = scratch();
            let engine = open(dir.path()).expect("the engine opens");
            rows.push(engine_appends(engine, &workload).expect("the engine runs"));
        }
    }
    rows
}

fn main() {
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<f64>().ok());
    let seconds = env("BAKEOFF_SECONDS").unwrap_or(3.0);
    let reps = env("BAKEOFF_REPS").unwrap_or(3.0) as usize;
    let load_before = load_average();
    // Passes interleave the engines so that each sees the same (shared, noisy) machine; the
    // table gives, per point, the run with the median acked/s.
    let windows: Vec<usize> = std::env::var("BAKEOFF_IN_FLIGHT")
        .ok()
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256]);
    let passes: Vec<Vec<Report>> = (0..reps.max(1)).map(|_| pass(seconds, &windows)).collect();
    println!("load average (1/5/15 min) before: {load_before}; after: {}", load_average());
    println!("{} passes of {seconds} s per point; the median pass per point:", passes.len());
    let header = Report::header().replacen(" |\n", " | spread |\n", 1);
    println!("{header}---|");
    for point in 0..passes[0].len() {
        let mut runs: Vec<&Report> = passes.iter().map(|p| &p[point]).collect();
        runs.sort_by(|a, b| a.acked_per_s.total_cmp(&b.acked_per_s));
        let spread = (runs[runs.len() - 1].acked_per_s - runs[0].acked_per_s) / runs[runs.len() / 2].acked_per_s;
        println!("{} {:.0}% |", runs[runs.len() / 2].row(), spread * 100.0);
    }
}
