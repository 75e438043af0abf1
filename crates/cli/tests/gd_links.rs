//! Guaranteed delivery across broker links, with real processes: what `pub --guaranteed
//! --json` acknowledges at one broker reaches `sub --guaranteed --json` at another exactly once,
//! in tick order, through a relay that is SIGKILLed and restarted empty, and across a restart
//! of the publisher's own broker on its data directory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use gd_common::{bin, publish, spawn};
use serde_json::Value;
use tidings_testkit::BrokerProcess;

/// Every acknowledged publish once, in tick order (see `gd_common`).
fn assert_exactly_once_in_order(got: &[Value], acked: &[Value]) {
    gd_common::assert_exactly_once_in_order(got, &acked.iter().collect::<Vec<_>>());
}

/// Waits at most 90 s for a command (the machine may be busy), killing it past that; its
/// output either way, and whether it finished.
fn wait(child: Child) -> (Output, bool) {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(out) => (out.unwrap(), true),
        Err(_) => {
            let _ = tidings_testkit::send_signal(pid, tidings_testkit::Signal::Kill);
            (rx.recv().unwrap().unwrap(), false)
        }
    }
}

/// The JSON lines of a command that must succeed.
fn json_lines(child: Child) -> Vec<Value> {
    let (lines, finished) = lines_so_far(child);
    assert!(finished, "the command did not finish in time");
    lines
}

/// The JSON lines of a command, and whether it finished (successfully) in time.
fn lines_so_far(child: Child) -> (Vec<Value>, bool) {
    let (out, finished) = wait(child);
    let finished = finished && out.status.success();
    if !finished {
        eprintln!("command did not finish: {}", String::from_utf8_lossy(&out.stderr));
    }
    let lines = BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap());
    (lines.collect(), finished)
}

fn metric(b: &BrokerProcess, name: &str) -> f64 {
    b.metric(name).unwrap_or(-1.0)
}

fn wait_for(what: &str, timeout: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A broker's fixed setup: its name, data directory and config file, so it can be restarted
/// on the same (or an empty) data directory with the same ports.
struct Node {
    name: String,
    data: PathBuf,
    config: PathBuf,
    key: PathBuf,
}

impl Node {
    fn new(scratch: &Path, name: &str) -> Node {
        let config = scratch.join(format!("{name}.toml"));
        std::fs::write(&config, "[cluster]\nheartbeat_interval = \"100ms\"\nmissed_heartbeats = 5\n").unwrap();
        let key = scratch.join("cluster.key");
        tidings_testkit::write_private(&key, tidings_testkit::test_key_text()).unwrap();
        Node { name: name.into(), data: scratch.join(name), config, key }
    }

    /// Starts the broker on `listen` (client) and `cluster` (link listener), linking to `peers`.
    fn start(&self, listen: &str, cluster: &str, peers: &[String]) -> BrokerProcess {
        let (data, config, key) =
            (self.data.display().to_string(), self.config.display().to_string(), self.key.display().to_string());
        let mut args = vec!["broker", "--name", &self.name, "--listen", listen, "--udp", "off"];
        args.extend(["--admin", "127.0.0.1:0", "--data", &data, "--config", &config, "--cluster-key", &key]);
        args.extend(["--cluster-listen", cluster]);
        for peer in peers {
            args.extend(["--peer", peer.as_str()]);
        }
        BrokerProcess::start_with_args(bin(), &args).unwrap()
    }
}

fn cluster_addr(b: &BrokerProcess) -> String {
    b.ready.cluster.unwrap().to_string()
}

fn links_up(b: &BrokerProcess, n: f64) -> impl Fn() -> bool + '_ {
    move || metric(b, "tidings_links_up") == n
}

/// Starts `sub --guaranteed --json` at `b` and returns once SUBSCRIBED was sent (after the
/// barrier, in a network).
fn start_sub(b: &BrokerProcess, extra: &[&str]) -> Child {
    let before = metric(b, "tidings_gd_subscriptions_confirmed_total");
    let server = b.tcp();
    let mut args = vec!["sub", "--server", server.as_str(), "--guaranteed", "--json"];
    args.extend_from_slice(extra);
    let child = spawn(&args);
    wait_for("the guaranteed subscription is confirmed", Duration::from_secs(20), || {
        metric(b, "tidings_gd_subscriptions_confirmed_total") > before
    });
    child
}

