//! A broker child process: started on ports the OS picks, read back from its ready line, and
//! killed when dropped, so neither an experiment nor a failing test leaves one behind.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::{metric_value, send_signal, Signal};

/// The broker's ready line (see `tidings broker`).
#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    /// Broker name.
    pub name: String,
    /// Process id.
    pub pid: u32,
    /// Client TCP address.
    pub tcp: Option<SocketAddr>,
    /// Client UDP address.
    pub udp: Option<SocketAddr>,
    /// Admin HTTP address.
    pub admin: Option<SocketAddr>,
    /// Broker-to-broker link listener (absent from brokers without one).
    #[serde(default)]
    pub cluster: Option<SocketAddr>,
    /// MQTT listener (absent from brokers without one).
    #[serde(default)]
    pub mqtt: Option<SocketAddr>,
    /// MQTT over WebSocket listener (absent from brokers without one).
    #[serde(default)]
    pub mqtt_ws: Option<SocketAddr>,
}

/// A running broker; killed on drop, and its scratch directory (data directory, key file)
/// removed.
pub struct BrokerProcess {
    child: Child,
    /// What it bound.
    pub ready: Ready,
    _stdout: Option<ChildStdout>,
    scratch: Option<tempfile::TempDir>,
    config_dir: Option<tempfile::TempDir>,
    /// The `Authorization` header its admin port asks for (a broker with a users file).
    admin_login: Option<String>,
}

