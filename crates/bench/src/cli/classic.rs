//! The foundation measurements, `tidings bench tput|latency|index`: one number each, with the
//! peer harness's methodology, printed (and written as JSON to `$TIDINGS_BENCH_JSON`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tidings_client::Transport;

use crate::latency::{self, LatencySpec};
use crate::stats::{median, spread};
use crate::target::Target;
use crate::throughput::{self, Background, ThroughputSpec};

/// The foundation measurements.
pub enum Classic {
    /// 1 publisher -> N subscribers, as fast as possible.
    Tput(TputArgs),
    /// End-to-end latency at a fixed publish rate with N subscribers.
    Latency(LatencyArgs),
    /// Publish throughput with many non-matching subscriptions versus none.
    Index(IndexArgs),
}

/// Options every measurement shares.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// Use this broker instead of starting one.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds of publishing per repetition.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
}

/// `tidings bench tput`.
#[derive(clap::Args)]
pub struct TputArgs {
    #[command(flatten)]
    common: Common,
    /// Payload bytes.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Subscribers.
    #[arg(long, default_value_t = 1)]
    subs: usize,
    /// Message cap per repetition.
    #[arg(long, default_value_t = 1_000_000)]
    max: u64,
    /// Subscribers connect here instead (another broker of a network started with
    /// `tidings net up`); the publisher uses --server.
    #[arg(long, value_name = "HOST:PORT", requires = "server")]
    subscribe_at: Option<String>,
}

/// `tidings bench latency`.
#[derive(clap::Args)]
pub struct LatencyArgs {
    #[command(flatten)]
    common: Common,
    /// Payload bytes.
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Subscribers.
    #[arg(long, default_value_t = 10)]
    subs: usize,
    /// Messages per second.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Over UDP instead of TCP.
    #[arg(long)]
    udp: bool,
}

/// `tidings bench index`.
#[derive(clap::Args)]
pub struct IndexArgs {
    #[command(flatten)]
    common: Common,
    /// Non-matching subscriptions in the loaded case.
    #[arg(long, default_value_t = 10_000)]
    subscriptions: usize,
    /// Make them selector subscriptions on the benchmark's own topic (seed 004 style, never
    /// matching) instead of subscriptions on other topics; messages then carry six properties
    /// in both runs.
    #[arg(long)]
    selectors: bool,
    /// Payload bytes.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Message cap per repetition. High by default so that --duration bounds each run: with a
    /// low cap the fast empty case ends in a second and the ratio compares unequal windows.
    #[arg(long, default_value_t = 20_000_000)]
    max: u64,
}

fn target(common: &Common) -> anyhow::Result<Target> {
    match &common.server {
        Some(addr) => Ok(Target::external(addr.clone())),
        None => {
            let exe = std::env::current_exe().context("cannot find the tidings binary")?;
            Target::spawn(&exe, &[])
        }
    }
}

async fn tput_reps(common: &Common, spec: &ThroughputSpec) -> anyhow::Result<Vec<throughput::ThroughputResult>> {
    let mut out = Vec::new();
    for rep in 0..common.reps {
        let t = target(common)?;
        let r = throughput::run(&t, spec).await?;
        eprintln!(
            "  rep {}: sent {} publish {:.0}/s received {:.0}/s ({:.1} MB/s) aggregate {:.0}/s lost {}",
            rep + 1,
            r.sent,
            r.publish_rate,
            r.received_rate,
            r.received_mb_s,
            r.aggregate_rate,
            r.lost
        );
        out.push(r);
    }
    Ok(out)
}

