//! The MQTT listener with clients nobody here wrote: Debian's `mosquitto_pub` and
//! `mosquitto_sub` (3.1.1 and 5.0) against a `tidings broker` process with `[mqtt] listen`, and
//! MQTT to native and back through the same broker core. Skipped, saying so, where the
//! mosquitto clients are not installed (`apt-get install mosquitto-clients`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;

use std::io::{Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use patterns_common::{bin, mosquitto_present, start, text, tidings};
use tidings_testkit::BrokerProcess;

/// A broker with its MQTT listener on an OS-chosen port.
/// The QoS 0 flood needs its subscriber scheduled: a `mosquitto_sub` left without a CPU for
/// 50 ms is, by design, a subscriber that stopped (`NO_PROGRESS`) and loses what overflows. It
/// failed about one run in two beside this binary's other tests on two loaded cores, and never
/// alone, so it runs alone; every other test here shares the lock.
static CORES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The flood test's hold: no other test of this binary runs meanwhile.
fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    CORES.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every other test's hold: they run beside each other, not beside the flood.
fn beside() -> std::sync::RwLockReadGuard<'static, ()> {
    CORES.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn broker() -> (BrokerProcess, String) {
    broker_with("")
}

/// A broker with its MQTT listener on an OS-chosen port and `extra` in its config.
fn broker_with(extra: &str) -> (BrokerProcess, String) {
    let config = format!("[mqtt]\nlisten = \"127.0.0.1:0\"\n{extra}");
    let b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    let port = b.ready.mqtt.expect("the ready line names the MQTT listener").port().to_string();
    (b, port)
}

/// A killed-on-drop child process.
struct Client(Option<Child>);

impl Client {
    fn finish(mut self) -> Output {
        tidings_testkit::finish_within(self.0.take().unwrap(), Duration::from_secs(20))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `mosquitto_sub ARGS` and returns once its subscriptions (`filters` many tidings
/// subscriptions) are active at `b`.
fn mosquitto_sub(b: &BrokerProcess, port: &str, args: &[&str], subscriptions: f64) -> Client {
    let before = b.metric("tidings_subscriptions").unwrap();
    let child = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", port, "-W", "20"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Client(Some(child));
    tidings_testkit::wait_until("mosquitto_sub subscribes", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() >= before + subscriptions
    });
    client
}

fn mosquitto_pub(port: &str, args: &[&str]) -> Output {
    patterns_common::mosquitto("mosquitto_pub", port, args)
}

#[test]
fn mosquitto_clients_talk_through_tidings_in_both_versions() {
    let _cores = beside();
    if !mosquitto_present() {
        return;
    }
    let (b, port) = broker();
    let idle = b.metric("tidings_subscriptions").unwrap();
    for version in ["mqttv311", "mqttv5"] {
        // The last client's subscriptions go when the broker sees it leave, which may be after
        // its process exited: counted from a stale total, the next ones would never be seen.
        tidings_testkit::wait_until("the last client's subscriptions are gone", Duration::from_secs(10), || {
            b.metric("tidings_subscriptions").unwrap() == idle
        });
        // `#` below `plant` maps to two tidings patterns (`plant` and `plant.>`).
        let sub = mosquitto_sub(&b, &port, &["-V", version, "-t", "plant/#", "-t", "x/+/z", "-v", "-C", "3"], 3.0);
        for (topic, payload) in [("plant", "parent"), ("plant/line 3/temp.c", "21.5"), ("x//z", "empty level")] {
            let out = mosquitto_pub(&port, &["-V", version, "-t", topic, "-m", payload]);
            assert!(out.status.success(), "{version} {topic}: {}", text(&out.stderr));
        }
        let out = sub.finish();
        assert!(out.status.success(), "{version}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "plant parent\nplant/line 3/temp.c 21.5\nx//z empty level\n", "{version}");
    }
}

#[test]
fn an_mqtt_publisher_reaches_a_native_subscriber_and_the_other_way_round() {
    let _cores = beside();
    if !mosquitto_present() {
        return;
    }
    let (b, port) = broker();
    let server = b.tcp();
    let native = start(&b, &["sub", "--server", &server, "sensors.*.temp", "--json", "--count", "1"], true);
    let out = mosquitto_pub(&port, &["-t", "sensors/kitchen/temp", "-m", "19.5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = native.finish();
    let line: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!((line["topic"].as_str(), line["payload"].as_str()), (Some("sensors.kitchen.temp"), Some("19.5")));

    let sub = mosquitto_sub(&b, &port, &["-V", "mqttv5", "-t", "plant/+/temp", "-v", "-C", "1"], 1.0);
    let out = tidings(&["pub", "--server", &server, "plant.line3.temp", "42"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&sub.finish().stdout), "plant/line3/temp 42\n");
}

#[test]
fn retained_values_reach_later_mqtt_subscribers_with_the_retain_flag() {
    let _cores = beside();
    if !mosquitto_present() {
        return;
    }
    let (b, port) = broker();
    let out = mosquitto_pub(&port, &["-t", "door/front", "-m", "open", "-r"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    tidings_testkit::wait_until("the value is retained", Duration::from_secs(5), || {
        b.metric("tidings_retained_topics").unwrap() == 1.0
    });
    // `-R` leaves out messages with the retain flag: the retained value must carry it. (No
    // wait for the subscriptions: a retained value comes whenever they start, and a client
    // with `-C 1` may be gone again before the metric is read.)
    let flagged = mosquitto_sub(&b, &port, &["-t", "door/#", "-v", "-C", "1", "-W", "2", "-R"], 0.0);
    let plain = mosquitto_sub(&b, &port, &["-t", "door/#", "-v", "-C", "1"], 0.0);
    assert_eq!(text(&plain.finish().stdout), "door/front open\n");
    assert_eq!(text(&flagged.finish().stdout), "", "the retained value is flagged as retained");
}

#[test]
fn wildcards_at_the_first_level_leave_out_dollar_topics() {
    let _cores = beside();
    if !mosquitto_present() {
        return;
    }
    let (b, port) = broker();
    let all = mosquitto_sub(&b, &port, &["-t", "#", "-v", "-C", "1"], 1.0);
    let dollar = mosquitto_sub(&b, &port, &["-t", "$app/#", "-v", "-C", "1"], 2.0);
    assert!(mosquitto_pub(&port, &["-t", "$app/state", "-m", "hidden"]).status.success());
    assert!(mosquitto_pub(&port, &["-t", "app/state", "-m", "seen"]).status.success());
    assert_eq!(text(&dollar.finish().stdout), "$app/state hidden\n");
    assert_eq!(text(&all.finish().stdout), "app/state seen\n", "`#` does not match a `$` topic");
}

#[test]
fn mosquitto_qos_1_and_2_publishes_are_guaranteed_publishes_and_reach_every_kind_of_subscriber() {
    let _cores = beside();
    if !mosquitto_present() {
        return;
    }
    let (b, port) = broker();
    let server = b.tcp();
    // A guaranteed subscription is not counted in `tidings_subscriptions`: wait for its SUBSCRIBED.
    let confirmed = b.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0);
    let native = Command::new(bin())
        .args(["sub", "--server", &server, "--guaranteed", "g.>", "--json", "--count", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let native = Client(Some(native));
    tidings_testkit::wait_until("the native subscription is confirmed", Duration::from_secs(10), || {
        b.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) > confirmed
    });
    let mut subs = Vec::new();
    for (version, qos) in [("mqttv311", "2"), ("mqttv5", "1")] {
        subs.push(mosquitto_sub(&b, &port, &["-V", version, "-q", qos, "-t", "g/#", "-v", "-C", "4"], 2.0));
    }
    // Their QoS 1 and 2 subscriptions are guaranteed ones: a publish before each is confirmed
    // (its stream's start fixed) is before its start (under load, 2 runs in 8 missed one).
    tidings_testkit::wait_until("the MQTT subscriptions are confirmed", Duration::from_secs(10), || {
        b.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= confirmed + 3.0
    });
    let logged = b.metric("tidings_gd_publishes_acked_total").unwrap_or(0.0);
    for (version, qos) in [("mqttv311", "1"), ("mqttv311", "2"), ("mqttv5", "1"), ("mqttv5", "2")] {
        // mosquitto_pub exits 0 only once PUBACK (QoS 1) or PUBCOMP (QoS 2) came.
        let out = mosquitto_pub(&port, &["-V", version, "-q", qos, "-t", &format!("g/{version}"), "-m", qos]);
        assert!(out.status.success(), "{version} QoS {qos}: {}", text(&out.stderr));
    }
    assert_eq!(b.metric("tidings_gd_publishes_acked_total").unwrap(), logged + 4.0, "each was a logged publish");
    // In order per topic, which is what MQTT promises (MQTT-4.6.0-6): across the two topics a
    // QoS 2 subscriber's library hands a message over at PUBREL, so a QoS 2 message of one topic
    // may print after the next topic's QoS 1 one (seen once under load).
    let expected = "g/mqttv311 1\ng/mqttv311 2\ng/mqttv5 1\ng/mqttv5 2\n";
    for sub in subs {
        let out = sub.finish();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let got = text(&out.stdout);
        let mut by_topic: Vec<&str> = got.lines().collect();
        by_topic.sort_by_key(|line| line.split(' ').next().unwrap_or_default().to_string());
        assert_eq!(by_topic.iter().map(|line| format!("{line}\n")).collect::<String>(), expected, "{got}");
    }
    let out = native.finish();
    let topics: Vec<String> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["topic"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(topics, ["g.mqttv311", "g.mqttv311", "g.mqttv5", "g.mqttv5"], "a native guaranteed subscriber");
    assert!(mosquitto_pub(&port, &["-V", "mqttv5", "-t", "a", "-m", "still serving"]).status.success());
}

/// Connects as MQTT 3.1.1 over a raw socket and writes `count` QoS 0 PUBLISHes on `topic` as
/// fast as the broker takes them (each payload the message's number, zero-padded to 100
/// bytes), 64 KiB per write, then DISCONNECT; returns how long the writes took. A raw socket,
/// not a client library: nothing but TCP's window may pace it.
fn flood(port: &str, topic: &str, count: usize) -> Duration {
    use tidings_wire::mqtt::{Connect, Packet, Properties, ProtocolVersion, Publish};
    let v311 = ProtocolVersion::V311;
    let mut socket = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    let connect = Connect {
        version: v311,
        clean_start: true,
        keep_alive: 60,
        properties: Properties::default(),
        client_id: "flood".into(),
        will: None,
        username: None,
        password: None,
    };
    socket.write_all(&Packet::Connect(Box::new(connect)).to_bytes(v311).unwrap()).unwrap();
    let mut connack = [0u8; 4];
    socket.read_exact(&mut connack).unwrap();
    assert_eq!(connack, [0x20, 2, 0, 0], "CONNACK, accepted");
    let started = Instant::now();
    let mut batch = Vec::with_capacity(64 * 1024 + 256);
    for n in 0..count {
        let publish = Publish::at_most_once(topic, format!("{n:0100}").into_bytes());
        batch.extend_from_slice(&Packet::Publish(publish).to_bytes(v311).unwrap());
        if batch.len() >= 64 * 1024 || n + 1 == count {
            socket.write_all(&batch).unwrap();
            batch.clear();
        }
    }
    let took = started.elapsed();
    socket.write_all(&[0xE0, 0]).unwrap(); // DISCONNECT
    took
}

/// The payload lines a `mosquitto_sub` printed, checked to be the numbers 0, 1, 2... in order.
fn numbered_lines(out: &Output) -> usize {
    let got = text(&out.stdout);
    for (n, line) in got.lines().enumerate() {
        assert_eq!(line.parse::<usize>().ok(), Some(n), "delivery {n} is missing or out of order");
    }
    got.lines().count()
}

/// A broker with `slow_consumer` settings and a `mosquitto_sub` on `flood` that ends after
/// `count` messages or `wait` seconds; `None` (the test skipped) without the mosquitto clients.
fn flood_subscriber(slow_consumer: &str, count: usize, wait: &str) -> Option<(BrokerProcess, String, Client)> {
    if !mosquitto_present() {
        return None;
    }
    let (b, port) = broker_with(&format!("[slow_consumer]\n{slow_consumer}"));
    let sub = mosquitto_sub(&b, &port, &["-t", "flood", "-C", &count.to_string(), "-W", wait], 1.0);
    Some((b, port, sub))
}

#[test]
fn a_qos_0_flood_reaches_an_mqtt_subscriber_that_keeps_up_whole() {
    let _cores = alone();
    // A small queue, so a publisher read faster than the subscriber drains overruns it in a
    // fraction of a second unless it is held back, as a native publisher is (issue 42); yet
    // room past half full for what one read of 64 KiB dispatches (about 560 messages here).
    let count = 100_000;
    let Some((b, port, sub)) = flood_subscriber("max_messages = 4000\n", count, "15") else { return };
    // The subscriber keeps up when it gets a core whenever it can run, so the broker is niced
    // to 10 (any user may do that to their own process) and gives way to it. Alone in its
    // binary the test still failed once (2026-12-02's CI preview: marked slow in its first
    // second, 29,848 of 100,000 dropped); whether a starved `mosquitto_sub` was the cause is not
    // known: beside two busy loops it passed 5 runs of 5 with the renice and 5 of 5 without.
    let _ = Command::new("renice").args(["-n", "10", "-p", &b.ready.pid.to_string()]).output();
    // Its output is read while it runs: a full pipe would stop it reading, a real stall.
    let reading = std::thread::spawn(move || sub.finish());
    flood(&port, "flood", count);
    let out = reading.join().unwrap();
    let drops = b.metric("tidings_slow_consumer_drops_total").unwrap();
    let got = numbered_lines(&out);
    assert_eq!((got, drops), (count, 0.0), "deliveries and drops: {}", text(&out.stderr));
    assert!(b.metric("tidings_publisher_stalls_total").unwrap() > 0.0, "the flood was held back at least once");
}

#[test]
fn a_stalled_mqtt_subscriber_holds_a_publisher_back_for_max_stall_then_loses_what_overflows() {
    let _cores = beside();
    let count = 50_000;
    let Some((b, port, sub)) = flood_subscriber("max_messages = 1000\nmax_stall = \"300ms\"\n", count, "8") else {
        return;
    };
    let pid = sub.0.as_ref().unwrap().id();
    tidings_testkit::send_signal(pid, tidings_testkit::Signal::Stop).unwrap();
    let took = flood(&port, "flood", count);
    // The queue is given up on after max_stall (or sooner, once nothing is written for 50 ms),
    // not waited for: the publisher is not stalled by a subscriber that stopped.
    assert!(took < Duration::from_secs(5), "the publisher was held {took:?} by a stopped subscriber");
    tidings_testkit::wait_until("the overflow is dropped and counted", Duration::from_secs(10), || {
        b.metric("tidings_slow_consumer_drops_total").unwrap() > 0.0
    });
    tidings_testkit::send_signal(pid, tidings_testkit::Signal::Cont).unwrap();
    let out = sub.finish();
    let got = text(&out.stdout).lines().count();
    let drops = b.metric("tidings_slow_consumer_drops_total").unwrap();
    assert!(got > 0 && got < count, "the stalled subscriber got {got} of {count}");
    assert_eq!(got as f64 + drops, count as f64, "every message was either delivered or counted as dropped");
}

#[test]
fn connz_subsz_and_the_metrics_show_mqtt_clients_with_their_protocol_version() {
    let _cores = beside();
    if !mosquitto_present() {
        return;
    }
    let (b, port) = broker();
    let admin = b.ready.admin.expect("the ready line names the admin listener");
    let get = |path: &str| -> serde_json::Value {
        serde_json::from_str(&tidings_testkit::http_get(admin, path).unwrap()).unwrap()
    };
    // Each MQTT filter counts once in tidings_subscriptions; /subsz lists its two native ones.
    let _v3 = mosquitto_sub(&b, &port, &["-V", "mqttv311", "-t", "three/x", "-q", "1"], 1.0);
    let _v5 = mosquitto_sub(&b, &port, &["-V", "mqttv5", "-t", "five/x"], 1.0);
    let server = b.tcp();
    let _native = start(&b, &["sub", "--server", &server, "native.x"], true);
    let connz = get("/connz");
    let mut protocols: Vec<(String, String)> = connz["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["protocol"].as_str().unwrap().to_string(), c["transport"].as_str().unwrap().to_string()))
        .collect();
    protocols.sort();
    let expected = [("mqtt/3.1.1", "tcp"), ("mqtt/5", "tcp"), ("native", "tcp")];
    assert_eq!(protocols, expected.map(|(p, t)| (p.to_string(), t.to_string())), "{connz}");
    for (pattern, protocol) in [("three.x", "mqtt/3.1.1"), ("five.x", "mqtt/5"), ("native.x", "native")] {
        let subsz = get(&format!("/subsz?pattern={pattern}"));
        let items = subsz["items"].as_array().unwrap();
        assert!(!items.is_empty() && items.iter().all(|s| s["protocol"] == protocol), "{pattern}: {subsz}");
    }
    let metrics = b.metrics().unwrap();
    for (protocol, count) in [("mqtt/3.1.1", 1.0), ("mqtt/5", 1.0), ("native", 1.0), ("mqtt-ws/5", 0.0)] {
        let selector = format!("tidings_connections_by_protocol{{protocol=\"{protocol}\"}}");
        assert_eq!(tidings_testkit::metric_value(&metrics, &selector), count, "{selector}\n{metrics}");
    }
    assert_eq!(tidings_testkit::metric_value(&metrics, "tidings_connections{transport=\"tcp\"}"), 3.0);
}

/// The connection's one timer serves both the read buffer's release (after 500 ms quiet) and
/// the keep alive: a client silent past one and a half keep alives is closed, not before the
/// keep alive, and not never (issue 42 merged the two timers).
#[test]
fn a_silent_mqtt_client_is_closed_after_one_and_a_half_keep_alives() {
    let _cores = beside();
    let (_b, port) = broker_with("");
    let v311 = tidings_wire::mqtt::ProtocolVersion::V311;
    let connect = tidings_wire::mqtt::Connect {
        version: v311,
        clean_start: true,
        keep_alive: 2,
        properties: Default::default(),
        client_id: "silent".into(),
        will: None,
        username: None,
        password: None,
    };
    let mut socket = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let packet = tidings_wire::mqtt::Packet::Connect(Box::new(connect));
    socket.write_all(&packet.to_bytes(v311).unwrap()).unwrap();
    let mut connack = [0u8; 4];
    socket.read_exact(&mut connack).unwrap();
    assert_eq!(connack, [0x20, 2, 0, 0], "CONNACK, accepted");
    let silent = Instant::now();
    let mut rest = [0u8; 16];
    let read = socket.read(&mut rest);
    let took = silent.elapsed();
    assert!(matches!(read, Ok(0)) || read.is_err() && took < Duration::from_secs(19), "closed: {read:?}");
    assert!(took >= Duration::from_secs(2), "closed after {took:?}, before the keep alive");
    assert!(took < Duration::from_secs(10), "closed after {took:?}");
}
