//! UDP on a busy machine (issue 45 part 4), with real processes and real stalls (SIGSTOP): a
//! subscriber that does not get a CPU for seconds loses alone, is told of what it lost, and is
//! not let go; a broker that does not get one does not let its live clients go either.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tidings_testkit::{send_signal, wait_until, BrokerProcess, Signal};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// What one `tidings sub --json` printed so far: deliveries of each phase, and the losses its
/// deliveries reported (`missed`).
#[derive(Default)]
struct Seen {
    first: AtomicU64,
    second: AtomicU64,
    missed: AtomicU64,
}

/// A `tidings sub --udp --json` process and a thread counting its lines; killed on drop.
struct Sub {
    child: Child,
    seen: Arc<Seen>,
}

impl Sub {
    fn start(b: &BrokerProcess, ttl: &str) -> Sub {
        let before = b.metric("tidings_subscriptions").unwrap();
        let args = ["sub", "--udp", "--server", &b.udp(), "--udp-ttl", ttl, "stall.>", "--json"];
        let mut child = Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let seen = Arc::new(Seen::default());
        let (out, counts) = (child.stdout.take().unwrap(), seen.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let d: serde_json::Value = serde_json::from_str(&line).unwrap();
                counts.missed.fetch_add(d["missed"].as_u64().unwrap(), Relaxed);
                let phase =
                    if d["payload"].as_str().unwrap().starts_with('b') { &counts.second } else { &counts.first };
                phase.fetch_add(1, Relaxed);
            }
        });
        let what = "the UDP subscriber subscribed";
        wait_until(what, Duration::from_secs(10), || b.metric("tidings_subscriptions").unwrap() > before);
        Sub { child, seen }
    }

    fn signal(&self, signal: Signal) {
        send_signal(self.child.id(), signal).unwrap();
    }

    fn counts(&self) -> (u64, u64, u64) {
        (self.seen.first.load(Relaxed), self.seen.second.load(Relaxed), self.seen.missed.load(Relaxed))
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tidings pub --udp` of `count` messages at `rate`, payload `payload` padded to 200 bytes.
fn publish(b: &BrokerProcess, payload: &str, count: u64, rate: u64) {
    let (count, rate) = (count.to_string(), rate.to_string());
    let args = ["pub", "--udp", "--server", &b.udp(), "stall.x", payload, "--count", &count, "--rate", &rate];
    let child = Command::new(bin())
        .args(args)
        .args(["--size", "200"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tidings_testkit::finish_within(child, Duration::from_secs(60));
    assert!(out.status.success(), "pub failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_stopped_udp_subscriber_loses_alone_is_told_what_it_lost_and_stays_subscribed() {
    let _one = tidings_testkit::one_at_a_time();
    // Keepalives every 10/3 s: a stop of about 4.5 s stays inside the liveness window.
    let b = BrokerProcess::start_configured(bin(), "[udp]\nsession_ttl = \"10s\"\n", &[]).unwrap();
    let subs: Vec<Sub> = (0..3).map(|_| Sub::start(&b, "10s")).collect();
    subs[0].signal(Signal::Stop);
    // 12,000 datagrams' worth while it is stopped: more than its socket buffer holds.
    let (first, second) = (12_000, 200);
    publish(&b, "a", first, 3_000);
    std::thread::sleep(Duration::from_millis(500));
    subs[0].signal(Signal::Cont);
    // It reads what its socket buffer held first: the second batch starts once that backlog is
    // drained (no new first-batch delivery for 300 ms), or a datagram of it could meet a buffer
    // still full from the stop on a loaded machine, a loss of the stop's, not of the live stream.
    let mut drained = subs[0].counts().0;
    wait_until("the stopped subscriber drained its socket buffer", Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(300));
        let now = subs[0].counts().0;
        std::mem::replace(&mut drained, now) == now
    });
    publish(&b, "b", second, 200);
    let total = first + second;
    wait_until("every subscriber accounted for every message", Duration::from_secs(30), || {
        subs.iter().all(|s| {
            let (a, b, missed) = s.counts();
            a + b + missed >= total
        })
    });
    for (i, s) in subs.iter().enumerate().skip(1) {
        assert_eq!(s.counts(), (first, second, 0), "subscriber {i} ran throughout and lost nothing");
    }
    let (a, b2, missed) = subs[0].counts();
    assert!(missed > 0, "the stopped subscriber lost datagrams (received {a} of {first})");
    assert_eq!(a + b2 + missed, total, "every loss was told to it, none twice");
    assert_eq!(b2, second, "after the stop it was served everything");
    assert_eq!(b.metric("tidings_udp_sessions_expired_total").unwrap(), 0.0, "no session was let go");
}

#[test]
fn a_broker_stopped_longer_than_the_ttl_keeps_its_live_udp_clients() {
    let _one = tidings_testkit::one_at_a_time();
    let b = BrokerProcess::start_configured(bin(), "[udp]\nsession_ttl = \"1s\"\n", &[]).unwrap();
    let subs: Vec<Sub> = (0..3).map(|_| Sub::start(&b, "1s")).collect();
    // Their keepalives (every third of a second) wait in the broker's socket meanwhile.
    b.pause().unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    b.resume().unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(b.metric("tidings_udp_sessions_expired_total").unwrap(), 0.0, "a live client was let go");
    publish(&b, "b", 10, 100);
    wait_until("every subscriber got the messages after the stall", Duration::from_secs(10), || {
        subs.iter().all(|s| s.counts().1 == 10)
    });
    // The test can fail: a client that really stops is let go after the TTL.
    subs[0].signal(Signal::Stop);
    wait_until("a client stopped for longer than the TTL is let go", Duration::from_secs(10), || {
        b.metric("tidings_udp_sessions_expired_total").unwrap() >= 1.0
    });
    subs[0].signal(Signal::Cont);
}