fn summarize_tput(label: &str, results: &[throughput::ThroughputResult]) -> serde_json::Value {
    let recv: Vec<f64> = results.iter().map(|r| r.received_rate).collect();
    let agg: Vec<f64> = results.iter().map(|r| r.aggregate_rate).collect();
    let mb: Vec<f64> = results.iter().map(|r| r.received_mb_s).collect();
    let lost: u64 = results.iter().map(|r| r.lost).sum();
    println!(
        "{label}: received {:.0} msg/s ({:.1} MB/s), aggregate {:.0} deliveries/s, lost {lost} (median of {}, spread {:.0}%)",
        median(&recv),
        median(&mb),
        median(&agg),
        results.len(),
        spread(&recv) * 100.0
    );
    serde_json::json!({"label": label, "received_msg_s": median(&recv), "received_mb_s": median(&mb),
        "aggregate_deliveries_s": median(&agg), "lost": lost, "reps": results})
}

/// Runs one of the foundation measurements and prints its summary.
pub async fn run(which: Classic) -> anyhow::Result<ExitCode> {
    let summary = match which {
        Classic::Tput(a) => {
            let spec = ThroughputSpec {
                size: a.size,
                subscribers: a.subs,
                duration: Duration::from_secs_f64(a.common.duration),
                max_messages: a.max,
                subscribe_at: a.subscribe_at.clone(),
                ..ThroughputSpec::default()
            };
            let label = format!("tput size={} subs={}", a.size, a.subs);
            summarize_tput(&label, &tput_reps(&a.common, &spec).await?)
        }
        Classic::Index(a) => {
            let (background, properties) = if a.selectors {
                (Background::Selectors(a.subscriptions), throughput::seed004_properties())
            } else {
                (Background::Topics(a.subscriptions), Vec::new())
            };
            let base = ThroughputSpec {
                size: a.size,
                duration: Duration::from_secs_f64(a.common.duration),
                max_messages: a.max,
                properties,
                ..ThroughputSpec::default()
            };
            let loaded = ThroughputSpec { background, ..base.clone() };
            let none = summarize_tput("index: no other subscriptions", &tput_reps(&a.common, &base).await?);
            let kind = if a.selectors { "non-matching selector" } else { "other-topic" };
            let label = format!("index: {} {kind} subscriptions", a.subscriptions);
            let many = summarize_tput(&label, &tput_reps(&a.common, &loaded).await?);
            let ratio = many["received_msg_s"].as_f64().unwrap_or(0.0) / none["received_msg_s"].as_f64().unwrap_or(1.0);
            println!("index: loaded / empty = {ratio:.3}");
            serde_json::json!({"empty": none, "loaded": many, "ratio": ratio})
        }
        Classic::Latency(a) => {
            let spec = LatencySpec {
                size: a.size,
                subscribers: a.subs,
                rate: a.rate,
                duration: Duration::from_secs_f64(a.common.duration),
                transport: if a.udp { Transport::Udp } else { Transport::Tcp },
                ..LatencySpec::default()
            };
            let mut results = Vec::new();
            for rep in 0..a.common.reps {
                let t = target(&a.common)?;
                let r = latency::run(&t, &spec).await?;
                eprintln!(
                    "  rep {}: mean {:.0} us p50 {} us p99 {} us max {} us lost {} dropped subscribers {}",
                    rep + 1,
                    r.mean_us,
                    r.p50_us,
                    r.p99_us,
                    r.max_us,
                    r.lost,
                    r.dropped_subscribers
                );
                results.push(r);
            }
            let pick = |f: fn(&latency::LatencyResult) -> f64| median(&results.iter().map(f).collect::<Vec<_>>());
            println!(
                "latency subs={} rate={} size={}: mean {:.0} us, p50 {:.0} us, p99 {:.0} us, max {:.0} us, lost {} (median of {})",
                a.subs,
                a.rate,
                a.size,
                pick(|r| r.mean_us),
                pick(|r| r.p50_us as f64),
                pick(|r| r.p99_us as f64),
                pick(|r| r.max_us as f64),
                results.iter().map(|r| r.lost).sum::<u64>(),
                results.len()
            );
            serde_json::json!({"reps": results})
        }
    };
    if let Ok(path) = std::env::var("TIDINGS_BENCH_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&summary)?).with_context(|| format!("writing {path}"))?;
    }
    Ok(ExitCode::SUCCESS)
}