#[test]
fn a_publish_acknowledged_at_one_broker_reaches_a_subscriber_at_another_once_in_tick_order() {
    let scratch = tempfile::tempdir().unwrap();
    let (a, b) = (Node::new(scratch.path(), "a"), Node::new(scratch.path(), "b"));
    let b = b.start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let a = a.start("127.0.0.1:0", "127.0.0.1:0", &[cluster_addr(&b)]);
    wait_for("a and b link up", Duration::from_secs(20), || links_up(&a, 1.0)() && links_up(&b, 1.0)());
    // Subscribed before the pubend exists: it starts when the pubend appears.
    let early = start_sub(&b, &["g.>", "--count", "500"]);
    let first = json_lines(publish(&a.tcp(), "g.one", 300, &["--window", "16"]));
    assert_eq!(first.len(), 300, "every publish is acknowledged");
    // Subscribed once the pubend exists: its start comes from the barrier, after what was
    // acknowledged before, and it gets everything after.
    let late = start_sub(&b, &["g.>", "--count", "200"]);
    let second = json_lines(publish(&a.tcp(), "g.two", 200, &["--window", "16"]));
    let got = json_lines(early);
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    assert_exactly_once_in_order(&got, &all);
    assert_exactly_once_in_order(&json_lines(late), &second);
    assert!(metric(&a, "tidings_gd_peer_frames_sent_total") > 0.0);
    assert_eq!(metric(&a, "tidings_gd_peer_frames_unsent_total"), 0.0);
}

/// Publishes at `a` while `kill` is done to the network (at about 1/3 of the publishes), and
/// checks that `sub` got every acknowledged publish once, in tick order.
fn publish_through(server: &str, sub: Child, count: u64, fault: impl FnOnce()) {
    let publisher = publish(server, "c.data", count, &["--rate", "300", "--window", "16"]);
    std::thread::sleep(Duration::from_millis(count * 1000 / 300 / 3));
    fault();
    let acked = json_lines(publisher);
    assert_eq!(acked.len() as u64, count, "the publisher got every acknowledgement, across the fault");
    let (got, _) = lines_so_far(sub);
    assert_exactly_once_in_order(&got, &acked);
}

#[test]
fn a_relay_killed_and_restarted_empty_loses_duplicates_and_reorders_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let (a, m, b) = (Node::new(scratch.path(), "a"), Node::new(scratch.path(), "m"), Node::new(scratch.path(), "b"));
    let mut relay = m.start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let (relay_tcp, relay_cluster) = (relay.tcp(), cluster_addr(&relay));
    let b = b.start("127.0.0.1:0", "127.0.0.1:0", std::slice::from_ref(&relay_cluster));
    let a = a.start("127.0.0.1:0", "127.0.0.1:0", std::slice::from_ref(&relay_cluster));
    wait_for("the chain links up", Duration::from_secs(20), || {
        links_up(&a, 1.0)() && links_up(&b, 1.0)() && links_up(&relay, 2.0)()
    });
    let sub = start_sub(&b, &["c.>", "--count", "900"]);
    publish_through(&a.tcp(), sub, 900, || {
        relay.kill();
        std::thread::sleep(Duration::from_millis(500));
        let empty = Node { data: scratch.path().join("m-second-life"), ..m };
        relay = empty.start(&relay_tcp, &relay_cluster, &[]);
    });
    assert!(links_up(&relay, 2.0)(), "the restarted relay is linked to both ends");
}

#[test]
fn the_publishers_broker_restarted_on_its_data_dir_loses_duplicates_and_reorders_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let (a, b) = (Node::new(scratch.path(), "a"), Node::new(scratch.path(), "b"));
    let mut home = a.start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let (home_tcp, home_cluster) = (home.tcp(), cluster_addr(&home));
    let b = b.start("127.0.0.1:0", "127.0.0.1:0", std::slice::from_ref(&home_cluster));
    wait_for("a and b link up", Duration::from_secs(20), || links_up(&home, 1.0)() && links_up(&b, 1.0)());
    let sub = start_sub(&b, &["c.>", "--count", "900"]);
    let publisher_home = home.tcp();
    publish_through(&publisher_home, sub, 900, || {
        home.kill();
        std::thread::sleep(Duration::from_millis(300));
        home = a.start(&home_tcp, &home_cluster, &[]);
    });
    assert!(metric(&b, "tidings_gd_peer_restarts_total") >= 1.0, "b saw the home's new incarnation");
}
