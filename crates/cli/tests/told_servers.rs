//! A client given one broker of a replicated cell fails over to the mates that broker told it
//! of (issue 40, `docs/replication.md`, "Clients"). p1, p2 and p3 form cell PUB (as in
//! `replicated-cell.toml`), a guaranteed subscriber listens at s1 outside it. Each broker tells
//! its cell mates its client address (peer frame SERVERS), and tells its clients its own and
//! its linked mates' (SERVERS after WELCOME). A guaranteed publisher is started with
//! `--server p1` alone; p1, the pubend's host and leader, is SIGKILLed mid-stream and stays
//! down. The publisher reconnects to a mate it was told of, resumes its pubend there, and the
//! subscriber gets every acknowledged publish exactly once, in order. The same run with
//! `--ignore-told-servers` (the list the user gave, alone) gets no acknowledgement after the
//! kill: the publisher only retries the dead p1.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::time::{Duration, Instant};

use replica_common::{publishers_cell, replica_group, Lines};
use serde_json::Value;
use tidings_testkit::{wait_until, BrokerProcess};

/// Publishes per second.
const RATE: u64 = 50;
/// Publishes in a run: 12 s at the rate, the kill after the first 20 acknowledgements.
const COUNT: u64 = RATE * 12;
/// How long the publisher has after the kill to be acknowledged by a mate.
const RESUME_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn a_publisher_given_only_p1_resumes_on_a_mate_p1_told_it_of() {
    let mut run = Cell::start();
    let publisher = run.publisher(&[]);
    let resumed = run.kill_p1(&publisher);
    assert!(resumed.is_some(), "no acknowledgement within {RESUME_WITHIN:?} of killing p1: {:?}", publisher.notes());
    eprintln!("p1 SIGKILLed, first acknowledgement from a mate after {:?}", resumed.unwrap());
    // p2 still tells p1, dead now: a mate cut off from p2 (alive) may be the one serving.
    let (p1, p2, p3) = (run.brokers[0].tcp(), run.brokers[1].tcp(), run.brokers[2].tcp());
    assert_eq!(told(&run.brokers[1]), [p2, p1, p3], "p2 tells itself, then p1 and p3");
    let reached: Vec<String> =
        publisher.notes().into_iter().filter(|(_, n)| n.starts_with("reconnected to")).map(|(_, n)| n).collect();
    eprintln!("publisher: {reached:?}");
    let (acked, status, stderr) = publisher.finish(Duration::from_secs(60));
    assert!(status.success(), "not every publish was acknowledged: {stderr}");
    assert_eq!(acked.len() as u64, COUNT);
    let pubends: std::collections::BTreeSet<&str> = acked.iter().map(|a| a["pubend"].as_str().unwrap()).collect();
    assert_eq!(pubends.len(), 1, "the publisher resumed its pubend on the mate: {pubends:?}");
    wait_until("the subscriber got every acknowledged publish", Duration::from_secs(60), || {
        run.sub.count() >= acked.len()
    });
    std::thread::sleep(Duration::from_millis(500));
    let got: Vec<Value> = run.sub.timed().into_iter().map(|(_, line)| line).collect();
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}

/// The control: the same run without the told list. Nothing but p1 is tried, so nothing is
/// acknowledged after p1's death.
#[test]
fn without_the_told_list_the_publisher_never_reaches_a_mate() {
    let mut run = Cell::start();
    let publisher = run.publisher(&["--ignore-told-servers"]);
    assert!(run.kill_p1(&publisher).is_none(), "acknowledged after p1's death: {:?}", publisher.notes());
}

