//! Request/reply, end to end: real broker processes on 127.0.0.1, the `tidings req` and
//! `tidings reply` commands and the Rust client's `request`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;

use std::time::{Duration, Instant};

use patterns_common::{bin, chain, runtime, start, text, tidings, Running};
use tidings_client::{Client, ClientError};
use tidings_testkit::BrokerProcess;

/// Starts `tidings reply ARGS`, its output discarded, once it has subscribed at `at`.
fn start_responder(at: &BrokerProcess, args: &[&str]) -> Running {
    start(at, args, false)
}

#[test]
fn req_prints_the_reply_of_an_echo_or_exec_responder() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let server = b.tcp();
    let _echo = start_responder(&b, &["reply", "--server", &server, "svc.echo", "--echo"]);
    let out = tidings(&["req", "--server", &server, "svc.echo", "hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\n");

    let out = tidings(&["req", "--server", &server, "svc.echo", "again", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(line["payload"], "again");
    assert!(line["reply_to"].as_str().unwrap().starts_with("_INBOX."), "{line}");
    assert!(line["rtt_us"].as_u64().is_some(), "{line}");

    let out = tidings(&["req", "--server", &server, "svc.echo", "x", "--count", "20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("20 requests: 20 answered, 0 no responders; round trip min "),
        "{}",
        text(&out.stdout)
    );
    let out = tidings(&["req", "--server", &server, "svc.nobody", "x", "--count", "20"]);
    assert!(!out.status.success(), "not every request was answered");
    assert!(text(&out.stdout).starts_with("20 requests: 0 answered, 20 no responders;"), "{}", text(&out.stdout));

    let args = ["reply", "--server", &server, "svc.upper", "--exec", "tr a-z A-Z", "--json", "--count", "1"];
    let upper = start(&b, &args, true);
    let out = tidings(&["req", "--server", &server, "svc.upper", "shout"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "SHOUT\n", "the command's output is the reply (printed with a newline)");
    let upper = upper.finish();
    assert!(upper.status.success(), "reply --count 1 exits after one: {}", text(&upper.stderr));
    let request: serde_json::Value = serde_json::from_str(text(&upper.stdout).trim()).unwrap();
    assert_eq!(request["payload"], "shout");
    assert!(request["reply_to"].as_str().unwrap().starts_with("_INBOX."), "the responder's --json shows reply_to");
}

#[test]
fn no_responders_is_answered_at_once_not_after_the_timeout() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let server = b.tcp();
    let started = Instant::now();
    let out = tidings(&["req", "--server", &server, "nobody.home", "x", "--timeout", "10s"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no responders for nobody.home"), "{}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(5), "not after the 10 s timeout: {:?}", started.elapsed());
    let times = runtime().block_on(async {
        let client = Client::connect(&server).await.unwrap();
        client.request("warm.up", "x", Duration::from_secs(5)).await.unwrap_err(); // sets the inbox up
        let mut times = Vec::new();
        for _ in 0..50 {
            let started = Instant::now();
            let error = client.request("nobody.home", "x", Duration::from_secs(10)).await.unwrap_err();
            times.push(started.elapsed());
            assert!(matches!(error, ClientError::NoResponders { ref subject } if subject == "nobody.home"), "{error}");
        }
        times.sort();
        times
    });
    eprintln!("no responders in: p50 {:?}, max {:?} (debug build, one broker)", times[25], times[49]);
    assert!(times[49] < Duration::from_millis(100), "every no-responders answer under 100 ms: {times:?}");
    assert!(b.metric("tidings_no_responders_total").unwrap() >= 52.0);
    assert!(b.metric("tidings_requests_total").unwrap() >= 52.0);
}

#[test]
fn ten_thousand_concurrent_requests_from_one_client_are_all_answered() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let server = b.tcp();
    let _echo = start_responder(&b, &["reply", "--server", &server, "svc.echo", "--echo"]);
    let (answered, failed) = runtime().block_on(async {
        let client = Client::connect(&server).await.unwrap();
        let requests = (0..10_000u32).map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let reply = client.request("svc.echo", i.to_string(), Duration::from_secs(60)).await?;
                assert_eq!(reply.payload, i.to_string(), "each request gets its own answer");
                Ok::<(), ClientError>(())
            })
        });
        let mut answered = 0;
        let mut failed = Vec::new();
        for outcome in futures::future::join_all(requests).await {
            match outcome.unwrap() {
                Ok(()) => answered += 1,
                Err(e) => failed.push(e.to_string()),
            }
        }
        (answered, failed)
    });
    for name in ["tidings_messages_in_total", "tidings_messages_out_total", "tidings_slow_consumer_drops_total"] {
        eprintln!("{name} {}", b.metric(name).unwrap());
    }
    assert_eq!(answered, 10_000, "{} failed, the first: {:?}", failed.len(), failed.first());
}

