//! Where a benchmark sends its traffic: a broker it starts itself, or one given by address.

use std::path::Path;

use tidings_admin::BrokerProcess;
use tidings_client::Transport;

/// The `tidings` binary (this one), for the brokers and tools a measurement starts.
pub fn tidings_exe() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    std::env::current_exe().context("cannot find the tidings binary")
}

/// A broker under test. When the benchmark started it, dropping this stops it.
pub struct Target {
    /// Client TCP address.
    pub tcp: String,
    /// Client UDP address, when known.
    pub udp: Option<String>,
    /// Admin address, when known (for reading metrics).
    pub admin: Option<String>,
    process: Option<BrokerProcess>,
}

impl Target {
    /// Starts `bin broker` on loopback ports chosen by the OS, with `extra` arguments.
    pub fn spawn(bin: &Path, extra: &[&str]) -> anyhow::Result<Target> {
        Ok(Target::started(BrokerProcess::start(bin, extra)?))
    }

    /// Starts `bin broker` as [`Target::spawn`] does, with `toml` as its config file.
    pub fn spawn_configured(bin: &Path, toml: &str) -> anyhow::Result<Target> {
        Ok(Target::started(BrokerProcess::start_configured(bin, toml, &[])?))
    }

    /// The broker `process` this benchmark started, at the addresses it reported.
    fn started(process: BrokerProcess) -> Target {
        Target {
            tcp: process.tcp(),
            udp: process.ready.udp.map(|a| a.to_string()),
            admin: process.ready.admin.map(|a| a.to_string()),
            process: Some(process),
        }
    }

    /// A broker someone else runs (TCP and UDP on the same address, metrics unknown).
    pub fn external(tcp: String) -> Target {
        Target { udp: Some(tcp.clone()), tcp, admin: None, process: None }
    }

    /// The address a client of `transport` connects to.
    pub fn addr(&self, transport: Transport) -> anyhow::Result<&str> {
        match transport {
            Transport::Tcp => Ok(&self.tcp),
            Transport::Udp => self.udp.as_deref().ok_or_else(|| anyhow::anyhow!("the broker has no UDP listener")),
        }
    }

    /// The broker's link listener, when this benchmark started it with one (for its cell
    /// mates' `--peer`).
    pub fn cluster(&self) -> Option<String> {
        self.process.as_ref()?.ready.cluster.map(|a| a.to_string())
    }

    /// The broker's process id, when this benchmark started it (to read its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.ready.pid)
    }

    /// A metric of the broker, when its admin address is known.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.process.as_ref()?.metric(name).ok()
    }

    /// The broker's `/metrics` text, when this benchmark started it.
    pub fn metrics(&self) -> anyhow::Result<String> {
        let process = self.process.as_ref().ok_or_else(|| anyhow::anyhow!("metrics of an external broker"))?;
        Ok(process.metrics()?)
    }
}