/// The network key every broker a test process starts shares (64 hex digits), so brokers
/// started separately can link: generated once per test process.
pub fn test_key_text() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut bytes = [0u8; 32];
        // Without randomness a fixed key still exercises authentication; tests never face an
        // attacker who could guess it.
        let _ = getrandom::fill(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

impl BrokerProcess {
    /// Starts `bin broker` on loopback port 0 for every listener, plus `extra` arguments,
    /// and waits (at most 20 s) for its ready line. Unless `extra` says otherwise, the broker
    /// gets its own data directory and the test process's network key ([`test_key_text`]) in
    /// a scratch directory removed when it is dropped, so tests never share state or litter.
    pub fn start(bin: &Path, extra: &[&str]) -> std::io::Result<BrokerProcess> {
        let scratch = tempfile::Builder::new().prefix("tidings-broker-").tempdir()?;
        let data = scratch.path().join("data").display().to_string();
        let key = scratch.path().join("cluster.key");
        write_private(&key, test_key_text())?;
        let key = key.display().to_string();
        let mut args = vec!["broker", "--listen", "127.0.0.1:0", "--udp", "127.0.0.1:0", "--admin", "127.0.0.1:0"];
        if !extra.contains(&"--data") {
            args.extend(["--data", data.as_str()]);
        }
        if !extra.contains(&"--cluster-key") && !extra.contains(&"--cluster-insecure") {
            args.extend(["--cluster-key", key.as_str()]);
        }
        args.extend_from_slice(extra);
        let mut broker = BrokerProcess::start_with_args(bin, &args)?;
        broker.scratch = Some(scratch);
        Ok(broker)
    }

    /// [`BrokerProcess::start`] with `toml` as its config file (kept in a directory removed
    /// when the broker is dropped), plus `extra` arguments.
    pub fn start_configured(bin: &Path, toml: &str, extra: &[&str]) -> std::io::Result<BrokerProcess> {
        let dir = tempfile::Builder::new().prefix("tidings-config-").tempdir()?;
        let path = dir.path().join("broker.toml");
        std::fs::write(&path, toml)?;
        let path = path.display().to_string();
        let mut args = vec!["--config", path.as_str()];
        args.extend_from_slice(extra);
        let mut broker = BrokerProcess::start(bin, &args)?;
        broker.config_dir = Some(dir);
        Ok(broker)
    }

    /// The scratch directory [`BrokerProcess::start`] made (holding `data/` and `cluster.key`).
    pub fn scratch_dir(&self) -> Option<&Path> {
        self.scratch.as_ref().map(tempfile::TempDir::path)
    }

    /// Starts `bin` with exactly `args` and waits for the ready line.
    pub fn start_with_args(bin: &Path, args: &[&str]) -> std::io::Result<BrokerProcess> {
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let res = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send(res);
            // Keep draining so the broker never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => {
                let _ = child.kill();
                return Err(e);
            }
            Err(_) => {
                let _ = child.kill();
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "broker printed no ready line in 20 s"));
            }
        };
        let ready: Ready = serde_json::from_str(line.trim()).map_err(|e| {
            let _ = child.kill();
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad ready line {line:?}: {e}"))
        })?;
        Ok(BrokerProcess { child, ready, _stdout: None, scratch: None, config_dir: None, admin_login: None })
    }

    /// The client TCP address, as `HOST:PORT` text for CLI arguments.
    pub fn tcp(&self) -> String {
        self.ready.tcp.map(|a| a.to_string()).unwrap_or_default()
    }

    /// The client UDP address.
    pub fn udp(&self) -> String {
        self.ready.udp.map(|a| a.to_string()).unwrap_or_default()
    }

    /// Sends a signal to the broker.
    pub fn signal(&self, signal: Signal) -> std::io::Result<()> {
        send_signal(self.child.id(), signal)
    }

    /// SIGTERM, then waits up to `timeout` for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        self.signal(Signal::Term)?;
        self.wait_timeout(timeout)
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Freezes the broker (SIGSTOP), as a stall fault.
    pub fn pause(&self) -> std::io::Result<()> {
        self.signal(Signal::Stop)
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) -> std::io::Result<()> {
        self.signal(Signal::Cont)
    }

    /// Kills it at once (SIGKILL), as a crash fault.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `GET /metrics` from the admin listener.
    pub fn metrics(&self) -> std::io::Result<String> {
        let addr = self.ready.admin.ok_or_else(|| std::io::Error::other("admin listener disabled"))?;
        crate::http::http_get_as(addr, "/metrics", self.admin_login.as_deref())
    }

    /// Logs in to its admin port as `user` (HTTP Basic) from now on: a broker with a users file
    /// asks every admin request but the probes for a user with an admin role.
    pub fn admin_login(&mut self, user: &str, password: &str) {
        use base64::Engine as _;
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.admin_login = Some(format!("Basic {pair}"));
    }

    /// Its resident memory in bytes, read from `/proc/PID/status` (the figure the broker's
    /// `process_resident_memory_bytes` gives) without a scrape: building `/metrics` beside
    /// thousands of connections lists `/proc/self/fd` (7-20 ms for 8,000 descriptors), which a
    /// neighbour timed beside the test would count against the attack.
    pub fn rss(&self) -> std::io::Result<f64> {
        resident_bytes(self.child.id())
    }

    /// How many of its threads are named `name` (`/proc/PID/task/*/comm`, e.g.
    /// `tokio-rt-worker`): what a thread setting put in force.
    pub fn threads_named(&self, name: &str) -> std::io::Result<usize> {
        let mut count = 0;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id()))? {
            let comm = std::fs::read_to_string(task?.path().join("comm")).unwrap_or_default();
            count += usize::from(comm.trim_end() == name);
        }
        Ok(count)
    }

    /// One field of its `/proc/PID/status` (e.g. `THP_enabled`), trimmed.
    pub fn status(&self, field: &str) -> std::io::Result<String> {
        proc_status(self.child.id(), field)
    }

    /// The value of one metric sample (`name` with its labels as printed, e.g.
    /// `tidings_connections{transport="tcp"}`), summed over matches.
    pub fn metric(&self, name: &str) -> std::io::Result<f64> {
        Ok(metric_value(&self.metrics()?, name))
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.resume();
        self.kill();
    }
}

/// Writes `text` to a file only its owner may read, as a key file should be.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())
}

/// The resident memory of process `pid` in bytes, from `/proc/PID/status` `VmRSS`: how the
/// brokers' memory is read alike, tidings' or a peer's (mosquitto, nats-server) the bench started.
pub fn resident_bytes(pid: u32) -> std::io::Result<f64> {
    let kib = proc_status(pid, "VmRSS")?
        .trim_end_matches("kB")
        .trim()
        .parse::<f64>()
        .map_err(|_| std::io::Error::other("VmRSS in /proc/PID/status is not a number"))?;
    Ok(kib * 1024.0)
}

/// One field of `/proc/PID/status`, trimmed.
fn proc_status(pid: u32, field: &str) -> std::io::Result<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|rest| rest.trim().to_string())
        .ok_or_else(|| std::io::Error::other(format!("no {field} in /proc/PID/status")))
}
