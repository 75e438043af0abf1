//! `tidings bench`: the seed experiments and the foundation measurements. Everything lives in
//! the `tidings-bench` crate; this module only forwards the command line to it.

use std::process::ExitCode;

/// Which measurement (see `tidings bench --help`).
pub(crate) type Which = tidings_bench::cli::Which;

pub(crate) async fn run(which: Which) -> anyhow::Result<ExitCode> {
    tidings_bench::cli::run(which).await
}
