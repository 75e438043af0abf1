//! The engine bake-off behind docs/store.md: the segment log, fjall and redb under the same
//! closed loop (256 B records, 1 / 16 / 256 in flight, durable before ack), beside raw
//! write + fdatasync. Prints a Markdown table.
//!
//! `cargo bench -p tidings-store --features engines --bench bakeoff`
//! (`BAKEOFF_SECONDS`, default 3, per point; `BAKEOFF_DIR` for the directory, default a
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

fn main() {
    let seconds = std::env::var("BAKEOFF_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let mut rows: Vec<Report> = Vec::new();
    let dir = scratch();
    rows.push(raw_fdatasync(dir.path(), 256, 2000).expect("the disk syncs"));
    for in_flight in [1, 16, 256] {
        let workload = Workload {
            in_flight,
            payload: 256,
            duration: Duration::from_secs_f64(seconds),
            max_appends: u64::MAX,
            fsync: FsyncPolicy::Always,
        };
        let dir = scratch();
        rows.push(store_appends(dir.path(), &workload).expect("the segment log runs"));
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
    println!("{}", Report::header());
    for row in rows {
        println!("{}", row.row());
    }
}
