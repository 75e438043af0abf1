//! `nats-server` on loopback (one node, or a two-node cluster) and the peer harness driving it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{parse_csv, PeerRow};
use crate::acked::AckedSpec;
use crate::children::Children;

/// The programs needed to measure NATS.
#[derive(Debug, Clone)]
pub struct NatsTools {
    /// `nats-server`.
    pub server: PathBuf,
    /// Its `--version` line.
    pub server_version: String,
    /// The peer harness binary.
    pub peerbench: PathBuf,
    /// The NATS client the harness was built with, from its `go.mod`.
    pub client_version: String,
    /// GOMAXPROCS for each `nats-server` started (None: Go's default, one per core); the
    /// harness, the load generator, keeps Go's default.
    pub server_threads: Option<usize>,
}

impl NatsTools {
    /// Finds `nats-server` (`server`, else on `PATH`) and the harness (`peerbench`, else
    /// `$TIDINGS_PEERBENCH`, else built from `PEERS/harness`); the error says what is missing.
    pub fn find(server: Option<PathBuf>, peerbench: Option<PathBuf>, peers_dir: &Path) -> Result<NatsTools, String> {
        let server = server.or_else(|| on_path("nats-server")).ok_or("nats-server is not on PATH (--nats-server)")?;
        let output = Command::new(&server)
            .arg("--version")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", server.display()))?;
        let server_version = String::from_utf8_lossy(&output.stdout).trim().replace("nats-server: ", "nats-server ");
        let peerbench = match peerbench.or_else(|| std::env::var_os("TIDINGS_PEERBENCH").map(PathBuf::from)) {
            Some(given) if given.is_file() => given,
            Some(given) => return Err(format!("the peer harness is not at {}", given.display())),
            None => build_harness(peers_dir)?,
        };
        let go_mod = std::fs::read_to_string(peers_dir.join("harness/go.mod")).unwrap_or_default();
        let client_version = go_mod
            .lines()
            .find(|l| l.contains("nats-io/nats.go"))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(|v| format!("nats.go {v}"))
            .unwrap_or_else(|| "nats.go version unknown".into());
        Ok(NatsTools { server, server_version, peerbench, client_version, server_threads: None })
    }
}

/// Builds the peer harness from `PEERS/harness` into `PEERS/bin/peerbench` with `go build`
/// (Go's build cache makes a rebuild of unchanged sources quick), so that the harness measured
/// is always the one in the repository. Needs Go, a C compiler and libzmq (cgo).
fn build_harness(peers_dir: &Path) -> Result<PathBuf, String> {
    let source = peers_dir.join("harness");
    if !source.join("main.go").is_file() {
        return Err(format!("no peer harness source in {}", source.display()));
    }
    let out = std::path::absolute(peers_dir.join("bin/peerbench")).map_err(|e| e.to_string())?;
    let output = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&source)
        .env("CGO_ENABLED", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `go build` for the peer harness (is Go installed?): {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("`go build` of the peer harness in {} failed: {}", source.display(), stderr.trim()));
    }
    Ok(out)
}

pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Running peer servers (`nats-server` nodes, mosquitto), stopped on drop.
pub struct PeerServer {
    children: Children,
    /// Client URL of each node, `nats://127.0.0.1:PORT`.
    pub urls: Vec<String>,
}

impl PeerServer {
    /// A node already started (`child`), reached at `url`, once it listens on `port`.
    fn up(child: Child, url: String, port: u16) -> anyhow::Result<PeerServer> {
        PeerServer { children: Children(vec![child]), urls: vec![url] }.listening(&[port])
    }

    /// The server once each node listens on its port of `ports` (dropped, so stopped, if one
    /// does not).
    fn listening(self, ports: &[u16]) -> anyhow::Result<PeerServer> {
        for &port in ports {
            wait_port(port)?;
        }
        Ok(self)
    }

