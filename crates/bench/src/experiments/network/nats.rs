//! NATS beside tidings: throughput of one node against a two-node cluster (publisher on node
//! A, subscriber on node B), runs interleaved as tidings's are, with CPU time per message;
//! latency on the cluster through node A alone and across the route. Measured now through the
//! peer harness when `--nats` found it, and the committed anchors (its E4) always.

use std::time::Duration;

use super::cpu;
use super::NetRow;
use super::{Key, Params, ANCHOR, NATS};
use crate::cpu::{CpuSample, Process};
use crate::peer::anchors::Point;
use crate::peer::nats::{self, Mode, PeerRun};
use crate::peer::{columns, NatsTools, PeerRow, PeerServer};
use crate::suite::Context;

/// Setup labels: one node, then the cluster; the anchors' "one" is the cluster's node A.
const ONE: &str = "one node";
const CLUSTER: &str = "two-node cluster";
const NODE_A: &str = "cluster, node A only";

/// NATS's servers for this experiment: one node and a two-node cluster, alive for the whole
/// run as tidings's broker and network are.
pub(super) struct Servers {
    tools: NatsTools,
    dir: std::path::PathBuf,
    single: PeerServer,
    cluster: PeerServer,
}

/// Starts NATS's servers when `--nats` found the tools.
pub(super) fn start(ctx: &Context) -> anyhow::Result<Option<Servers>> {
    let Some(tools) = ctx.peers.tools() else { return Ok(None) };
    let dir = ctx.scratch("network-nats")?;
    let single = tokio::task::block_in_place(|| PeerServer::single(tools, &dir))?;
    let cluster = tokio::task::block_in_place(|| PeerServer::cluster(tools, &dir))?;
    Ok(Some(Servers { tools: tools.clone(), dir, single, cluster }))
}

/// One throughput repetition on NATS (one node, then the cluster), run right after tidings's.
pub(super) async fn throughput_rep(
    ctx: &Context,
    p: &Params,
    servers: &Servers,
    rep: usize,
    table: &mut Vec<NetRow>,
) -> anyhow::Result<()> {
    let Servers { tools, dir, single, cluster } = servers;
    let b = cluster.urls[1].clone();
    for (brokers, setup, server, sub) in [(1, ONE, single, &single.urls[0]), (2, CLUSTER, cluster, &b)] {
        let names = if brokers == 1 { vec!["nats"] } else { vec!["nats-a", "nats-b"] };
        let mut processes: Vec<(&str, Process)> =
            names.into_iter().zip(server.pids()).map(|(n, pid)| (n, Process::Pid(pid))).collect();
        processes.push(("peerbench", Process::WaitedChildren));
        let run = PeerRun {
            exp: "E4".into(),
            publisher: server.urls[0].clone(),
            subscriber: sub.clone(),
            size: p.size,
            subs: 1,
            reps: 1,
            duration: p.duration,
            max: p.max_messages,
            // The tidings run's limit: publishing time plus 20 s.
            drain: p.duration + Duration::from_secs(20),
            hops: brokers as u64,
            ..PeerRun::default()
        };
        let cpu = CpuSample::take(&processes);
        let rows = nats::run_async(tools, run, dir).await?;
        let spent = CpuSample::take(&processes).since(&cpu);
        let key = Key::new("throughput", NATS, setup, brokers, rep);
        let received = throughput_rows(&key, table, rows.first())?;
        cpu::put(&key, table, &spent, received);
        ctx.step(format!("nats {setup}, rep {rep}"));
    }
    Ok(())
}

