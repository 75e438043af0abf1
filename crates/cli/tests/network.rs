//! Black-box tests of broker networks: `tidings net up` of the shared topologies, real clients,
//! and the brokers' own metrics as the judge.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use tidings_client::{Client, SubscribeOptions, Subscription};
use tidings_testkit::{http_get, metric_value, process_alive, send_signal, wait_until, Signal};
use tidings_wire::{Property, Value as WireValue};

/// One network at a time: 22 broker processes are plenty for a 2-core machine.
static ONE_NETWORK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

fn topology(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies").join(file)
}

fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidings-net-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A running network; `net down` (and SIGKILL of anything left) on drop.
struct Network {
    dir: PathBuf,
    brokers: BTreeMap<String, Value>,
}

impl Network {
    fn up(file: &Path, test: &str) -> Network {
        Network::up_with(file, test, &[])
    }

    /// `net up` with extra options (`--faults`).
    fn up_with(file: &Path, test: &str, options: &[&str]) -> Network {
        let dir = scratch_dir(test);
        let out = Command::new(bin())
            .args(["net", "up"])
            .arg(file)
            .arg("--dir")
            .arg(&dir)
            .args(options)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let network = Network::load(&dir);
        assert!(
            out.status.success(),
            "net up failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        network.check_key_and_data_dirs();
        network
    }

    /// `net up` made a private network key and one data directory per broker, each holding
    /// the incarnation it announced.
    fn check_key_and_data_dirs(&self) {
        use std::os::unix::fs::PermissionsExt;
        let key = std::fs::metadata(self.dir.join("cluster.key")).expect("net up writes a network key");
        assert_eq!(key.permissions().mode() & 0o777, 0o600, "the key file is readable by its owner only");
        for (name, broker) in &self.brokers {
            let data = PathBuf::from(broker["data"].as_str().unwrap());
            let stored = std::fs::read_to_string(data.join("incarnation")).unwrap();
            let announced = broker["incarnation"].as_u64().unwrap();
            assert_eq!(stored, format!("{announced}\n"), "{name}'s data dir holds the incarnation it announced");
        }
    }

    fn load(dir: &Path) -> Network {
        let text = std::fs::read_to_string(dir.join("network.json")).unwrap_or_else(|_| "{}".into());
        let json: Value = serde_json::from_str(&text).unwrap();
        let brokers = json["brokers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|b| (b["name"].as_str().unwrap().to_string(), b))
            .collect();
        Network { dir: dir.to_path_buf(), brokers }
    }

    fn tcp(&self, broker: &str) -> String {
        self.brokers[broker]["tcp"].as_str().unwrap().to_string()
    }

    fn admin(&self, broker: &str) -> SocketAddr {
        self.brokers[broker]["admin"].as_str().unwrap().parse().unwrap()
    }

    fn metric(&self, broker: &str, name: &str) -> f64 {
        metric_value(&http_get(self.admin(broker), "/metrics").unwrap(), name)
    }

    /// A metric summed over all its label sets (every link, say).
    fn total(&self, broker: &str, name: &str) -> f64 {
        tidings_testkit::metric_total(&http_get(self.admin(broker), "/metrics").unwrap(), name)
    }

    /// Data messages a broker received over all its links.
    fn link_messages_in(&self, broker: &str) -> f64 {
        self.total(broker, "tidings_link_messages_in_total")
    }

    /// Starts `tidings net fault ARGS` on this network (it runs for its `--after` + `--for`).
    fn fault(&self, args: &[&str]) -> std::process::Child {
        Command::new(bin()).args(["net", "fault"]).args(args).arg("--dir").arg(&self.dir).spawn().unwrap()
    }

    /// Links up at a broker, as its /state lists them (0 while it does not answer).
    fn links(&self, broker: &str) -> usize {
        let state = http_get(self.admin(broker), "/state").ok().and_then(|s| serde_json::from_str::<Value>(&s).ok());
        state.and_then(|s| s["router"]["links"].as_array().map(Vec::len)).unwrap_or(0)
    }

    fn kill(&self, broker: &str) {
        let pid = self.brokers[broker]["pid"].as_u64().unwrap();
        send_signal(pid as u32, Signal::Kill).unwrap();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new(bin()).args(["net", "down", "--dir"]).arg(&self.dir).output();
        for broker in self.brokers.values() {
            if let Some(pid) = broker["pid"].as_u64() {
                let _ = send_signal(pid as u32, Signal::Kill);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn subscribe(addr: &str, pattern: &str, selector: Option<&str>) -> (Client, Subscription) {
    let client = Client::connect(addr).await.unwrap();
    let mut options = SubscribeOptions::new(pattern);
    if let Some(selector) = selector {
        options = options.selector(selector);
    }
    let sub = client.subscribe_with(options).await.unwrap();
    (client, sub)
}

fn number(delivery: &tidings_client::Delivery) -> i64 {
    match delivery.property("n") {
        Some(WireValue::Int(n)) => *n,
        other => panic!("no n property: {other:?}"),
    }
}

/// Publishes `t.warm` until every subscription got one, so summaries have reached the
/// publisher along every path before the measured messages go out.
async fn warm_up(publisher: &Client, subs: &mut [Subscription]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut warm = vec![false; subs.len()];
    while warm.iter().any(|w| !w) {
        assert!(Instant::now() < deadline, "subscriptions did not propagate in 20 s: {warm:?}");
        let properties = [Property::new("n", -1i64), Property::new("k", 0i64)];
        publisher.publish_with("t.warm", &properties, Bytes::from_static(b"warm")).await.unwrap();
        publisher.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for (index, sub) in subs.iter_mut().enumerate() {
            while let Some(d) = sub.try_recv() {
                warm[index] |= d.topic == "t.warm";
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for sub in subs.iter_mut() {
        while sub.try_recv().is_some() {}
    }
}

/// Receives until `quiet` passes without a delivery; returns the `n` of each `t.data` delivery.
async fn drain(sub: &mut Subscription, quiet: Duration) -> Vec<i64> {
    let mut got = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(quiet, sub.next()).await {
        if d.topic == "t.data" {
            got.push(number(&d));
        }
    }
    got
}

#[test]
fn net_up_refuses_bad_topologies_before_starting_anything() {
    let dir = scratch_dir("refused");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("duplicate", "name = \"d\"\n[[broker]]\nname = \"a\"\n[[broker]]\nname = \"a\"\n", "already used"),
        (
            "unknown-cell",
            "name = \"u\"\n[[broker]]\nname = \"a\"\n[[broker]]\nname = \"b\"\n[[link]]\nbetween = [\"a\", \"zz\"]\n",
            "zz",
        ),
        ("disconnected", "name = \"x\"\n[[broker]]\nname = \"a\"\n[[broker]]\nname = \"b\"\n", "connected"),
        ("unknown-key", "name = \"k\"\n[[broker]]\nname = \"a\"\ncolour = \"red\"\n", "colour"),
        ("settings-cell", "name = \"c\"\n[[broker]]\nname = \"a\"\n[cells.zz.storage]\nreplicas = 1\n", "cells.zz"),
        ("settings-key", "name = \"c\"\n[[broker]]\nname = \"a\"\n[cells.a.storage]\nreplica = 1\n", "replica"),
        (
            "settings-lone",
            "name = \"c\"\n[[broker]]\nname = \"a\"\ndurable = { store = \"cell\" }\n",
            "no other broker",
        ),
    ];
    for (name, text, expect) in cases {
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let net = dir.join(format!("{name}-net"));
        let out = Command::new(bin()).args(["net", "up"]).arg(&file).arg("--dir").arg(&net).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: accepted");
        assert!(stderr.contains(expect), "{name}: {stderr}");
        assert!(!net.join("network.json").exists(), "{name}: something started");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `net up` told to stop half way (SIGTERM, as a supervisor or a timed-out harness does)
/// stops every broker it started: they are detached and not yet in `network.json`, so nothing
/// else could find them.
#[test]
fn net_up_stopped_half_way_stops_the_brokers_it_started() {
    let _one = ONE_NETWORK.blocking_lock();
    let dir = scratch_dir("interrupted");
    let mut up = Command::new(bin())
        .args(["net", "up"])
        .arg(topology("narada-22-dense.toml"))
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pids = || -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
        entries
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().with_extension("ready")).ok())
            .filter_map(|text| serde_json::from_str::<serde_json::Value>(text.lines().next()?).ok())
            .filter_map(|ready| ready["pid"].as_u64().map(|pid| pid as u32))
            .collect()
    };
    wait_until("three brokers of the network started", Duration::from_secs(60), || pids().len() >= 3);
    assert!(!dir.join("network.json").exists(), "the network was written before all 22 brokers started");
    send_signal(up.id(), Signal::Term).unwrap();
    let status = up.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(up.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "an interrupted `net up` said it succeeded");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let started = pids();
    assert!(started.len() >= 3, "{started:?}");
    let running: Vec<u32> = started.iter().copied().filter(|pid| process_alive(*pid)).collect();
    for pid in &running {
        let _ = send_signal(*pid, Signal::Kill);
    }
    assert!(running.is_empty(), "brokers {running:?} of {started:?} still run after `net up` stopped");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscriber_of_the_dense_narada_network_gets_exactly_one_copy() {
    let _one = ONE_NETWORK.lock().await;
    let net = Network::up(&topology("narada-22-dense.toml"), "dense-once");
    let at = ["n22", "n1", "n3", "n7", "n10", "n15", "n18"];
    let mut clients = Vec::new();
    let mut subs = Vec::new();
    for broker in at {
        let (client, sub) = subscribe(&net.tcp(broker), "t.>", None).await;
        clients.push(client);
        subs.push(sub);
    }
    let publisher = Client::connect(net.tcp("n22").as_str()).await.unwrap();
    warm_up(&publisher, &mut subs).await;
    let count = 300i64;
    for n in 0..count {
        publisher.publish_with("t.data", &[Property::new("n", n)], Bytes::from_static(b"x")).await.unwrap();
    }
    publisher.flush().await.unwrap();
    for (broker, sub) in at.iter().zip(subs.iter_mut()) {
        let mut got = drain(sub, Duration::from_millis(1500)).await;
        got.sort_unstable();
        let expected: Vec<i64> = (0..count).collect();
        assert_eq!(got, expected, "subscriber at {broker}: duplicates or losses");
    }
    // Exactly once also means every broker received each message at most once over its links.
    for broker in net.brokers.keys() {
        let received = net.link_messages_in(broker);
        assert!(received <= (count + 1000) as f64, "{broker} received {received} copies");
    }
}

/// `net up --link-delay 20ms --link-jitter 2ms --link-rate 100` runs every link through its
/// fault point shaped like a WAN: a message from `a` to `c` crosses two links, so it takes at
/// least 40 ms, where unshaped loopback takes well under a millisecond; and the fault points
/// still cut and heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_shaped_like_a_wan_add_their_delay_to_every_message() {
    let _one = ONE_NETWORK.lock().await;
    let shape = ["--link-delay", "20ms", "--link-jitter", "2ms", "--link-rate", "100"];
    let net = Network::up_with(&topology("chain-3.toml"), "wan-links", &shape);
    let (_client, sub) = subscribe(&net.tcp("c"), "t.>", None).await;
    let mut subs = [sub];
    let publisher = Client::connect(net.tcp("a").as_str()).await.unwrap();
    warm_up(&publisher, &mut subs).await;
    let mut took = Vec::new();
    for n in 0..20i64 {
        let properties = [Property::new("n", n), Property::new("k", 0i64)];
        publisher.publish_with("t.data", &properties, Bytes::from_static(b"x")).await.unwrap();
        publisher.flush().await.unwrap();
        let d = tokio::time::timeout(Duration::from_secs(5), subs[0].next()).await.unwrap().unwrap();
        assert_eq!(number(&d), n);
        took.push(d.received_us.saturating_sub(d.sent_us));
    }
    took.sort_unstable();
    assert!(took[0] >= 40_000, "two links of 20 ms each: the fastest message took {} us", took[0]);
    assert!(took[took.len() / 2] < 1_000_000, "median {} us: the shape is far off", took[took.len() / 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_in_a_branch_without_interest_receive_no_messages() {
    let _one = ONE_NETWORK.lock().await;
    let net = Network::up(&topology("narada-22-dense.toml"), "dense-selective");
    // Interest only at n10 and n19 (reached through n1 and n8), for 10% of the messages.
    let mut clients = Vec::new();
    let mut subs = Vec::new();
    for broker in ["n10", "n19"] {
        let (client, sub) = subscribe(&net.tcp(broker), "t.>", Some("k = 0")).await;
        clients.push(client);
        subs.push(sub);
    }
    let publisher = Client::connect(net.tcp("n22").as_str()).await.unwrap();
    warm_up(&publisher, &mut subs).await;
    let before_n10 = net.link_messages_in("n10");
    let count = 1000i64;
    for n in 0..count {
        let properties = [Property::new("n", n), Property::new("k", n % 10)];
        publisher.publish_with("t.data", &properties, Bytes::from_static(b"x")).await.unwrap();
    }
    publisher.flush().await.unwrap();
    for sub in &mut subs {
        let got = drain(sub, Duration::from_millis(1500)).await;
        assert_eq!(got, (0..count).filter(|n| n % 10 == 0).collect::<Vec<_>>());
    }
    let uninterested =
        ["n2", "n3", "n4", "n5", "n6", "n11", "n12", "n13", "n14", "n15", "n16", "n17", "n18", "n20", "n21"];
    for broker in uninterested {
        assert_eq!(net.link_messages_in(broker), 0.0, "{broker} is in a branch without interest");
    }
    let at_n10 = net.link_messages_in("n10") - before_n10;
    assert_eq!(at_n10, (count / 10) as f64, "n10 should receive exactly the matching tenth");
    assert_eq!(net.total("n22", "tidings_link_drops_total"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_flows_through_the_cell_mate_when_a_bundle_broker_dies() {
    let _one = ONE_NETWORK.lock().await;
    let net = Network::up(&topology("gryphon-fig3.toml"), "fig3-failover");
    let (_client, sub) = subscribe(&net.tcp("s1"), "t.>", None).await;
    let mut subs = vec![sub];
    let publisher = Client::connect(net.tcp("p1").as_str()).await.unwrap();
    warm_up(&publisher, &mut subs).await;
    let carrier = if net.link_messages_in("b1") > 0.0 { "b1" } else { "b2" };
    let mate = if carrier == "b1" { "b2" } else { "b1" };
    assert_eq!(net.link_messages_in(mate), 0.0, "one broker of the bundle carries the pubend");
    net.kill(carrier);
    let killed = Instant::now();
    let mut n = 0i64;
    let mut seen: BTreeMap<i64, u32> = BTreeMap::new();
    let recovered = loop {
        assert!(killed.elapsed() < Duration::from_secs(15), "no delivery through {mate} within 15 s");
        publisher.publish_with("t.data", &[Property::new("n", n)], Bytes::from_static(b"x")).await.unwrap();
        n += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let mut any = false;
        while let Some(d) = subs[0].try_recv() {
            if d.topic == "t.data" {
                *seen.entry(number(&d)).or_default() += 1;
                any = true;
            }
        }
        if any && net.link_messages_in(mate) > 0.0 {
            break killed.elapsed();
        }
    };
    for extra in n..n + 100 {
        publisher.publish_with("t.data", &[Property::new("n", extra)], Bytes::from_static(b"x")).await.unwrap();
    }
    publisher.flush().await.unwrap();
    for got in drain(&mut subs[0], Duration::from_millis(1500)).await {
        *seen.entry(got).or_default() += 1;
    }
    assert!(seen.values().all(|c| *c == 1), "a message was delivered twice: {seen:?}");
    for after in n..n + 100 {
        assert_eq!(seen.get(&after), Some(&1), "message {after}, sent after recovery, was lost");
    }
    eprintln!("{carrier} killed; traffic flowed through {mate} after {recovered:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_into_a_stalled_broker_is_counted_as_link_drops_and_never_cuts_the_link() {
    let _one = ONE_NETWORK.lock().await;
    let dir = scratch_dir("flood-config");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("broker.toml");
    // Liveness generous enough that a 1 s stall is a stall, not a death.
    std::fs::write(
        &config,
        "[cluster]\nlink_queue_messages = 500\nheartbeat_interval = \"200ms\"\nmissed_heartbeats = 25\n",
    )
    .unwrap();
    let net = {
        let dir = scratch_dir("flood");
        let out = Command::new(bin())
            .args(["net", "up"])
            .arg(topology("two-brokers.toml"))
            .arg("--dir")
            .arg(&dir)
            .arg("--")
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let network = Network::load(&dir);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        network
    };
    let (_client, sub) = subscribe(&net.tcp("shb"), "t.>", None).await;
    let mut subs = vec![sub];
    let publisher = Client::connect(net.tcp("phb").as_str()).await.unwrap();
    warm_up(&publisher, &mut subs).await;
    let shb_pid = net.brokers["shb"]["pid"].as_u64().unwrap() as u32;
    send_signal(shb_pid, Signal::Stop).unwrap();
    // 60 MB: far more than the link queue and the kernel's socket buffers hold.
    let count = 60_000i64;
    for n in 0..count {
        publisher.publish_with("t.data", &[Property::new("n", n)], Bytes::from_static(&[7; 1000])).await.unwrap();
    }
    publisher.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    send_signal(shb_pid, Signal::Cont).unwrap();
    let got = drain(&mut subs[0], Duration::from_millis(2000)).await;
    let drops = net.total("phb", "tidings_link_drops_total");
    assert!(drops > 0.0, "the stalled link never overflowed; the test proves nothing");
    assert_eq!(got.len() as f64 + drops, count as f64, "every message is delivered or counted as dropped");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "the link delivers in order, without duplicates");
    for broker in ["phb", "shb"] {
        assert_eq!(net.metric(broker, "tidings_links_established_total"), 1.0, "{broker}: the link was cut");
        assert_eq!(net.metric(broker, "tidings_links_up"), 1.0, "{broker}: the link is down");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn links_up(broker: &tidings_testkit::BrokerProcess) -> f64 {
    broker.metric("tidings_links_up").unwrap_or(-1.0)
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_fault_cuts_and_heals_a_link_and_restarts_a_killed_broker_where_it_was() {
    let _one = ONE_NETWORK.lock().await;
    let net = Network::up_with(&topology("two-brokers.toml"), "fault", &["--faults"]);
    let (_client, mut sub) = subscribe(&net.tcp("shb"), "t.>", None).await;

    let mut cut = net.fault(&["cut", "phb", "shb", "--for", "2s"]);
    wait_for("the cut to take the link down", Duration::from_secs(10), || net.links("phb") == 0);
    assert!(cut.wait().unwrap().success(), "net fault cut failed");
    wait_for("the link to come back after the cut", Duration::from_secs(20), || net.links("phb") == 1);
    wait_for("the dialling broker to say it is ready", Duration::from_secs(10), || {
        http_get(net.admin("shb"), "/readyz").is_ok_and(|body| body.contains("\"ready\":true"))
    });

    let old_pid = net.brokers["phb"]["pid"].as_u64();
    assert!(net.fault(&["kill", "phb", "--for", "300ms"]).wait().unwrap().success(), "net fault kill failed");
    let restarted = Network::load(&net.dir);
    assert_ne!(restarted.brokers["phb"]["pid"].as_u64(), old_pid, "a new process");
    let (before, after) =
        (net.brokers["phb"]["incarnation"].as_u64(), restarted.brokers["phb"]["incarnation"].as_u64());
    assert!(after > before, "on the same data directory: {after:?} after {before:?}");
    wait_for("the restarted broker to link again", Duration::from_secs(20), || net.links("shb") == 1);

    // Clients find the restarted broker where it was, and messages cross the healed link.
    let publisher = Client::connect(net.tcp("phb").as_str()).await.unwrap();
    warm_up(&publisher, std::slice::from_mut(&mut sub)).await;
    for n in 0..100i64 {
        publisher.publish_with("t.data", &[Property::new("n", n)], Bytes::from_static(b"x")).await.unwrap();
    }
    publisher.flush().await.unwrap();
    assert_eq!(drain(&mut sub, Duration::from_millis(500)).await, (0..100).collect::<Vec<_>>());

    let log = std::fs::read_to_string(net.dir.join("faults.jsonl")).unwrap();
    let events: Vec<(String, String, String)> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["fault"].as_str().unwrap().into(),
                v["target"].as_str().unwrap().into(),
                v["event"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected =
        [("cut", "phb-shb", "begin"), ("cut", "phb-shb", "end"), ("kill", "phb", "begin"), ("kill", "phb", "end")];
    assert_eq!(events, expected.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())));
    let mut stall = net.fault(&["stall", "phb", "shb", "--for", "200ms"]);
    assert!(stall.wait().unwrap().success(), "a link stall ends by itself");
    let refused = Command::new(bin()).args(["net", "fault", "cut", "phb", "--dir"]).arg(&net.dir).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("takes a link"));
}

#[test]
fn a_restarted_peer_is_redialled_and_links_again_with_a_new_incarnation() {
    use tidings_testkit::BrokerProcess;
    // The restarted broker keeps its data directory, where its incarnation counter lives.
    let scratch = tempfile::tempdir().unwrap();
    let a_data = scratch.path().join("a").display().to_string();
    let a_args = |listen: &str| -> Vec<String> {
        ["--name", "a", "--cluster-listen", listen, "--data", &a_data].iter().map(|s| s.to_string()).collect()
    };
    let args = a_args("127.0.0.1:0");
    let mut a = BrokerProcess::start(bin(), &args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    let a_cluster = a.ready.cluster.unwrap().to_string();
    let b = BrokerProcess::start(bin(), &["--name", "b", "--peer", &a_cluster]).unwrap();
    wait_for("first link", Duration::from_secs(10), || links_up(&a) == 1.0 && links_up(&b) == 1.0);
    let first = http_get(a.ready.admin.unwrap(), "/state").unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    a.kill();
    wait_for("b notices", Duration::from_secs(5), || links_up(&b) == 0.0);
    let args = a_args(&a_cluster);
    let a = BrokerProcess::start(bin(), &args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    let relinked = wait_for("relink", Duration::from_secs(10), || links_up(&a) == 1.0 && links_up(&b) == 1.0);
    let second: Value = serde_json::from_str(&http_get(a.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    assert!(second["incarnation"].as_u64() > first["incarnation"].as_u64(), "the incarnation grows");
    let b_state: Value = serde_json::from_str(&http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    assert_eq!(b_state["router"]["links"][0]["incarnation"], second["incarnation"]);
    eprintln!("b linked to the restarted a {relinked:?} after it started");
}

#[test]
fn print_config_shows_the_cluster_settings_and_every_peer() {
    let out = Command::new(bin())
        .args(["broker", "--print-config", "--cell", "IB1", "--cluster-listen", "127.0.0.1:7100"])
        .args(["--peer", "127.0.0.1:7101", "--peer", "host.example:7102", "--cluster-key", "net.key"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for expected in [
        "[cluster]",
        "cell = \"IB1\"",
        "listen = \"127.0.0.1:7100\"",
        "heartbeat_interval",
        "[[peer]]",
        "host.example:7102",
        "key_file = \"net.key\"",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let bad = Command::new(bin())
        .args(["broker", "--print-config", "--peer", "nope", "--cluster-insecure"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("peer[0].address"));
    let settings = Command::new(bin())
        .args(["broker", "--print-config", "--replicas", "2", "--durable-store", "cell"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&settings.stdout);
    assert!(text.contains("replicas = 2") && text.contains("store = \"cell\""), "{text}");
}

/// A topology's `[cells.<name>]` and per-broker settings reach each broker's command line (and
/// the line that restarts it), the broker's own keys over its cell's, and the brokers start
/// with them: C's brokers store durable subscriptions in their cell, which a broker refuses
/// to start with unless it is in a cell with links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_up_gives_each_broker_the_settings_of_its_cell_and_its_own() {
    let _one = ONE_NETWORK.lock().await;
    let dir = scratch_dir("settings-file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("settings.toml");
    let text = "name = \"settings\"\n\
        [[broker]]\nname = \"c1\"\ncell = \"C\"\n\
        [[broker]]\nname = \"c2\"\ncell = \"C\"\nstorage = { replicas = 2 }\n\
        [[broker]]\nname = \"p\"\n\
        [[link]]\nbetween = [\"p\", \"C\"]\n\
        [cells.C]\ndurable = { store = \"cell\" }\nstorage = { replicas = 0 }\n";
    std::fs::write(&file, text).unwrap();
    let net = Network::up(&file, "settings");
    let restart = |name: &str| -> Vec<String> {
        net.brokers[name]["restart"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
    };
    let flags = |name: &str| {
        let args = restart(name);
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].clone());
        (after("--replicas"), after("--durable-store"))
    };
    assert_eq!(flags("c1"), (Some("0".into()), Some("cell".into())));
    assert_eq!(flags("c2"), (Some("2".into()), Some("cell".into())));
    assert_eq!(flags("p"), (None, None));
    drop(net);
    let _ = std::fs::remove_dir_all(&dir);
}
