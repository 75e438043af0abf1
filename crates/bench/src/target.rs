//! Where a benchmark sends its traffic: a broker it starts itself, or one given by address.

use std::path::Path;

use tidings_testkit::BrokerProcess;

/// A broker under test. When the benchmark started it, dropping this stops it.
pub struct Target {
    /// Client TCP address.
    pub tcp: String,
    /// Admin address, when known (for reading metrics).
    pub admin: Option<String>,
    process: Option<BrokerProcess>,
}

impl Target {
    /// Starts `bin broker` on loopback ports chosen by the OS, with `extra` arguments.
    pub fn spawn(bin: &Path, extra: &[&str]) -> anyhow::Result<Target> {
        let process = BrokerProcess::start(bin, extra)?;
        Ok(Target { tcp: process.tcp(), admin: process.ready.admin.map(|a| a.to_string()), process: Some(process) })
    }

    /// A broker someone else runs.
    pub fn external(tcp: String) -> Target {
        Target { tcp, admin: None, process: None }
    }

    /// A metric of the broker, when this benchmark started it.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.process.as_ref().and_then(|p| p.metric(name).ok())
    }
}