/// After the throughput repetitions: what cut NATS's route, then latency on the cluster.
pub(super) async fn finish(ctx: &Context, p: &Params, servers: Servers, table: &mut Vec<NetRow>) -> anyhow::Result<()> {
    let Servers { tools, dir, single, cluster } = servers;
    drop(single);
    let a = cluster.urls[0].clone();
    let b = cluster.urls[1].clone();
    let tools = &tools;
    // What cut NATS's route under the flood, in the nodes' own words.
    let logs: String =
        ["nats-a.log", "nats-b.log"].iter().filter_map(|f| std::fs::read_to_string(dir.join(f)).ok()).collect();
    let reports: Vec<&str> = logs.lines().filter(|l| l.contains("Slow Consumer")).collect();
    let on = |kind: &str| reports.iter().filter(|l| l.contains(kind)).count() as f64;
    let key = Key::new("throughput", NATS, CLUSTER, 2, 0);
    key.put(table, "slow_consumer_reports", reports.len() as f64);
    key.put(table, "slow_consumer_reports_on_clients", on("cid:"));
    key.put(table, "slow_consumer_reports_on_routes", on("rid:"));
    for (brokers, setup, sub) in [(1, NODE_A, &a), (2, CLUSTER, &b)] {
        let run = PeerRun {
            mode: Mode::Latency,
            exp: "E4".into(),
            publisher: a.clone(),
            subscriber: sub.clone(),
            size: p.size,
            subs: 1,
            rate: p.rate.round() as u64,
            reps: ctx.reps,
            duration: p.latency_duration,
            drain: Duration::from_secs(30),
            hops: brokers as u64,
            ..PeerRun::default()
        };
        for (i, row) in nats::run_async(tools, run, &dir).await?.iter().enumerate() {
            latency_rows(&Key::new("latency", NATS, setup, brokers, i + 1), table, row);
        }
        ctx.step(format!("nats latency, {setup}"));
    }
    drop(cluster);
    Ok(())
}

/// The committed anchors of the same points (E4: the cluster, node A alone and across).
pub(super) fn anchored(ctx: &Context, p: &Params, table: &mut Vec<NetRow>) -> anyhow::Result<()> {
    let Some(anchors) = &ctx.peers.anchors else { return Ok(()) };
    for (brokers, setup) in [(1, NODE_A), (2, CLUSTER)] {
        let point = Point { exp: "E4", label: "nats-cluster", size: p.size as u64, subs: 1, hops: brokers };
        for (i, row) in anchors.throughput(point).iter().enumerate() {
            throughput_rows(&Key::new("throughput", ANCHOR, setup, brokers as usize, i + 1), table, Some(row))?;
        }
        for (i, row) in anchors.latency(point).iter().enumerate() {
            latency_rows(&Key::new("latency", ANCHOR, setup, brokers as usize, i + 1), table, row);
        }
    }
    Ok(())
}

/// A harness throughput row as ours; returns the messages received.
fn throughput_rows(key: &Key, table: &mut Vec<NetRow>, row: Option<&PeerRow>) -> anyhow::Result<u64> {
    let row = row.ok_or_else(|| anyhow::anyhow!("the peer harness wrote no row"))?;
    let names = columns! {
        sent, received = recv_total, lost, lost_pct, received_msg_s = agg_recv_msgs_s, publish_msg_s = pub_msgs_s,
        dropped_subscribers = dropped_subs,
    };
    put_all(key, table, row, &names);
    Ok(row.require("recv_total")? as u64)
}

/// A harness latency row as ours.
fn latency_rows(key: &Key, table: &mut Vec<NetRow>, row: &PeerRow) {
    let names = columns! { sent, received = delivered, p50_us, p99_us, mean_us };
    put_all(key, table, row, &names);
}

/// Each `(quantity, column)` of a harness row the row has, as our quantity.
fn put_all(key: &Key, table: &mut Vec<NetRow>, row: &PeerRow, names: &[(&str, &str)]) {
    for (quantity, column) in names {
        if let Some(v) = row.num(column) {
            key.put(table, quantity, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::network::median;

    #[test]
    fn harness_rows_become_ours() {
        let rows = crate::peer::parse_csv(
            "sent,recv_total,lost,lost_pct,agg_recv_msgs_s,dropped_subs\n1000,90,910,91.0,150000,1\n",
        );
        let mut table = Vec::new();
        let key = Key::new("throughput", NATS, CLUSTER, 2, 1);
        assert_eq!(throughput_rows(&key, &mut table, rows.first()).unwrap(), 90);
        assert_eq!(median(&table, "throughput", NATS, 2, "lost_pct"), Some(91.0));
        assert_eq!(median(&table, "throughput", NATS, 2, "dropped_subscribers"), Some(1.0));
        assert!(throughput_rows(&key, &mut table, None).is_err());
    }
}