    /// One server `program -c NAME.conf`, the file written from `config` into `logs`, reached at
    /// `url` once it listens on `port`: how every peer run from a configuration file starts.
    pub(crate) fn configured(
        (program, threads): (&Path, Option<usize>),
        logs: &Path,
        name: &str,
        config: &str,
        (port, url): (u16, String),
    ) -> anyhow::Result<PeerServer> {
        let file = logs.join(format!("{name}.conf"));
        std::fs::write(&file, config)?;
        let child = spawn_program(program, threads, logs, name, &["-c", &file.display().to_string()])?;
        PeerServer::up(child, url, port)
    }

    /// The process id of each node, in the order of [`urls`](PeerServer::urls) (to read their
    /// CPU time).
    pub fn pids(&self) -> Vec<u32> {
        self.children.0.iter().map(Child::id).collect()
    }

    /// One node with default settings (as `run_all.sh` starts it).
    pub fn single(tools: &NatsTools, logs: &Path) -> anyhow::Result<PeerServer> {
        let port = free_port()?;
        let child = spawn(tools, logs, "nats", &["-a", "127.0.0.1", "-p", &port.to_string()])?;
        PeerServer::up(child, format!("nats://127.0.0.1:{port}"), port)
    }

    /// Two nodes joined by a route (as `run_all.sh` starts the E4 cluster).
    pub fn cluster(tools: &NatsTools, logs: &Path) -> anyhow::Result<PeerServer> {
        let (a, b, ra, rb) = (free_port()?, free_port()?, free_port()?, free_port()?);
        // Each node is held as soon as it starts, so that one started before a later one failed
        // is still stopped.
        let mut server = PeerServer { children: Children::default(), urls: Vec::new() };
        for (name, port, route, other) in [("nats-a", a, ra, rb), ("nats-b", b, rb, ra)] {
            let (port, route, other) =
                (port.to_string(), format!("nats://127.0.0.1:{route}"), format!("nats://127.0.0.1:{other}"));
            let args =
                ["-a", "127.0.0.1", "-p", &port, "--cluster_name", "bench", "--cluster", &route, "--routes", &other];
            server.children.0.push(spawn(tools, logs, name, &args)?);
            server.urls.push(format!("nats://127.0.0.1:{port}"));
        }
        let server = server.listening(&[a, b])?;
        // The harness's probe messages wait for interest to cross the route; this only lets the
        // route itself form first, as run_all.sh does.
        std::thread::sleep(Duration::from_secs(2));
        Ok(server)
    }

    /// One node with JetStream on, its file store in `store_dir`, syncing every write before
    /// it acknowledges (`sync_interval: always`): the peer of tidings' `fsync = always`.
    pub fn jetstream_always(tools: &NatsTools, logs: &Path, store_dir: &Path) -> anyhow::Result<PeerServer> {
        let port = free_port()?;
        let config = format!("listen: \"127.0.0.1:{port}\"\n{}", jetstream_always_block(store_dir));
        PeerServer::configured(tools.program(), logs, "nats-js", &config, (port, format!("nats://127.0.0.1:{port}")))
    }

