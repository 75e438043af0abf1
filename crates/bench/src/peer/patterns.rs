//! NATS beside `tidings bench request` and `tidings bench queue`: the peer harness's `req` and
//! `queue` modes (`bench/peers/harness/patterns.go`), each run on servers of its own, started
//! here and stopped after it, as tidings gets fresh brokers every repetition.

use std::path::Path;

use super::nats::{flags, harness_row, millis, NatsTools, PeerServer};
use super::PeerRow;
use crate::queue::QueueSpec;
use crate::request::RequestSpec;

/// The harness's `req` flags for `spec` from `requester` to `responder` (`hops` only labels).
fn req_args(spec: &RequestSpec, hops: u64, requester: &str, responder: &str, csv: &Path) -> Vec<String> {
    flags(&[
        ("-mode", "req".into()),
        ("-exp", "request".into()),
        ("-label", "nats".into()),
        ("-hops", hops.to_string()),
        ("-pub", requester.into()),
        ("-sub", responder.into()),
        ("-size", spec.size.to_string()),
        ("-reps", "1".into()),
        ("-dur", millis(spec.duration)),
        ("-inflight", spec.in_flight.to_string()),
        ("-req-timeout", millis(spec.timeout)),
        ("-csv", csv.display().to_string()),
    ])
}

/// The harness's `queue` flags for `spec` on the server at `url`, with tidings' drain wait.
fn queue_args(spec: &QueueSpec, url: &str, csv: &Path) -> Vec<String> {
    flags(&[
        ("-mode", "queue".into()),
        ("-exp", "queue".into()),
        ("-label", "nats".into()),
        ("-pub", url.into()),
        ("-sub", url.into()),
        ("-topic", "bench.q".into()),
        ("-size", spec.size.to_string()),
        ("-subs", spec.members.to_string()),
        ("-reps", "1".into()),
        ("-dur", millis(spec.duration)),
        ("-max", spec.max_messages.to_string()),
        ("-drain", millis(spec.duration + spec.drain)),
        ("-csv", csv.display().to_string()),
    ])
}

/// Runs `req` at `spec` once (blocking) on a fresh server, or a fresh two-node cluster for 2
/// hops (the requester on node A, the responder on node B), and returns its row.
pub fn run_req(tools: &NatsTools, spec: &RequestSpec, hops: u64, scratch: &Path) -> anyhow::Result<PeerRow> {
    let server = match hops {
        1 => PeerServer::single(tools, scratch)?,
        2 => PeerServer::cluster(tools, scratch)?,
        other => anyhow::bail!("NATS request/reply is measured through 1 or 2 servers, not {other}"),
    };
    let (requester, responder) = (&server.urls[0], &server.urls[server.urls.len() - 1]);
    harness_row(tools, "req", scratch, |csv| req_args(spec, hops, requester, responder, csv))
}

/// Runs `queue` at `spec` once (blocking) on a fresh server and returns its row.
pub fn run_queue(tools: &NatsTools, spec: &QueueSpec, scratch: &Path) -> anyhow::Result<PeerRow> {
    let server = PeerServer::single(tools, scratch)?;
    harness_row(tools, "queue", scratch, |csv| queue_args(spec, &server.urls[0], csv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn req_flags_name_both_ends_and_the_window() {
        let spec = RequestSpec { size: 128, in_flight: 100, timeout: Duration::from_secs(5), ..RequestSpec::default() };
        let spec = RequestSpec { duration: Duration::from_secs(5), ..spec };
        let args = req_args(&spec, 2, "nats://a", "nats://b", Path::new("/tmp/r.csv")).join(" ");
        assert!(args.starts_with("-mode req -exp request -label nats -hops 2 -pub nats://a -sub nats://b -size 128"));
        assert!(args.contains("-dur 5000ms -inflight 100 -req-timeout 5000ms -csv /tmp/r.csv"));
    }

    #[test]
    fn queue_flags_give_the_members_and_the_cap() {
        let (duration, drain) = (Duration::from_secs(2), Duration::from_secs(7));
        let spec = QueueSpec { size: 256, members: 10, duration, max_messages: 1000, drain, ..QueueSpec::default() };
        let args = queue_args(&spec, "nats://q", Path::new("/tmp/q.csv")).join(" ");
        assert!(args.starts_with("-mode queue -exp queue -label nats -pub nats://q -sub nats://q -topic bench.q"));
        assert!(args.contains("-size 256 -subs 10 -reps 1 -dur 2000ms -max 1000 -drain 9000ms"));
    }
}
