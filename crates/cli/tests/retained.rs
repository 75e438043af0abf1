//! Retained values, end to end: real broker processes on 127.0.0.1, `tidings pub --retain`,
//! `tidings sub --json` and the Rust client.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use patterns_common::{bin, chain, json_lines, retained_values, runtime, start, text, tidings, Running};
use tidings_client::{Client, Delivery, Property, Subscription};
use tidings_testkit::{http_get, BrokerProcess};
use tidings_wire::RETAIN;

/// `tidings sub ARGS`, its JSON lines kept, once its subscription is active at `at`.
fn start_sub(at: &BrokerProcess, args: &[&str]) -> Running {
    start(at, args, true)
}

fn retained_topics(b: &BrokerProcess) -> u64 {
    let state: serde_json::Value = serde_json::from_str(&http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    state["retained"]["topics"].as_u64().unwrap()
}

#[test]
fn a_new_subscriber_gets_the_retained_values_first_then_live_ones() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let server = b.tcp();
    for (topic, value) in [("door.front", "open"), ("door.back", "shut"), ("door.side", "open"), ("door.front", "shut")]
    {
        let out = tidings(&["pub", "--server", &server, topic, value, "--retain"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = tidings(&["pub", "--server", &server, "door.side", "--retain"]); // empty: clears
    assert!(out.status.success(), "{}", text(&out.stderr));
    tidings_testkit::wait_until("2 retained topics", Duration::from_secs(5), || retained_topics(&b) == 2);
    assert_eq!(b.metric("tidings_retained_topics").unwrap(), 2.0);
    let sub = start_sub(&b, &["sub", "--server", &server, "door.>", "--json", "--count", "3"]);
    let out = tidings(&["pub", "--server", &server, "door.back", "opening"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = json_lines(sub);
    assert_eq!(retained_values(&got[..2]), [("door.back".into(), "shut".into()), ("door.front".into(), "shut".into())]);
    assert_eq!(got[2]["payload"], "opening");
    assert!(got[2].get("retained").is_none(), "a live message is not flagged: {}", got[2]);
}

#[test]
fn a_retained_value_over_the_limit_is_refused_and_changes_nothing() {
    let b = BrokerProcess::start_configured(bin(), "[limits]\nmax_retained_bytes = 1000\n", &[]).unwrap();
    let server = b.tcp();
    let out = tidings(&["pub", "--server", &server, "big.a", "small", "--retain"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let refused = || b.metric("tidings_protocol_errors_total{reason=\"limit_exceeded\"}").unwrap();
    let out = tidings(&["pub", "--server", &server, "big.b", "--size", "2000", "--retain"]);
    tidings_testkit::wait_until("2,000 B past a 1,000 B limit is refused", Duration::from_secs(5), || refused() == 1.0);
    // The publisher hears why, unless its connection was reset before it read the ERROR.
    let stderr = text(&out.stderr);
    assert!(out.status.success() || stderr.contains("max_retained_bytes"), "{stderr}");
    assert_eq!(retained_topics(&b), 1);
    // Two lines: the retained value, then a live one (with one, `sub` could be gone before the
    // broker's subscription count was read).
    let sub = start_sub(&b, &["sub", "--server", &server, "big.>", "--json", "--count", "2"]);
    let out = tidings(&["pub", "--server", &server, "big.c", "live"]);
    assert!(out.status.success());
    let got = json_lines(sub);
    let topics: Vec<&str> = got.iter().map(|l| l["topic"].as_str().unwrap()).collect();
    assert_eq!(topics, ["big.a", "big.c"], "the refused value was neither kept nor delivered");
}

fn pair() -> (BrokerProcess, BrokerProcess) {
    let mut brokers = chain(2);
    let b = brokers.pop().unwrap();
    (brokers.pop().unwrap(), b)
}

async fn next(sub: &mut Subscription) -> Delivery {
    tokio::time::timeout(Duration::from_secs(10), sub.recv()).await.expect("a delivery within 10 s").unwrap()
}

fn retain(value: impl ToString) -> (Vec<Property>, Bytes) {
    (vec![Property::new(RETAIN, true)], Bytes::from(value.to_string()))
}

#[test]
fn a_wildcard_subscriber_at_another_broker_gets_each_of_1000_retained_topics_once_then_live() {
    let (a, b) = pair();
    runtime().block_on(async {
        let publisher = Client::connect(a.tcp()).await.unwrap();
        for i in 0..1000 {
            let (props, payload) = retain(i);
            publisher.publish_with(&format!("r.t{i}"), &props, payload).await.unwrap();
        }
        publisher.flush().await.unwrap();
        tidings_testkit::wait_until("b holds the 1,000 values", Duration::from_secs(20), || {
            b.metric("tidings_retained_topics").unwrap() == 1000.0
        });
        let subscriber = Client::connect(b.tcp()).await.unwrap();
        let mut sub = subscriber.subscribe("r.>").await.unwrap();
        let mut seen = BTreeMap::new();
        for _ in 0..1000 {
            let d = next(&mut sub).await;
            assert!(d.retained(), "the retained values come first: {}", d.topic);
            let expected = d.topic.trim_start_matches("r.t").to_string();
            assert_eq!(d.payload, expected, "each topic's own value");
            assert!(seen.insert(d.topic.clone(), ()).is_none(), "{} twice", d.topic);
        }
        assert_eq!(seen.len(), 1000);
        // Live ones once b's interest has reached a: published until one arrives.
        let started = Instant::now();
        let live = loop {
            publisher.publish("r.t7", "live").await.unwrap();
            if let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(100), sub.recv()).await {
                break d;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "no live message reached b");
        };
        assert!(!live.retained() && live.payload == "live", "{live:?}");
        assert!(sub.try_recv().is_none_or(|d| !d.retained()), "no retained value after a live one");
    });
}

#[test]
fn a_subscriber_never_sees_an_older_retained_value_after_a_newer_one_under_a_concurrent_publisher() {
    let (a, b) = pair();
    let (a_tcp, b_tcp) = (a.tcp(), b.tcp());
    runtime().block_on(async {
        let publisher = Client::connect(&a_tcp).await.unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let publishing = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let (props, payload) = retain(n);
                    publisher.publish_with("o.t", &props, payload).await.unwrap();
                    if n.is_multiple_of(50) {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                n
            })
        };
        let mut checked = 0;
        for round in 0..12 {
            let at = if round % 2 == 0 { &a_tcp } else { &b_tcp };
            let client = Client::connect(at).await.unwrap();
            let mut sub = client.subscribe("o.*").await.unwrap();
            let first = next(&mut sub).await;
            let mut last: u64 = std::str::from_utf8(&first.payload).unwrap().parse().unwrap();
            let deadline = Instant::now() + Duration::from_millis(150);
            while Instant::now() < deadline {
                let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await else { continue };
                assert!(!d.retained(), "a retained value after a live one (round {round})");
                let value: u64 = std::str::from_utf8(&d.payload).unwrap().parse().unwrap();
                assert!(value > last, "round {round}: {value} after {last}");
                last = value;
                checked += 1;
            }
            client.close().await.unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let published = publishing.await.unwrap();
        eprintln!("{published} retained publishes; {checked} live deliveries checked in order after the retained one");
        assert!(checked > 100, "the subscribers saw the live stream: {checked}");
    });
}
