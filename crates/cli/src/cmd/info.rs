//! `tidings info`: what a running broker says about itself, from its admin port (`/healthz`,
//! `/readyz`, `/state`, `/metrics`), on one screen.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;
use tidings_admin::{metric_total, metric_value};

use super::login::{Admin, AdminArgs};
use crate::cmd::outln;

/// `info` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings info                          # the broker whose admin port is 127.0.0.1:6465
  tidings info --admin 10.0.0.7:6465
  tidings info --admin https://127.0.0.1:6465 --tls-ca ca.pem --user alice   # TIDINGS_PASSWORD
  tidings info --connections            # who is connected: queue depth, counts, subscriptions
  tidings info --subscriptions --pattern orders")]
pub(crate) struct Args {
    #[command(flatten)]
    admin: AdminArgs,
    /// List the open connections (`/connz`), one line each.
    #[arg(long)]
    connections: bool,
    /// List the subscriptions of open connections (`/subsz`), one line each.
    #[arg(long)]
    subscriptions: bool,
    /// With --subscriptions: only those whose pattern contains this text.
    #[arg(long, value_name = "TEXT", requires = "subscriptions")]
    pattern: Option<String>,
    /// With a list: skip this many entries.
    #[arg(long, default_value_t = 0)]
    offset: usize,
    /// With a list: show at most this many entries.
    #[arg(long, default_value_t = 100, value_parser = tidings_bench::parse::at_least_one::<usize>)]
    limit: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let admin = args.admin.client()?;
    if args.connections || args.subscriptions {
        return list(&admin, args);
    }
    let state: Value = serde_json::from_str(&admin.get("/state?filters=0")?).context("/state is not JSON")?;
    let metrics = admin.get("/metrics")?;
    let alive = admin.get("/healthz").is_ok();
    let ready = admin.get("/readyz").is_ok();
    let sum = |name: &str| metric_total(&metrics, name);
    let router = &state["router"];
    outln!(
        "broker {} (cell {}, incarnation {})",
        state["name"].as_str().unwrap_or("?"),
        state["cell"].as_str().unwrap_or("?"),
        state["incarnation"]
    )?;
    outln!("  alive {alive}, ready {ready}, links up {}", router["links"].as_array().map_or(0, Vec::len))?;
    if let Some(why) = state["forgotten_here"].as_str() {
        outln!("  REFUSED BY ITS CELL, {why}")?;
    }
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
    if let Some(told) = state["told_servers"].as_array().filter(|told| !told.is_empty()) {
        let told: Vec<&str> = told.iter().filter_map(Value::as_str).collect();
        outln!("  tells clients its cell: {}", told.join(", "))?;
    }
    if let Some(pubends) = state["guaranteed"]["pubends"].as_array() {
        outln!("  guaranteed pubends {}", pubends.len())?;
    }
    for group in state["guaranteed"]["replicas"].as_array().into_iter().flatten() {
        let names = |field: &str| {
            let names: Vec<&str> = group[field].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            names.join(", ")
        };
        let learners = names("learners");
        let learners = if learners.is_empty() { String::new() } else { format!(", learners {learners}") };
        // A replica rebuilt from its mates (its journal was damaged) is worth an operator's look.
        let rebuilt = if group["started"] == "rebuilt" { "; rebuilt from its mates (damaged journal)" } else { "" };
        outln!(
            "  replica group {}: voters {}{learners}; leader {}, term {}, commit {}{rebuilt}",
            group["pubend"].as_str().unwrap_or("?"),
            names("voters"),
            group["leader"].as_str().unwrap_or("none"),
            group["term"],
            group["commit"]
        )?;
    }
    Ok(if alive && ready { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `--connections` / `--subscriptions`: one page of `/connz` or `/subsz`, a line per entry,
/// then how many there are in all.
fn list(admin: &Admin, args: &Args) -> anyhow::Result<ExitCode> {
    let (path, what) = if args.connections { ("/connz", "connections") } else { ("/subsz", "subscriptions") };
    let mut query = format!("{path}?offset={}&limit={}", args.offset, args.limit);
    if let Some(pattern) = &args.pattern {
        query.push_str("&pattern=");
        query.extend(form_urlencoded::byte_serialize(pattern.as_bytes()));
    }
    let page: Value = serde_json::from_str(&admin.get(&query)?).with_context(|| format!("{path} is not JSON"))?;
    let items = page["items"].as_array().cloned().unwrap_or_default();
    for item in &items {
        let line = if args.connections {
            format!(
                "{:>6} {} {}  up {} s, {} subscriptions, queued {} ({} B), in {}, out {} ({} B), dropped {}",
                item["id"],
                item["transport"].as_str().unwrap_or("?"),
                item["client"].as_str().unwrap_or("?"),
                item["uptime_s"],
                item["subscriptions"],
                item["queued"],
                item["queued_bytes"],
                item["frames_in"],
                item["messages_out"],
                item["bytes_out"],
                item["dropped"]
            )
        } else {
            let selector = item["selector"].as_str().map(|s| format!(" where {s}")).unwrap_or_default();
            let durable = item["durable"].as_str().map(|d| format!(" (durable {d})")).unwrap_or_default();
            format!(
                "{:>6} #{} {} {}{selector}{durable}",
                item["connection"],
                item["id"],
                item["mode"].as_str().unwrap_or("?"),
                item["pattern"].as_str().unwrap_or("?")
            )
        };
        outln!("{line}")?;
    }
    outln!("{} of {} {what} (from {})", items.len(), page["total"], args.offset)?;
    Ok(ExitCode::SUCCESS)
}