/// The time from p1's SIGKILL to the first acknowledgement from a mate, for a publisher told
/// of the mates (`--server p1`) and one given them (`--server p1,p2,p3`), interleaved run by
/// run (`TOLD_RUNS` each, 5 by default): median and max of each.
#[test]
#[ignore = "a measurement (about two minutes): run with --ignored --nocapture"]
fn told_failover_times() {
    let runs: usize = std::env::var("TOLD_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let (mut told_times, mut given_times) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for given in [false, true] {
            let mut cell = Cell::start();
            let servers = if given {
                cell.brokers.iter().map(|b| b.tcp()).collect::<Vec<_>>().join(",")
            } else {
                cell.brokers[0].tcp()
            };
            let publisher = cell.publisher_to(&servers, &[]);
            let took = cell.kill_p1(&publisher).expect("no acknowledgement from a mate within 15 s");
            eprintln!("run {run}, {}: {took:?}", if given { "given p1,p2,p3" } else { "told (given p1)" });
            if given { &mut given_times } else { &mut told_times }.push(took);
        }
    }
    for (what, times) in [("told (given p1)", &mut told_times), ("given p1,p2,p3", &mut given_times)] {
        times.sort();
        eprintln!(
            "{what}: median {:?}, max {:?} over {} kills",
            times[times.len() / 2],
            times[times.len() - 1],
            times.len()
        );
    }
}

/// The running cell and subscriber.
struct Cell {
    // Dropped in this order: the subscriber and the brokers, then the lock, then their files.
    sub: Lines,
    brokers: [BrokerProcess; 3],
    _s1: BrokerProcess,
    _serial: std::sync::MutexGuard<'static, ()>,
    _scratch: tempfile::TempDir,
}

impl Cell {
    fn start() -> Cell {
        let serial = tidings_testkit::one_at_a_time();
        let scratch = tempfile::tempdir().unwrap();
        let (_, brokers, s1) = publishers_cell(scratch.path());
        // p1 tells its clients itself and both mates, and not s1 (another cell).
        let cell: Vec<String> = brokers.iter().map(|b| b.tcp()).collect();
        wait_until("p1 tells its clients the whole cell", Duration::from_secs(10), || told(&brokers[0]) == cell);
        let info = gd_common::spawn(&["info", "--admin", &brokers[0].ready.admin.unwrap().to_string()]);
        let out = tidings_testkit::finish_within(info, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("tells clients its cell: {}", cell.join(", "))), "tidings info: {text}");
        let server = s1.tcp();
        let sub = Lines::follow(gd_common::spawn(&["sub", "--server", &server, "--guaranteed", "--json", "g.>"]));
        wait_until("the subscription is confirmed", Duration::from_secs(20), || {
            s1.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
        });
        Cell { _scratch: scratch, _serial: serial, brokers, _s1: s1, sub }
    }

    /// A guaranteed publisher given p1's address alone, acknowledged 20 times by p1.
    fn publisher(&self, extra: &[&str]) -> Lines {
        self.publisher_to(&self.brokers[0].tcp(), extra)
    }

    /// A guaranteed publisher given `servers`, acknowledged 20 times by p1.
    fn publisher_to(&self, servers: &str, extra: &[&str]) -> Lines {
        let rate = RATE.to_string();
        let mut args = vec!["--rate", rate.as_str(), "--window", "64"];
        args.extend_from_slice(extra);
        let publisher = Lines::follow(gd_common::publish(servers, "g.a", COUNT, &args));
        wait_until("p1 acknowledges", Duration::from_secs(20), || publisher.count() >= 20);
        wait_until("p1 hosts and leads the pubend's group", Duration::from_secs(20), || {
            self.brokers.iter().all(|b| replica_group(b)["leader"] == "p1")
        });
        publisher
    }

    /// SIGKILLs p1 (it stays down); how long until the publisher's first acknowledgement read
    /// after it reconnected, if within [`RESUME_WITHIN`].
    fn kill_p1(&mut self, publisher: &Lines) -> Option<Duration> {
        self.brokers[0].kill();
        let killed_at = Instant::now();
        while killed_at.elapsed() < RESUME_WITHIN {
            let back = publisher.notes().into_iter().find(|(at, n)| *at > killed_at && n.starts_with("reconnected to"));
            if let Some((back, _)) = back {
                if let Some((at, _)) = publisher.timed().into_iter().find(|(at, _)| *at > back) {
                    return Some(at.duration_since(killed_at));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// What `b` tells its clients of its cell, from its `/state`.
fn told(b: &BrokerProcess) -> Vec<String> {
    let state: Value =
        serde_json::from_str(&tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    state["told_servers"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}
