//! NATS beside `tidings bench request` and `tidings bench queue`: the peer harness's `req` and
//! `queue` modes (`bench/peers/harness/patterns.go`), each run on servers of its own, started
//! here and stopped after it, as tidings gets fresh brokers every repetition.

use std::path::Path;
use std::time::Duration;

use super::nats::{flags, harness, millis, NatsServer, NatsTools};
use super::PeerRow;

/// One run of the harness's `req` mode.
#[derive(Debug, Clone)]
pub struct ReqRun {
    /// 1: requester and responder on one server; 2: on the two nodes of a routed cluster.
    pub hops: u64,
    /// Request payload bytes.
    pub size: usize,
    /// Length of each phase (sequential, then in flight).
    pub duration: Duration,
    /// Requests outstanding at once in the second phase.
    pub in_flight: usize,
    /// One request's longest wait for its answer.
    pub timeout: Duration,
}

/// One run of the harness's `queue` mode.
#[derive(Debug, Clone)]
pub struct QueueRun {
    /// Payload bytes.
    pub size: usize,
    /// Members of the queue group.
    pub members: usize,
    /// Publishing time limit.
    pub duration: Duration,
    /// Message cap.
    pub max: u64,
    /// Longest wait for the members once publishing ended.
    pub drain: Duration,
}

impl ReqRun {
    fn args(&self, requester: &str, responder: &str, csv: &Path) -> Vec<String> {
        flags(&[
            ("-mode", "req".into()),
            ("-exp", "request".into()),
            ("-label", "nats".into()),
            ("-hops", self.hops.to_string()),
            ("-pub", requester.into()),
            ("-sub", responder.into()),
            ("-size", self.size.to_string()),
            ("-reps", "1".into()),
            ("-dur", millis(self.duration)),
            ("-inflight", self.in_flight.to_string()),
            ("-req-timeout", millis(self.timeout)),
            ("-csv", csv.display().to_string()),
        ])
    }
}

impl QueueRun {
    fn args(&self, url: &str, csv: &Path) -> Vec<String> {
        flags(&[
            ("-mode", "queue".into()),
            ("-exp", "queue".into()),
            ("-label", "nats".into()),
            ("-pub", url.into()),
            ("-sub", url.into()),
            ("-topic", "bench.q".into()),
            ("-size", self.size.to_string()),
            ("-subs", self.members.to_string()),
            ("-reps", "1".into()),
            ("-dur", millis(self.duration)),
            ("-max", self.max.to_string()),
            ("-drain", millis(self.drain)),
            ("-csv", csv.display().to_string()),
        ])
    }
}

/// Runs `req` once (blocking) on a fresh server, or a fresh two-node cluster for 2 hops (the
/// requester on node A, the responder on node B), and returns its row.
pub fn run_req(tools: &NatsTools, run: &ReqRun, scratch: &Path) -> anyhow::Result<PeerRow> {
    let server = match run.hops {
        1 => NatsServer::single(tools, scratch)?,
        2 => NatsServer::cluster(tools, scratch)?,
        other => anyhow::bail!("NATS request/reply is measured through 1 or 2 servers, not {other}"),
    };
    let (requester, responder) = (&server.urls[0], &server.urls[server.urls.len() - 1]);
    let csv = scratch.join(format!("peerbench-req-{}.csv", std::process::id()));
    let _ = std::fs::remove_file(&csv);
    let rows = harness(tools, &run.args(requester, responder, &csv), &csv)?;
    drop(server);
    rows.into_iter().next().ok_or_else(|| anyhow::anyhow!("the peer harness wrote no request row"))
}

/// Runs `queue` once (blocking) on a fresh server and returns its row.
pub fn run_queue(tools: &NatsTools, run: &QueueRun, scratch: &Path) -> anyhow::Result<PeerRow> {
    let server = NatsServer::single(tools, scratch)?;
    let csv = scratch.join(format!("peerbench-queue-{}.csv", std::process::id()));
    let _ = std::fs::remove_file(&csv);
    let rows = harness(tools, &run.args(&server.urls[0], &csv), &csv)?;
    drop(server);
    rows.into_iter().next().ok_or_else(|| anyhow::anyhow!("the peer harness wrote no queue row"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn req_flags_name_both_ends_and_the_window() {
        let run = ReqRun {
            hops: 2,
            size: 128,
            duration: Duration::from_secs(5),
            in_flight: 100,
            timeout: Duration::from_secs(5),
        };
        let args = run.args("nats://a", "nats://b", Path::new("/tmp/r.csv")).join(" ");
        assert!(args.starts_with("-mode req -exp request -label nats -hops 2 -pub nats://a -sub nats://b -size 128"));
        assert!(args.contains("-dur 5000ms -inflight 100 -req-timeout 5000ms -csv /tmp/r.csv"));
    }

    #[test]
    fn queue_flags_give_the_members_and_the_cap() {
        let run = QueueRun {
            size: 256,
            members: 10,
            duration: Duration::from_secs(2),
            max: 1000,
            drain: Duration::from_secs(9),
        };
        let args = run.args("nats://q", Path::new("/tmp/q.csv")).join(" ");
        assert!(args.starts_with("-mode queue -exp queue -label nats -pub nats://q -sub nats://q -topic bench.q"));
        assert!(args.contains("-size 256 -subs 10 -reps 1 -dur 2000ms -max 1000 -drain 9000ms"));
    }
}
