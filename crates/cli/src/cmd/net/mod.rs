//! `tidings net up | status | down`: run a whole broker network from a topology file on
//! loopback, one process per broker, and manage it from its directory.
//!
//! `up` validates the file first (nothing starts if it is refused), starts the brokers in file
//! order, each dialling the expected peers already started (links may be dialled from either
//! side, so every link is dialled exactly once), waits until every broker sees every link of the
//! topology and all agree on one link-state view, then prints the table and writes
//! `DIR/network.json`. Brokers are detached: they outlive the command, logs go to `DIR/N.log`.
//!
//! `up --faults` puts every link through a fault point (one [`proxy`] process per link), and
//! [`fault`] stalls, cuts, kills and restarts parts of the running network on a schedule.

mod fault;
mod ports;
mod proxy;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cmd::login::{Admin, LoginArgs};
use crate::cmd::outln;
use anyhow::{bail, Context};
use serde_json::{json, Value};
use tidings_admin::{send_signal, Signal};
use tidings_route::topology::BrokerSpec;
use tidings_route::Topology;

/// What `net` can do.
#[derive(clap::Subcommand)]
pub(crate) enum Which {
    /// Start every broker of a topology file and wait until the network has converged.
    Up(UpArgs),
    /// Show each broker of a running network: alive, healthy, links up.
    Status(StatusArgs),
    /// Stop every broker of a running network (SIGTERM, then SIGKILL after 10 s).
    Down(DirArgs),
    /// Stall, cut, kill or restart part of a running network, now or on a schedule.
    Fault(fault::Args),
    /// One link's fault point (started by `net up --faults`; not for direct use).
    #[command(hide = true)]
    LinkProxy(proxy::Args),
}

/// `net up` arguments.
#[derive(clap::Args)]
pub(crate) struct UpArgs {
    /// Topology file (schema: docs/topologies.md; examples in topologies/).
    file: PathBuf,
    #[command(flatten)]
    dir: DirArgs,
    /// Give up if the network has not converged after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Run every broker link through a fault point, so `tidings net fault stall|cut A B` can
    /// stall or cut it (costs one small proxy process and one extra copy per link).
    #[arg(long)]
    faults: bool,
    #[command(flatten)]
    shape: proxy::ShapeArgs,
    /// The admin login and CA, for brokers started with a users file or `[tls]`.
    #[command(flatten)]
    login: LoginArgs,
    /// Extra arguments for every broker, after `--` (e.g. `-- --config tuning.toml`).
    #[arg(last = true)]
    broker_args: Vec<String>,
}

/// `net status` arguments.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The admin login and CA, for brokers started with a users file or `[tls]`.
    #[command(flatten)]
    login: LoginArgs,
}

/// The network's directory.
#[derive(clap::Args)]
pub(crate) struct DirArgs {
    /// Directory holding network.json and the brokers' logs.
    #[arg(long, default_value = "tidings-net")]
    dir: PathBuf,
}

pub(crate) async fn run(which: Which) -> anyhow::Result<ExitCode> {
    match which {
        Which::Up(args) => up(&args, &*stop_on_signals()?),
        Which::Status(args) => status(&args.dir.dir, &admin_of(&args.login)?),
        Which::Down(args) => down(&args.dir),
        Which::Fault(args) => fault::run(&args),
        Which::LinkProxy(args) => proxy::run(args).await,
    }
}

/// One started broker, as network.json records it.
struct Started {
    name: String,
    cell: String,
    address: Option<String>,
    peers: Vec<String>,
    ready: Value,
    /// The arguments that restart it on the same addresses, data directory and links.
    restart: Vec<String>,
}

impl Started {
    fn addr(&self, key: &str) -> Option<SocketAddr> {
        self.ready.get(key)?.as_str()?.parse().ok()
    }

    fn pid(&self) -> u32 {
        self.ready.get("pid").and_then(Value::as_u64).unwrap_or(0) as u32
    }

    fn to_json(&self, dir: &Path) -> Value {
        json!({
            "name": self.name, "cell": self.cell, "address": self.address, "pid": self.pid(),
            "tcp": self.ready["tcp"], "udp": self.ready["udp"], "admin": self.ready["admin"],
            "cluster": self.ready["cluster"], "incarnation": self.ready["incarnation"],
            "peers": self.peers, "log": dir.join(format!("{}.log", self.name)),
            "data": dir.join("data").join(&self.name), "restart": self.restart,
        })
    }
}

