//! `tidings`: run a broker, publish, subscribe, ping.
//!
//! Each subcommand lives in [`cmd`]; the command lines and the JSON printed by `sub --json`
//! are a contract that scripts rely on (see the README).

mod cmd;

/// The broker allocates read buffers, frames and queue entries at high rates from several
/// threads; mimalloc's thread-local free lists measurably beat the system allocator here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// A publish/subscribe broker network.
#[derive(Parser)]
#[command(name = "tidings", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker (defaults need no config file).
    Broker(cmd::broker::Args),
    /// Publish one message, or many as a load generator.
    Pub(cmd::publish::Args),
    /// Subscribe and print deliveries.
    Sub(cmd::subscribe::Args),
    /// Measure round trips to a broker.
    Ping(cmd::ping::Args),
    /// Run a network of brokers from a topology file: up, status, down.
    #[command(subcommand)]
    Net(cmd::net::Which),
    /// Run benchmarks against a broker started for the purpose.
    #[command(subcommand)]
    Bench(cmd::bench::Which),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Broker(args) => cmd::broker::run(args).await,
            Command::Pub(args) => cmd::publish::run(args).await,
            Command::Sub(args) => cmd::subscribe::run(args).await,
            Command::Ping(args) => cmd::ping::run(args).await,
            Command::Net(which) => cmd::net::run(which).await,
            Command::Bench(which) => cmd::bench::run(which).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
