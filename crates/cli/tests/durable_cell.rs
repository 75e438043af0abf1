//! `[durable] store = "cell"` through real broker processes (issue 40 part 4, the seed's double
//! replication): a durable subscriber in a three-broker replicated cell whose publishers are in
//! another cell catches up from its own cell after the publishers' cell is gone; the relay
//! pubend's stream reaches no broker without its reader, link flaps included.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use gd_common::{cluster_addr, id, links_up, publish, spawn, Node};
use serde_json::Value;
use tidings_testkit::BrokerProcess;

const STORE_CELL: &str = "[durable]\nstore = \"cell\"\n";

/// The publishers' cell PUB (broker p1, linked to all of cell S), a durable subscription at
/// s1 (its reader and its relay confirmed), 200 publishes and the subscription's first 50.
fn publishers_and_fifty(scratch: &std::path::Path, s: [&BrokerProcess; 3]) -> (BrokerProcess, Vec<Value>, Vec<Value>) {
    let peers: Vec<String> = s.iter().map(|b| cluster_addr(b)).collect();
    let p1 = Node::in_cell(scratch, "p1", "PUB").start("127.0.0.1:0", "127.0.0.1:0", &peers);
    wait_for("the cells link up", || links_up(s[0], 3.0)() && links_up(&p1, 3.0)());
    let first = durable_sub(s[0], 50);
    wait_for("the durable subscription and its relay are confirmed", || {
        s[0].metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 2.0
    });
    let acked = ok_lines(publish(&p1.tcp(), "k.a", 200, &[]), 60);
    let got = ok_lines(first, 60);
    (p1, acked, got)
}

/// Cell S: brokers s1, s2 and s3 with `store = "cell"`, each linked to those started before
/// it; their nodes (to restart one on its data) and the three processes.
fn start_cell_s(scratch: &std::path::Path) -> (Vec<Node>, BrokerProcess, BrokerProcess, BrokerProcess) {
    let any = "127.0.0.1:0";
    let cell: Vec<Node> = ["s1", "s2", "s3"].iter().map(|n| Node::configured(scratch, n, "S", STORE_CELL)).collect();
    let s3 = cell[2].start(any, any, &[]);
    let s2 = cell[1].start(any, any, &[cluster_addr(&s3)]);
    let s1 = cell[0].start(any, any, &[cluster_addr(&s2), cluster_addr(&s3)]);
    (cell, s1, s2, s3)
}

/// The JSON lines of a command that must succeed within `secs`.
fn ok_lines(child: Child, secs: u64) -> Vec<Value> {
    let out = tidings_testkit::finish_within(child, Duration::from_secs(secs));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "command failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn wait_for(what: &str, check: impl Fn() -> bool) {
    tidings_testkit::wait_until(what, Duration::from_secs(30), check);
}

/// `sub --durable d k.> --json --count N` on `b`.
fn durable_sub(b: &BrokerProcess, count: usize) -> Child {
    let (server, count) = (b.tcp(), count.to_string());
    spawn(&["sub", "--server", &server, "--durable", "d", "k.>", "--json", "--count", &count])
}

/// The subscriber's lines against the acknowledged publishes: each once, in the origin's tick
/// order, no gap notice, all from one pubend (the relay's, not the origin's) in its tick order.
fn assert_relayed_once_in_order(got: &[Value], acked: &[Value]) {
    let mut expected: Vec<&Value> = acked.iter().collect();
    expected.sort_by_key(|a| a["tick"].as_u64().unwrap());
    let got_ids: Vec<(String, u64)> = got.iter().map(id).collect();
    let want_ids: Vec<(String, u64)> = expected.iter().map(|a| id(a)).collect();
    assert_eq!(got.len(), want_ids.len(), "got {} of {} acknowledged", got.len(), want_ids.len());
    assert_eq!(got_ids, want_ids, "deliveries differ from the acknowledged publishes (order, loss or duplicates)");
    let relay = &got[0]["pubend"];
    assert_ne!(relay, &acked[0]["pubend"], "the subscriber read the origin pubend, not its cell's copy");
    let mut last = 0;
    for line in got {
        assert_eq!(line["missed"], 0, "a gap was notified: {line}");
        assert_eq!(&line["pubend"], relay, "every delivery comes from the relay pubend: {line}");
        assert!(line["topic"].as_str().unwrap().starts_with("k."), "the relay prefix is stripped: {line}");
        let tick = line["tick"].as_u64().unwrap();
        assert!(tick > last, "relay ticks in order: {line}");
        last = tick;
    }
}

