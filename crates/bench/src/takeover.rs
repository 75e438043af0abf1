//! `tidings bench takeover` (issue 40's measure): how long a replicated pubend's publisher waits
//! when its leader dies. A cell of three brokers (`[storage] replicas = 3`, every other setting
//! the broker's default) holds the pubend's log as a Raft group; one guaranteed publisher, given
//! all three (`pub --server p1,p2,p3`), publishes at a steady rate. The group's leader is
//! SIGKILLed, kill after kill; each kill is timed from just before the signal to the first
//! acknowledgement the publisher received more than [`GRACE_US`] after it (an acknowledgement
//! the dead leader sent just before, still in flight, does not count): the successor's. The
//! killed broker then restarts on its own disk and catches up before the next kill.
//!
//! JetStream's side (`crate::peer::jstakeover`) is timed by the same rule from the same
//! timestamps: the kill's, taken here, and each acknowledgement's `acked_us`, taken by the
//! publishing client as it read the acknowledgement.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tidings_admin::{BrokerProcess, Signal};
use tidings_client::now_us;

use crate::acked::ScratchDir;
use crate::tools::Tool;

/// An acknowledgement received within this long after the kill may have left the dead leader
/// before it died, so it does not end the takeover.
pub const GRACE_US: u64 = 2_000;

