//! A broker network for an experiment: `tidings net up FILE --dir DIR` starts every broker of a
//! topology file as its own process and writes `DIR/network.json`; `tidings net down --dir DIR`
//! stops them. This module runs those two commands and reads the file; it never imitates a
//! network with anything else.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

use crate::topology::Topology;

/// One broker of a running network.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerInfo {
    /// Broker name from the topology file.
    pub name: String,
    /// Its cell, when the file gives one.
    pub cell: Option<String>,
    /// Client TCP address.
    pub tcp: String,
    /// Admin HTTP address (metrics), when it has one.
    pub admin: Option<String>,
    /// Its process id, when `network.json` gives it (to read its CPU time or send it a fault).
    pub pid: Option<u32>,
}

impl BrokerInfo {
    /// Its admin address, or an error naming the broker: what every scrape of its metrics needs.
    pub fn admin_addr(&self) -> anyhow::Result<String> {
        self.admin.clone().ok_or_else(|| anyhow::anyhow!("broker {} has no admin address", self.name))
    }

    /// Its process id, or an error naming the broker: what reading its CPU or a fault needs.
    pub fn process_id(&self) -> anyhow::Result<u32> {
        self.pid.ok_or_else(|| anyhow::anyhow!("network.json gives no pid for {}", self.name))
    }
}

/// A running network; stopped on drop.
pub struct Network {
    /// Its brokers.
    pub brokers: Vec<BrokerInfo>,
    /// The topology it was started from.
    pub topology: Topology,
    tidings: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

/// The error an experiment reports when the binary has no `net` command yet.
pub fn unavailable(why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "needs the broker network (`tidings net up FILE --dir DIR`), which this tidings binary cannot start: {why}"
    )
}

impl Network {
    /// Starts the network of `file` with `tidings net up`, and waits (at most `timeout`) for
    /// `DIR/network.json` to list every broker of the file.
    pub async fn up(tidings: &Path, file: &Path, dir: &Path, timeout: Duration) -> anyhow::Result<Network> {
        Network::up_with(tidings, file, dir, timeout, &[]).await
    }

