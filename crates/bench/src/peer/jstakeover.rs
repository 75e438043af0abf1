//! NATS JetStream beside `tidings bench takeover` ([`crate::takeover`]): a 3-node cluster
//! (`PeerServer::jetstream_cluster`: every write synced before it is acknowledged), stream
//! TAKEOVER with file storage and 3 replicas, one synchronous publisher of the peer harness
//! (`-mode jspub`, every node in its server list, a publish not acknowledged within 100 ms sent
//! again, deduplicated by the stream). The stream's leader (asked with `-mode jsstream`, which
//! also waits until every replica is current) is SIGKILLed kill after kill and restarted on its
//! store; each kill is timed by tidings' rule ([`crate::takeover::wait_answered`]) from the
//! same clock points.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context as _;
use serde_json::Value;

use super::{NatsTools, PeerServer};
use crate::acked::ScratchDir;
use crate::takeover::{check_acks, wait_answered, wait_started, TakeoverResult, TakeoverSpec, PUBLISHES};
use crate::tools::Tool;

/// How long the publisher waits for an acknowledgement before it sends the publish again.
const PUB_TIMEOUT: &str = "100ms";

/// One run on JetStream: a fresh cluster under `parent`, `spec.kills` kills of the stream's
/// leader.
pub fn run(tools: &NatsTools, parent: &Path, spec: &TakeoverSpec) -> anyhow::Result<TakeoverResult> {
    let scratch = ScratchDir::new(parent, "jstakeover")?;
    let mut server = PeerServer::jetstream_cluster(tools, &scratch.0, 3)?;
    let all = server.urls.join(",");
    stream(tools, &all)?;
    let args: Vec<String> = [
        "-mode",
        "jspub",
        "-pub",
        &all,
        "-stream",
        "TAKEOVER",
        "-topic",
        "takeover.a",
        "-publisher",
        "a",
        "-count",
        PUBLISHES,
        "-rate",
        &spec.rate.to_string(),
        "-size",
        &spec.size.to_string(),
        "-pub-timeout",
        PUB_TIMEOUT,
        "-dur",
        "3600s",
    ]
    .map(String::from)
    .to_vec();
    let publisher = Tool::spawn(&tools.peerbench, &scratch.0, "jspub", &args)?;
    wait_started(|| publisher.lines()).map_err(|e| anyhow::anyhow!("JetStream: {e}"))?;
    let mut result = TakeoverResult::default();
    for _ in 0..spec.kills {
        let leader = leader_index(&stream(tools, &all)?)?;
        let kill_us = server.kill_node(leader)?;
        let took = wait_answered(|| publisher.lines(), kill_us)
            .map_err(|e| anyhow::anyhow!("JetStream, kill of node {leader}: {e}"))?;
        let name = format!("nats-{}", char::from(b'a' + leader as u8));
        eprintln!("    nats: {name} SIGKILLed, answered after {took:.1} ms");
        result.took_ms.push(took);
        result.killed.push(name);
        server.restart_node(tools, &scratch.0, leader)?;
    }
    let last = stream(tools, &all)?;
    drop(publisher);
    let text = std::fs::read_to_string(scratch.0.join("jspub.jsonl"))?;
    let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    result.acked = check_acks(&lines, false)?;
    let stored = last["messages"].as_u64().unwrap_or(0);
    anyhow::ensure!(stored >= result.acked, "JetStream acknowledged {} publishes and holds {stored}", result.acked);
    Ok(result)
}

/// `-mode jsstream`: creates the stream if need be, waits until it has a leader and every
/// other replica is current, and returns its line (`leader`, `messages`, ...).
fn stream(tools: &NatsTools, all: &str) -> anyhow::Result<Value> {
    let output = Command::new(&tools.peerbench)
        .args(["-mode", "jsstream", "-pub", all, "-stream", "TAKEOVER", "-topic", "takeover.>", "-replicas", "3"])
        .args(["-dur", "60s"])
        .stdin(Stdio::null())
        .output()
        .context("running the peer harness (-mode jsstream)")?;
    anyhow::ensure!(output.status.success(), "jsstream: {}", String::from_utf8_lossy(&output.stderr).trim());
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// The node index of the stream's leader (`nats-a` is 0).
fn leader_index(stream: &Value) -> anyhow::Result<usize> {
    let name = stream["leader"].as_str().unwrap_or_default();
    match name.strip_prefix("nats-").map(str::as_bytes) {
        Some([letter @ b'a'..=b'c']) => Ok(usize::from(letter - b'a')),
        _ => anyhow::bail!("the stream's leader is {name:?}, not a node of the cluster"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_is_read_from_the_node_name() {
        assert_eq!(leader_index(&serde_json::json!({ "leader": "nats-b" })).unwrap(), 1);
        assert!(leader_index(&serde_json::json!({ "leader": "" })).is_err());
        assert!(leader_index(&serde_json::json!({ "leader": "nats-z" })).is_err());
    }
}
