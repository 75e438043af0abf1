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
    if let Some(v) = &args.data {
        config.storage.dir = v.display().to_string();
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
    let signals = Signals::install()?;
    let running = tidings_broker::start(config).await.context("broker failed to start")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", running.ready_line())?;
        out.flush()?;
    }
    signals.wait().await;
    tracing::info!("shutting down");
    running.shutdown();
    running.wait().await;
    Ok(ExitCode::SUCCESS)
}

/// The signals that stop the broker in order.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
