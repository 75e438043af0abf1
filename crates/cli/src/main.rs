//! `tidings`: run a broker, publish, subscribe, ping.
//!
//! Each subcommand lives in [`cmd`]; the command lines and the JSON printed by `sub --json`
//! are a contract that scripts rely on (see docs/cli.md).

mod cmd;

/// The broker allocates read buffers, frames and queue entries at high rates from several
/// threads; mimalloc's thread-local free lists measurably beat the system allocator here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, Parser, Subcommand};

/// mimalloc's environment variable for how long freed memory waits before it goes back to the
/// operating system.
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// mimalloc's environment variable for transparent huge pages (`0`: it turns them off for the
/// process with `prctl(PR_SET_THP_DISABLE)`).
const ALLOW_THP: &str = "MIMALLOC_ALLOW_THP";

/// With `[limits] return_freed_memory` (the default), a broker's memory goes back to the
/// operating system as soon as it is freed: a burst (a stalled subscriber's 400 MB queue, say)
/// otherwise stayed resident after the subscriber left, because mimalloc purges a delayed page
/// only when the thread that freed it allocates again, and that thread may stay idle
/// (measured: 557 MB resident 5 s after such a burst by default, 22 MB with a purge delay of
/// 0; delays of 1, 10 and 50 ms kept all of it).
///
/// Returning memory at once pairs badly with the transparent huge pages mimalloc asks for
/// (`madvise(MADV_HUGEPAGE)` on its arenas): every page given back and touched again is a fault
/// that zeroes 2 MiB. During a durable subscriber's catch-up (`tidings bench catch-up`) that
/// zeroing (`clear_page_erms`) was 19 % of the broker's CPU, and turns of the delivery driver
/// that replay 1,024 messages in 2 ms took 6-30 ms, while every live guaranteed message waited
/// behind them. The same build with huge pages off and on, alternated three times on
/// 2026-11-28: catch-up 630-686 k against 602-623 k msg/s, live p99 during it 14-16 ms against
/// 21-54 ms, turns over 5 ms from about 15 a run to 1 or 2; best-effort `bench tput --subs 4`
/// 530-586 k against 505-544 k msg/s; a steady guaranteed stream costs the same CPU.
///
/// mimalloc reads both settings from its environment when the process starts, before `main`,
/// and the workspace forbids the unsafe call that would set them later: so the broker runs
/// itself again, once, with the variables set. An operator's own values are kept.
fn purge_freed_memory_at_once() {
    use std::os::unix::process::CommandExt;
    let missing: Vec<(&str, &str)> = [(PURGE_DELAY, "0"), (ALLOW_THP, "0")]
        .into_iter()
        .filter(|(name, _)| std::env::var_os(name).is_none())
        .collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    // `exec` returns only if it failed; the broker then runs as it is.
    let error = std::process::Command::new(exe).args(std::env::args_os().skip(1)).envs(missing).exec();
    eprintln!(
        "warning: could not restart with {PURGE_DELAY}=0 and {ALLOW_THP}=0 ({error}); memory freed after a burst may stay resident"
    );
}

/// A publish/subscribe broker network.
#[derive(Parser)]
#[command(
    name = "tidings",
    version,
    about,
    propagate_version = true,
    after_help = "Examples:
  tidings broker                                  # a broker on 127.0.0.1:6464, admin on :6465
  tidings sub 'prices.>' --where \"price > 100\"    # print matching deliveries
  tidings pub prices.ibm '120.5' -p price=120.5   # publish one message
  tidings net up topologies/narada-22-dense.toml  # a network of 22 brokers on loopback
  tidings bench tput --nats                       # throughput, beside NATS if installed"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

