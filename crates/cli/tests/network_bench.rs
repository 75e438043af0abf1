//! Measurements of broker networks, not assertions: run them in release mode and read the
//! figures they print.
//!
//! ```sh
//! cargo test --release -p tidings-cli --test network_bench -- --ignored --nocapture --test-threads 1
//! ```
//!
//! The parameters follow the peer harness's E4 (`shared/peers/run_all.sh`): 2000-byte payloads,
//! one subscriber, throughput for a few seconds as fast as possible, latency at 1000 msg/s.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement harness: a failed step is a failed run

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use tidings_client::{Client, Subscription};
use tidings_testkit::{http_get, BrokerProcess};

const SIZE: usize = 2000;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// A `net up` network, `net down` on drop.
struct Network {
    dir: PathBuf,
    brokers: BTreeMap<String, Value>,
}

impl Network {
    fn up(file: &str) -> Network {
        let dir = std::env::temp_dir().join(format!("tidings-netbench-{}-{file}", std::process::id()));
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/topologies").join(file);
        let out = Command::new(bin()).args(["net", "up"]).arg(path).arg("--dir").arg(&dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("network.json")).unwrap()).unwrap();
        let brokers = json["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["name"].as_str().unwrap().to_string(), b.clone()))
            .collect();
        Network { dir, brokers }
    }

    fn tcp(&self, broker: &str) -> String {
        self.brokers[broker]["tcp"].as_str().unwrap().to_string()
    }

    /// A metric summed over all its label sets.
    fn total(&self, broker: &str, name: &str) -> f64 {
        let admin = self.brokers[broker]["admin"].as_str().unwrap().parse().unwrap();
        let text = http_get(admin, "/metrics").unwrap();
        text.lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new(bin()).args(["net", "down", "--dir"]).arg(&self.dir).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn ready(publisher: &Client, sub: &mut Subscription) {
    loop {
        publisher.publish("bench.warm", Bytes::from_static(b"w")).await.unwrap();
        publisher.flush().await.unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), sub.next()).await {
            break;
        }
    }
    while tokio::time::timeout(Duration::from_millis(300), sub.next()).await.is_ok() {}
}

