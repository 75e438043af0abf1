//! `overhead` against NATS (with `--nats`): the same traffic on a two-node NATS cluster, core
//! NATS against JetStream (an R1 file stream on node A syncing every write, acknowledged
//! publishes, a durable pull consumer per subscriber acknowledging each message), as NATS's
//! own price of durability beside ours. The peer harness (`peerbench -mode overhead`) runs
//! each mode right after tidings' two in the same repetition, on a fresh cluster; each
//! nats-server's CPU and the harness's are read from `/proc` over the publishing (between
//! the harness's `ready` and `published` lines), as tidings' brokers' are.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::point::Load;
use super::rows::Row;
use crate::cpu::{CpuSample, Process};
use crate::peer::nats::{flags, json_line as line};
use crate::peer::{NatsTools, PeerServer};
use crate::stats::load_average;
use crate::tools::Tool;

/// The modes' names in rows and legends.
pub(super) const CORE: &str = "nats-core";
/// See [`CORE`].
pub(super) const JETSTREAM: &str = "jetstream";

/// One repetition of one NATS mode; `dir` is scratch for its servers and logs.
pub(super) async fn rep(tools: &NatsTools, dir: &Path, load: &Load, rep: usize) -> anyhow::Result<Row> {
    let js = load.guaranteed;
    let mode = if js { JETSTREAM } else { CORE };
    let logs = dir.join(format!("{mode}-{}-{rep}", load.remote));
    std::fs::create_dir_all(&logs)?;
    let server = tokio::task::block_in_place(|| PeerServer::jetstream_cluster(tools, &logs, 2))?;
    let pids = server.pids();
    let secs = load.duration.as_secs_f64();
    let mut args = flags(&[
        ("-mode", "overhead".into()),
        ("-pub", server.urls[0].clone()),
        ("-sub", server.urls[1].clone()),
        ("-subs", load.remote.to_string()),
        ("-local", load.local.to_string()),
        ("-groups", load.groups.to_string()),
        ("-rate", load.rate.to_string()),
        ("-size", load.size.to_string()),
        ("-dur", format!("{secs}s")),
        ("-rep", rep.to_string()),
        ("-place-tag", "a".into()),
        ("-drain", format!("{}s", load.drain.idle.as_secs())),
        ("-csv", logs.join("overhead.csv").display().to_string()),
    ]);
    // One argument: Go's flag package reads `-js false` as `-js` (true) and stops at `false`.
    args.push(format!("-js={js}"));
    let mut child = Tool::spawn(&tools.peerbench, &logs, "peerbench", &args)?;
    let harness = child.id();
    let processes =
        [("phb", Process::Pid(pids[0])), ("shb", Process::Pid(pids[1])), ("clients", Process::Pid(harness))];
    let before_load = load_average();
    line(&child.out, "ready", Duration::from_secs(600)).await.context("the harness never got its subscribers ready")?;
    let before = CpuSample::take(&processes);
    let published = secs + 60.0;
    line(&child.out, "published", Duration::from_secs_f64(published))
        .await
        .context("the harness never finished publishing")?;
    let cpu = CpuSample::take(&processes).since(&before);
    let status = child.finish(Instant::now() + load.drain.max + Duration::from_secs(30)).await?;
    anyhow::ensure!(
        status.is_some_and(|s| s.success()),
        "the peer harness failed ({mode}, see {})",
        logs.join("peerbench.log").display()
    );
    let result = line(&child.out, "sent", Duration::from_secs(1)).await?;
    let pct = |name: &str| -> anyhow::Result<f64> {
        let spent = cpu.by_process.get(name).ok_or_else(|| anyhow::anyhow!("no CPU time was read for {name}"))?;
        anyhow::ensure!(cpu.wall_secs > 0.0, "the CPU was read over no time");
        Ok(100.0 * spent / cpu.wall_secs)
    };
    let mut row = Row {
        mode: mode.into(),
        subscribers: load.remote,
        local_subscribers: load.local,
        groups: load.groups,
        rep,
        rate_msg_s: load.rate,
        size_b: load.size,
        phb_cpu_pct: pct("phb")?,
        phb_log_writer_cpu_pct: None,
        shb_cpu_pct: pct("shb")?,
        clients_cpu_pct: pct("clients")?,
        cpu_wall_s: cpu.wall_secs,
        load_before: before_load,
        load_after: load_average(),
        ..Row::default()
    };
    harness_figures(&mut row, &result)?;
    Ok(row)
}

/// Copies the harness's result line into `row`. Every figure must be there: a missing or
/// non-numeric field is an error naming it, never a 0 that would read as "nothing lost" or
/// enter a ratio.
fn harness_figures(row: &mut Row, result: &serde_json::Value) -> anyhow::Result<()> {
    let float = |key: &str| {
        result
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| anyhow::anyhow!("the peer harness's result line has no number {key:?}: {result}"))
    };
    let int = |key: &str| {
        result
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| anyhow::anyhow!("the peer harness's result line has no count {key:?}: {result}"))
    };
    let us = |key: &str| float(key).map(|v| v.round() as u64);
    row.achieved_rate_msg_s = float("achieved_rate_msg_s")?;
    (row.sent, row.acked, row.ack_failed) = (int("sent")?, int("acked")?, int("ack_failed")?);
    (row.local_p50_us, row.local_p99_us, row.local_samples) =
        (us("local_p50_us")?, us("local_p99_us")?, int("local_samples")?);
    (row.remote_p50_us, row.remote_p99_us, row.remote_samples) =
        (us("remote_p50_us")?, us("remote_p99_us")?, int("remote_samples")?);
    (row.lost, row.duplicates, row.out_of_order) = (int("lost")?, int("duplicates")?, int("out_of_order")?);
    row.ended = usize::try_from(int("dropped_subscribers")?)?;
    row.setup_s = float("setup_s")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> serde_json::Value {
        serde_json::json!({
            "sent": 4000, "acked": 4000, "ack_failed": 0, "achieved_rate_msg_s": 1999.5,
            "local_p50_us": 120.4, "local_p99_us": 300.0, "local_samples": 40,
            "remote_p50_us": 250.6, "remote_p99_us": 900.0, "remote_samples": 400,
            "lost": 0, "duplicates": 0, "out_of_order": 0, "dropped_subscribers": 0, "setup_s": 1.5,
        })
    }

    #[test]
    fn a_complete_result_line_fills_the_row() {
        let mut row = Row::default();
        harness_figures(&mut row, &result()).unwrap();
        assert_eq!((row.sent, row.acked, row.remote_p50_us, row.local_p50_us), (4000, 4000, 251, 120));
        assert_eq!(row.setup_s, 1.5);
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it_not_a_zero() {
        for missing in ["lost", "remote_p50_us", "achieved_rate_msg_s", "dropped_subscribers"] {
            let mut line = result();
            line.as_object_mut().unwrap().remove(missing);
            let error = harness_figures(&mut Row::default(), &line).unwrap_err().to_string();
            assert!(error.contains(&format!("{missing:?}")), "{missing}: {error}");
        }
    }
}
