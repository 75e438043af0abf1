//! One link of a broker triangle fails while the brokers at its ends stay up: a stalling proxy
//! (silent: only missed heartbeats tell) and a cut (connections reset). Routes must move to the
//! two-hop path, come back when the link heals, and no message may arrive twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_client::Client;
use tidings_testkit::{http_get, metric_value, BrokerProcess, FaultProxy};
use tidings_wire::{Property, Value};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// Data messages the brokers counted as dropped: refused by routing, or for a full link queue.
fn dropped(brokers: &[&Arc<BrokerProcess>]) -> f64 {
    let count = |broker: &&Arc<BrokerProcess>| {
        let text = broker.metrics().unwrap();
        tidings_testkit::metric_total(&text, "tidings_route_drops_total")
            + tidings_testkit::metric_total(&text, "tidings_link_drops_total")
    };
    brokers.iter().map(count).sum()
}

fn metric(broker: &BrokerProcess, name: &str) -> f64 {
    broker.metric(name).unwrap_or(-1.0)
}

/// Data messages `broker` wrote on its link to `peer`.
fn sent_to(broker: &BrokerProcess, peer: &str) -> f64 {
    metric_value(&broker.metrics().unwrap(), &format!("tidings_link_messages_out_total{{peer=\"{peer}\"}}"))
}

/// Waits (polling, on a blocking thread) until `check` holds; how long it took, or `None`.
async fn wait_until(timeout: Duration, check: impl Fn() -> bool + Send + 'static) -> Option<Duration> {
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while !check() {
            if start.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(start.elapsed())
    })
    .await
    .unwrap()
}

async fn wait_for(what: &str, timeout: Duration, check: impl Fn() -> bool + Send + 'static) -> Duration {
    wait_until(timeout, check).await.unwrap_or_else(|| panic!("{what}: not within {timeout:?}"))
}

/// Each broker's `/state`, for a failure message.
fn views(brokers: &[&BrokerProcess]) -> String {
    let state = |b: &BrokerProcess| http_get(b.ready.admin.unwrap(), "/state").unwrap_or_else(|e| e.to_string());
    brokers.iter().map(|b| format!("{}: {}", b.ready.name, state(b))).collect::<Vec<_>>().join("\n")
}