/// Set once `net up` gets SIGINT, SIGTERM or SIGHUP. The brokers it starts are detached (each
/// its own process group), so a Ctrl-C or a supervisor's stop meant for `net up` would leave them
/// running, and before `network.json` is written nothing could find them: `up` stops what it
/// started instead, then exits.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{signal, SignalKind};
    let stop = Arc::new(AtomicBool::new(false));
    for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
        let mut stream = signal(kind).context("cannot watch for signals")?;
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            if stream.recv().await.is_some() {
                stop.store(true, Ordering::Relaxed);
            }
        });
    }
    Ok(stop)
}

/// An error once `net up` was asked to stop ([`stop_on_signals`]): its loops check it between
/// steps, so everything started is stopped on the way out.
fn go_on(stop: &AtomicBool) -> anyhow::Result<()> {
    anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted by a signal");
    Ok(())
}

fn up(args: &UpArgs, stop: &AtomicBool) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let topology = Topology::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    let dir = &args.dir.dir;
    if let Ok(existing) = read_network(dir) {
        if brokers(&existing).iter().any(|b| alive(pid_of(b))) {
            bail!(
                "a network is already running from {} (run `tidings net down --dir {}` first)",
                dir.display(),
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_key(&dir.join(KEY_FILE))?;
    let exe = std::env::current_exe().context("cannot find the tidings binary")?;
    let _ = std::fs::remove_file(dir.join(fault::LOG_FILE));
    let mut started: Vec<Started> = Vec::new();
    let mut links: Vec<proxy::LinkProxy> = Vec::new();
    let shaped = !args.shape.shape()?.is_none();
    let faults = args.faults || shaped;
    let net = Net { topology: &topology, exe: &exe, dir, extra: &args.broker_args, faults, shape: &args.shape, stop };
    let result = net.start_all(&mut started, &mut links).and_then(|()| {
        write_network(dir, &topology, &args.file, &started, &links, None)?;
        let began = Instant::now();
        converge(&topology, &started, &admin_of(&args.login)?, Duration::from_secs(args.timeout), stop)?;
        let converged_ms = began.elapsed().as_millis() as u64;
        write_network(dir, &topology, &args.file, &started, &links, Some(converged_ms))?;
        Ok(converged_ms)
    });
    match result {
        Ok(converged_ms) => {
            print_table(&started)?;
            outln!(
                "{} brokers of {:?} up; converged {converged_ms} ms after the last start; state in {}",
                started.len(),
                topology.name(),
                dir.join("network.json").display()
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            for broker in &started {
                terminate(broker.pid(), Duration::from_secs(5));
            }
            for link in &links {
                terminate(link.pid, Duration::from_secs(5));
            }
            let _ = std::fs::remove_file(dir.join("network.json"));
            Err(e.context(format!("network not started; brokers' logs are in {}", dir.display())))
        }
    }
}

/// What starting a network needs to know, whatever broker it is at.
struct Net<'a> {
    topology: &'a Topology,
    exe: &'a Path,
    dir: &'a Path,
    extra: &'a [String],
    faults: bool,
    /// How each link's fault point shapes its traffic.
    shape: &'a proxy::ShapeArgs,
    /// Set when `net up` is asked to stop ([`stop_on_signals`]).
    stop: &'a AtomicBool,
}

impl Net<'_> {
    /// Starts the brokers in file order; each dials the expected peers already started (through
    /// a new fault point per link with `--faults`).
    fn start_all(&self, started: &mut Vec<Started>, links: &mut Vec<proxy::LinkProxy>) -> anyhow::Result<()> {
        for spec in self.topology.brokers() {
            go_on(self.stop)?;
            let name = spec.name.to_string();
            let expected = self.topology.expected_peers(&name)?;
            let mut dial = Vec::new();
            for peer in started.iter().filter(|s| expected.iter().any(|p| p.as_str() == s.name)) {
                let Some(cluster) = peer.addr("cluster") else { continue };
                if self.faults {
                    let link = proxy::LinkProxy::start(self.exe, self.dir, [&peer.name, &name], cluster, self.shape)?;
                    dial.push(link.listen.to_string());
                    links.push(link);
                } else {
                    dial.push(cluster.to_string());
                }
            }
            let listen = Listen::any();
            let args = broker_args(self.dir, spec, &listen, &dial, self.extra);
            let ready = start_broker(self.exe, self.dir, &name, &args, false, self.stop)?;
            let restart = broker_args(self.dir, spec, &Listen::from_ready(&ready), &dial, self.extra);
            started.push(Started {
                name,
                cell: spec.cell.to_string(),
                address: spec.address.clone(),
                peers: expected.iter().map(ToString::to_string).collect(),
                ready,
                restart,
            });
        }
        Ok(())
    }
}

/// The addresses a broker listens on.
struct Listen {
    tcp: String,
    udp: String,
    admin: String,
    cluster: String,
}

impl Listen {
    /// Free ports on loopback only, below the kernel's ephemeral range so that nothing takes
    /// them while the broker is down between a kill and a restart ([`ports`]).
    fn any() -> Listen {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let seed = (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32);
        let [tcp, udp, admin, cluster]: [String; 4] =
            ports::distinct(seed, 4).try_into().unwrap_or_else(|_| std::array::from_fn(|_| "127.0.0.1:0".to_string()));
        Listen { tcp, udp, admin, cluster }
    }

    /// The ports a broker got, so a restart binds the same ones and its peers and clients find
    /// it where it was.
    fn from_ready(ready: &Value) -> Listen {
        let get = |key: &str| ready[key].as_str().unwrap_or("127.0.0.1:0").to_string();
        Listen { tcp: get("tcp"), udp: get("udp"), admin: get("admin"), cluster: get("cluster") }
    }
}

/// The command line of one broker: its name, cell, listeners, data directory and links, the
/// topology's settings for it (as flags, so they win over a `--config` file in `extra`), and
/// `extra`.
fn broker_args(dir: &Path, spec: &BrokerSpec, listen: &Listen, dial: &[String], extra: &[String]) -> Vec<String> {
    let path = |p: PathBuf| p.to_string_lossy().into_owned();
    let name = spec.name.as_str();
    let mut args: Vec<String> =
        vec!["broker".into(), "--name".into(), name.into(), "--cell".into(), spec.cell.as_str().into()];
    for (flag, addr) in [
        ("--listen", &listen.tcp),
        ("--udp", &listen.udp),
        ("--admin", &listen.admin),
        ("--cluster-listen", &listen.cluster),
    ] {
        args.extend([flag.to_string(), addr.clone()]);
    }
    args.extend(["--cluster-key".into(), path(dir.join(KEY_FILE))]);
    args.extend(["--data".into(), path(dir.join("data").join(name))]);
    for peer in dial {
        args.extend(["--peer".into(), peer.clone()]);
    }
    if let Some(replicas) = spec.settings.replicas {
        args.extend(["--replicas".into(), replicas.to_string()]);
    }
    if let Some(store) = &spec.settings.durable_store {
        args.extend(["--durable-store".into(), store.clone()]);
    }
    args.extend(extra.iter().cloned());
    args
}

/// The network's key file in its directory: every broker of the network gets it.
const KEY_FILE: &str = "cluster.key";

/// Writes a fresh random network key, readable by its owner only.
fn write_key(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let text = tidings_broker::cluster::auth::generate_key_text().context("no randomness for the network key")?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // An existing file keeps its mode through `open`: set it explicitly.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

/// Starts a broker detached (its own process group: a Ctrl-C meant for `net up` must not reach
/// it) and returns its ready line. A restart appends to the log rather than replacing it, so
/// what led to the crash stays readable.
fn start_broker(
    exe: &Path,
    dir: &Path,
    name: &str,
    args: &[String],
    restart: bool,
    stop: &AtomicBool,
) -> anyhow::Result<Value> {
    let log = dir.join(format!("{name}.log"));
    let stderr = std::fs::OpenOptions::new().create(true).append(restart).write(true).truncate(!restart).open(&log)?;
    let mut command = Command::new(exe);
    command.args(args);
    spawn_ready(command, &dir.join(format!("{name}.ready")), stderr, &format!("broker {name}"), &log, stop)
}

/// Spawns a detached process that prints one JSON ready line on stdout, and waits for it (a
/// process not ready when `stop` is set is killed).
fn spawn_ready(
    mut command: Command,
    ready_path: &Path,
    stderr: std::fs::File,
    what: &str,
    log: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<Value> {
    use std::os::unix::process::CommandExt;
    let stdout = std::fs::File::create(ready_path)?;
    command.stdin(Stdio::null()).stdout(stdout).stderr(stderr).process_group(0);
    let mut child = command.spawn().with_context(|| format!("cannot start {what}"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(ready_path).unwrap_or_default();
        if let Some(line) = text.lines().next().filter(|_| text.contains('\n')) {
            return serde_json::from_str(line).with_context(|| format!("{what} printed a bad ready line {line:?}"));
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("{what} exited ({status}) before it was ready; see {}", log.display());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{what} printed no ready line within 20 s");
        }
        if let Err(e) = go_on(stop) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until every broker's up links are exactly its expected peers and all hold one view.
fn converge(
    topology: &Topology,
    started: &[Started],
    admin: &Admin,
    timeout: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        go_on(stop)?;
        let mut missing = Vec::new();
        let mut views = BTreeSet::new();
        for broker in started {
            match broker_state(admin, broker.addr("admin")) {
                Some(state) => {
                    let up = linked_peers(&state);
                    let expected: BTreeSet<String> = broker.peers.iter().cloned().collect();
                    let absent: Vec<&String> = expected.difference(&up).collect();
                    if !absent.is_empty() {
                        missing.push(format!("{} lacks links to {absent:?}", broker.name));
                    }
                    views.insert(state["router"]["view"].as_u64().unwrap_or(0));
                }
                None => missing.push(format!("{} does not answer /state", broker.name)),
            }
            if !alive(broker.pid()) {
                bail!("broker {} died while the network converged", broker.name);
            }
        }
        if missing.is_empty() && views.len() == 1 {
            return Ok(());
        }
        if Instant::now() > deadline {
            if missing.is_empty() {
                missing.push(format!("brokers disagree on the link-state view ({} views)", views.len()));
            }
            bail!("topology {:?} did not converge within {:?}:\n  {}", topology.name(), timeout, missing.join("\n  "));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn linked_peers(state: &Value) -> BTreeSet<String> {
    state["router"]["links"]
        .as_array()
        .map(|links| links.iter().filter_map(|l| l["peer"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The admin client every broker of the network is read with (`at` each one's address): one
/// CA and one login for all.
fn admin_of(login: &LoginArgs) -> anyhow::Result<Admin> {
    login.admin_client(SocketAddr::from(([127, 0, 0, 1], 0)), false)
}

fn broker_state(admin: &Admin, addr: Option<SocketAddr>) -> Option<Value> {
    let body = admin.at(addr?).get("/state").ok()?;
    serde_json::from_str(&body).ok()
}

fn write_network(
    dir: &Path,
    topology: &Topology,
    file: &Path,
    started: &[Started],
    links: &[proxy::LinkProxy],
    converged_ms: Option<u64>,
) -> anyhow::Result<()> {
    let doc = json!({
        "topology": topology.name(),
        "file": file,
        "converged_ms": converged_ms,
        "key_file": dir.join(KEY_FILE),
        "brokers": started.iter().map(|s| s.to_json(dir)).collect::<Vec<_>>(),
        "links": links.iter().map(proxy::LinkProxy::to_json).collect::<Vec<_>>(),
    });
    save_network(dir, &doc)
}

/// Replaces network.json atomically: a reader never sees half a file.
fn save_network(dir: &Path, doc: &Value) -> anyhow::Result<()> {
    let path = dir.join("network.json");
    let tmp = dir.join("network.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(doc)?)?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Reads network.json, changes it with `change` and writes it back, under an exclusive lock:
/// the restarts of a cell's brokers killed together run side by side, and each must not write
/// back a copy read before another's change (a lost pid made a later fault on that broker fail
/// with "not running").
fn update_network(dir: &Path, change: impl FnOnce(&mut Value)) -> anyhow::Result<()> {
    let path = dir.join("network.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    lock.lock().with_context(|| format!("cannot lock {}", path.display()))?;
    let mut network = read_network(dir)?;
    change(&mut network);
    save_network(dir, &network)
}

fn read_network(dir: &Path) -> anyhow::Result<Value> {
    let path = dir.join("network.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no network in {} (cannot read {})", dir.display(), path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

fn brokers(network: &Value) -> Vec<Value> {
    network["brokers"].as_array().cloned().unwrap_or_default()
}

fn pid_of(broker: &Value) -> u32 {
    broker["pid"].as_u64().unwrap_or(0) as u32
}

fn print_table(started: &[Started]) -> std::io::Result<()> {
    outln!("{:<10} {:<8} {:<10} {:<22} {:<22}", "BROKER", "CELL", "ADDRESS", "CLIENT", "ADMIN")?;
    for s in started {
        let show = |key: &str| s.addr(key).map(|a| a.to_string()).unwrap_or_else(|| "-".into());
        outln!(
            "{:<10} {:<8} {:<10} {:<22} {:<22}",
            s.name,
            s.cell,
            s.address.as_deref().unwrap_or("-"),
            show("tcp"),
            show("admin")
        )?;
    }
    Ok(())
}

fn status(dir: &Path, admin_login: &Admin) -> anyhow::Result<ExitCode> {
    let network = read_network(dir)?;
    outln!("topology {}", network["topology"].as_str().unwrap_or("?"))?;
    outln!(
        "{:<10} {:<8} {:<8} {:<9} {:<8} {:<22} {:<20}",
        "BROKER",
        "CELL",
        "PID",
        "HEALTH",
        "LINKS",
        "CLIENT",
        "VIEW"
    )?;
    let mut healthy = true;
    for b in brokers(&network) {
        let admin = b["admin"].as_str().and_then(|a| a.parse().ok());
        let pid = pid_of(&b);
        let health = if !alive(pid) {
            "dead"
        } else if admin.and_then(|a| admin_login.at(a).get("/healthz").ok()).is_some() {
            "ok"
        } else {
            "no-admin"
        };
        let expected = b["peers"].as_array().map_or(0, Vec::len);
        let (links, view) = match broker_state(admin_login, admin) {
            Some(state) => (linked_peers(&state).len().to_string(), state["router"]["view"].to_string()),
            None => ("-".to_string(), "-".to_string()),
        };
        healthy &= health == "ok" && links == expected.to_string();
        outln!(
            "{:<10} {:<8} {:<8} {:<9} {:<8} {:<22} {:<20}",
            b["name"].as_str().unwrap_or("?"),
            b["cell"].as_str().unwrap_or("?"),
            pid,
            health,
            format!("{links}/{expected}"),
            b["tcp"].as_str().unwrap_or("-"),
            view
        )?;
    }
    Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn down(dir: &Path) -> anyhow::Result<ExitCode> {
    let network = read_network(dir)?;
    let list = brokers(&network);
    for b in &list {
        signal(pid_of(b), Signal::Term);
    }
    let mut stopped = 0;
    for b in &list {
        if terminate(pid_of(b), Duration::from_secs(10)) {
            stopped += 1;
        }
    }
    for link in proxy::links(&network) {
        terminate(link.pid, Duration::from_secs(2));
    }
    std::fs::remove_file(dir.join("network.json"))
        .with_context(|| format!("cannot remove {}/network.json", dir.display()))?;
    outln!("{stopped} of {} brokers stopped", list.len())?;
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM, wait up to `grace`, then SIGKILL. True once the process is gone.
fn terminate(pid: u32, grace: Duration) -> bool {
    if pid == 0 || !alive(pid) {
        return true;
    }
    signal(pid, Signal::Term);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(pid, Signal::Kill);
    std::thread::sleep(Duration::from_millis(50));
    !alive(pid)
}

/// Best effort: the process may have exited already.
fn signal(pid: u32, signal: Signal) {
    if pid > 0 {
        let _ = send_signal(pid, signal);
    }
}

/// Whether a process exists and is not a zombie.
fn alive(pid: u32) -> bool {
    tidings_admin::process_alive(pid)
}
