//! One nemesis schedule against real processes: `tidings net up --faults` on loopback, the
//! schedule's `sub` and `pub --guaranteed` tools (with `--client-faults`, each through its own
//! fault point, [`Proxies`]), its faults made with `tidings net fault` (a client's at its fault
//! point) on two or three tracks, then the drain and the check of every output line. Every
//! process is stopped on every path out (the network and the tools stop on drop).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::clients::Proxies;
use crate::guarantee::{self, Ack, Line, Subscriber, Verdict};
use crate::network::{net_fault_unless, Network};
use crate::pause::pause;
use crate::recovery::Done;
use crate::schedule::{Fault, Kind, Schedule, STALL_FIRST};
use crate::tools::{subscribe_with, Tool};

/// What every schedule of a run shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The `tidings` binary.
    pub tidings: PathBuf,
    /// The topology file.
    pub topology: PathBuf,
    /// How long the publishers publish.
    pub duration: Duration,
    /// Each publisher's rate, msg/s.
    pub rate: f64,
    /// Every client dials its broker through a fault point of its own (`--client-faults`).
    pub client_faults: bool,
    /// Every broker's `[storage] replica_compact_bytes` (`--compact-bytes`), if set.
    pub compact_bytes: Option<u64>,
    /// Brokers whose durable subscriptions are relayed into their cell (the topology's
    /// `store = "cell"`).
    pub relaying: std::collections::BTreeSet<String>,
}

/// One schedule's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Acknowledged publishes.
    pub acked: usize,
    /// Per subscriber: name, durable, verdict.
    pub verdicts: Vec<(String, bool, Verdict)>,
    /// Per fault and affected subscriber: the fault's kind and the time from its end to the
    /// subscriber's next delivery, ms.
    pub recoveries: Vec<(Kind, f64)>,
    /// The faults as they happened.
    pub faults: Vec<Done>,
    /// Publishers that did not exit successfully (some publish not acknowledged in time).
    pub failed_publishers: Vec<String>,
    /// Streams stuck at the end (`crate::stuck`), one line each.
    pub stuck: Vec<String>,
}

impl Outcome {
    /// Whether any subscriber saw the guarantee broken, or a fault could not be made.
    pub fn failed(&self) -> bool {
        self.verdicts.iter().any(|(_, durable, v)| v.failed(*durable)) || self.faults.iter().any(|d| d.error.is_some())
    }
}

/// Unix time now, µs.
fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// The brokers' configuration: quick link-failure detection, seed 001's liveness timers,
/// unsynced writes dropped at a kill when the schedule says so, and the compaction trigger
/// when one is given.
fn config(s: &Schedule, compact_bytes: Option<u64>) -> String {
    let mut text = "[cluster]\nheartbeat_interval = \"100ms\"\nmissed_heartbeats = 3\n\n\
                    [guaranteed]\nliveness = \"seed001\"\n\n[storage]\n"
        .to_string();
    if s.power_loss {
        text.push_str("fault_drop_unsynced = true\n");
    }
    if let Some(bytes) = compact_bytes {
        text.push_str(&format!("replica_compact_bytes = {bytes}\n"));
    }
    text
}

