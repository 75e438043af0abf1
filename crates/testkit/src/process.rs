//! A broker child process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

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
}

/// The signals tests and fault experiments send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: orderly shutdown.
    Term,
    /// SIGKILL: a crash.
    Kill,
    /// SIGSTOP: a stall (the process keeps its sockets but does nothing).
    Stop,
    /// SIGCONT: the end of a stall.
    Cont,
    /// SIGUSR1: a fault point cuts its link.
    Usr1,
    /// SIGUSR2: a fault point stalls its link.
    Usr2,
    /// SIGHUP: a fault point heals its link.
    Hup,
}

/// Sends `signal` to process `pid` through `rustix` (the workspace forbids the unsafe FFI call,
/// and shelling out to `kill(1)` hid its errors).
pub fn send_signal(pid: u32, signal: Signal) -> std::io::Result<()> {
    use rustix::process::{kill_process, Pid, Signal as Raw};
    let raw = i32::try_from(pid).ok().and_then(Pid::from_raw);
    let pid = raw.ok_or_else(|| std::io::Error::other(format!("{pid} is not a process id")))?;
    let signal = match signal {
        Signal::Term => Raw::TERM,
        Signal::Kill => Raw::KILL,
        Signal::Stop => Raw::STOP,
        Signal::Cont => Raw::CONT,
        Signal::Usr1 => Raw::USR1,
        Signal::Usr2 => Raw::USR2,
        Signal::Hup => Raw::HUP,
    };
    kill_process(pid, signal).map_err(std::io::Error::from)
}

/// Waits at most `timeout` for `child` (reading its output while it runs, so a long output
/// cannot fill the pipe and stall it); kills it and panics past that, failing the test.
pub fn finish_within(child: std::process::Child, timeout: Duration) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(out)) => out,
        Ok(Err(error)) => panic!("waiting for process {pid} failed: {error}"),
        Err(_) => {
            let _ = send_signal(pid, Signal::Kill);
            panic!("process {pid} did not finish within {timeout:?}");
        }
    }
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
        Ok(BrokerProcess { child, ready, _stdout: None, scratch: None, config_dir: None })
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
        http_get(addr, "/metrics")
    }

    /// Its resident memory in bytes, read from `/proc/PID/status` (the figure the broker's
    /// `process_resident_memory_bytes` gives) without a scrape: building `/metrics` beside
    /// thousands of connections lists `/proc/self/fd` (7-20 ms for 8,000 descriptors), which a
    /// neighbour timed beside the test would count against the attack.
    pub fn rss(&self) -> std::io::Result<f64> {
        let kib = self
            .status("VmRSS")?
            .trim_end_matches("kB")
            .trim()
            .parse::<f64>()
            .map_err(|_| std::io::Error::other("VmRSS in /proc/PID/status is not a number"))?;
        Ok(kib * 1024.0)
    }

    /// One field of its `/proc/PID/status` (e.g. `THP_enabled`), trimmed.
    pub fn status(&self, field: &str) -> std::io::Result<String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .map(|rest| rest.trim().to_string())
            .ok_or_else(|| std::io::Error::other(format!("no {field} in /proc/PID/status")))
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

/// Sums the samples of a metric in Prometheus text (`name` may include a label block).
pub fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(key, _)| *key == name)
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

/// Sums a metric over all its label sets (every link, every reason...) in Prometheus text.
pub fn metric_total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

/// A minimal HTTP/1.0 GET for admin endpoints in tests: one request, read to close.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    match http_request(addr, "GET", path)? {
        (200, body) => Ok(body),
        (status, body) => Err(std::io::Error::other(format!("GET {path}: status {status}: {}", body.trim()))),
    }
}

/// `METHOD path` over HTTP/1.0 to `addr`: the status and the body, whatever the status.
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    match status {
        Some(status) => Ok((status, body.to_string())),
        None => {
            Err(std::io::Error::other(format!("{method} {path}: {}", head.lines().next().unwrap_or("no response"))))
        }
    }
}
