//! The same fault schedule against NATS JetStream (with `--nats`): a 3-node cluster of
//! `nats-server` with an R3 file stream syncing every write (`sync_interval: always`, so an
//! acknowledged publish is on the disk of a quorum), four publishers and two durable pull
//! consumers of the peer harness (`peerbench -mode jspub` / `-mode jssub`), whose JSON lines
//! are checked by the same [`verify`] as tidings' own tools.
//!
//! Roles, gryphon-fig3 onto three peers: the publishers connect to n1 (p1), subscriber s1 to
//! n3 (s1's broker) and s2 to n2 (b1, above both subscribers in the seed's figure). Each
//! client is given every node, its own first, and fails over as NATS clients do. The faults:
//! the n2-n3 route (b1-s1) stalled then cut, through a `tidings net link-proxy` fault point
//! (n2 and n3 advertise a route address nobody listens on, so gossip cannot route around
//! it: `bench/peers/NATS_FAILURES.md`); n2 (b1) stalled with SIGSTOP, SIGKILLed and restarted
//! on its store; n1 (p1) the same. Stall, failure and quiet times are the tidings run's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tidings_admin::{send_signal, Signal};
use tidings_client::now_us;

use super::faults::{steps, Window};
use super::run::Run;
use super::Params;
use crate::peer::nats::{free_port, jetstream_always_block, json_line, spawn, wait_port};
use crate::peer::NatsTools;
use crate::suite::Context;
use crate::tools::{finish_all, Tool};

/// What the NATS run left behind: a run shaped as tidings' (no nack counters: NATS has none to
/// compare), and the servers' version.
pub(super) struct NatsRun {
    /// The run.
    pub run: Run,
    /// The servers' version.
    pub version: String,
}

/// One `nats-server` of the cluster.
struct Node {
    name: &'static str,
    config: PathBuf,
    client: u16,
    child: Option<Child>,
}

/// The cluster, its fault point on the n2-n3 route, and where their files go.
struct Cluster {
    nodes: Vec<Node>,
    proxy: Child,
    dir: PathBuf,
}

impl Cluster {
    /// Writes the three configurations and starts every node and the fault point.
    async fn start(tools: &NatsTools, tidings: &Path, dir: &Path) -> anyhow::Result<Cluster> {
        let port = || free_port();
        let (clients, routes) = ([port()?, port()?, port()?], [port()?, port()?, port()?]);
        // Route addresses nobody listens on, advertised by n2 and n3 (see the module doc).
        let dead = [port()?, port()?];
        let proxy_out = dir.join("proxy.json");
        let proxy = Command::new(tidings)
            .args(["net", "link-proxy", "--to", &format!("127.0.0.1:{}", routes[2])])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&proxy_out)?)
            .stderr(std::fs::File::create(dir.join("proxy.log"))?)
            .spawn()
            .context("starting the fault point of the n2-n3 route")?;
        let listen = json_line(&proxy_out, "listen", Duration::from_secs(10)).await?["listen"]
            .as_str()
            .map(str::to_owned)
            .context("the fault point printed no listen address")?;
        let route = |p: &str| format!("    nats-route://{p}\n");
        let r = |i: usize| format!("127.0.0.1:{}", routes[i]);
        let cluster_of = [
            (route(&r(1)) + &route(&r(2)), String::new()),
            (route(&r(0)) + &route(&listen), format!("  advertise: \"127.0.0.1:{}\"\n", dead[0])),
            (route(&r(0)), format!("  advertise: \"127.0.0.1:{}\"\n", dead[1])),
        ];
        let mut nodes = Vec::new();
        for (i, (name, (routes_text, advertise))) in ["n1", "n2", "n3"].into_iter().zip(cluster_of).enumerate() {
            let (client, store, route) = (clients[i], jetstream_always_block(&dir.join(name)), routes[i]);
            let text = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{client}\n{store}\
                 cluster {{\n  name: failures\n  listen: 127.0.0.1:{route}\n  routes: [\n\
                 {routes_text}  ]\n{advertise}}}\n"
            );
            let config = dir.join(format!("{name}.conf"));
            std::fs::write(&config, text)?;
            nodes.push(Node { name, config, client: clients[i], child: None });
        }
        let mut cluster = Cluster { nodes, proxy, dir: dir.to_path_buf() };
        for i in 0..3 {
            cluster.launch(tools, i)?;
        }
        for node in &cluster.nodes {
            tokio::task::block_in_place(|| wait_port(node.client))?;
        }
        Ok(cluster)
    }

    fn launch(&mut self, tools: &NatsTools, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        let config = node.config.display().to_string();
        node.child = Some(spawn(tools, &self.dir, node.name, &["-c", &config])?);
        Ok(())
    }

    /// The client URLs, node `first` first, then the others in order.
    fn urls(&self, first: usize) -> String {
        let order = std::iter::once(first).chain((0..3).filter(|&i| i != first));
        order.map(|i| format!("nats://127.0.0.1:{}", self.nodes[i].client)).collect::<Vec<_>>().join(",")
    }

    fn signal(&self, i: usize, signal: Signal) -> anyhow::Result<()> {
        let pid = self.nodes[i].child.as_ref().map(Child::id).context("the node is not running")?;
        send_signal(pid, signal).with_context(|| format!("signalling {}", self.nodes[i].name))
    }

    fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, Signal::Kill)?;
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.wait();
        }
        Ok(())
    }

    fn route(&self, signal: Signal) -> anyhow::Result<()> {
        send_signal(self.proxy.id(), signal).context("signalling the route's fault point")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
    }
}