/// Logging options every command takes.
#[derive(clap::Args)]
struct LogArgs {
    /// Log level or filter (error, warn, info, debug, trace, or e.g. `info,tidings_broker=debug`);
    /// overrides RUST_LOG and the broker's `[log] level`.
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Log lines as `text` or `json` (one object per line); overrides the broker's `[log] format`.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker (defaults need no config file).
    Broker(cmd::broker::Args),
    /// Publish one message, or many as a load generator.
    Pub(cmd::publish::Args),
    /// Subscribe and print deliveries.
    Sub(cmd::subscribe::Args),
    /// Send a request and print the reply (or "no responders" at once).
    Req(cmd::request::ReqArgs),
    /// Answer requests: echo them, or with a command's output.
    Reply(cmd::request::ReplyArgs),
    /// Measure round trips to a broker.
    Ping(cmd::ping::Args),
    /// Run a network of brokers from a topology file: up, status, fault, down.
    #[command(subcommand)]
    Net(cmd::net::Which),
    /// Run benchmarks against a broker started for the purpose.
    #[command(subcommand)]
    Bench(cmd::bench::Which),
    /// What a running broker says about itself (from its admin port).
    Info(cmd::info::Args),
    /// A running broker's durable subscriptions: list, delete.
    #[command(subcommand)]
    Durable(cmd::durable::Which),
    /// A broker's cell: forget a broker removed for good (its replica groups replace it).
    #[command(subcommand)]
    Cell(cmd::cell::Which),
    /// Add or change a user's password (argon2id) or bearer token in a users file.
    Passwd(cmd::passwd::Args),
    /// Print a shell completion script.
    Completions(cmd::docs::CompletionArgs),
    /// Print the manual page, or write every page into a directory.
    Man(cmd::docs::ManArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The broker's config file may set its log level and format: read it before logging starts
    // (a bad config is reported plainly, without a log line).
    let broker_config = match &cli.command {
        Command::Broker(args) => match cmd::broker::effective_config(args) {
            Ok(config) => Some(config),
            Err(e) => return cmd::exit_with(&e),
        },
        _ => None,
    };
    if broker_config.as_ref().is_some_and(|config| config.limits.return_freed_memory) {
        purge_freed_memory_at_once();
    }
    let (level, json) = match &broker_config {
        Some(config) => (config.log.level.clone(), config.log.format == tidings_broker::config::LogFormat::Json),
        None => ("info".to_string(), false),
    };
    if let Err(e) = init_logging(&cli.log, &level, json) {
        return cmd::exit_with(&e);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = broker_config.as_ref().map(|config| config.limits.worker_threads).filter(|n| *n > 0) {
        builder.worker_threads(threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match (cli.command, broker_config) {
            (Command::Broker(args), config) => cmd::broker::run(args, config).await,
            (Command::Pub(args), _) => cmd::publish::run(args).await,
            (Command::Sub(args), _) => cmd::subscribe::run(args).await,
            (Command::Req(args), _) => cmd::request::req(args).await,
            (Command::Reply(args), _) => cmd::request::reply(args).await,
            (Command::Ping(args), _) => cmd::ping::run(args).await,
            (Command::Net(which), _) => cmd::net::run(which).await,
            (Command::Bench(which), _) => cmd::bench::run(which).await,
            (Command::Info(args), _) => cmd::info::run(&args),
            (Command::Durable(which), _) => cmd::durable::run(&which),
            (Command::Cell(which), _) => cmd::cell::run(&which),
            (Command::Passwd(args), _) => cmd::passwd::run(&args),
            (Command::Completions(args), _) => cmd::docs::completions(&args, Cli::command()),
            (Command::Man(args), _) => cmd::docs::man(&args, Cli::command()),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => cmd::exit_with(&e),
    }
}

/// Logs go to stderr: coloured only on a terminal (a log file gets no escape codes), as text or
/// JSON. `--log-level` beats `RUST_LOG`, which beats the config's level. The filter sits behind
/// a reload handle so a broker's SIGHUP can change its level live.
fn init_logging(args: &LogArgs, config_level: &str, config_json: bool) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{reload, EnvFilter};
    let (filter, pinned) = match (&args.log_level, std::env::var("RUST_LOG")) {
        (Some(level), _) => (cmd::log_filter(level, "--log-level")?, true),
        (None, Ok(text)) if !text.is_empty() => (cmd::log_filter(&text, "RUST_LOG")?, true),
        _ => (cmd::log_filter(config_level, "log.level")?, false),
    };
    let json = args.log_format.as_deref().map_or(config_json, |f| f == "json");
    let (filter, handle) = reload::Layer::new(filter);
    let plain = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let shaped = if json { plain.json().boxed() } else { plain.with_ansi(std::io::stderr().is_terminal()).boxed() };
    tracing_subscriber::registry().with(filter).with(shaped).init();
    let level: Box<dyn Fn(EnvFilter) -> bool + Send + Sync> = Box::new(move |new| handle.reload(new).is_ok());
    cmd::LOG_LEVEL.set(cmd::LogLevel { set: level, pinned }).ok();
    Ok(())
}
