//! `tidings ping`: round trips to a broker, then min/p50/p99/max.

use std::process::ExitCode;
use std::time::Duration;

use crate::cmd::outln;
use anyhow::Context;
use hdrhistogram::Histogram;
use tidings_bench::parse::at_least_one;

/// Sends PINGs one after another and reports the round-trip distribution.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: super::server::ServerArgs,
    /// Number of round trips.
    #[arg(long, default_value_t = 10, value_parser = at_least_one::<u64>)]
    count: u64,
    /// Pause between round trips, in milliseconds.
    #[arg(long, default_value_t = 10)]
    interval_ms: u64,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.server.connect("tidings-ping").await?;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for i in 0..args.count {
        let rtt = client.ping().await.context("ping failed")?;
        let us = (rtt.as_micros() as u64).max(1);
        histogram.saturating_record(us);
        outln!("pong from {}: seq={} time={} us", args.server.server, i, us)?;
        if i + 1 < args.count {
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
        }
    }
    outln!(
        "{} round trips: min {} us, p50 {} us, p99 {} us, max {} us",
        histogram.len(),
        histogram.min(),
        histogram.value_at_quantile(0.5),
        histogram.value_at_quantile(0.99),
        histogram.max()
    )?;
    let _ = client.close().await;
    Ok(ExitCode::SUCCESS)
}
