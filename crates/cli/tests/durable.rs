//! Durable subscriptions through real broker processes: a subscriber away while messages are
//! published gets every one once, in order, when it comes back, also when its broker was
//! SIGKILLed while it was away or while it was catching up.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use gd_common::{assert_exactly_once_in_order, publish, spawn, start_on};
use serde_json::Value;
use tidings_testkit::BrokerProcess;

/// The JSON lines a command printed, whatever its exit, and its stderr.
fn lines(child: Child) -> (Vec<Value>, String) {
    let out = tidings_testkit::finish_within(child, Duration::from_secs(60));
    let lines = BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    (lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The JSON lines of a command that must succeed.
fn ok_lines(child: Child) -> Vec<Value> {
    let out = tidings_testkit::finish_within(child, Duration::from_secs(60));
    assert!(out.status.success(), "command failed: {}", String::from_utf8_lossy(&out.stderr));
    BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect()
}

fn wait_for(b: &BrokerProcess, metric: &str, at_least: f64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.metric(metric).unwrap_or(0.0) < at_least {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `sub --durable NAME k.> --json --count N` on `b`.
fn durable_sub(b: &BrokerProcess, name: &str, count: usize) -> Child {
    let server = b.tcp();
    let count = count.to_string();
    spawn(&["sub", "--server", &server, "--durable", name, "k.>", "--json", "--count", &count])
}

/// A broker on `<scratch>/data` with an empty `<scratch>/broker.toml`, to restart on its port.
fn restartable() -> (tempfile::TempDir, BrokerProcess) {
    restartable_with("")
}

/// A broker on `<scratch>/data` with `<scratch>/broker.toml` holding `text`.
fn restartable_with(text: &str) -> (tempfile::TempDir, BrokerProcess) {
    let scratch = tempfile::tempdir().unwrap();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    std::fs::write(&config, text).unwrap();
    let b = start_on(&data, "127.0.0.1:0", &config);
    (scratch, b)
}

#[test]
fn a_durable_subscriber_back_after_a_broker_kill_gets_what_it_missed_once_in_order() {
    let (scratch, mut b) = restartable();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    let listen = b.tcp();
    let first = durable_sub(&b, "d", 50);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let mut acked = ok_lines(publish(&listen, "k.a", 200, &[]));
    let mut got = ok_lines(first);
    assert_eq!(got.len(), 50);
    // Away: 2,000 more are published, then its broker dies and comes back.
    acked.extend(ok_lines(publish(&listen, "k.b", 2000, &["--window", "256"])));
    b.kill();
    let b = start_on(&data, &listen, &config);
    assert_eq!(b.metric("tidings_gd_durables").unwrap(), 1.0, "the durable subscription came back with its broker");
    let rest = acked.len() - got.len();
    got.extend(ok_lines(durable_sub(&b, "d", rest)));
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}

/// Issue 38, failure C: a durable subscriber stopped (SIGTERM) just after its broker was killed
/// (SIGKILL) prints nothing twice when it comes back: the broker's last acknowledgement of it
/// may predate what it printed, and `sub --durable` keeps its own checkpoint (it re-printed its
/// last 7-10 lines before).
#[test]
fn a_durable_subscriber_stopped_after_its_broker_was_killed_prints_nothing_twice() {
    let (scratch, mut b) = restartable();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    let listen = b.tcp();
    let total = 3000;
    let first = durable_sub(&b, "dd", total);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let publisher = publish(&listen, "k.a", total as u64, &["--rate", "300", "--window", "16"]);
    std::thread::sleep(Duration::from_secs(6));
    b.kill();
    tidings_testkit::send_signal(first.id(), tidings_testkit::Signal::Term).unwrap();
    let (mut got, stderr) = lines(first);
    assert!(!got.is_empty() && got.len() < total, "the first run printed part of the stream: {} ({stderr})", got.len());
    let b = start_on(&data, &listen, &config);
    let acked = ok_lines(publisher);
    assert_eq!(acked.len(), total, "every publish was acknowledged in the end");
    got.extend(ok_lines(durable_sub(&b, "dd", total - got.len())));
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop(b);
}

// The first subscriber leaves after one message while thousands more are on their way to it:
// its client closes with deliveries unread. That once cost its last acknowledgement (the reset
// connection ended the broker's session before the ack was read), and the next client got the
// message again; `Client::close` now waits for the broker to have handled what was sent.
#[test]
fn a_durable_subscriber_whose_broker_is_killed_mid_catch_up_sees_no_duplicate_and_no_gap() {
    // The replay is bounded to 20,000 messages a second, so that the kill lands in the middle of
    // it in any build: unbounded, a release build replays the 10,000 before the kill.
    let (scratch, mut b) = restartable_with("[guaranteed]\ncatch_up_rate = 20000\n");
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    let listen = b.tcp();
    let first = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let acked = ok_lines(publish(&listen, "k.a", 10_000, &["--window", "256"]));
    let mut got = ok_lines(first);
    // Back, and its broker killed while it catches up; the same subscriber process reconnects.
    let back = durable_sub(&b, "d", acked.len() - 1);
    wait_for(&b, "tidings_gd_durable_resumed_total", 1.0, "the subscriber did not come back");
    b.kill();
    let b = start_on(&data, &listen, &config);
    let (back, stderr) = lines(back);
    assert!(stderr.contains("reconnected"), "the broker died before the catch-up ended: {stderr}");
    got.extend(back);
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop(b);
}

#[test]
fn a_second_holder_is_refused_and_an_operator_lists_and_deletes_the_name() {
    let b = BrokerProcess::start(gd_common::bin(), &[]).unwrap();
    let server = b.tcp();
    let admin = b.ready.admin.unwrap().to_string();
    let holder = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let run = |args: &[&str]| tidings_testkit::finish_within(spawn(args), Duration::from_secs(20));
    let second = run(&["sub", "--server", &server, "--durable", "d", "k.>", "--count", "1"]);
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("held by another session"), "{err}");
    let held = run(&["durable", "rm", "d", "--admin", &admin]);
    assert!(!held.status.success(), "a held name is not deleted from under its client");
    ok_lines(publish(&server, "k.a", 1, &[]));
    assert_eq!(ok_lines(holder).len(), 1);
    let mismatch = run(&["sub", "--server", &server, "--durable", "d", "other.>", "--count", "1"]);
    let err = String::from_utf8_lossy(&mismatch.stderr);
    assert!(err.contains("exists for pattern"), "{err}");
    let bad = run(&["sub", "--server", &server, "--durable", "no spaces", "k.>"]);
    assert_eq!(bad.status.code(), Some(2), "an invalid name is a usage error");
    // `/state` is a snapshot refreshed every 250 ms: the holder's leaving shows within a second.
    let deadline = Instant::now() + Duration::from_secs(5);
    let listed = loop {
        let listed = ok_lines(spawn(&["durable", "ls", "--json", "--admin", &admin]));
        let listed = listed[0].as_array().unwrap().clone();
        let written = |d: &Value| d["pubends"][0]["checkpoint"].as_u64().is_some_and(|c| c > 0);
        if listed.first().is_some_and(|d| d["held"] == false && written(d)) || Instant::now() > deadline {
            break listed;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["name"], "d");
    assert_eq!(listed[0]["held"], false, "{listed:?}");
    assert!(listed[0]["pubends"][0]["checkpoint"].as_u64().unwrap() > 0, "{listed:?}");
    let removed = run(&["durable", "rm", "d", "--admin", &admin]);
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    wait_for_zero(&b, "tidings_gd_durables");
    let unknown = run(&["durable", "rm", "d", "--admin", &admin]);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no durable subscription"));
}

fn wait_for_zero(b: &BrokerProcess, metric: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.metric(metric).unwrap() > 0.0 {
        assert!(Instant::now() < deadline, "{metric} did not drop to 0");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many times the publisher's broker is killed: 5 here, 20 with `TIDINGS_LONG=1`.
fn kills() -> usize {
    if std::env::var_os("TIDINGS_LONG").is_some() {
        20
    } else {
        5
    }
}

#[test]
fn the_broker_killed_again_and_again_under_load_loses_and_repeats_nothing_for_a_durable_subscriber() {
    killed_again_and_again("");
}

/// The same, with every log write not yet synced lost at each kill, as a power cut loses it
/// (`fault_drop_unsynced`): an acknowledgement never depended on an unsynced write.
#[test]
fn killed_again_and_again_with_unsynced_writes_dropped_nothing_acknowledged_is_lost() {
    killed_again_and_again("[storage]\nfault_drop_unsynced = true\n");
}

fn killed_again_and_again(config: &str) {
    let (scratch, mut b) = restartable_with(config);
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    let listen = b.tcp();
    let total = 1500;
    let first = durable_sub(&b, "d", total);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let publisher = publish(&listen, "k.a", total as u64, &["--rate", "400", "--window", "16"]);
    // Killed at moments spread over the run, each time restarted on its data and port: the
    // publisher retries what was not acknowledged, the subscriber reconnects and resumes.
    let mut seed = u64::from(std::process::id());
    for _ in 0..kills() {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        std::thread::sleep(Duration::from_millis(150 + (seed >> 33) % 300));
        b.kill();
        b = start_on(&data, &listen, &config);
    }
    let acked = ok_lines(publisher);
    assert_eq!(acked.len(), total, "every publish was acknowledged in the end");
    let (got, stderr) = lines(first);
    assert!(stderr.contains("reconnected"), "{stderr}");
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop(b);
}

/// A broker whose config is `config`, on a scratch data directory.
fn configured(config: &str) -> (tempfile::TempDir, BrokerProcess) {
    let scratch = tempfile::tempdir().unwrap();
    let (data, path) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    std::fs::write(&path, config).unwrap();
    let b = start_on(&data, "127.0.0.1:0", &path);
    (scratch, b)
}

/// Publishes `count` 200-byte messages at `b` in one burst, returning what `pub` printed and
/// whether it succeeded.
fn burst(b: &BrokerProcess, topic: &str, count: u64) -> (Vec<Value>, bool, String) {
    let out =
        tidings_testkit::finish_within(publish(&b.tcp(), topic, count, &["--size", "200"]), Duration::from_secs(60));
    let lines = BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    (lines, out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_release_policy_tells_a_subscriber_behind_it_exactly_which_ticks_it_lost() {
    let (_scratch, b) = configured("[retention]\nmax_bytes = 60000\npolicy = \"release\"\n");
    let first = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let (mut acked, ok, _) = burst(&b, "k.a", 1);
    assert!(ok);
    let got = ok_lines(first);
    // Away: two bursts a second apart, together past the limit.
    for topic in ["k.b", "k.c"] {
        let (lines, ok, err) = burst(&b, topic, 200);
        assert!(ok, "{err}");
        acked.extend(lines);
        std::thread::sleep(Duration::from_millis(1100));
    }
    wait_for(&b, "tidings_gd_early_releases_total", 1.0, "the log was not released at its limit");
    // The release point, from /state (refreshed every 250 ms), tells how many are still there.
    std::thread::sleep(Duration::from_millis(600));
    let state: Value =
        serde_json::from_str(&tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    let release = state["guaranteed"]["pubends"][0]["release"].as_u64().unwrap();
    let still = acked.iter().filter(|a| a["tick"].as_u64().unwrap() > release).count();
    let (lines, _) = lines(durable_sub(&b, "d", still));
    let gaps: Vec<&Value> = lines.iter().filter(|l| l["gap"] == true).collect();
    assert_eq!(gaps.len(), 1, "one gap notice: {gaps:?}");
    let (from, to) = (gaps[0]["from"].as_u64().unwrap(), gaps[0]["to"].as_u64().unwrap());
    assert_eq!(from, got[0]["tick"].as_u64().unwrap() + 1, "the gap starts right after what it had");
    assert_eq!(to, release, "and ends where the log was released");
    let tick = |v: &Value| v["tick"].as_u64().unwrap();
    let kept: Vec<&Value> = acked.iter().filter(|a| tick(a) > to).collect();
    let lost = acked.iter().filter(|a| tick(a) >= from && tick(a) <= to).count();
    assert!(lost > 0 && !kept.is_empty(), "the limit took some, not all: lost {lost}, kept {}", kept.len());
    let delivered: Vec<Value> = lines.iter().filter(|l| l["gap"] != true).cloned().collect();
    assert_exactly_once_in_order(&delivered, &kept);
    assert_eq!(lines[0]["gap"], true, "the gap comes first, in stream order");
}

#[test]
fn the_backpressure_policy_refuses_publishes_past_the_limit_and_loses_nothing_acknowledged() {
    let config = "[retention]\nmax_bytes = 30000\npolicy = \"backpressure\"\nmax_wait = \"300ms\"\n";
    let (_scratch, b) = configured(config);
    let first = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let (mut acked, ok, _) = burst(&b, "k.a", 1);
    assert!(ok);
    let mut got = ok_lines(first);
    let (lines, ok, err) = burst(&b, "k.b", 400);
    assert!(!ok, "past the limit, publishes are refused");
    assert!(err.contains("retention limit"), "{err}");
    assert!(!lines.is_empty() && lines.len() < 400, "some were acknowledged before the limit: {}", lines.len());
    assert!(b.metric("tidings_gd_publishes_held_total").unwrap() >= 1.0);
    acked.extend(lines);
    got.extend(ok_lines(durable_sub(&b, "d", acked.len() - 1)));
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}

#[test]
fn a_durable_subscription_that_matches_nothing_does_not_hold_the_log() {
    let b = BrokerProcess::start(gd_common::bin(), &[]).unwrap();
    let server = b.tcp();
    let rare = spawn(&["sub", "--server", &server, "--durable", "rare", "k.>", "--where", "seq > 1000000", "--json"]);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let acked = ok_lines(publish(&server, "k.a", 200, &[]));
    let last = acked.iter().map(|a| a["tick"].as_u64().unwrap()).max().unwrap();
    let release = || -> u64 {
        let state: Value =
            serde_json::from_str(&tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
        state["guaranteed"]["pubends"][0]["release"].as_u64().unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while release() < last {
        assert!(Instant::now() < deadline, "the log is still held for a subscription none of it matched");
        std::thread::sleep(Duration::from_millis(100));
    }
    tidings_testkit::send_signal(rare.id(), tidings_testkit::Signal::Kill).unwrap();
    let (lines, _) = lines(rare);
    assert!(lines.is_empty(), "nothing matched: {lines:?}");
}

/// A broker whose data directory is a tmpfs of `size` of its own: `unshare` gives the broker a
/// mount namespace (and a user namespace, so no privilege is needed where those are allowed),
/// the tmpfs is mounted over `<scratch>/data` inside it and goes away with the broker.
fn on_small_tmpfs(size: &str) -> (tempfile::TempDir, BrokerProcess) {
    let scratch = tempfile::tempdir().unwrap();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(&config, "").unwrap();
    let (data, config) = (data.display().to_string(), config.display().to_string());
    let mount = format!("mount -t tmpfs -o size={size} tidings-test \"$0\" && exec \"$@\"");
    let tidings = gd_common::bin().display().to_string();
    let args = [
        "-rm",
        "sh",
        "-c",
        &mount,
        &data,
        &tidings,
        "broker",
        "--listen",
        "127.0.0.1:0",
        "--udp",
        "off",
        "--admin",
        "127.0.0.1:0",
        "--data",
        &data,
        "--config",
        &config,
    ];
    let b = BrokerProcess::start_with_args(Path::new("unshare"), &args)
        .expect("a broker on a tmpfs of its own (needs `unshare -rm`: user and mount namespaces)");
    (scratch, b)
}

#[test]
fn a_full_disk_refuses_publishes_clearly_loses_nothing_acknowledged_and_reads_go_on() {
    let (_scratch, b) = on_small_tmpfs("12m");
    let server = b.tcp();
    // A durable subscriber takes one message and leaves: the log keeps everything after it.
    let first = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let (mut acked, ok, err) = burst(&b, "k.a", 1);
    assert!(ok, "{err}");
    let mut got = ok_lines(first);
    // Publishing until the disk is full: the publisher is told why, and stops.
    let out = tidings_testkit::finish_within(
        publish(&server, "k.b", 100_000, &["--size", "4000", "--window", "32"]),
        Duration::from_secs(120),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a full disk must refuse publishes");
    assert!(err.contains("storage"), "the refusal says the storage failed: {err}");
    let full: Vec<Value> =
        BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert!(full.len() > 100 && full.len() < 100_000, "some were acknowledged before the disk filled: {}", full.len());
    acked.extend(full);
    // Best effort goes on beside the full disk.
    let listener = spawn(&["sub", "--server", &server, "be.>", "--count", "1", "--json"]);
    std::thread::sleep(Duration::from_millis(300));
    let sent = tidings_testkit::finish_within(
        spawn(&["pub", "--server", &server, "be.x", "still here"]),
        Duration::from_secs(20),
    );
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    assert_eq!(ok_lines(listener).len(), 1, "a best-effort message went through");
    // Reads go on: the durable subscriber comes back and gets every acknowledged message.
    got.extend(ok_lines(durable_sub(&b, "d", acked.len() - 1)));
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}

#[test]
fn while_a_durable_subscriber_is_away_its_lag_and_the_logs_release_lag_grow_and_fall_when_it_is_back() {
    let b = BrokerProcess::start(gd_common::bin(), &[]).unwrap();
    let server = b.tcp();
    let first = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let mut acked = ok_lines(publish(&server, "k.a", 1, &[]));
    let mut got = ok_lines(first);
    acked.extend(ok_lines(publish(&server, "k.b", 50, &[])));
    let pubend = || -> Value {
        let state = tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap();
        serde_json::from_str::<Value>(&state).unwrap()["guaranteed"]["pubends"][0].clone()
    };
    // `/state` is a snapshot refreshed every 250 ms: a field may not be there yet.
    let lag = |key: &str| pubend()[key].as_u64().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while lag("release_lag_ms") < 1000 || lag("subend_lag_ms_max") < 1000 {
        assert!(Instant::now() < deadline, "the away subscriber's lag did not show: {}", pubend());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lag("subends_behind"), 1, "{}", pubend());
    let metrics = b.metrics().unwrap();
    assert!(tidings_testkit::metric_total(&metrics, "tidings_gd_release_lag_ms") >= 1000.0, "{metrics}");
    // Back, and staying (it waits for one more than it missed): caught up, acknowledged,
    // released, nothing held and nobody behind.
    let back = durable_sub(&b, "d", 51);
    let deadline = Instant::now() + Duration::from_secs(20);
    while pubend()["release_lag_ms"] != 0 || pubend()["subends_behind"] != 0 {
        assert!(Instant::now() < deadline, "the log stayed held after the catch-up: {}", pubend());
        std::thread::sleep(Duration::from_millis(100));
    }
    acked.extend(ok_lines(publish(&server, "k.c", 1, &[])));
    got.extend(ok_lines(back));
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}

/// Issue 45: a durable subscriber back to a backlog is served by a cursor outside the driver
/// (the default) while live publishes go on; those published during the catch-up reach it
/// after the backlog, and every message once, in order (the seam between the cursor and live
/// delivery). The catch-up is bounded to 20,000 messages a second so that it lasts about a
/// second in any build, with live publishes before, during and after it.
#[test]
fn a_durable_catch_up_beside_live_publishes_delivers_every_message_once_in_order() {
    catch_up_beside_live("[guaranteed]\ncatch_up_rate = 20000\n", true);
}

/// The same served by the driver's replay (`catch_up_cursor = false`), the path a catch-up
/// also takes where the cursor cannot serve it (a relay, a queue group, stopped short).
#[test]
fn a_durable_catch_up_replayed_by_the_driver_beside_live_publishes_delivers_every_message_once_in_order() {
    catch_up_beside_live("[guaranteed]\ncatch_up_rate = 20000\ncatch_up_cursor = false\n", false);
}

fn catch_up_beside_live(config: &str, by_cursor: bool) {
    let (_scratch, b) = restartable_with(config);
    let listen = b.tcp();
    let first = durable_sub(&b, "d", 1);
    wait_for(&b, "tidings_gd_subscriptions_confirmed_total", 1.0, "the durable subscription was not confirmed");
    let mut acked = ok_lines(publish(&listen, "k.a", 20_000, &["--window", "256"]));
    let mut got = ok_lines(first);
    let live = publish(&listen, "k.b", 3000, &["--rate", "1000", "--window", "16"]);
    std::thread::sleep(Duration::from_millis(300));
    let back = durable_sub(&b, "d", acked.len() - 1 + 3000);
    acked.extend(ok_lines(live));
    got.extend(ok_lines(back));
    assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    let served = b.metric("tidings_gd_catch_up_served_total").unwrap_or(0.0);
    match by_cursor {
        true => assert!(served >= 19_000.0, "the backlog was served by the cursor: {served}"),
        false => assert_eq!(served, 0.0, "the driver replayed the backlog"),
    }
}