    /// `nodes` nodes (2 to 26) routed to each other, JetStream on in each with every write
    /// synced before it is acknowledged (`sync_interval: always`, stores under `logs`): the
    /// peer of a replicated tidings cell. Node `i` is `nats-<letter>` with the server tag
    /// `<letter>` (`a`, `b`, ...), so a stream can be placed on one.
    pub fn jetstream_cluster(tools: &NatsTools, logs: &Path, nodes: usize) -> anyhow::Result<PeerServer> {
        anyhow::ensure!((2..=26).contains(&nodes), "a JetStream cluster of {nodes} nodes");
        let clients: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<anyhow::Result<_>>()?;
        let routes: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<anyhow::Result<_>>()?;
        let mut server = PeerServer { children: Children::default(), urls: Vec::new() };
        for i in 0..nodes {
            let tag = char::from(b'a' + i as u8);
            let name = format!("nats-{tag}");
            let others: Vec<String> =
                (0..nodes).filter(|&j| j != i).map(|j| format!("nats-route://127.0.0.1:{}", routes[j])).collect();
            let (client, route, others) = (clients[i], routes[i], others.join(", "));
            let store = jetstream_always_block(&logs.join(format!("{name}-store")));
            let text = format!(
                "server_name: {name}\nserver_tags: [\"{tag}\"]\nlisten: 127.0.0.1:{client}\n{store}\
                 cluster {{\n  name: bench\n  listen: 127.0.0.1:{route}\n  routes: [ {others} ]\n}}\n"
            );
            let config = logs.join(format!("{name}.conf"));
            std::fs::write(&config, text)?;
            server.children.0.push(spawn(tools, logs, &name, &["-c", &config.display().to_string()])?);
            server.urls.push(format!("nats://127.0.0.1:{}", clients[i]));
        }
        server.listening(&clients)
    }
}

impl PeerServer {
    /// SIGKILLs node `i` of a [`PeerServer::jetstream_cluster`] and reaps it; the kill's time
    /// (µs, just before the signal).
    pub(crate) fn kill_node(&mut self, i: usize) -> anyhow::Result<u64> {
        let child = self.children.0.get_mut(i).ok_or_else(|| anyhow::anyhow!("no node {i}"))?;
        let at = tidings_client::now_us();
        child.kill()?;
        child.wait()?;
        Ok(at)
    }

    /// Starts node `i` of a [`PeerServer::jetstream_cluster`] (whose files are in `logs`) again
    /// on its configuration and store, once it was killed.
    pub(crate) fn restart_node(&mut self, tools: &NatsTools, logs: &Path, i: usize) -> anyhow::Result<()> {
        let name = format!("nats-{}", char::from(b'a' + i as u8));
        let config = logs.join(format!("{name}.conf"));
        let child = spawn(tools, logs, &name, &["-c", &config.display().to_string()])?;
        let old = std::mem::replace(&mut self.children.0[i], child);
        drop(Children(vec![old]));
        let port = self.urls[i].rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        wait_port(port)
    }
}

/// The `jetstream {}` block of a node whose store is `store` and which syncs every write before
/// it acknowledges it (`sync_interval: always`): the peer of tidings' `fsync = always`.
pub(crate) fn jetstream_always_block(store: &Path) -> String {
    format!("jetstream {{\n  store_dir: {:?}\n  sync_interval: always\n}}\n", store.display().to_string())
}

impl NatsTools {
    /// `nats-server` and the threads it is given, as [`spawn_program`] and
    /// [`PeerServer::configured`] take a program.
    pub(crate) fn program(&self) -> (&Path, Option<usize>) {
        (&self.server, self.server_threads)
    }
}

/// Starts `nats-server ARGS` with its output in `logs/NAME.log` (appended: a server restarted
/// on its store keeps one log).
pub(crate) fn spawn(tools: &NatsTools, logs: &Path, name: &str, args: &[&str]) -> anyhow::Result<Child> {
    let (program, threads) = tools.program();
    spawn_program(program, threads, logs, name, args)
}

/// Starts any peer server `program ARGS` (nats-server, mosquitto) the same way: no input, its
/// output appended to `logs/NAME.log`, and GOMAXPROCS set to `threads` when given.
pub(crate) fn spawn_program(
    program: &Path,
    threads: Option<usize>,
    logs: &Path,
    name: &str,
    args: &[&str],
) -> anyhow::Result<Child> {
    let log = std::fs::File::options().create(true).append(true).open(logs.join(format!("{name}.log")))?;
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    if let Some(threads) = threads {
        command.env("GOMAXPROCS", threads.to_string());
    }
    command.spawn().with_context(|| format!("starting {}", program.display()))
}

