//! `tidings info`: what a running broker says about itself, from its admin port (`/healthz`,
//! `/readyz`, `/state`, `/metrics`), on one screen.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;
use tidings_testkit::{http_get, metric_total, metric_value};

use crate::cmd::outln;

/// `info` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings info                          # the broker whose admin port is 127.0.0.1:6465
  tidings info --admin 10.0.0.7:6465")]
pub(crate) struct Args {
    /// The broker's admin address (HOST:PORT).
    #[arg(long, default_value_t = default_admin(), value_name = "HOST:PORT")]
    admin: String,
}

pub(crate) fn default_admin() -> String {
    format!("127.0.0.1:{}", tidings_broker::DEFAULT_ADMIN_PORT)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let admin: SocketAddr = args.admin.parse().map_err(|_| {
        super::UsageError(format!("--admin {:?} is not HOST:PORT (an IP address and a port)", args.admin))
    })?;
    let state: Value = serde_json::from_str(&http_get(admin, "/state?filters=0").context("cannot read /state")?)
        .context("/state is not JSON")?;
    let metrics = http_get(admin, "/metrics").context("cannot read /metrics")?;
    let alive = http_get(admin, "/healthz").is_ok();
    let ready = http_get(admin, "/readyz").is_ok();
    let sum = |name: &str| metric_total(&metrics, name);
    let router = &state["router"];
    outln!(
        "broker {} (cell {}, incarnation {})",
        state["name"].as_str().unwrap_or("?"),
        state["cell"].as_str().unwrap_or("?"),
        state["incarnation"]
    )?;
    outln!("  alive {alive}, ready {ready}, links up {}", router["links"].as_array().map_or(0, Vec::len))?;
    outln!("  connections {}, subscriptions {}", sum("tidings_connections"), sum("tidings_subscriptions"))?;
    outln!(
        "  messages in {}, out {}, slow-consumer drops {}, protocol errors {}",
        sum("tidings_messages_in_total"),
        sum("tidings_messages_out_total"),
        sum("tidings_slow_consumer_drops_total"),
        sum("tidings_protocol_errors_total")
    )?;
    let rss = metric_value(&metrics, "process_resident_memory_bytes");
    outln!(
        "  resident memory {:.1} MB, open files {}, CPU {:.2} s",
        rss / 1e6,
        metric_value(&metrics, "process_open_fds"),
        metric_value(&metrics, "process_cpu_seconds_total")
    )?;
    if let Some(pubends) = state["guaranteed"]["pubends"].as_array() {
        outln!("  guaranteed pubends {}", pubends.len())?;
    }
    Ok(if alive && ready { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