#[test]
fn a_bad_reply_subject_is_refused_and_nothing_is_delivered() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let server = b.tcp();
    let sub = start(&b, &["sub", "--server", &server, "svc.x", "--count", "1", "--json"], true);
    let refused = || b.metric("tidings_protocol_errors_total{reason=\"invalid_topic\"}").unwrap();
    let mut told = 0;
    for bad in ["a.*", "a.>", "a..b", ""] {
        let before = refused();
        let prop = format!("$reply_to={bad}");
        let out = tidings(&["pub", "--server", &server, "svc.x", "bad", "-p", &prop]);
        tidings_testkit::wait_until("the broker refuses it", Duration::from_secs(5), || refused() == before + 1.0);
        // The publisher hears why, unless its connection was reset before it read the ERROR
        // (the broker closes the session after it); then `pub` cannot tell.
        if !out.status.success() {
            let stderr = text(&out.stderr);
            assert!(stderr.contains("invalid_topic") && stderr.contains("reply subject"), "{bad:?}: {stderr}");
            told += 1;
        }
    }
    assert!(told >= 2, "the publisher was told why only {told} times of 4");
    let out = tidings(&["pub", "--server", &server, "svc.x", "good"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sub = sub.finish();
    assert!(sub.status.success(), "the subscriber is unharmed: {}", text(&sub.stderr));
    let line: serde_json::Value = serde_json::from_str(text(&sub.stdout).trim()).unwrap();
    assert_eq!(line["payload"], "good", "none of the refused requests was delivered");
    assert_eq!(b.metric("tidings_requests_total").unwrap(), 0.0, "a refused request is not counted as one");
}

#[test]
fn requests_are_answered_across_three_brokers_and_no_responders_too() {
    let brokers = chain(3);
    let (a, c) = (&brokers[0], &brokers[2]);
    let _echo = start_responder(c, &["reply", "--server", &c.tcp(), "svc.far", "--echo"]);
    let server = a.tcp();
    runtime().block_on(async {
        let client = Client::connect(&server).await.unwrap();
        // The responder's interest reaches a through b's summary: until then, no responders.
        let started = Instant::now();
        while let Err(e) = client.request("svc.far", "first", Duration::from_secs(5)).await {
            assert!(started.elapsed() < Duration::from_secs(10), "no answer through the chain: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("the responder's interest reached a within {:?}", started.elapsed());
        let mut round_trips = Vec::new();
        for i in 0..200 {
            let started = Instant::now();
            let reply = client.request("svc.far", format!("r{i}"), Duration::from_secs(5)).await.unwrap();
            round_trips.push(started.elapsed());
            assert_eq!(reply.payload, format!("r{i}"));
        }
        round_trips.sort();
        eprintln!("3-broker round trip: p50 {:?}, p99 {:?} (debug build)", round_trips[100], round_trips[198]);
        let mut times = Vec::new();
        for _ in 0..50 {
            let started = Instant::now();
            let error = client.request("svc.nowhere", "x", Duration::from_secs(10)).await.unwrap_err();
            times.push(started.elapsed());
            assert!(matches!(error, ClientError::NoResponders { .. }), "{error}");
        }
        times.sort();
        eprintln!("no responders on the chain: p50 {:?}, max {:?} (debug build)", times[25], times[49]);
        assert!(times[49] < Duration::from_millis(100), "{times:?}");
    });
    let out = tidings(&["req", "--server", &server, "svc.far", "by the cli"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "by the cli\n");
}