/// A loopback port that was free a moment ago (the OS picks it; the race with other programs
/// is the same one `run_all.sh` accepts with fixed ports, but smaller).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn wait_port(port: u16) -> anyhow::Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("the peer server did not listen on port {port} within 10 s")
}

/// The harness's two measurement modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// As fast as the client publishes (`-mode tput`).
    #[default]
    Throughput,
    /// At a fixed rate, one-way latency of every delivery (`-mode lat`).
    Latency,
}

/// One `peerbench` invocation (flags as in `bench/peers/run_all.sh`); by default on a fresh
/// server (no URLs), nothing in it set.
#[derive(Debug, Clone, Default)]
pub struct PeerRun {
    /// Mode.
    pub mode: Mode,
    /// Experiment id written to the CSV.
    pub exp: String,
    /// Publisher URL.
    pub publisher: String,
    /// Subscribers' URL.
    pub subscriber: String,
    /// Payload bytes.
    pub size: usize,
    /// Subscriber connections.
    pub subs: usize,
    /// Latency mode: messages per second.
    pub rate: u64,
    /// Repetitions.
    pub reps: usize,
    /// Publishing time limit.
    pub duration: Duration,
    /// Throughput mode: message cap.
    pub max: u64,
    /// Longest wait for stragglers.
    pub drain: Duration,
    /// Hops (label only).
    pub hops: u64,
}

impl PeerRun {
    /// The harness's flags for this run, writing its CSV to `csv`.
    pub(crate) fn args(&self, csv: &Path) -> Vec<String> {
        let mode = match self.mode {
            Mode::Throughput => "tput",
            Mode::Latency => "lat",
        };
        flags(&[
            ("-mode", mode.to_string()),
            ("-exp", self.exp.clone()),
            ("-label", "nats".into()),
            ("-peer", "nats".into()),
            ("-hops", self.hops.to_string()),
            ("-pub", self.publisher.clone()),
            ("-sub", self.subscriber.clone()),
            ("-topic", "bench.t".into()),
            ("-size", self.size.to_string()),
            ("-subs", self.subs.to_string()),
            ("-rate", self.rate.to_string()),
            ("-reps", self.reps.to_string()),
            ("-dur", millis(self.duration)),
            ("-max", self.max.to_string()),
            ("-drain", millis(self.drain)),
            ("-csv", csv.display().to_string()),
        ])
    }
}

/// Runs the harness's JetStream mode once (blocking; `-mode js -js-mode async`: acknowledged
/// publishes at `spec`, its window in flight) against the server at `url`, on a stream of
/// `replicas` (1 on a single server; 3 on a 3-node cluster: R3), and returns its row.
pub fn run_js(
    tools: &NatsTools,
    spec: &AckedSpec,
    url: &str,
    replicas: usize,
    scratch: &Path,
) -> anyhow::Result<PeerRow> {
    harness_row(tools, "js", scratch, |csv| {
        flags(&[
            ("-mode", "js".to_string()),
            ("-js-mode", "async".into()),
            ("-exp", "acked".into()),
            ("-label", "nats-js".into()),
            ("-pub", url.into()),
            ("-size", spec.size.to_string()),
            ("-window", spec.window.to_string()),
            ("-js-replicas", replicas.to_string()),
            ("-reps", "1".into()),
            ("-dur", millis(spec.duration)),
            ("-max", spec.max.to_string()),
            ("-sync-note", "always".into()),
            ("-csv", csv.display().to_string()),
        ])
    })
}

/// Runs the harness once (blocking) with the flags `args` gives for its CSV in `scratch`, and
/// returns the one row it wrote (`mode` names the CSV and the error when there is none).
pub(crate) fn harness_row(
    tools: &NatsTools,
    mode: &str,
    scratch: &Path,
    args: impl FnOnce(&Path) -> Vec<String>,
) -> anyhow::Result<PeerRow> {
    let rows = harness(tools, &scratch.join(format!("peerbench-{mode}-{}.csv", std::process::id())), args)?;
    rows.into_iter().next().ok_or_else(|| anyhow::anyhow!("the peer harness wrote no {mode} row"))
}

