//! `tidings durable ls|rm`: a running broker's durable subscriptions, from its admin port.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;

use super::login::AdminArgs;
use crate::cmd::outln;

/// `durable` subcommands.
#[derive(clap::Subcommand)]
pub(crate) enum Which {
    /// List durable subscriptions: held or not, and per pubend the checkpoint, how far behind
    /// it is, and whether it is what holds the pubend's log.
    Ls(LsArgs),
    /// Delete a durable subscription no client holds: its name, checkpoints and the messages
    /// kept for it go.
    Rm(RmArgs),
}

/// `durable ls` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings durable ls
  tidings durable ls --json --admin 10.0.0.7:6465")]
pub(crate) struct LsArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The `/state` entries as one JSON array.
    #[arg(long)]
    json: bool,
}

/// `durable rm` arguments.
#[derive(clap::Args)]
#[command(after_help = "Example:
  tidings durable rm billing")]
pub(crate) struct RmArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The durable subscription's name.
    name: String,
}

pub(crate) fn run(which: &Which) -> anyhow::Result<ExitCode> {
    match which {
        Which::Ls(args) => ls(args),
        Which::Rm(args) => rm(args),
    }
}

fn ls(args: &LsArgs) -> anyhow::Result<ExitCode> {
    let state: Value =
        serde_json::from_str(&args.admin.client()?.get("/state?filters=0")?).context("/state is not JSON")?;
    let durables = state["guaranteed"]["durables"].as_array().cloned().unwrap_or_default();
    if args.json {
        outln!("{}", Value::Array(durables))?;
        return Ok(ExitCode::SUCCESS);
    }
    if durables.is_empty() {
        outln!("no durable subscriptions")?;
    }
    for d in &durables {
        let selector = d["selector"].as_str().map(|s| format!(" where {s}")).unwrap_or_default();
        let held = if d["held"].as_bool() == Some(true) { "held" } else { "away" };
        outln!("{} {}{} ({held})", d["name"].as_str().unwrap_or("?"), d["pattern"].as_str().unwrap_or("?"), selector)?;
        for p in d["pubends"].as_array().into_iter().flatten() {
            let pins = if p["pins"].as_bool() == Some(true) { ", holds the log" } else { "" };
            outln!(
                "  pubend {}: checkpoint {}, behind {} ms{pins}",
                p["pubend"].as_str().unwrap_or("?"),
                p["checkpoint"],
                p["behind_ms"]
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rm(args: &RmArgs) -> anyhow::Result<ExitCode> {
    tidings_broker::guaranteed::durable::check_name(&args.name).map_err(|n| super::UsageError(n.text))?;
    args.admin.client()?.change("DELETE", &format!("/durable/{}", args.name))
}
