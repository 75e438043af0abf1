//! A link's fault point: one small process per broker link of a `net up --faults` network,
//! forwarding the link through tidings-admin's [`FaultProxy`].
//!
//! A process rather than a thread of `net up`: the network outlives the command that started
//! it, and `net fault` (a later, separate command) must reach the fault point of one link. It
//! does so with signals, so the fault point needs no control port of its own:
//! SIGUSR1 cuts the link (connections reset, new ones refused), SIGUSR2 stalls it (bytes held,
//! connections open), SIGHUP heals it, SIGTERM ends it. With `--link-delay`, `--link-jitter`
//! or `--link-rate` it also shapes the link like a LAN or a WAN (tidings-admin's `Shape`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::atomic::AtomicBool;

use crate::cmd::outln;
use anyhow::Context;
use serde_json::{json, Value};
use tidings_admin::{FaultProxy, Shape, Signal};
use tokio::signal::unix::{signal, SignalKind};

/// `net link-proxy` arguments.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The broker's cluster address the link leads to.
    #[arg(long)]
    to: SocketAddr,
    #[command(flatten)]
    shape: ShapeArgs,
}

/// How every link of a network behaves: loopback (the default), or like a LAN or a WAN.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct ShapeArgs {
    /// One-way delay added on every link, e.g. `200us` (a LAN) or `20ms` (a WAN); implies
    /// `--faults` (each link runs through its fault point, which adds it).
    #[arg(long, value_parser = humantime::parse_duration)]
    link_delay: Option<std::time::Duration>,
    /// Up to this much more delay per chunk, drawn uniformly (order is kept).
    #[arg(long, value_parser = humantime::parse_duration)]
    link_jitter: Option<std::time::Duration>,
    /// Bandwidth of each link, each way, in megabits per second (e.g. `1000` for a LAN, `100`
    /// for a WAN).
    #[arg(long)]
    link_rate: Option<f64>,
}

impl ShapeArgs {
    /// The shape the arguments ask for (nothing by default).
    pub(crate) fn shape(&self) -> anyhow::Result<Shape> {
        let rate = match self.link_rate {
            None => 0,
            Some(mbit) if mbit.is_finite() && mbit > 0.0 => (mbit * 1e6 / 8.0).max(1.0) as u64,
            Some(mbit) => anyhow::bail!("--link-rate must be a positive number of megabits per second, not {mbit}"),
        };
        Ok(Shape { delay: self.link_delay.unwrap_or_default(), jitter: self.link_jitter.unwrap_or_default(), rate })
    }

    /// The same arguments for a fault point's own command line.
    fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(delay) = self.link_delay {
            args.extend(["--link-delay".to_string(), humantime::format_duration(delay).to_string()]);
        }
        if let Some(jitter) = self.link_jitter {
            args.extend(["--link-jitter".to_string(), humantime::format_duration(jitter).to_string()]);
        }
        if let Some(rate) = self.link_rate {
            args.extend(["--link-rate".to_string(), rate.to_string()]);
        }
        args
    }
}

/// The faults a link's fault point takes, and the signal that sets each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkMode {
    /// Connections reset, new ones refused.
    Cut,
    /// Bytes held both ways; connections stay open.
    Stall,
    /// Forwarding again.
    Heal,
}

impl LinkMode {
    fn signal(self) -> Signal {
        match self {
            LinkMode::Cut => Signal::Usr1,
            LinkMode::Stall => Signal::Usr2,
            LinkMode::Heal => Signal::Hup,
        }
    }
}

/// One running fault point, as network.json records it.
pub(crate) struct LinkProxy {
    /// The two brokers it joins: the listening one first, then the dialling one.
    pub(crate) between: [String; 2],
    /// Where the dialling broker connects.
    pub(crate) listen: SocketAddr,
    /// The proxy's process.
    pub(crate) pid: u32,
}

impl LinkProxy {
    /// Starts the fault point for the link `between[1]` dials to `between[0]` at `to`.
    pub(crate) fn start(
        exe: &Path,
        dir: &Path,
        between: [&str; 2],
        to: SocketAddr,
        shape: &ShapeArgs,
    ) -> anyhow::Result<LinkProxy> {
        let links = dir.join("links");
        std::fs::create_dir_all(&links).with_context(|| format!("cannot create {}", links.display()))?;
        let name = format!("{}-{}", between[0], between[1]);
        let log = links.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log)?;
        let mut command = Command::new(exe);
        command.args(["net", "link-proxy", "--to", &to.to_string()]).args(shape.to_args());
        let what = format!("the fault point of link {name}");
        let ready = super::spawn_ready(
            command,
            &links.join(format!("{name}.ready")),
            stderr,
            &what,
            &log,
            &AtomicBool::new(false),
        )?;
        let listen = ready["listen"].as_str().and_then(|a| a.parse().ok());
        Ok(LinkProxy {
            between: between.map(str::to_owned),
            listen: listen.with_context(|| format!("{what} printed no listen address"))?,
            pid: ready["pid"].as_u64().unwrap_or(0) as u32,
        })
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({ "between": self.between, "listen": self.listen, "pid": self.pid })
    }

    /// Whether this is the link between `a` and `b`, in either order.
    pub(crate) fn joins(&self, a: &str, b: &str) -> bool {
        (self.between[0] == a && self.between[1] == b) || (self.between[0] == b && self.between[1] == a)
    }

    /// Sets the link's fault.
    pub(crate) fn set(&self, mode: LinkMode) -> anyhow::Result<()> {
        let name = self.between.join("-");
        anyhow::ensure!(super::alive(self.pid), "the fault point of link {name} (pid {}) is not running", self.pid);
        tidings_admin::send_signal(self.pid, mode.signal())
            .with_context(|| format!("cannot signal the fault point of link {name}"))
    }
}

/// The fault points network.json lists.
pub(crate) fn links(network: &Value) -> Vec<LinkProxy> {
    let Some(list) = network["links"].as_array() else { return Vec::new() };
    list.iter()
        .filter_map(|l| {
            let between = l["between"].as_array()?;
            Some(LinkProxy {
                between: [between.first()?.as_str()?.to_owned(), between.get(1)?.as_str()?.to_owned()],
                listen: l["listen"].as_str()?.parse().ok()?,
                pid: l["pid"].as_u64()? as u32,
            })
        })
        .collect()
}

/// The fault point's own process: forward until told otherwise by a signal.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let shape = args.shape.shape()?;
    let proxy = FaultProxy::start_shaped(args.to, shape).context("cannot start the link's fault point")?;
    let mut cut = signal(SignalKind::user_defined1())?;
    let mut stall = signal(SignalKind::user_defined2())?;
    let mut heal = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let shaped = json!({ "delay_us": shape.delay.as_micros() as u64, "jitter_us": shape.jitter.as_micros() as u64, "rate_bytes_s": shape.rate });
    outln!("{}", json!({ "listen": proxy.addr(), "pid": std::process::id(), "to": args.to, "shape": shaped }))?;
    loop {
        tokio::select! {
            _ = cut.recv() => proxy.cut(),
            _ = stall.recv() => proxy.stall(),
            _ = heal.recv() => proxy.heal(),
            _ = term.recv() => break,
        }
        tracing::info!(mode = ?proxy.mode(), stats = ?proxy.stats(), "link fault point");
    }
    Ok(ExitCode::SUCCESS)
}