/// The harness's command line from `(flag, value)` pairs: every run of it states its flags one
/// pair a line, the same way.
pub(crate) fn flags(pairs: &[(&str, String)]) -> Vec<String> {
    pairs.iter().flat_map(|(flag, value)| [flag.to_string(), value.clone()]).collect()
}

/// A duration as the harness's flags take it (Go's `time.ParseDuration`): `1500ms`.
pub(crate) fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Runs the harness (blocking) with the flags `args` gives for its CSV `csv` (removed before and
/// after), and reads the rows it wrote there.
fn harness(tools: &NatsTools, csv: &Path, args: impl FnOnce(&Path) -> Vec<String>) -> anyhow::Result<Vec<PeerRow>> {
    let _ = std::fs::remove_file(csv);
    let output = Command::new(&tools.peerbench)
        .args(args(csv))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", tools.peerbench.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "peerbench failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let rows = parse_csv(&std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?);
    let _ = std::fs::remove_file(csv);
    Ok(rows)
}

/// Runs the harness (blocking) and returns its rows, one per repetition.
pub fn run(tools: &NatsTools, run: &PeerRun, scratch: &Path) -> anyhow::Result<Vec<PeerRow>> {
    let rows = harness(tools, &scratch.join(format!("peerbench-{}-{}.csv", run.exp, std::process::id())), |csv| {
        run.args(csv)
    })?;
    anyhow::ensure!(rows.len() == run.reps, "peerbench wrote {} rows for {} repetitions", rows.len(), run.reps);
    Ok(rows)
}

/// Runs the harness off the async threads; when `job` names no server (an empty `publisher`),
/// on a fresh single `nats-server` in `scratch`, stopped after it, so that each repetition
/// gets a server of its own as tidings gets a fresh broker.
pub async fn run_async(tools: &NatsTools, mut job: PeerRun, scratch: &Path) -> anyhow::Result<Vec<PeerRow>> {
    let (tools, scratch) = (tools.clone(), scratch.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let server = if job.publisher.is_empty() { Some(PeerServer::single(&tools, &scratch)?) } else { None };
        if let Some(server) = &server {
            (job.publisher, job.subscriber) = (server.urls[0].clone(), server.urls[0].clone());
        }
        run(&tools, &job, &scratch)
    })
    .await?
}

/// The first JSON line of `path` (a peer tool's stdout, being written) with the key `key`,
/// waiting for it up to `wait`.
pub(crate) async fn json_line(path: &Path, key: &str, wait: Duration) -> anyhow::Result<serde_json::Value> {
    let deadline = Instant::now() + wait;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get(key).is_some());
        if let Some(v) = found {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < deadline, "no line with {key:?} in {} within {wait:?}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_flags_follow_run_all() {
        let run = PeerRun {
            mode: Mode::Latency,
            exp: "subscribers".into(),
            publisher: "nats://127.0.0.1:1".into(),
            subscriber: "nats://127.0.0.1:2".into(),
            size: 200,
            subs: 10,
            rate: 1000,
            reps: 1,
            duration: Duration::from_secs(5),
            max: 5000,
            drain: Duration::from_secs(60),
            hops: 1,
        };
        let args = run.args(Path::new("/tmp/x.csv")).join(" ");
        assert!(args.starts_with("-mode lat -exp subscribers -label nats -peer nats -hops 1"));
        assert!(args.contains("-pub nats://127.0.0.1:1 -sub nats://127.0.0.1:2"));
        assert!(args.contains("-dur 5000ms -max 5000 -drain 60000ms -csv /tmp/x.csv"));
    }

    #[test]
    fn free_ports_are_nonzero() {
        assert_ne!(free_port().unwrap(), 0);
    }
}