/// How long one kill may take to be answered before the run fails.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// What one run does.
#[derive(Debug, Clone)]
pub struct TakeoverSpec {
    /// Leaders killed.
    pub kills: usize,
    /// The publisher's rate, msg/s.
    pub rate: u64,
    /// Publishes in flight.
    pub window: usize,
    /// Payload bytes.
    pub size: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct TakeoverResult {
    /// Each kill's takeover time, ms, in kill order.
    pub took_ms: Vec<f64>,
    /// The leader each kill struck.
    pub killed: Vec<String>,
    /// Publishes acknowledged over the run (every one checked: see [`check_acks`]).
    pub acked: u64,
}

/// When the first acknowledgement more than [`GRACE_US`] after `kill_us` was received, if one
/// was: `acked_us` of every acknowledgement so far.
pub fn first_ack_after(acked_us: impl IntoIterator<Item = u64>, kill_us: u64) -> Option<u64> {
    acked_us.into_iter().filter(|&at| at > kill_us + GRACE_US).min()
}

/// The `acked_us` of a publisher's JSON lines (lines without one are skipped).
pub fn acked_times(lines: &[Value]) -> Vec<u64> {
    lines.iter().filter_map(|line| line["acked_us"].as_u64()).collect()
}

/// Waits until the publisher writing `lines_of` was answered after `kill_us`: the takeover
/// time, ms.
pub fn wait_answered(lines_of: impl Fn() -> anyhow::Result<Vec<Value>>, kill_us: u64) -> anyhow::Result<f64> {
    let deadline = Instant::now() + ANSWER_WITHIN;
    loop {
        if let Some(at) = first_ack_after(acked_times(&lines_of()?), kill_us) {
            return Ok((at - kill_us) as f64 / 1000.0);
        }
        anyhow::ensure!(Instant::now() < deadline, "no acknowledgement within {ANSWER_WITHIN:?} of the kill");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Publishes a run's publisher is asked for: more than any run sends (the run stops it).
pub const PUBLISHES: &str = "100000000";

/// Waits (30 s at most) for the publisher writing `lines_of` to have 20 acknowledgements: the
/// group's (or stream's) first election is over before the first kill.
pub fn wait_started(lines_of: impl Fn() -> anyhow::Result<Vec<Value>>) -> anyhow::Result<()> {
    wait("the first 20 acknowledgements", Duration::from_secs(30), || (lines_of().ok()?.len() >= 20).then_some(()))
}

/// Checks a publisher's acknowledgements of `seq`s 1, 2, ...: each acknowledged once, none
/// missing below the last, and (tidings) every one by the same pubend, the publisher having
/// resumed its pubend at every successor. Returns how many.
pub fn check_acks(lines: &[Value], one_pubend: bool) -> anyhow::Result<u64> {
    let mut seqs: Vec<u64> = lines.iter().filter_map(|line| line["seq"].as_u64()).collect();
    anyhow::ensure!(seqs.len() == lines.len(), "an acknowledgement without a seq");
    seqs.sort_unstable();
    for (i, &seq) in seqs.iter().enumerate() {
        anyhow::ensure!(seq == i as u64 + 1, "acknowledged seqs are not 1..={}: {seq} at {i}", seqs.len());
    }
    if one_pubend {
        let pubends: std::collections::BTreeSet<&str> = lines.iter().filter_map(|l| l["pubend"].as_str()).collect();
        anyhow::ensure!(pubends.len() == 1, "the publisher's acknowledgements name several pubends: {pubends:?}");
    }
    Ok(seqs.len() as u64)
}

/// One broker of the cell, restartable on the same addresses and disk.
struct Broker {
    name: String,
    /// `broker --name ... --data ... --config ... --cluster-key ...`: what every start shares.
    base: Vec<String>,
    process: Option<BrokerProcess>,
    /// Client, link and admin addresses, fixed after the first start.
    addresses: Option<(String, String, String)>,
}

impl Broker {
    fn start(&mut self, peers: &[String]) -> anyhow::Result<()> {
        let any = "127.0.0.1:0".to_string();
        let (tcp, cluster, admin) = self.addresses.clone().unwrap_or((any.clone(), any.clone(), any));
        let mut args = self.base.clone();
        args.extend(["--listen".into(), tcp, "--cluster-listen".into(), cluster, "--admin".into(), admin]);
        args.extend(["--udp".into(), "off".into()]);
        for peer in peers {
            args.extend(["--peer".into(), peer.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let process = BrokerProcess::start_with_args(&crate::target::tidings_exe()?, &args)?;
        let address = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
        let r = &process.ready;
        self.addresses = Some((address(r.tcp), address(r.cluster), address(r.admin)));
        self.process = Some(process);
        Ok(())
    }

    fn live(&self) -> anyhow::Result<&BrokerProcess> {
        self.process.as_ref().ok_or_else(|| anyhow::anyhow!("{} is down", self.name))
    }

    fn cluster(&self) -> String {
        self.addresses.as_ref().map(|a| a.1.clone()).unwrap_or_default()
    }

    fn tcp(&self) -> String {
        self.addresses.as_ref().map(|a| a.0.clone()).unwrap_or_default()
    }

    /// Its replica group as `/state` shows it (an error while it is in none).
    fn group(&self) -> anyhow::Result<Value> {
        let admin = self.live()?.ready.admin.ok_or_else(|| anyhow::anyhow!("{} has no admin listener", self.name))?;
        crate::cell::replica_group(admin)
    }

    fn links(&self) -> f64 {
        self.process.as_ref().and_then(|p| p.metric("tidings_links_up").ok()).unwrap_or(-1.0)
    }
}

/// Waits up to `within` for `check` to give a value.
fn wait<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The three brokers of cell PUB.
struct Cell {
    brokers: Vec<Broker>,
}

impl Cell {
    fn start(dir: &Path) -> anyhow::Result<Cell> {
        let key = dir.join("cluster.key");
        tidings_admin::write_private(&key, tidings_admin::test_key_text())?;
        let config = dir.join("cell.toml");
        std::fs::write(&config, "[storage]\nreplicas = 3\n")?;
        let mut brokers: Vec<Broker> = ["p1", "p2", "p3"]
            .iter()
            .map(|name| Broker {
                name: name.to_string(),
                base: [
                    "broker",
                    "--name",
                    name,
                    "--cell",
                    "PUB",
                    "--data",
                    &dir.join(name).display().to_string(),
                    "--config",
                    &config.display().to_string(),
                    "--cluster-key",
                    &key.display().to_string(),
                    // A mate down is the point: its mates' dial retries are not news.
                    "--log-level",
                    "error",
                ]
                .map(String::from)
                .to_vec(),
                process: None,
                addresses: None,
            })
            .collect();
        // p3 first, then each dials those already up: the links form in one pass.
        for i in (0..3).rev() {
            let peers: Vec<String> = brokers[i + 1..].iter().map(Broker::cluster).collect();
            brokers[i].start(&peers)?;
        }
        let cell = Cell { brokers };
        cell.linked()?;
        Ok(cell)
    }

    fn linked(&self) -> anyhow::Result<()> {
        wait("the cell's links", Duration::from_secs(20), || {
            self.brokers.iter().all(|b| b.links() == 2.0).then_some(())
        })
    }

    /// The group's leader, once every live broker has named it in two views of `/state` (which
    /// each broker refreshes every 250 ms) taken 600 ms apart: a kill must strike the broker
    /// that leads, or it measures no takeover.
    fn stable_leader(&self) -> anyhow::Result<usize> {
        wait("a stable leader", Duration::from_secs(30), || {
            let first = self.leader().ok()?;
            std::thread::sleep(Duration::from_millis(600));
            (self.leader().ok()? == first).then_some(first)
        })
    }

    /// The broker every live one names as the group's leader.
    fn leader(&self) -> anyhow::Result<usize> {
        wait("the brokers agreeing on a leader", Duration::from_secs(20), || {
            let names: Vec<Option<String>> = self
                .brokers
                .iter()
                .filter(|b| b.process.is_some())
                .map(|b| b.group().ok().and_then(|g| g["leader"].as_str().map(str::to_string)))
                .collect();
            let first = names.first()?.clone()?;
            names.iter().all(|n| n.as_deref() == Some(first.as_str())).then_some(())?;
            self.brokers.iter().position(|b| b.name == first)
        })
    }

    /// Waits until every broker applied what the leader committed, past its fences.
    fn caught_up(&self, leader: usize) -> anyhow::Result<()> {
        wait("every replica caught up", Duration::from_secs(30), || {
            let commit = self.brokers[leader].group().ok()?["commit"].as_u64()?;
            self.brokers
                .iter()
                .map(|b| b.group().ok())
                .all(|g| g.is_some_and(|g| g["fenced"] == false && g["applied"].as_u64() >= Some(commit)))
                .then_some(())
        })
    }

    /// SIGKILLs broker `i`; the kill's time (µs, just before the signal).
    fn kill(&mut self, i: usize) -> anyhow::Result<u64> {
        let mut process = self.brokers[i].process.take().ok_or_else(|| anyhow::anyhow!("kill of a dead broker"))?;
        let at = now_us();
        process.kill();
        Ok(at)
    }

    /// Starts broker `i` again on its addresses and disk, dialling its mates.
    fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let peers: Vec<String> = (0..3).filter(|&j| j != i).map(|j| self.brokers[j].cluster()).collect();
        self.brokers[i].start(&peers)
    }

    /// Waits until every replica applied at least `acked` entries. A floor only: each elected
    /// leader's empty entry counts too, and the publisher was stopped with publishes in
    /// flight, so how many more there are is not known.
    fn holds(&self, acked: u64) -> anyhow::Result<()> {
        wait("every replica applied every acknowledged publish", Duration::from_secs(20), || {
            let groups: Vec<Value> = self.brokers.iter().map(|b| b.group().ok()).collect::<Option<_>>()?;
            groups.iter().all(|g| g["applied"].as_u64().is_some_and(|a| a >= acked)).then_some(())
        })
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        for broker in &mut self.brokers {
            if let Some(mut process) = broker.process.take() {
                let _ = process.signal(Signal::Term);
                if !matches!(process.wait_timeout(Duration::from_secs(5)), Ok(Some(_))) {
                    process.kill();
                }
            }
        }
    }
}

/// One run on tidings: a fresh cell under `parent`, `spec.kills` kills of the leader.
pub fn run_tidings(parent: &Path, spec: &TakeoverSpec) -> anyhow::Result<TakeoverResult> {
    let dir = ScratchDir::new(parent, "takeover")?;
    let mut cell = Cell::start(&dir.0)?;
    let servers: Vec<String> = cell.brokers.iter().map(Broker::tcp).collect();
    let args: Vec<String> = [
        "pub",
        "--server",
        &servers.join(","),
        "--guaranteed",
        "--json",
        "--pubend",
        "tk",
        "takeover.a",
        "x",
        "--count",
        PUBLISHES,
        "--rate",
        &spec.rate.to_string(),
        "--window",
        &spec.window.to_string(),
        "--size",
        &spec.size.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let publisher = Tool::spawn(&crate::target::tidings_exe()?, &dir.0, "pub", &args)?;
    wait_started(|| publisher.lines())?;
    let mut result = TakeoverResult::default();
    for _ in 0..spec.kills {
        let leader = cell.leader()?;
        cell.caught_up(leader)?;
        let leader = cell.stable_leader()?;
        let kill_us = cell.kill(leader)?;
        let name = cell.brokers[leader].name.clone();
        let took = wait_answered(|| publisher.lines(), kill_us)
            .map_err(|e| anyhow::anyhow!("tidings, kill of {name}: {e}"))?;
        let successor = wait("the survivors naming a successor", Duration::from_secs(10), || {
            cell.leader().ok().filter(|&now| now != leader)
        })?;
        eprintln!("    tidings: {name} SIGKILLed, answered after {took:.1} ms, {} leads", cell.brokers[successor].name);
        result.took_ms.push(took);
        result.killed.push(name);
        cell.restart(leader)?;
        cell.linked()?;
    }
    let leader = cell.leader()?;
    cell.caught_up(leader)?;
    drop(publisher);
    let lines = std::fs::read_to_string(dir.0.join("pub.jsonl"))?;
    let lines: Vec<Value> = lines.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    result.acked = check_acks(&lines, true)?;
    cell.holds(result.acked)?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_answer_is_the_earliest_acknowledgement_past_the_grace() {
        let kill = 1_000_000;
        // In flight from the dead leader (within the grace), then the successor's, out of order.
        let acks = [kill - 5_000, kill + 1_500, kill + 250_000, kill + 180_000];
        assert_eq!(first_ack_after(acks, kill), Some(kill + 180_000));
        assert_eq!(first_ack_after([kill + 2_000], kill), None);
    }

    #[test]
    fn acknowledgements_must_be_seqs_one_to_n_each_once_and_of_one_pubend() {
        let line = |seq: u64, pubend: &str| serde_json::json!({ "seq": seq, "pubend": pubend, "acked_us": 1 });
        let good = [line(2, "a"), line(1, "a"), line(3, "a")];
        assert_eq!(check_acks(&good, true).unwrap(), 3);
        assert!(check_acks(&[line(1, "a"), line(3, "a")], true).is_err(), "a hole");
        assert!(check_acks(&[line(1, "a"), line(1, "a")], true).is_err(), "twice");
        assert!(check_acks(&[line(1, "a"), line(2, "b")], true).is_err(), "two pubends");
        assert_eq!(check_acks(&[line(1, "a"), line(2, "b")], false).unwrap(), 2);
    }
}