/// Runs the schedule of `p` against NATS; the logs are kept in `logs/nats`.
pub(super) async fn run(ctx: &Context, tools: &NatsTools, p: &Params, logs: &Path) -> anyhow::Result<NatsRun> {
    let dir = ctx.scratch("failures-nats")?;
    let cluster = Cluster::start(tools, &ctx.tidings, &dir).await?;
    let harness = &tools.peerbench;
    let arg = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let stream = arg(&["-mode", "jsstream", "-pub", &cluster.urls(0), "-stream", "FAILURES"]);
    let stream = [stream, arg(&["-topic", "failures.>", "-replicas", "3", "-dur", "60s"])].concat();
    let mut made = Tool::spawn(harness, &dir, "jsstream", &stream)?;
    let status = made.finish(Instant::now() + Duration::from_secs(70)).await?;
    anyhow::ensure!(status.is_some_and(|s| s.success()), "the R3 stream was not created (see jsstream.log)");
    let per_publisher = (p.rate * p.schedule().as_secs_f64()).round() as u64;
    let total = per_publisher * p.publishers as u64;
    let deadline = format!("{}s", (p.schedule() + p.drain * 2).as_secs());
    let mut subs = Vec::new();
    for (name, node) in [("s1", 2), ("s2", 1)] {
        let args = arg(&["-mode", "jssub", "-sub", &cluster.urls(node), "-stream", "FAILURES", "-durable", name]);
        let args = [args, arg(&["-topic", "failures.>", "-count", &total.to_string(), "-dur", &deadline])].concat();
        let tool = Tool::spawn(harness, &dir, &format!("nats-{name}"), &args)?;
        json_line(&tool.out, "ready", Duration::from_secs(30))
            .await
            .with_context(|| format!("NATS subscriber {name}"))?;
        subs.push(tool);
    }
    let t0_us = now_us();
    let mut pubs = Vec::new();
    for i in 1..=p.publishers {
        let (topic, publisher) = (format!("failures.f{i}"), format!("f{i}"));
        let args = arg(&["-mode", "jspub", "-pub", &cluster.urls(0), "-stream", "FAILURES", "-topic", &topic]);
        let load = [&per_publisher.to_string(), &p.rate.to_string(), &p.size.to_string()];
        let more = arg(&["-publisher", &publisher, "-count", load[0], "-rate", load[1], "-size", load[2]]);
        pubs.push(Tool::spawn(
            harness,
            &dir,
            &format!("nats-pub-{publisher}"),
            &[args, more, arg(&["-dur", &deadline])].concat(),
        )?);
    }
    ctx.step("NATS: cluster, stream and clients up");
    let (tools2, p2) = (tools.clone(), p.clone());
    let (cluster, windows) = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let windows = inject(&mut cluster, &tools2, &p2);
        (cluster, windows)
    })
    .await?;
    let windows = windows?;
    ctx.step("NATS: faults injected");
    let (failed, unfinished) = finish_all(&mut pubs, &mut subs, p.drain).await?;
    let end_us = now_us();
    let names = vec!["NATS s1".to_string(), "NATS s2".to_string()];
    let run = Run::gather((&pubs, &subs, names), (t0_us, end_us, p.bin), &[], windows, (total, failed, unfinished))?;
    drop(cluster);
    // The servers' logs and the clients' lines, kept next to the results as `failures-logs/nats/`.
    super::run::keep(&dir, &logs.join("nats"), &["jsonl", "log", "conf"], "");
    Ok(NatsRun { run, version: tools.server_version.clone() })
}

/// The schedule of [`super::faults::inject`] on the cluster: per step a stall, the failure for
/// its duration (the route healed, the node restarted on its store), then the quiet time.
fn inject(cluster: &mut Cluster, tools: &NatsTools, p: &Params) -> anyhow::Result<Vec<Window>> {
    let ms = || now_us() / 1000;
    std::thread::sleep(p.warmup);
    let mut windows = Vec::new();
    for step in steps() {
        let stalled_ms = ms();
        let node = match step.target.as_slice() {
            ["b1", "s1"] => None,
            ["b1"] => Some(1),
            _ => Some(0),
        };
        match node {
            None => cluster.route(Signal::Usr2)?,
            Some(i) => cluster.signal(i, Signal::Stop)?,
        }
        std::thread::sleep(p.stall);
        let failed_ms = ms();
        match node {
            None => {
                cluster.route(Signal::Usr1)?;
                std::thread::sleep(p.cut);
                cluster.route(Signal::Hup)?;
            }
            Some(i) => {
                cluster.kill(i)?;
                std::thread::sleep(p.down);
                cluster.launch(tools, i)?;
            }
        }
        windows.push(Window { label: step.label, stalled_ms, failed_ms, ended_ms: ms() });
        std::thread::sleep(p.between);
    }
    Ok(windows)
}
