//! Messages built to be costly to match, against the real broker: matching one of them does
//! not stop other sessions' matching (it held one lock across every session: 30 LIKE
//! selectors and one 65 KB property froze the whole broker for 6 s), and a publisher whose
//! message takes longer than `[limits] max_match_time` to match is cut with a reason.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_testkit::{BrokerProcess, Neighbour, RawConnection};
use tidings_wire::{DeliveryMode, Frame, Message, Ping, Property, ReasonCode, SubId, Subscribe};

const SECOND: Duration = Duration::from_secs(1);

/// The longest property value a message may carry.
const LONGEST: usize = 65_535;

fn broker_with(limits: &str) -> (BrokerProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.toml");
    std::fs::write(&path, format!("[limits]\n{limits}\n")).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_tidings"));
    (BrokerProcess::start(bin, &["--config", path.to_str().unwrap()]).unwrap(), dir)
}

fn subscribe(c: &mut RawConnection, id: u32, pattern: &str, selector: Option<String>) {
    let frame = Frame::Subscribe(Subscribe {
        queue_key: None,
        id: SubId(id),
        mode: DeliveryMode::BestEffort,
        pattern: pattern.into(),
        selector,
        durable: None,
        group: None,
    });
    c.send(&frame).unwrap();
}

/// PING and wait for its PONG (every earlier frame was handled), skipping deliveries.
fn sync(c: &mut RawConnection, nonce: u64, timeout: Duration) {
    c.send(&Frame::Ping(Ping { nonce })).unwrap();
    loop {
        match c.expect(timeout).unwrap() {
            Frame::Pong(p) if p.nonce == nonce => return,
            Frame::Deliver(_) => continue,
            other => panic!("expected PONG {nonce}, got {other:?}"),
        }
    }
}

/// Adds LIKE selectors `from..to` on `heavy.>`, each different (equal predicates are
/// evaluated once per message) and none matching the costly text: each scans all of it.
fn add_selectors(c: &mut RawConnection, from: u32, to: u32) {
    for i in from..to {
        subscribe(c, i + 1, "heavy.>", Some(format!("s LIKE '%zq{i}%'")));
    }
    sync(c, u64::from(to), 30 * SECOND);
}

fn costly() -> Frame {
    let props = [Property::new("s", "a".repeat(LONGEST).as_str())];
    Frame::Publish(Message::new("heavy.t", &props, Bytes::new(), 1).unwrap())
}

/// Adds selectors until one costly message takes at least `at_least` to match (a faster
/// machine, or a release build, needs more); returns that time.
fn load_until(selectors: &mut RawConnection, attacker: &mut RawConnection, at_least: Duration) -> Duration {
    let (mut count, mut one) = (0, Duration::ZERO);
    while one < at_least && count < 40_000 {
        let more = if count == 0 { 500 } else { count };
        add_selectors(selectors, count, count + more);
        count += more;
        one = time_matching(attacker, &[costly()]);
    }
    assert!(one >= at_least, "{count} selectors matched in {one:?}: the test cannot load the broker");
    one
}

/// How long the broker takes to match `frames` (sent back to back, then a PING).
fn time_matching(c: &mut RawConnection, frames: &[Frame]) -> Duration {
    let started = Instant::now();
    for frame in frames {
        c.send(frame).unwrap();
    }
    sync(c, 7, 60 * SECOND);
    started.elapsed()
}

#[test]
fn a_costly_message_does_not_stop_other_sessions_matching() {
    let (b, _dir) = broker_with("max_match_time = \"0s\"");
    let mut selectors = RawConnection::handshake(&b.tcp()).unwrap();
    let mut attacker = RawConnection::handshake(&b.tcp()).unwrap();
    // Each costly message takes at least 300 ms to match; enough of them keep matching busy
    // for 2 s.
    let one = load_until(&mut selectors, &mut attacker, Duration::from_millis(300));
    let count = (2 * SECOND).as_millis().div_ceil(one.as_millis()).max(2) as usize;
    let burst: Vec<Frame> = (0..count).map(|_| costly()).collect();

    // A well-behaved client beside it, publishing and receiving on a topic of its own.
    let neighbour = Neighbour::start(&b.tcp()).unwrap();
    let attacker = std::thread::spawn(move || time_matching(&mut attacker, &burst));
    let busy = attacker.join().unwrap();
    let report = neighbour.stop();
    eprintln!("{count} costly messages of {one:?} each matched in {busy:?}; neighbour: {report}");
    assert!(report.rounds >= 10 && report.lost == 0, "the neighbour while matching was busy for {busy:?}: {report}");
    // With one lock over all matching, its publish waited for the costly match in progress.
    assert!(
        report.max < one / 2,
        "a neighbour's round trip took {:?} while each costly message took {one:?}",
        report.max
    );
}

#[test]
fn a_publisher_whose_message_takes_too_long_to_match_is_cut_with_a_reason() {
    let (b, _dir) = broker_with("max_match_time = \"150ms\"");
    let mut selectors = RawConnection::handshake(&b.tcp()).unwrap();
    let mut attacker = RawConnection::handshake(&b.tcp()).unwrap();
    // Under the bound: served.
    add_selectors(&mut selectors, 0, 10);
    assert!(time_matching(&mut attacker, &[costly()]) < Duration::from_millis(150));
    add_selectors(&mut selectors, 10, 40_000);
    attacker.send(&costly()).unwrap();
    match attacker.expect(60 * SECOND) {
        Ok(Frame::Error(n)) => {
            assert_eq!(n.reason(), Some(ReasonCode::LimitExceeded), "{n}");
            assert!(n.to_string().contains("max_match_time"), "{n}");
        }
        other => panic!("expected ERROR limit_exceeded, got {other:?}"),
    }
    assert!(attacker.expect_closed(5 * SECOND), "the connection closes after the ERROR");
    // Cheap messages are never cut, and the broker goes on serving.
    let mut fine = RawConnection::handshake(&b.tcp()).unwrap();
    for _ in 0..100 {
        fine.send(&Frame::Publish(Message::new("heavy.t", &[], Bytes::new(), 1).unwrap())).unwrap();
    }
    sync(&mut fine, 3, 10 * SECOND);
}