    /// [`Network::up`] with more arguments for `net up` (`--faults`, and `--` then every
    /// broker's extra arguments), for experiments that fault links or configure the brokers.
    pub async fn up_with(
        tidings: &Path,
        file: &Path,
        dir: &Path,
        timeout: Duration,
        extra: &[String],
    ) -> anyhow::Result<Network> {
        let help =
            Command::new(tidings).args(["net", "--help"]).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
        if !help.success() {
            return Err(unavailable("`tidings net --help` fails"));
        }
        let topology = Topology::load(file)?;
        let log = std::fs::File::create(dir.join("net-up.log"))?;
        let child = Command::new(tidings)
            .arg("net")
            .arg("up")
            .arg(file)
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting `tidings net up`")?;
        let mut network = Network {
            brokers: Vec::new(),
            topology,
            tidings: tidings.to_path_buf(),
            dir: dir.to_path_buf(),
            child: Some(child),
        };
        let deadline = Instant::now() + timeout;
        let json = dir.join("network.json");
        loop {
            // `net up` returns once the network has converged (the brokers are detached); a
            // `network.json` that records the convergence is as good, should it stay running.
            let exited = match network.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                network.child = None;
                if !status.success() {
                    let log = std::fs::read_to_string(dir.join("net-up.log")).unwrap_or_default();
                    anyhow::bail!("`tidings net up` failed ({status}): {}", log.trim());
                }
            }
            let text = std::fs::read_to_string(&json).unwrap_or_default();
            let converged = serde_json::from_str::<Value>(&text).is_ok_and(|v| !v["converged_ms"].is_null());
            if exited.is_some() || converged {
                let brokers = parse_network(&text).with_context(|| format!("reading {}", json.display()))?;
                anyhow::ensure!(
                    brokers.len() == network.topology.brokers.len(),
                    "{} lists {} brokers, the topology {}",
                    json.display(),
                    brokers.len(),
                    network.topology.brokers.len()
                );
                network.brokers = brokers;
                return Ok(network);
            }
            anyhow::ensure!(Instant::now() < deadline, "the network was not up within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The broker called `name`.
    pub fn broker(&self, name: &str) -> anyhow::Result<&BrokerInfo> {
        self.brokers.iter().find(|b| b.name == name).ok_or_else(|| anyhow::anyhow!("no broker {name:?} in the network"))
    }

    /// The network's directory (`network.json`, logs, `faults.jsonl`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every broker's admin address, in order (an error if one has none).
    pub fn admins(&self) -> anyhow::Result<Vec<String>> {
        self.brokers.iter().map(BrokerInfo::admin_addr).collect()
    }

    /// Stops the network, whether `net up` finished or not. A `net up` still running (a timeout
    /// here, or an experiment stopped early) is asked with SIGTERM to stop the brokers it has
    /// started (it does so, then exits); killing it outright would leave those brokers running
    /// with no `network.json` that `net down` could find them by.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = tidings_admin::send_signal(child.id(), tidings_admin::Signal::Term);
            let deadline = Instant::now() + Duration::from_secs(60);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new(&self.tidings)
            .args(["net", "down", "--dir"])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `tidings net fault ARGS [--for D] --dir DIR`, which must succeed: the faults of the failures
/// experiment, injected as an operator would.
pub fn net_fault(tidings: &Path, dir: &Path, args: &[&str], lasting: Option<Duration>) -> anyhow::Result<()> {
    net_fault_unless(tidings, dir, args, lasting, &AtomicBool::new(false))
}

/// [`net_fault`], killed (and an error) once `stop` is set: the nemesis's faults, whose run a
/// signal may end while a `--for` fault sleeps, which would otherwise heal or restart a broker
/// after the network went down, and so outlive the run.
pub fn net_fault_unless(
    tidings: &Path,
    dir: &Path,
    args: &[&str],
    lasting: Option<Duration>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut command = Command::new(tidings);
    command.args(["net", "fault"]).args(args).arg("--dir").arg(dir);
    if let Some(d) = lasting {
        command.args(["--for", &format!("{}ms", d.as_millis())]);
    }
    let what = format!("`tidings net fault {}`", args.join(" "));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {what}"))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("{what} stopped");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    anyhow::ensure!(status.success(), "{what} failed: {}", stderr.trim());
    Ok(())
}

/// Reads `network.json`: either `{"brokers": [...]}` or a bare list; each broker has `name`,
/// `tcp` and optionally `cell` and `admin`.
pub fn parse_network(text: &str) -> anyhow::Result<Vec<BrokerInfo>> {
    let value: Value = serde_json::from_str(text)?;
    let list = value.get("brokers").unwrap_or(&value).as_array().ok_or_else(|| anyhow::anyhow!("no broker list"))?;
    list.iter()
        .map(|b| {
            let text = |key: &str| b.get(key).and_then(Value::as_str).map(str::to_string);
            Ok(BrokerInfo {
                name: text("name").ok_or_else(|| anyhow::anyhow!("a broker without a name: {b}"))?,
                cell: text("cell"),
                tcp: text("tcp").ok_or_else(|| anyhow::anyhow!("a broker without a tcp address: {b}"))?,
                admin: text("admin"),
                pid: b.get("pid").and_then(Value::as_u64).and_then(|p| u32::try_from(p).ok()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_files_are_read_in_both_shapes() {
        let wrapped = r#"{"brokers":[{"name":"phb","cell":"phb","tcp":"127.0.0.1:1","admin":"127.0.0.1:2","pid":7}]}"#;
        let b = &parse_network(wrapped).unwrap()[0];
        assert_eq!((b.name.as_str(), b.tcp.as_str(), b.admin.as_deref()), ("phb", "127.0.0.1:1", Some("127.0.0.1:2")));
        assert_eq!(b.pid, Some(7));
        let bare = r#"[{"name":"a","tcp":"127.0.0.1:3"}]"#;
        assert_eq!(parse_network(bare).unwrap()[0].cell, None);
    }

    #[test]
    fn a_broker_without_an_address_is_an_error() {
        assert!(parse_network(r#"[{"name":"a"}]"#).is_err());
        assert!(parse_network(r#"{"x":1}"#).is_err());
    }

    #[test]
    fn the_missing_network_is_named_in_the_error() {
        assert!(unavailable("no net").to_string().starts_with("needs the broker network"));
    }
}
