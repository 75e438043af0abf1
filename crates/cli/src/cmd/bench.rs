//! `tidings bench`: the seed experiments and the foundation measurements. Everything lives in
//! the `tidings-bench` crate; this module only forwards the command line to it, except for
//! `store` (the pubend log, [`super::bench_store`]).

use std::process::ExitCode;

/// Which measurement (see `tidings bench --help`).
#[derive(clap::Subcommand)]
pub(crate) enum Which {
    /// The pubend log: acknowledged appends/s, ack latency and group sizes, beside raw fdatasync.
    Store(super::bench_store::Args),
    #[command(flatten)]
    Suite(tidings_bench::cli::Which),
}

pub(crate) async fn run(which: Which) -> anyhow::Result<ExitCode> {
    match which {
        Which::Store(args) => super::bench_store::run(args).await,
        Which::Suite(which) => tidings_bench::cli::run(which).await,
    }
}
