//! `tidings broker`: run a broker until SIGINT or SIGTERM.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tidings_broker::Config;

/// Flags override the config file, which overrides the built-in defaults.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings broker                                   # built-in defaults, no file needed
  tidings broker --config /etc/tidings/broker.toml
  tidings broker --print-config > broker.toml      # every setting with its default
  tidings broker --name b1 --cluster-listen 127.0.0.1:6466 --cluster-key net.key --peer 10.0.0.2:6466")]
pub(crate) struct Args {
    /// Client TCP listener, HOST:PORT (port 0: the OS picks; see the ready line).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Client UDP listener, HOST:PORT; `off` disables UDP.
    #[arg(long, value_name = "HOST:PORT")]
    udp: Option<String>,
    /// Admin HTTP listener (/metrics, /healthz), HOST:PORT; `off` disables it.
    #[arg(long, value_name = "HOST:PORT")]
    admin: Option<String>,
    /// Broker name.
    #[arg(long)]
    name: Option<String>,
    /// This broker's cell (default: its name, a cell of one).
    #[arg(long)]
    cell: Option<String>,
    /// Listener for links from other brokers, HOST:PORT; `off` disables it.
    #[arg(long, value_name = "HOST:PORT")]
    cluster_listen: Option<String>,
    /// A broker to link to (its cluster listener); repeatable, added to the config's `[[peer]]`.
    #[arg(long = "peer", value_name = "HOST:PORT")]
    peers: Vec<String>,
    /// The network's shared key file (`[cluster] key_file`): links prove they hold it.
    #[arg(long, value_name = "FILE")]
    cluster_key: Option<PathBuf>,
    /// Link without authentication (`[cluster] insecure`): test networks only.
    #[arg(long)]
    cluster_insecure: bool,
    /// Data directory (`[storage] dir`; default `tidings-data/<name>`), locked while running.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Threads running sessions and links (`[limits] worker_threads`; 0: one per core).
    #[arg(long, value_name = "N")]
    worker_threads: Option<usize>,
    /// Brokers of the cell holding each pubend's log (`[storage] replicas`; 0: 3, or the whole
    /// cell if smaller; 1: this broker alone). `net up` sets it from a topology's settings.
    #[arg(long, value_name = "N")]
    replicas: Option<usize>,
    /// Where durable subscriptions' messages wait (`[durable] store`): `publisher` (their
    /// publishers' cell) or `cell` (this broker's cell too). `net up` sets it from a topology's
    /// settings.
    #[arg(long, value_name = "WHERE")]
    durable_store: Option<String>,
    /// TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

fn off_or(value: String) -> String {
    if value == "off" {
        String::new()
    } else {
        value
    }
}

pub(crate) fn effective_config(args: &Args) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(|e| super::UsageError(e.to_string()))?,
        None => Config::default(),
    };
    if let Some(v) = &args.listen {
        config.listen.tcp = off_or(v.clone());
    }
    if let Some(v) = &args.udp {
        config.listen.udp = off_or(v.clone());
    }
    if let Some(v) = &args.admin {
        config.listen.admin = off_or(v.clone());
    }
    if let Some(v) = &args.name {
        config.name = v.clone();
    }
    if let Some(v) = &args.cell {
        config.cluster.cell = v.clone();
    }
    if let Some(v) = &args.cluster_listen {
        config.cluster.listen = off_or(v.clone());
    }
    if let Some(v) = &args.cluster_key {
        config.cluster.key_file = v.display().to_string();
    }
    if args.cluster_insecure {
        config.cluster.insecure = true;
    }
    if let Some(v) = args.worker_threads {
        config.limits.worker_threads = v;
    }
    if let Some(v) = &args.data {
        config.storage.dir = v.display().to_string();
    }
    if let Some(v) = args.replicas {
        config.storage.replicas = v;
    }
    if let Some(v) = &args.durable_store {
        config.durable.store = v.clone();
    }
    config.peer.extend(args.peers.iter().map(|address| tidings_broker::config::Peer { address: address.clone() }));
    config.validate().map_err(|e| super::UsageError(e.to_string()))?;
    Ok(config)
}

/// Runs the broker on `config` (read already, so logging could follow its `[log]` section).
pub(crate) async fn run(args: Args, config: Option<Config>) -> anyhow::Result<ExitCode> {
    let config = match config {
        Some(config) => config,
        None => effective_config(&args)?,
    };
    if args.print_config {
        {
            use std::io::Write as _;
            write!(std::io::stdout().lock(), "{}", config.to_toml())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Signal handlers first: a SIGTERM sent as soon as the ready line is read must stop the
    // broker in order, not kill it with the default action.
    let mut signals = Signals::install()?;
    let running = tidings_broker::start(config.clone()).await.context("broker failed to start")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", running.ready_line())?;
        out.flush()?;
    }
    let mut current = config;
    while signals.wait().await == Wake::Reload {
        current = reload(&args, &running, current);
    }
    tracing::info!("shutting down");
    running.shutdown();
    running.wait().await;
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP: reads the config file again (flags still override it), applies what can change
/// live, logs what changed and what waits for a restart; a bad file changes nothing.
fn reload(args: &Args, running: &tidings_broker::Running, current: Config) -> Config {
    if args.config.is_none() {
        running.reload_files();
        tracing::warn!("SIGHUP: no config file to reload (the broker was started without --config)");
        return current;
    }
    let new = match effective_config(args) {
        Ok(new) => new,
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "SIGHUP: the config file is refused; nothing changed");
            return current;
        }
    };
    let outcome = running.reload(&current, &new);
    if new.log.level != current.log.level {
        match (super::LOG_LEVEL.get(), super::log_filter(&new.log.level, "log.level")) {
            (Some(log), _) if log.pinned => {
                tracing::warn!("log.level changed but --log-level or RUST_LOG fixes the level")
            }
            (Some(log), Ok(filter)) => {
                (log.set)(filter);
            }
            (_, Err(error)) => tracing::error!(%error, "SIGHUP: log.level not applied"),
            (None, _) => {}
        }
    }
    if outcome.applied.is_empty() && outcome.need_restart.is_empty() {
        tracing::info!("SIGHUP: configuration reloaded, nothing changed");
    } else {
        tracing::info!(
            applied = %outcome.applied.join(", "),
            need_restart = %outcome.need_restart.join(", "),
            "SIGHUP: configuration reloaded"
        );
    }
    tidings_broker::live::with_live(&current, &new)
}

/// Why the broker woke up.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    Stop,
    Reload,
}

/// The signals the broker acts on.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
            hup: signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?,
        })
    }

    async fn wait(&mut self) -> Wake {
        tokio::select! {
            _ = self.term.recv() => Wake::Stop,
            _ = self.int.recv() => Wake::Stop,
            _ = self.hup.recv() => Wake::Reload,
        }
    }
}