#[test]
fn a_durable_subscriber_stored_in_its_cell_catches_up_with_the_publishers_cell_gone() {
    let scratch = tempfile::tempdir().unwrap();
    let (_, s1, s2, s3) = start_cell_s(scratch.path());
    let (mut p1, mut acked, mut got) = publishers_and_fifty(scratch.path(), [&s1, &s2, &s3]);
    assert_eq!(got.len(), 50);

    // Away: more are published, and relayed into the subscribers' cell.
    acked.extend(ok_lines(publish(&p1.tcp(), "k.b", 1000, &["--window", "256"]), 60));
    wait_for("s1's relay republished everything into its cell", || {
        s1.metric("tidings_gd_publishes_acked_total").unwrap_or(0.0) >= acked.len() as f64
    });
    // The publishers' cell is gone.
    p1.kill();
    wait_for("s1 sees its publisher's broker gone", links_up(&s1, 2.0));

    let rest = acked.len() - got.len();
    got.extend(ok_lines(durable_sub(&s1, rest), 60));
    assert_relayed_once_in_order(&got, &acked);
    // The relay pubend is replicated in the cell: its group has three members.
    let state: Value =
        serde_json::from_str(&tidings_testkit::http_get(s1.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    let groups = state["guaranteed"]["replicas"].as_array().cloned().unwrap_or_default();
    assert!(!groups.is_empty(), "the relay pubend has a replica group: {state}");
}

#[test]
fn store_cell_is_refused_where_there_is_no_replication() {
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("broker.toml");
    std::fs::write(&config, STORE_CELL).unwrap();
    let config = config.display().to_string();
    let out = tidings_testkit::finish_within(
        spawn(&["broker", "--listen", "127.0.0.1:0", "--udp", "off", "--config", &config]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a lone broker started with store = \"cell\"");
    assert!(err.contains("durable.store"), "the refusal names the key: {err}");
    // A cell of one linked to another cell starts, but refuses a durable subscription: no
    // mate could hold a replica of its copy.
    let any = "127.0.0.1:0";
    let s1 = Node::configured(scratch.path(), "s1", "S", STORE_CELL).start(any, any, &[]);
    let p1 = Node::in_cell(scratch.path(), "p1", "PUB").start(any, any, &[cluster_addr(&s1)]);
    wait_for("the cells link up", links_up(&p1, 1.0));
    let out = tidings_testkit::finish_within(durable_sub(&s1, 1), Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no cell mate"), "refused, saying why: {err}");
}

/// `count` guaranteed publishes on `topic` at `b`, at most 256 in flight: the acknowledged lines.
fn burst(b: &BrokerProcess, topic: &str, count: u64) -> Vec<Value> {
    ok_lines(publish(&b.tcp(), topic, count, &["--window", "256", "--size", "200"]), 60)
}

#[test]
fn ticks_the_origin_lost_reach_the_subscriber_stored_in_its_cell_as_a_gap() {
    let scratch = tempfile::tempdir().unwrap();
    let any = "127.0.0.1:0";
    let (cell, mut s1, s2, s3) = start_cell_s(scratch.path());
    // The publishers' broker links to s1 alone: no mate of s1 caches what s1 misses.
    let release = "[retention]\nmax_bytes = 60000\npolicy = \"release\"\n";
    let p1 = Node::configured(scratch.path(), "p1", "PUB", release).start(any, any, &[cluster_addr(&s1)]);
    wait_for("the cells link up", || links_up(&s1, 3.0)() && links_up(&p1, 1.0)());
    let mut first = durable_sub(&s1, 1);
    wait_for("the durable subscription and its relay are confirmed", || {
        s1.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 2.0
    });
    first.kill().unwrap();
    first.wait().unwrap();
    // The subscriber's broker dies; the origin's log passes its limit and releases early.
    let (tcp, link) = (s1.tcp(), cluster_addr(&s1));
    s1.kill();
    let mut acked = Vec::new();
    for topic in ["k.b", "k.c"] {
        acked.extend(burst(&p1, topic, 200));
        std::thread::sleep(Duration::from_millis(1100));
    }
    wait_for("the origin's log was released at its limit", || {
        p1.metric("tidings_gd_early_releases_total").unwrap_or(0.0) >= 1.0
    });
    std::thread::sleep(Duration::from_millis(600));
    let state: Value =
        serde_json::from_str(&tidings_testkit::http_get(p1.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    let release = state["guaranteed"]["pubends"][0]["release"].as_u64().unwrap();
    let s1 = cell[0].start(&tcp, &link, &[cluster_addr(&s2), cluster_addr(&s3)]);
    wait_for("s1 links up again", links_up(&s1, 3.0));
    let tick = |v: &Value| v["tick"].as_u64().unwrap();
    let kept: Vec<Value> = acked.iter().filter(|a| tick(a) > release).cloned().collect();
    let lost = acked.len() - kept.len();
    assert!(lost > 0 && !kept.is_empty(), "the limit took some, not all: lost {lost}, kept {}", kept.len());
    let lines = ok_lines(durable_sub(&s1, kept.len()), 60);
    let gaps: Vec<&Value> = lines.iter().filter(|l| l["gap"] == true).collect();
    let summary: Vec<String> = lines
        .iter()
        .map(|l| match l["gap"] == true {
            true => format!("gap {}", l["from"]),
            false => format!("{}:{}", l["topic"], l["properties"]["seq"]),
        })
        .collect();
    let kb: Vec<u64> = acked.iter().filter(|a| a["topic"] == "k.b").map(tick).collect();
    eprintln!("release {release}; k.b ticks {:?}..{:?}; lines {summary:?}", kb.first(), kb.last());
    assert!(
        !gaps.is_empty(),
        "the ticks the origin lost are told as a gap, not silence: {:?}",
        lines.iter().take(3).collect::<Vec<_>>()
    );
    assert_eq!(lines[0]["gap"], true, "the gap comes first, in stream order");
    let delivered: Vec<Value> = lines.iter().filter(|l| l["gap"] != true).cloned().collect();
    assert_relayed_once_in_order(&delivered, &kept);
}

/// Live delivery latencies (µs) of a durable subscriber at s1 (cell S of three) to `count`
/// guaranteed publishes of 256 B at `rate`/s from p1 (cell PUB of three, replicated), with the
/// subscription stored in cell S (`store_cell`) or read from the publishers' pubend.
fn live_latencies(store_cell: bool, count: u64, rate: u64) -> Vec<u64> {
    let scratch = tempfile::tempdir().unwrap();
    let any = "127.0.0.1:0";
    let extra = if store_cell { STORE_CELL } else { "" };
    let start_cell = |names: [&str; 3], cell: &str, extra: &str, peers: &[String]| -> Vec<BrokerProcess> {
        let nodes: Vec<Node> = names.iter().map(|n| Node::configured(scratch.path(), n, cell, extra)).collect();
        let c = nodes[2].start(any, any, peers);
        let mut with_c = peers.to_vec();
        with_c.push(cluster_addr(&c));
        let b = nodes[1].start(any, any, &with_c);
        with_c.push(cluster_addr(&b));
        let a = nodes[0].start(any, any, &with_c);
        vec![a, b, c]
    };
    let s = start_cell(["s1", "s2", "s3"], "S", extra, &[]);
    let peers: Vec<String> = s.iter().map(cluster_addr).collect();
    let p = start_cell(["p1", "p2", "p3"], "PUB", "", &peers);
    wait_for("the cells link up", || s.iter().chain(&p).all(|b| links_up(b, 5.0)()));
    // Read as it prints: a full pipe would hold the subscriber back and time the pipe. The
    // first WARM publishes (the pubends appearing, the streams starting) are not counted.
    const WARM: u64 = 20;
    let sub = durable_sub(&s[0], (count + WARM) as usize);
    let sub = std::thread::spawn(move || ok_lines(sub, 120));
    let confirmed = if store_cell { 2.0 } else { 1.0 };
    wait_for("the durable subscription is confirmed", || {
        s[0].metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= confirmed
    });
    ok_lines(publish(&p[0].tcp(), "k.a", WARM, &["--size", "256"]), 60);
    std::thread::sleep(Duration::from_secs(3));
    let rate = rate.to_string();
    ok_lines(publish(&p[0].tcp(), "k.a", count, &["--size", "256", "--rate", &rate]), 120);
    let lines = sub.join().unwrap();
    assert_eq!(lines.len() as u64, count + WARM);
    lines[WARM as usize..].iter().map(|l| l["latency_us"].as_u64().unwrap()).collect()
}

/// `cargo test -p tidings-cli --test durable_cell --release -- --ignored --nocapture`: the
/// cost of the second replication for a live durable subscriber, alternated three times
/// (`MEASURE_COUNT`, `MEASURE_RATE`: publishes and their rate a second, 2,000 at 500 unless given).
#[test]
#[ignore = "a measurement, not a check: run by hand"]
fn measure_live_latency_stored_in_the_cell_against_the_publishers_pubend() {
    let var = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (count, rate) = (var("MEASURE_COUNT", 2000), var("MEASURE_RATE", 500));
    let pct = |v: &mut Vec<u64>, p: f64| {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
    };
    for round in 1..=3 {
        for store_cell in [false, true] {
            let mut v = live_latencies(store_cell, count, rate);
            let (p50, p99) = (pct(&mut v, 0.5), pct(&mut v, 0.99));
            let what = if store_cell { "store = cell     " } else { "store = publisher" };
            let first = v.first().copied().unwrap_or(0) as f64 / 1000.0;
            eprintln!(
                "round {round} {what}: median {p50:.2} ms, p99 {p99:.2} ms, min {first:.2} ms over {} deliveries at {rate}/s",
                v.len()
            );
        }
    }
}

#[test]
fn the_subscriber_s_broker_killed_while_it_relays_gets_its_pubend_back_and_loses_and_repeats_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let (cell, mut s1, s2, s3) = start_cell_s(scratch.path());
    let (p1, mut acked, mut got) = publishers_and_fifty(scratch.path(), [&s1, &s2, &s3]);
    // Away; its broker is killed while the relay republishes a stream, and a mate takes the
    // relay pubend over.
    let publisher = publish(&p1.tcp(), "k.b", 2000, &["--window", "64", "--rate", "2000"]);
    let publisher = std::thread::spawn(move || ok_lines(publisher, 60));
    wait_for("s1 relays part of the stream", || s1.metric("tidings_gd_publishes_acked_total").unwrap_or(0.0) >= 600.0);
    let (tcp, link) = (s1.tcp(), cluster_addr(&s1));
    s1.kill();
    let leading =
        |b: &BrokerProcess| tidings_testkit::metric_total(&b.metrics().unwrap(), "tidings_gd_replica_leading");
    wait_for("a mate takes the relay pubend over", || leading(&s2) + leading(&s3) >= 1.0);
    acked.extend(publisher.join().unwrap());
    let s1 = cell[0].start(&tcp, &link, &[cluster_addr(&s2), cluster_addr(&s3)]);
    wait_for("s1 links up again", links_up(&s1, 3.0));
    // Its relay asks the lead back (only it feeds the pubend): the mate hands it over.
    wait_for("s1 leads its relay pubend again", || leading(&s1) >= 1.0 && leading(&s2) + leading(&s3) == 0.0);
    let rest = acked.len() - got.len();
    got.extend(ok_lines(durable_sub(&s1, rest), 90));
    assert_relayed_once_in_order(&got, &acked);
}

/// Guaranteed data messages `b` received from peers, per pubend (hex id).
fn data_received(b: &BrokerProcess) -> BTreeMap<String, f64> {
    let text = b.metrics().unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("tidings_gd_pubend_received_total{")) {
        if !line.contains("kind=\"data\"") {
            continue;
        }
        let pubend = line.split("pubend=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?").to_string();
        let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *out.entry(pubend).or_insert(0.0) += value;
    }
    out
}

/// The hex id of the pubend a subscriber's line came from.
fn hex(line: &Value) -> String {
    let id = &line["pubend"];
    id.as_u64()
        .map(|v| format!("{v:016x}"))
        .unwrap_or_else(|| id.as_str().unwrap_or("?").trim_start_matches("0x").to_string())
}

/// Cells in a line, Q - PUB - S: a durable subscriber stored in cell S (three brokers, `store =
/// "cell"`), a publisher in PUB (p1), and q1 beyond it. Broker `stall` stalls (SIGSTOP) long
/// enough for its links to be declared down and comes back, after the subscription was made
/// (so the brokers it was linked to hold what it had told them, and it what they had). The
/// relay pubend at s1 has one reader, at s1: no other broker may receive its stream as data
/// (only its knowledge, F).
fn no_relay_data_beyond_the_reader_after(stall: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let any = "127.0.0.1:0";
    let cell: Vec<Node> =
        ["s1", "s2", "s3"].iter().map(|n| Node::configured(scratch.path(), n, "S", STORE_CELL)).collect();
    let s3 = cell[2].start(any, any, &[]);
    let s2 = cell[1].start(any, any, &[cluster_addr(&s3)]);
    let s1 = cell[0].start(any, any, &[cluster_addr(&s2), cluster_addr(&s3)]);
    let s = [&s1, &s2, &s3];
    let peers: Vec<String> = s.iter().map(|b| cluster_addr(b)).collect();
    let p1 = Node::in_cell(scratch.path(), "p1", "PUB").start(any, any, &peers);
    let q1 = Node::in_cell(scratch.path(), "q1", "Q").start(any, any, &[cluster_addr(&p1)]);
    let links = |b: &BrokerProcess, n: f64| b.metric("tidings_links_up").unwrap_or(-1.0) == n;
    wait_for("the cells link up", || links(&s1, 3.0) && links(&p1, 4.0) && links(&q1, 1.0));
    let (count, server) = (200usize, s1.tcp());
    let sub = spawn(&["sub", "--server", &server, "--durable", "d", "k.>", "--json", "--count", &count.to_string()]);
    wait_for("the durable subscription and its relay are confirmed", || {
        s1.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 2.0
    });
    std::thread::sleep(Duration::from_millis(500));
    let (stalled, others): (&BrokerProcess, Vec<(&BrokerProcess, f64)>) = match stall {
        "q1" => (&q1, vec![(&p1, 3.0)]),
        _ => (&s2, vec![(&s1, 2.0), (&s3, 2.0), (&p1, 3.0)]),
    };
    stalled.signal(tidings_testkit::Signal::Stop).unwrap();
    wait_for("its peers declare it gone", || others.iter().all(|(b, n)| links(b, *n)));
    std::thread::sleep(Duration::from_millis(800));
    stalled.signal(tidings_testkit::Signal::Cont).unwrap();
    wait_for("it links up again", || links(&s1, 3.0) && links(&s2, 3.0) && links(&p1, 4.0) && links(&q1, 1.0));
    let acked = ok_lines(publish(&p1.tcp(), "k.a", count as u64, &["--window", "64"]), 60);
    let got = ok_lines(sub, 60);
    assert_eq!((acked.len(), got.len()), (count, count));
    let (origin, relay) = (hex(&acked[0]), hex(&got[0]));
    assert_ne!(origin, relay, "the subscriber reads the relay pubend");
    // Settle: whatever is still on its way arrives.
    std::thread::sleep(Duration::from_secs(2));
    let mut report = Vec::new();
    for (name, b) in [("s2", &s2), ("s3", &s3), ("p1", &p1), ("q1", &q1)] {
        let got = data_received(b);
        let relayed = got.get(&relay).copied().unwrap_or(0.0);
        report.push(format!("{name}: {got:?}"));
        assert_eq!(relayed, 0.0, "{name} has no reader of the relay pubend {relay} but received its data: {report:?}");
        if name == "p1" || name == "q1" {
            assert!(got.values().all(|n| *n == 0.0), "{name} has no subscriber but received data: {report:?}");
        }
    }
    eprintln!("{stall} stalled: origin {origin}, relay {relay}; data received: {report:?}");
}

#[test]
fn a_relay_pubend_s_stream_reaches_no_broker_without_its_reader_after_a_link_beyond_flaps() {
    no_relay_data_beyond_the_reader_after("q1");
}

#[test]
fn a_relay_pubend_s_stream_reaches_no_cell_mate_of_its_reader_after_a_mate_stalled() {
    no_relay_data_beyond_the_reader_after("s2");
}

/// The relay's cell without a quorum for seconds while it relays (the nemesis on
/// `gryphon-fig3-double.toml`, seed 625: s2 killed and s3 cut off from s1 at once): s2 and s3
/// SIGKILLed while a publisher at p1 publishes at 200/s, and restarted on their data 2.5 s
/// later. s1's republishes are refused meanwhile; each refusal is followed by the relay's
/// resend, in order, of everything unacknowledged, and nothing newer is sent before it (a newer
/// republish logged first would make the pubend answer the older ones as retries, never logging
/// them). The subscriber, there throughout, gets every acknowledged message once, in order.
#[test]
fn the_relays_cell_without_a_quorum_for_seconds_loses_and_repeats_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let (cell, s1, mut s2, mut s3) = start_cell_s(scratch.path());
    let (p1, mut acked, mut got) = publishers_and_fifty(scratch.path(), [&s1, &s2, &s3]);
    let total = 1_000;
    let sub = durable_sub(&s1, 150 + total);
    let publisher = publish(&p1.tcp(), "k.b", total as u64, &["--rate", "200"]);
    let publisher = std::thread::spawn(move || ok_lines(publisher, 90));
    let relayed = || s1.metric("tidings_gd_publishes_acked_total").unwrap_or(0.0);
    let refused = || s1.metric("tidings_gd_publishes_refused_total").unwrap_or(0.0);
    wait_for("s1 relays part of the stream", || relayed() >= 400.0);
    let (addresses, refused_before) = ([(s2.tcp(), cluster_addr(&s2)), (s3.tcp(), cluster_addr(&s3))], refused());
    s2.kill();
    s3.kill();
    std::thread::sleep(Duration::from_millis(2_500));
    let refusals = refused() - refused_before;
    let s3 = cell[2].start(&addresses[1].0, &addresses[1].1, &[cluster_addr(&s1)]);
    let s2 = cell[1].start(&addresses[0].0, &addresses[0].1, &[cluster_addr(&s1), cluster_addr(&s3)]);
    acked.extend(publisher.join().unwrap());
    got.extend(ok_lines(sub, 90));
    eprintln!("republishes refused while s2 and s3 were down: {refusals}");
    assert!(refusals > 0.0, "the relay's republishes were refused without a quorum");
    assert_relayed_once_in_order(&got, &acked);
    drop((s2, s3));
}