/// Runs schedule `s` in `dir` (created empty by the caller; the tools' lines, the brokers' logs
/// and `faults.jsonl` stay there).
pub async fn run(setup: &Setup, s: &Schedule, dir: &Path) -> anyhow::Result<Outcome> {
    let config_file = dir.join("broker.toml");
    std::fs::write(&config_file, config(s, setup.compact_bytes))?;
    let net_dir = dir.join("net");
    std::fs::create_dir_all(&net_dir)?;
    let extra: Vec<String> = ["--faults", "--", "--config"]
        .map(String::from)
        .into_iter()
        .chain([config_file.display().to_string()])
        .collect();
    let net = Network::up_with(&setup.tidings, &setup.topology, &net_dir, Duration::from_secs(90), &extra).await?;
    // Declared before the tools, so dropped after them: a proxy closing first would cut them.
    let mut proxies = Proxies::default();
    let mut dial = |client: &str, broker: String| match setup.client_faults {
        true => proxies.add(client, &broker),
        false => Ok(broker),
    };
    let mut subs = Vec::new();
    for sub in &s.subscribers {
        let b = net.broker(&sub.broker)?;
        let admin = b.admin_addr()?;
        let server = dial(&sub.name, b.tcp.clone())?;
        let mut args = sub.args();
        if sub.durable.is_some() {
            // The command's own checkpoint, in the schedule's directory rather than the user's.
            args.extend(["--checkpoint".into(), dir.join(format!("{}.checkpoint", sub.name)).display().to_string()]);
        }
        subs.push(subscribe_with(&setup.tidings, dir, &sub.name, (&server, &admin), &args).await?);
    }
    // Let the subscriptions reach every pubend's broker before anything is published.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count = (setup.rate * setup.duration.as_secs_f64()).round().max(1.0) as u64;
    let mut pubs = Vec::new();
    for p in &s.publishers {
        let mut servers =
            p.servers.iter().map(|b| Ok(net.broker(b)?.tcp.clone())).collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(own) = servers.first_mut() {
            *own = dial(&p.name, own.clone())?;
        }
        let args = [
            "pub",
            "--server",
            &servers.join(","),
            "--guaranteed",
            "--json",
            &p.topic,
            "x",
            "-p",
            &format!("shade={}", p.shade),
            "--count",
            &count.to_string(),
            "--rate",
            &setup.rate.to_string(),
        ];
        pubs.push(Tool::spawn(&setup.tidings, dir, &p.name, &args.map(String::from))?);
    }
    let started = Instant::now();
    let tracks: Vec<Vec<Fault>> =
        (0..3).map(|t| s.faults.iter().filter(|f| f.kind.track() == t).cloned().collect()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let proxies = Arc::new(proxies);
    let threads = tracks
        .into_iter()
        .map(|track| {
            let (tidings, fault_dir, stop) = (setup.tidings.clone(), net.dir().to_path_buf(), Arc::clone(&stop));
            let proxies = Arc::clone(&proxies);
            std::thread::spawn(move || inject((&tidings, &proxies), &fault_dir, started, track, &stop))
        })
        .collect();
    let faults = Tracks { stop, threads }.finish().await?;
    let mut failed_publishers = Vec::new();
    let deadline = started + setup.duration + Duration::from_secs(30);
    for p in &mut pubs {
        if !p.finish(deadline).await?.is_some_and(|status| status.success()) {
            failed_publishers.push(p.name.clone());
        }
    }
    let acks: Vec<Ack> = pubs
        .iter()
        .map(|p| p.lines())
        .collect::<anyhow::Result<Vec<_>>>()?
        .iter()
        .flatten()
        .filter_map(Ack::parse)
        .collect();
    let checked: Vec<Subscriber> = s
        .subscribers
        .iter()
        .map(|sub| {
            Ok(Subscriber {
                name: sub.name.clone(),
                pattern: tidings_matching::Pattern::parse(&sub.pattern)?,
                selector: sub
                    .selector
                    .as_deref()
                    .map(tidings_matching::Selector::parse)
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?,
                durable: sub.durable.is_some(),
                relayed: sub.durable.is_some() && setup.relaying.contains(&sub.broker),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let lines = drain(&subs, &acks, &checked).await?;
    let stuck = save_states(&net, dir).await;
    drop(subs);
    let verdicts =
        checked.iter().zip(&lines).map(|(c, l)| (c.name.clone(), c.durable, guarantee::check(&acks, c, l))).collect();
    let recoveries = faults
        .iter()
        .flat_map(|d| {
            lines.iter().filter_map(|l| super::recovery::recovery(d, &faults, l).map(|ms| (d.fault.kind, ms)))
        })
        .collect();
    drop(net);
    Ok(Outcome { acked: acks.len(), verdicts, recoveries, faults, failed_publishers, stuck })
}

/// Writes every broker's `/state` and `/metrics` after the drain (the subscribers still
/// connected) to `state-<broker>.txt` and `metrics-<broker>.txt` in `dir`, kept with a failing
/// schedule's logs: each stream's route, done prefix, doubt horizon, ack and open nacks as the
/// brokers ended, and what they sent and received per pubend, which the logs alone do not
/// tell (seed 684's stream that stopped flowing to one broker showed there as a nack nobody
/// answered). A broker that does not answer is left out. Returns the streams stuck at the end
/// (`crate::stuck`).
async fn save_states(net: &Network, dir: &Path) -> Vec<String> {
    let brokers: Vec<(String, String)> =
        net.brokers.iter().filter_map(|b| Some((b.name.clone(), b.admin_addr().ok()?))).collect();
    let dir = dir.to_path_buf();
    let saved = tokio::task::spawn_blocking(move || {
        let mut stuck = Vec::new();
        for (name, admin) in brokers {
            let Ok(addr) = admin.parse() else { continue };
            for (path, file) in [("/state", "state"), ("/metrics", "metrics")] {
                if let Ok(text) = tidings_admin::http_get(addr, path) {
                    if file == "state" {
                        stuck.extend(crate::stuck::stuck_streams(&name, &text));
                    }
                    let _ = std::fs::write(dir.join(format!("{file}-{name}.txt")), text);
                }
            }
        }
        stuck
    })
    .await;
    saved.unwrap_or_default()
}

/// The threads of the fault tracks. Dropped with the schedule (ended by a signal or an error)
/// before the tools and the network, it stops them first: a fault command still running would
/// otherwise restart a broker of a network already down.
struct Tracks {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Done>>>,
}

impl Tracks {
    /// Waits, without holding a runtime thread, until every track has made its faults.
    async fn finish(mut self) -> anyhow::Result<Vec<Done>> {
        while !self.threads.iter().all(JoinHandle::is_finished) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut done = Vec::new();
        for thread in std::mem::take(&mut self.threads) {
            done.extend(thread.join().map_err(|_| anyhow::anyhow!("a fault track panicked"))?);
        }
        Ok(done)
    }
}

impl Drop for Tracks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

/// Runs one track's faults at their times (blocking) until `stop` is set; a partition's cuts run
/// side by side, a client's fault is made at its proxy.
fn inject(
    (tidings, proxies): (&Path, &Proxies),
    dir: &Path,
    started: Instant,
    track: Vec<Fault>,
    stop: &AtomicBool,
) -> Vec<Done> {
    let mut done = Vec::new();
    for fault in track {
        if !pause(stop, (started + fault.at).saturating_duration_since(Instant::now())) {
            break;
        }
        let started_us = unix_us();
        if fault.kind.is_client() {
            let error = proxies.make(&fault, dir, stop).err().map(|e| format!("{e:#}"));
            done.push(Done { fault, started_us, ended_us: unix_us(), error });
            continue;
        }
        if fault.kind == Kind::StallKill {
            let stall: Vec<&str> =
                ["stall"].into_iter().chain(fault.targets.iter().flatten().map(String::as_str)).collect();
            if let Err(e) = net_fault_unless(tidings, dir, &stall, None, stop) {
                done.push(Done { fault, started_us, ended_us: unix_us(), error: Some(format!("{e:#}")) });
                continue;
            }
            if !pause(stop, STALL_FIRST) {
                break;
            }
        }
        let results: Vec<anyhow::Result<()>> = std::thread::scope(|scope| {
            let runs: Vec<_> = fault
                .commands()
                .into_iter()
                .map(|args| {
                    scope.spawn(move || {
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        net_fault_unless(tidings, dir, &args, Some(fault.lasting), stop)
                    })
                })
                .collect();
            runs.into_iter()
                .map(|r| r.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a fault thread panicked"))))
                .collect()
        });
        let error = results.into_iter().filter_map(Result::err).map(|e| format!("{e:#}")).next();
        done.push(Done { fault, started_us, ended_us: unix_us(), error });
    }
    done
}

/// How long the subscribers may take, after the publishers, to catch up.
const DRAIN: Duration = Duration::from_secs(30);
/// How long without a new line ends the drain early.
const QUIET: Duration = Duration::from_secs(8);

/// Waits until every subscriber has every expected publish (nothing lost silently), or nothing
/// new arrived for [`QUIET`], or [`DRAIN`] passed; then every subscriber's lines.
async fn drain(subs: &[Tool], acks: &[Ack], checked: &[Subscriber]) -> anyhow::Result<Vec<Vec<Line>>> {
    let began = Instant::now();
    let (mut total, mut changed) = (0, Instant::now());
    loop {
        let lines: Vec<Vec<Line>> = subs
            .iter()
            .map(|t| Ok(t.lines()?.iter().filter_map(Line::parse).collect()))
            .collect::<anyhow::Result<_>>()?;
        let complete = checked.iter().zip(&lines).all(|(c, l)| guarantee::check(acks, c, l).lost_silent == 0);
        let now: usize = lines.iter().map(Vec::len).sum();
        if now != total {
            (total, changed) = (now, Instant::now());
        }
        if complete || changed.elapsed() >= QUIET || began.elapsed() >= DRAIN {
            return Ok(lines);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