/// Publication times, by message number, shared with the test.
type Log = Arc<Mutex<Vec<Instant>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_cut_link_is_routed_around_and_heals_without_duplicates() {
    let dir = std::env::temp_dir().join(format!("tidings-link-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("broker.toml");
    std::fs::write(&config, "[cluster]\nheartbeat_interval = \"100ms\"\nmissed_heartbeats = 3\n").unwrap();
    let config = config.to_str().unwrap();
    let start = |name: &str, peers: &[String]| {
        let mut args = vec!["--name", name, "--cluster-listen", "127.0.0.1:0", "--config", config];
        for peer in peers {
            args.extend(["--peer", peer.as_str()]);
        }
        Arc::new(BrokerProcess::start(bin(), &args).unwrap())
    };
    // a -- proxy -- b, a -- c, b -- c: the direct a-b link is the one that fails.
    let c = start("c", &[]);
    let c_cluster = c.ready.cluster.unwrap().to_string();
    let b = start("b", std::slice::from_ref(&c_cluster));
    let proxy = FaultProxy::start(b.ready.cluster.unwrap()).unwrap();
    let a = start("a", &[proxy.addr().to_string(), c_cluster]);
    let all_linked = {
        let (a, b, c) = (Arc::clone(&a), Arc::clone(&b), Arc::clone(&c));
        move || [&a, &b, &c].iter().all(|broker| metric(broker, "tidings_links_up") == 2.0)
    };
    wait_for("the triangle links up", Duration::from_secs(10), all_linked.clone()).await;

    let subscriber = Client::connect(b.tcp().as_str()).await.unwrap();
    let mut sub = subscriber.subscribe("t.>").await.unwrap();
    let publisher = Client::connect(a.tcp().as_str()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::time::timeout(Duration::from_millis(50), sub.recv()).await.is_err() {
        assert!(Instant::now() < deadline, "the subscription never reached a");
        publisher.publish("t.warm", Bytes::from_static(b"warm")).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while sub.try_recv().is_some() {}

    // Every millisecond a numbered message; the subscriber records what it gets.
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let pacer = {
        let (stop, log) = (Arc::clone(&stop), Arc::clone(&log));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let n = log.lock().unwrap().len() as i64;
                log.lock().unwrap().push(Instant::now());
                publisher
                    .publish_with("t.data", &[Property::new("n", n)], Bytes::from_static(&[1; 100]))
                    .await
                    .unwrap();
            }
            publisher.flush().await.unwrap();
        })
    };
    let got: Arc<Mutex<Vec<i64>>> = Arc::default();
    let collector = {
        let got = Arc::clone(&got);
        tokio::spawn(async move {
            while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await {
                if let Some(Value::Int(n)) = d.property("n") {
                    got.lock().unwrap().push(*n);
                }
            }
        })
    };
    let received_after = |n: usize| {
        let got = Arc::clone(&got);
        move || got.lock().unwrap().iter().any(|&m| m as usize > n)
    };

    // Each fault: traffic flows through c until the link heals, then takes the direct link again.
    let mut outages = Vec::new();
    // Drops the brokers counted inside the outages; the rest were counted outside them.
    let mut during = 0.0;
    for fault in ["stall", "cut"] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let via_c = metric_value(&c.metrics().unwrap(), "tidings_link_messages_out_total{peer=\"b\"}");
        // Everything after the last message received before the fault was still on its way (in
        // a client, a broker, a socket buffer or the proxy) and may be lost with the link; a
        // fixed time slack for that is too thin on a loaded machine (CI lost one 20 ms early).
        let delivered = got.lock().unwrap().iter().copied().max().unwrap_or(-1);
        during -= dropped(&[&a, &b, &c]);
        match fault {
            "stall" => proxy.stall(),
            _ => proxy.cut(),
        }
        let a_watch = Arc::clone(&a);
        let detected = wait_for(&format!("{fault}: a declares the link down"), Duration::from_secs(5), move || {
            metric(&a_watch, "tidings_links_up") == 1.0
        })
        .await;
        let published = log.lock().unwrap().len();
        let rerouted = match wait_until(Duration::from_secs(2), received_after(published)).await {
            Some(took) => took + detected,
            None => panic!("{fault}: deliveries did not resume in 2 s; the brokers' views:\n{}", views(&[&a, &b, &c])),
        };
        let through_c = metric_value(&c.metrics().unwrap(), "tidings_link_messages_out_total{peer=\"b\"}") - via_c;
        assert!(through_c > 0.0, "{fault}: nothing went through c while the direct link was down");
        // Both ends give up on the link before it heals: what the proxy held is gone for good.
        let b_watch = Arc::clone(&b);
        wait_for(&format!("{fault}: b declares the link down"), Duration::from_secs(5), move || {
            metric(&b_watch, "tidings_links_up") == 1.0
        })
        .await;
        outages.push((delivered, Instant::now()));
        during += dropped(&[&a, &b, &c]);
        proxy.heal();
        wait_for(&format!("{fault}: the link comes back"), Duration::from_secs(10), all_linked.clone()).await;
        let direct = sent_to(&a, "b");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(sent_to(&a, "b") > direct, "{fault}: after healing, a does not use the direct link again");
        eprintln!("{fault}: link declared down after {detected:?}, deliveries resumed after {rerouted:?}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    pacer.await.unwrap();
    collector.await.unwrap();

    let got = got.lock().unwrap();
    let distinct: BTreeSet<i64> = got.iter().copied().collect();
    assert_eq!(distinct.len(), got.len(), "a message was delivered twice");
    let log = log.lock().unwrap();
    // Not yet delivered when the fault hit, and sent before both ends had given the link up.
    let in_outage = |n: usize| outages.iter().any(|(delivered, until)| n as i64 > *delivered && log[n] <= *until);
    let lost: Vec<usize> = (0..log.len()).filter(|n| !distinct.contains(&(*n as i64))).collect();
    let outside: Vec<&usize> = lost.iter().filter(|n| !in_outage(**n)).collect();
    // Outside them a loss must be counted (docs/guarantees.md, "Best effort"): a copy that
    // reaches b over the healed link while b's tree still has c as a's parent (or the other way
    // round) is dropped as `not_from_parent` while the routes re-converge.
    let counted = dropped(&[&a, &b, &c]) - during;
    assert!(
        outside.len() as f64 <= counted,
        "lost outside the outages, not counted by a broker: {outside:?} ({counted} counted)"
    );
    assert!(distinct.contains(&(log.len() as i64 - 1)), "the last message never arrived");
    assert!(proxy.stats().accepted >= 3, "the link never came back through the proxy: {:?}", proxy.stats());
    eprintln!("{} published, {} received, {} lost, all during the two outages", log.len(), got.len(), lost.len());
    let _ = std::fs::remove_dir_all(&dir);
}
