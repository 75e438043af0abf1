//! Guaranteed delivery through real broker processes and the `tidings` command: what
//! `pub --guaranteed --json` acknowledges reaches every matching `sub --guaranteed` exactly once,
//! in tick order; retries are deduplicated; a SIGKILLed broker keeps every acknowledged publish.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gd_common::{assert_exactly_once_in_order, bin, id, publish, spawn, start_on};
use serde_json::Value;
use tidings_testkit::{BrokerProcess, RawConnection, Signal};
use tidings_wire::{Frame, GuaranteedPublish, Message, PublisherId, SubId, Subscribe};

/// Waits at most 30 s for a command, killing it past that.
fn wait(child: Child) -> Output {
    tidings_testkit::finish_within(child, Duration::from_secs(30))
}

/// The JSON lines of a command that must succeed.
fn json_lines(child: Child) -> Vec<Value> {
    let out = wait(child);
    assert!(out.status.success(), "command failed: {}", String::from_utf8_lossy(&out.stderr));
    BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect()
}

/// Starts `sub --guaranteed --json` and returns once the broker holds one more guaranteed
/// subscription (the driver sent SUBSCRIBED in the same step).
fn start_sub(b: &BrokerProcess, extra: &[&str]) -> Child {
    let before = b.metric("tidings_gd_subends").unwrap();
    let server = b.tcp();
    let mut args = vec!["sub", "--server", server.as_str(), "--guaranteed", "--json"];
    args.extend_from_slice(extra);
    let child = spawn(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.metric("tidings_gd_subends").unwrap() <= before {
        assert!(Instant::now() < deadline, "the guaranteed subscription was not confirmed");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn publishes_from_two_publishers_reach_two_subscribers_exactly_once_in_tick_order() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let all = start_sub(&b, &["g.>", "--count", "120"]);
    let half = start_sub(&b, &["g.>", "--where", "seq <= 30", "--count", "60"]);
    let p1 = publish(&b.tcp(), "g.one", 60, &["--window", "8"]);
    let p2 = publish(&b.tcp(), "g.two", 60, &[]);
    let mut acked = json_lines(p1);
    acked.extend(json_lines(p2));
    assert_eq!(acked.len(), 120, "every publish is acknowledged");
    let all = json_lines(all);
    assert_exactly_once_in_order(&all, &acked.iter().collect::<Vec<_>>());
    let half = json_lines(half);
    let matching: Vec<&Value> = acked.iter().filter(|a| a["seq"].as_u64().unwrap() <= 30).collect();
    assert_exactly_once_in_order(&half, &matching);
    assert!(b.metric("tidings_gd_publishes_acked_total").unwrap() >= 120.0);
    assert_eq!(
        b.metric("tidings_gd_publishes_acked_synced_total").unwrap(),
        b.metric("tidings_gd_publishes_acked_total").unwrap(),
        "every acknowledgement was sent after the log's sync covered its tick"
    );
    assert!(b.metric("tidings_gd_fsyncs_total").unwrap() >= 1.0);
    assert!(b.metric("tidings_gd_fsync_seconds_count").unwrap() >= 1.0, "syncs are timed");
    assert_eq!(b.metric("tidings_gd_corrupt_records_total").unwrap(), 0.0, "a healthy log reports no damage");
    assert_eq!(b.metric("tidings_gd_corrupt_at_open_total").unwrap(), 0.0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.metric("tidings_gd_subends").unwrap() > 0.0 {
        assert!(Instant::now() < deadline, "the subscribers left but their subends stayed attached");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `pub --guaranteed --json --rate R` stamps `acked_us` when an acknowledgement comes, not
/// when the next publish goes: at 2 msg/s the two acknowledgements are about 500 ms apart.
/// Stamped at the next send (as before), the first was stamped with the second's send and the
/// second at once: a few ms apart, and a takeover measured from them looked instant.
#[test]
fn acknowledgements_are_stamped_as_they_come_between_paced_publishes() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let acked = json_lines(publish(&b.tcp(), "paced.a", 2, &["--rate", "2"]));
    let at: Vec<u64> = acked.iter().map(|a| a["acked_us"].as_u64().unwrap()).collect();
    let apart = at[1] - at[0];
    assert!(apart > 300_000, "the acknowledgements were stamped {apart} µs apart, not about 500 ms");
}

fn gpublish(conn: &mut RawConnection, publisher: u64, seq: u64, topic: &str) -> u64 {
    let message = Message::new(topic, &[], Bytes::from_static(b"r"), 0).unwrap();
    let publish =
        GuaranteedPublish { publisher: PublisherId(publisher), seq, pubend: String::new(), home: None, message };
    conn.send(&Frame::GuaranteedPublish(publish)).unwrap();
    loop {
        match conn.expect(Duration::from_secs(10)).unwrap() {
            Frame::PublishAck(ack) if ack.publisher == PublisherId(publisher) && ack.seq == seq => return ack.tick.0,
            Frame::PublishAck(_) => {}
            other => panic!("expected PUBLISH_ACK, got {other:?}"),
        }
    }
}

#[test]
fn a_retry_after_a_lost_ack_gets_the_same_tick_and_is_delivered_once() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let sub = start_sub(&b, &["r.>", "--count", "2"]);
    let mut first = RawConnection::handshake(&b.tcp()).unwrap();
    let tick = gpublish(&mut first, 77, 1, "r.a");
    assert_eq!(gpublish(&mut first, 77, 1, "r.a"), tick, "a retry on the same connection");
    drop(first);
    let mut second = RawConnection::handshake(&b.tcp()).unwrap();
    assert_eq!(gpublish(&mut second, 77, 1, "r.a"), tick, "a retry on a new connection");
    let next = gpublish(&mut second, 77, 2, "r.b");
    assert!(next > tick);
    let lines = json_lines(sub);
    let topics: Vec<&str> = lines.iter().map(|l| l["topic"].as_str().unwrap()).collect();
    assert_eq!(topics, ["r.a", "r.b"], "the retried publish was delivered once");
    assert_eq!(lines[0]["tick"].as_u64(), Some(tick));
    assert!(b.metric("tidings_gd_duplicate_publishes_total").unwrap() >= 2.0);
}

/// Every unreleased record of every pubend in a stopped broker's log: tick -> (publisher hex,
/// seq); and, per publisher, the release point of the pubend holding its records (released
/// records are gone from the log).
fn logged(data: &Path) -> (BTreeMap<u64, (String, u64)>, BTreeMap<String, u64>) {
    let sink = |_: Vec<tidings_store::Completion>| {};
    let dir = data.join("pubends");
    let (store, recovered) = tidings_store::Store::open(&dir, tidings_store::Options::default(), sink).unwrap();
    let mut out = BTreeMap::new();
    let mut released = BTreeMap::new();
    for (pubend, log) in &recovered.pubends {
        for publisher in log.publishers.keys() {
            released.insert(format!("{}", PublisherId(publisher.0)), log.released.0);
        }
        let range = tidings_store::TickRange { first: tidings_store::Tick(1), last: log.highest };
        for item in store.read(*pubend, range, usize::MAX).unwrap() {
            if let tidings_store::ReadItem::Data(record) = item {
                let publisher = format!("{}", PublisherId(record.publisher.0));
                assert!(out.insert(record.tick.0, (publisher, record.seq.0)).is_none());
            }
        }
    }
    (out, released)
}

/// A guaranteed subscriber that never reads, and a flood on another pubend until its queue is
/// full: its subend stops, and the log keeps everything published after it (nothing is
/// released while a subscriber still needs it).
fn pin_the_log(b: &BrokerProcess) -> RawConnection {
    let mut raw = RawConnection::handshake(&b.tcp()).unwrap();
    let mode = tidings_wire::DeliveryMode::Guaranteed;
    raw.send(&Frame::Subscribe(Subscribe {
        queue_key: None,
        id: SubId(1),
        mode,
        pattern: "k.>".into(),
        selector: None,
        durable: None,
        group: None,
    }))
    .unwrap();
    assert!(matches!(raw.expect(Duration::from_secs(5)).unwrap(), Frame::Subscribed(_)));
    let fill = publish(&b.tcp(), "k.fill", 300, &["--pubend", "fill", "--size", "65536"]);
    assert_eq!(json_lines(fill).len(), 300);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.metric("tidings_gd_outbox_full_total").unwrap() < 1.0 {
        assert!(Instant::now() < deadline, "the silent subscriber's queue never filled");
        std::thread::sleep(Duration::from_millis(20));
    }
    raw
}

#[test]
fn a_broker_killed_while_a_publisher_retries_keeps_every_acknowledged_publish_once() {
    let scratch = tempfile::tempdir().unwrap();
    let data = scratch.path().join("data");
    let config = scratch.path().join("broker.toml");
    std::fs::write(&config, "[slow_consumer]\nmax_messages = 16\n").unwrap();
    let mut b = start_on(&data, "127.0.0.1:0", &config);
    let listen = b.tcp();
    let _pin = pin_the_log(&b);
    let publisher = publish(&listen, "k.t", 400, &["--rate", "200", "--window", "16"]);
    std::thread::sleep(Duration::from_millis(700));
    b.kill();
    let (first_life, first_release) = logged(&data);
    let mut b = start_on(&data, &listen, &config);
    let acked = json_lines(publisher);
    assert_eq!(acked.len(), 400, "the publisher got every acknowledgement, across the crash");
    b.kill();
    let ours = |key: &(String, u64)| key.0 == acked[0]["publisher"].as_str().unwrap();
    let before: BTreeMap<(String, u64), u64> =
        first_life.iter().filter(|(_, key)| ours(key)).map(|(tick, key)| (key.clone(), *tick)).collect();
    assert!(!before.is_empty(), "the crash came after some publishes were logged");
    let last_before = before.values().max().copied().unwrap_or(0);
    let released = first_release.get(acked[0]["publisher"].as_str().unwrap()).copied().unwrap_or(0);
    for ack in &acked {
        let tick = ack["tick"].as_u64().unwrap();
        match before.get(&id(ack)) {
            Some(logged) => assert_eq!(*logged, tick, "a retry of a publish logged before the crash got a new tick"),
            // A record the pin's subend took before its queue filled is released, and gone.
            None if tick <= released => {}
            None => assert!(
                tick > last_before,
                "acknowledged {ack} is missing from the log of before the crash (released up to {released})"
            ),
        }
    }
    let ticks: Vec<u64> = acked.iter().map(|a| a["tick"].as_u64().unwrap()).collect();
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "ticks follow the publisher's sequence, none reused");
    let (after, _) = logged(&data);
    let mut seen = BTreeMap::new();
    for (tick, key) in after.iter().filter(|(_, key)| ours(key)) {
        assert!(seen.insert(key.clone(), *tick).is_none(), "{key:?} is logged twice");
    }
    // (No subscriber pins the second life's log: what it released is gone, as it should be.)
    for (key, tick) in &seen {
        let ack = acked.iter().find(|a| &id(a) == key).expect("a logged publish was acknowledged");
        assert_eq!(ack["tick"].as_u64(), Some(*tick));
    }
}

#[test]
fn a_flood_past_a_stalled_subscribers_queue_drops_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("broker.toml");
    std::fs::write(&config, "[slow_consumer]\nmax_messages = 16\n").unwrap();
    let b = BrokerProcess::start(bin(), &["--config", config.to_str().unwrap()]).unwrap();
    let sub = start_sub(&b, &["f.>", "--count", "5000"]);
    tidings_testkit::send_signal(sub.id(), Signal::Stop).unwrap();
    let acked = json_lines(publish(&b.tcp(), "f.x", 5000, &["--size", "500"]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.metric("tidings_gd_outbox_full_total").unwrap() < 1.0 {
        assert!(Instant::now() < deadline, "the stalled subscriber's queue never filled");
        std::thread::sleep(Duration::from_millis(20));
    }
    tidings_testkit::send_signal(sub.id(), Signal::Cont).unwrap();
    let got = json_lines(sub);
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}

#[test]
fn a_guaranteed_subscription_with_a_bad_selector_is_refused() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let mut raw = RawConnection::handshake(&b.tcp()).unwrap();
    let subscribe = Subscribe {
        queue_key: None,
        id: SubId(1),
        mode: tidings_wire::DeliveryMode::Guaranteed,
        pattern: "a.>".into(),
        selector: Some("x >".into()),
        durable: None,
        group: None,
    };
    raw.send(&Frame::Subscribe(subscribe)).unwrap();
    assert!(matches!(raw.expect(Duration::from_secs(5)).unwrap(), Frame::Error(_)), "a bad selector is refused");
}

/// The durable subscriber `d` on `h.>`, until it has `count` messages.
fn durable_h(b: &BrokerProcess, count: &str) -> Child {
    let server = b.tcp();
    spawn(&["sub", "--server", &server, "--durable", "d", "h.>", "--json", "--count", count])
}

/// A publisher whose PUBLISH_ACK a crash lost retries; by then every subscriber had the message,
/// so its record was released. The retry must still be taken for one (T4): the released
/// record's publisher and sequence outlive it in the log, and the durable subscriber is not
/// handed the message a second time.
#[test]
fn a_retry_of_a_publish_released_before_a_broker_kill_is_not_delivered_again() {
    let scratch = tempfile::tempdir().unwrap();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    std::fs::write(&config, "").unwrap();
    let mut b = start_on(&data, "127.0.0.1:0", &config);
    let listen = b.tcp();
    let first = durable_h(&b, "1");
    tidings_testkit::wait_until("the durable subscription is confirmed", Duration::from_secs(10), || {
        b.metric("tidings_gd_subscriptions_confirmed_total").unwrap() >= 1.0
    });
    let mut conn = RawConnection::handshake(&listen).unwrap();
    let tick = gpublish(&mut conn, 91, 1, "h.a");
    let got = json_lines(first);
    assert_eq!(got[0]["topic"].as_str(), Some("h.a"));
    // Released once the durable's acknowledgement is in; then give the writer time to log it.
    let admin = b.ready.admin.unwrap();
    // (`/state` refreshes the lag gauges.)
    tidings_testkit::wait_until("the delivered message is released", Duration::from_secs(10), || {
        tidings_testkit::http_get(admin, "/state").is_ok()
            && tidings_testkit::metric_total(&b.metrics().unwrap(), "tidings_gd_release_lag_ms") == 0.0
    });
    std::thread::sleep(Duration::from_millis(1000));
    b.kill();
    drop(conn);
    let publisher = format!("{}", PublisherId(91));
    let (records, released) = logged(&data);
    assert!(
        released.get(&publisher).is_some_and(|r| *r >= tick),
        "the setup: the record at {tick} is released ({released:?})"
    );
    assert!(records.values().all(|(p, _)| *p != publisher), "the setup: the released record is gone");
    let b = start_on(&data, &listen, &config);
    let second = durable_h(&b, "1");
    let mut conn = RawConnection::handshake(&listen).unwrap();
    let retried = gpublish(&mut conn, 91, 1, "h.a");
    assert!(retried == tick || retried == 0, "the retry was logged again at tick {retried} (first {tick})");
    let next = gpublish(&mut conn, 91, 2, "h.b");
    assert!(next > tick);
    let got = json_lines(second);
    assert_eq!(got[0]["topic"].as_str(), Some("h.b"), "the durable subscriber got the released message again");
    assert!(b.metric("tidings_gd_duplicate_publishes_total").unwrap() >= 1.0);
}