/// Publishes as fast as the client goes for `duration`; returns (published, received, msg/s
/// received from the first publish to the last delivery).
async fn throughput(pub_addr: &str, sub_addr: &str, duration: Duration) -> (u64, u64, f64) {
    let subscriber = Client::connect(sub_addr).await.unwrap();
    let mut sub = subscriber.subscribe("bench.>").await.unwrap();
    let publisher = Client::connect(pub_addr).await.unwrap();
    ready(&publisher, &mut sub).await;
    let payload = Bytes::from(vec![b'x'; SIZE]);
    let counter = tokio::spawn(async move {
        let mut received = 0u64;
        let mut last = Instant::now();
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(2), sub.next()).await {
            received += 1;
            last = Instant::now();
        }
        (received, last)
    });
    let start = Instant::now();
    let mut published = 0u64;
    while start.elapsed() < duration && published < 5_000_000 {
        for _ in 0..100 {
            publisher.publish("bench.t", payload.clone()).await.unwrap();
        }
        published += 100;
    }
    publisher.flush().await.unwrap();
    let (received, last) = counter.await.unwrap();
    (published, received, received as f64 / last.duration_since(start).as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run in release with --ignored --nocapture"]
async fn two_brokers_against_one_broker_throughput() {
    let duration = Duration::from_secs(3);
    let single = BrokerProcess::start(bin(), &[]).unwrap();
    let net = Network::up("two-brokers.toml");
    let (mut ones, mut twos) = (Vec::new(), Vec::new());
    // Interleaved repetitions, so that drift in the machine's load hits both alike.
    for rep in 0..3 {
        let one = throughput(&single.tcp(), &single.tcp(), duration).await;
        let two = throughput(&net.tcp("phb"), &net.tcp("shb"), duration).await;
        println!(
            "rep {rep}: one broker {:.0} msg/s ({} of {} received), two brokers {:.0} msg/s ({} of {})",
            one.2, one.1, one.0, two.2, two.1, two.0
        );
        ones.push(one.2);
        twos.push(two.2);
    }
    ones.sort_by(f64::total_cmp);
    twos.sort_by(f64::total_cmp);
    let drops = net.total("phb", "tidings_link_drops_total");
    println!("median one broker : {:.0} msg/s ({SIZE} B payloads)", ones[1]);
    println!("median two brokers: {:.0} msg/s, link drops {drops}", twos[1]);
    println!("ratio two/one: {:.2}", twos[1] / ones[1]);
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run in release with --ignored --nocapture"]
async fn per_hop_latency_along_the_sparse_narada_path() {
    let net = Network::up("narada-22-sparse.toml");
    // Brokers on the path from n22, per the topology's README: n22 1, n1 2, n7 6, n10 9.
    let at = [("n22", 1u32), ("n1", 2), ("n7", 6), ("n10", 9)];
    let publisher = Client::connect(net.tcp("n22").as_str()).await.unwrap();
    let mut tasks = Vec::new();
    for (broker, path) in at {
        let client = Client::connect(net.tcp(broker).as_str()).await.unwrap();
        let mut sub = client.subscribe("bench.>").await.unwrap();
        ready(&publisher, &mut sub).await;
        tasks.push((broker, path, client, sub));
    }
    let payload = Bytes::from(vec![b'x'; SIZE]);
    let (rate, seconds) = (1000u64, 5u64);
    let collectors: Vec<_> = tasks
        .into_iter()
        .map(|(broker, path, client, mut sub)| {
            tokio::spawn(async move {
                let _client = client;
                let mut latencies = Vec::new();
                while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(2), sub.next()).await {
                    if d.topic == "bench.t" {
                        latencies.push(d.latency().as_micros() as u64);
                    }
                }
                (broker, path, latencies)
            })
        })
        .collect();
    let start = tokio::time::Instant::now();
    for n in 0..rate * seconds {
        tokio::time::sleep_until(start + Duration::from_micros(n * 1_000_000 / rate)).await;
        publisher.publish("bench.t", payload.clone()).await.unwrap();
    }
    publisher.flush().await.unwrap();
    let mut p50_local = 0;
    for collector in collectors {
        let (broker, path, mut latencies) = collector.await.unwrap();
        latencies.sort_unstable();
        let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        if path == 1 {
            p50_local = p50;
        }
        let per_hop = if path > 1 {
            format!("{:.0} us", (p50 - p50_local.min(p50)) as f64 / f64::from(path - 1))
        } else {
            "-".into()
        };
        println!(
            "{broker:>4}: {path} brokers on the path, {} received, p50 {p50} us, p99 {p99} us, added per hop at p50 {per_hop}",
            latencies.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run in release with --ignored --nocapture"]
async fn reconvergence_after_a_bundle_broker_fails() {
    // SIGKILL: the kernel resets the connections, so the links drop at once. SIGSTOP: nothing
    // is said, and the missed-heartbeat verdict (3 x 250 ms by default) must find it.
    for (how, signal) in [("crash (SIGKILL)", "-KILL"), ("silent stall (SIGSTOP)", "-STOP")] {
        let net = Network::up("gryphon-fig3.toml");
        let subscriber = Client::connect(net.tcp("s1").as_str()).await.unwrap();
        let mut sub = subscriber.subscribe("bench.>").await.unwrap();
        let publisher = Client::connect(net.tcp("p1").as_str()).await.unwrap();
        ready(&publisher, &mut sub).await;
        let carrier = if net.total("b1", "tidings_link_messages_in_total") > 0.0 { "b1" } else { "b2" };
        let pid = net.brokers[carrier]["pid"].as_u64().unwrap().to_string();
        // Publish every millisecond; the gap in deliveries is the outage.
        let pacer = tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                if publisher.publish("bench.t", Bytes::from(n.to_be_bytes().to_vec())).await.is_err() {
                    break;
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(1), sub.next()).await {}
        Command::new("kill").args([signal, &pid]).status().unwrap();
        let failed = Instant::now();
        let mut last = failed;
        let mut gap = Duration::ZERO;
        while failed.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(50), sub.next()).await {
                let now = Instant::now();
                gap = gap.max(now - last);
                last = now;
            }
        }
        pacer.abort();
        Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        println!("{how} of {carrier}: longest gap in deliveries at s1 {gap:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run in release with --ignored --nocapture"]
async fn subscription_cost_at_a_linked_broker() {
    let net = Network::up("two-brokers.toml");
    let client = Client::connect(net.tcp("shb").as_str()).await.unwrap();
    let mut subs = Vec::new();
    let mut last = Instant::now();
    for batch in 0..4 {
        for n in 0..500 {
            subs.push(client.subscribe(&format!("bench.{batch}.{n}.>")).await.unwrap());
        }
        println!("subscriptions {}..{}: {:?} per subscription", batch * 500, (batch + 1) * 500, last.elapsed() / 500);
        last = Instant::now();
    }
}
