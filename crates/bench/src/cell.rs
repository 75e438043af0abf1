//! A replicated cell for `tidings bench acked --replicas N` (issue 40's measure): N brokers of
//! one cell on loopback ports the OS picks, data directories on the disk being measured, each
//! pubend's log a Raft group of N replicas, so a guaranteed publish at the first broker is
//! acknowledged only once a quorum synced it. After a run, [`check_replicated`] reads every
//! replica's `/state`, so an acknowledgement of a record some replica never applied cannot
//! pass unnoticed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::acked::ScratchDir;
use crate::target::Target;

/// The brokers of a cell, the publishers' broker first; stopped (and their data removed) on
/// drop.
pub struct Cell {
    /// `p1` (where the publisher connects), then its mates.
    pub brokers: Vec<Target>,
    _dir: ScratchDir,
}

/// Starts `replicas` brokers in cell `PUB` with their data under a scratch directory in
/// `parent`, on `config` (else on `[storage] replicas = N`), and waits until each is linked to
/// all its mates (a pubend created before that would be refused or unreplicated).
pub fn spawn_cell(exe: &Path, parent: &Path, config: Option<&Path>, replicas: usize) -> anyhow::Result<Cell> {
    anyhow::ensure!(replicas >= 2, "a replicated cell needs 2 brokers or more, not {replicas}");
    let dir = ScratchDir::new(parent, "cell")?;
    let config = match config {
        Some(given) => given.display().to_string(),
        None => {
            let path = dir.0.join("cell.toml");
            std::fs::write(&path, format!("[storage]\nreplicas = {replicas}\n"))?;
            path.display().to_string()
        }
    };
    let mut brokers: Vec<Target> = Vec::new();
    // The last first: each broker dials those already up, so p1, the publishers' broker, comes
    // up last with every mate to dial and the links form in one pass.
    for i in (1..=replicas).rev() {
        let name = format!("p{i}");
        let data = dir.0.join(&name).display().to_string();
        let peers: Vec<String> = brokers.iter().filter_map(Target::cluster).collect();
        let mut args = vec!["--name", &name, "--cell", "PUB", "--cluster-listen", "127.0.0.1:0"];
        args.extend(["--data", &data, "--config", &config]);
        for peer in &peers {
            args.extend(["--peer", peer.as_str()]);
        }
        brokers.push(Target::spawn(exe, &args)?);
    }
    brokers.reverse();
    let mates = (replicas - 1) as f64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !brokers.iter().all(|b| b.metric("tidings_links_up") == Some(mates)) {
        anyhow::ensure!(Instant::now() < deadline, "the cell's {replicas} brokers did not link up within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Cell { brokers, _dir: dir })
}

/// What every replica of the publisher's pubend applied, once they all caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicated {
    /// The log index every replica applied (the same on all).
    pub applied: u64,
    /// Entries beyond the acknowledged publishes: the empty entry each newly elected leader
    /// appends (Raft), nothing else while the broker proposes only publishes.
    pub extra_entries: u64,
}

/// Waits (up to 10 s) until every broker of `cell` applied the commit index of p1's single
/// replica group and that index reaches `acked` (or the time is up), then checks that the group
/// has every broker as a voter and that `acked` publishes fit what was applied: at least `acked`
/// entries, and no more beyond them than one empty entry per term. An acknowledgement of a
/// publish the replicas lack fails this.
pub async fn check_replicated(cell: &Cell, acked: u64) -> anyhow::Result<Replicated> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let groups: Vec<Value> = cell.brokers.iter().map(group).collect::<anyhow::Result<_>>()?;
        let commit = groups[0]["commit"].as_u64().unwrap_or(0);
        let applied: Vec<u64> = groups.iter().map(|g| g["applied"].as_u64().unwrap_or(0)).collect();
        // `/state` is refreshed every 250 ms and a follower learns the last commit index with
        // the next heartbeat, so right after the last acknowledgement all three may still agree
        // on an index below it: that is a view to wait past, not a loss. A publish acknowledged
        // and never committed keeps the commit below `acked` until the deadline, and fails.
        if applied.iter().all(|&a| a == commit) && (commit >= acked || Instant::now() >= deadline) {
            let voters = groups[0]["voters"].as_array().map_or(0, Vec::len);
            anyhow::ensure!(voters == cell.brokers.len(), "p1's group has {voters} voters: {}", groups[0]);
            let term = groups[0]["term"].as_u64().unwrap_or(0);
            anyhow::ensure!(
                commit >= acked && commit - acked <= term,
                "{acked} publishes acknowledged, but every replica applied {commit} entries in term {term}"
            );
            return Ok(Replicated { applied: commit, extra_entries: commit - acked });
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the replicas did not apply p1's commit index {commit} within 10 s: applied {applied:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The one replica group `broker`'s `/state` lists (an error while it lists none).
fn group(broker: &Target) -> anyhow::Result<Value> {
    let admin: SocketAddr =
        broker.admin.as_deref().ok_or_else(|| anyhow::anyhow!("a broker without admin"))?.parse()?;
    replica_group(admin)
}

/// The one replica group the `/state` of the broker with admin address `admin` lists (an error
/// while it lists none).
pub(crate) fn replica_group(admin: SocketAddr) -> anyhow::Result<Value> {
    let state: Value = serde_json::from_str(&tidings_admin::http_get(admin, "/state")?)?;
    let group = &state["guaranteed"]["replicas"][0];
    anyhow::ensure!(group.is_object(), "{admin} is in no replica group: {}", state["guaranteed"]);
    Ok(group.clone())
}

/// One guaranteed publish at `broker`, waited for (up to 15 s): it creates the pubend and
/// its replica group, whose first election (about a second) is then not in the measurement.
pub async fn warm_up(broker: &Target) -> anyhow::Result<()> {
    let client = tidings_client::Client::builder(&broker.tcp).connect().await?;
    let message = tidings_client::Message::new("acked.warmup", &[], bytes::Bytes::from_static(b"w"), 0)?;
    let pending = client.send_guaranteed(message).await?;
    let acked = tokio::time::timeout(Duration::from_secs(15), pending).await;
    let _ = client.close().await;
    match acked {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => anyhow::bail!("the warm-up publish was refused: {e}"),
        Err(_) => anyhow::bail!("the warm-up publish was not acknowledged within 15 s"),
    }
}
