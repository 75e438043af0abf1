//! MQTT QoS 1/2, persistent sessions, wills, shared subscriptions and MQTT over WebSocket with
//! Eclipse paho-mqtt (Python, PyPI), a client nobody here wrote, in 3.1.1 and 5.0, against
//! `tidings broker` processes: the scenarios are in `mqtt_paho.py`, this file starts brokers and
//! kills them.
//! Skipped, saying so, where Python's paho-mqtt is not installed (`.ci/run` installs it and sets
//! `TIDINGS_REQUIRE_MQTT_CLIENTS=1`, which turns a missing client into a failure).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use tidings_testkit::BrokerProcess;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("mqtt_paho.py")
}

/// Whether `python3` with paho-mqtt can run here; says why not otherwise.
fn paho_present() -> bool {
    let present = Command::new("python3")
        .args(["-c", "import paho.mqtt.client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !present && std::env::var_os("TIDINGS_REQUIRE_MQTT_CLIENTS").is_some() {
        panic!("TIDINGS_REQUIRE_MQTT_CLIENTS is set but python3 cannot import paho.mqtt.client");
    }
    if !present {
        eprintln!("SKIPPED: python3 with paho-mqtt not found (python3 -m pip install paho-mqtt)");
    }
    present
}

/// A broker on `<scratch>/data` whose MQTT listeners (TCP and WebSocket) keep their ports
/// across restarts.
struct Broker {
    scratch: tempfile::TempDir,
    process: BrokerProcess,
    port: String,
    ws_port: String,
}

impl Broker {
    fn start() -> Broker {
        let scratch = tempfile::tempdir().unwrap();
        let process = Self::process(scratch.path(), "127.0.0.1:0", ("0", "0"));
        let port = process.ready.mqtt.expect("the ready line names the MQTT listener").port().to_string();
        let ws = process.ready.mqtt_ws.expect("the ready line names the MQTT over WebSocket listener");
        Broker { scratch, process, port, ws_port: ws.port().to_string() }
    }

    fn process(scratch: &Path, listen: &str, (port, ws_port): (&str, &str)) -> BrokerProcess {
        let config = scratch.join("broker.toml");
        let mqtt = format!("[mqtt]\nlisten = \"127.0.0.1:{port}\"\nwebsocket = \"127.0.0.1:{ws_port}\"\n");
        std::fs::write(&config, mqtt).unwrap();
        gd_common::start_on(&scratch.join("data"), listen, &config)
    }

    /// SIGKILL, and a new process on the same data directory and ports.
    fn kill_and_restart(&mut self) {
        let listen = self.process.tcp();
        self.process.kill();
        self.process = Self::process(self.scratch.path(), &listen, (&self.port, &self.ws_port));
    }

    fn paho(&self, args: &[&str]) -> Output {
        paho(&self.port, args)
    }
}

/// `python3 mqtt_paho.py COMMAND PORT ARGS...` for `args` = `[COMMAND, ARGS...]`.
fn scenario(port: &str, args: &[&str]) -> Command {
    let (command, rest) = args.split_first().unwrap();
    let mut scenario = Command::new("python3");
    scenario.arg(script()).args([command, port]).args(rest).stdout(Stdio::piped());
    scenario
}

fn paho(port: &str, args: &[&str]) -> Output {
    let child = scenario(port, args).stderr(Stdio::piped()).spawn().unwrap();
    tidings_testkit::finish_within(child, Duration::from_secs(60))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a scenario to its end and returns its output, failing with its stderr.
fn ok(out: Output) -> String {
    assert!(out.status.success(), "paho scenario failed: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

const VERSIONS: [&str; 2] = ["3", "5"];

/// Runs a self-checking scenario on a new broker, in 3.1.1 then 5.0.
fn passes_in_each_version(name: &str) {
    if !paho_present() {
        return;
    }
    let b = Broker::start();
    for version in VERSIONS {
        assert_eq!(ok(b.paho(&[name, version])), "ok\n", "{name}, MQTT {version}");
    }
}

#[test]
fn paho_qos_1_and_2_publishes_reach_qos_1_and_2_subscribers_once_in_order() {
    passes_in_each_version("qos");
}

#[test]
fn a_paho_persistent_session_gets_what_it_missed_on_reconnect_and_after_a_broker_kill() {
    if !paho_present() {
        return;
    }
    let mut b = Broker::start();
    for version in VERSIONS {
        let client = format!("persistent-{version}");
        let out = ok(b.paho(&["subscribe", version, &client, "away/#", "2"]));
        assert_eq!(out, "session_present=False\n", "a new session is not present");
        // Missed while disconnected, then got on reconnect.
        ok(b.paho(&["publish", version, "away/a", "1", "3", "r"]));
        let out = ok(b.paho(&["receive", version, &client, "3"]));
        assert_eq!(out, "session_present=True\naway/a r0 qos=1\naway/a r1 qos=1\naway/a r2 qos=1\n", "MQTT {version}");
        // Missed, and the broker killed and restarted before the reconnect: nothing lost.
        ok(b.paho(&["publish", version, "away/b", "2", "4", "k"]));
        b.kill_and_restart();
        let out = ok(b.paho(&["receive", version, &client, "4"]));
        let expected = "session_present=True\naway/b k0 qos=2\naway/b k1 qos=2\naway/b k2 qos=2\naway/b k3 qos=2\n";
        assert_eq!(out, expected, "MQTT {version}, after the broker's SIGKILL and restart");
    }
}

#[test]
fn a_qos_2_publish_retried_across_a_broker_kill_and_restart_is_published_once() {
    if !paho_present() {
        return;
    }
    let mut b = Broker::start();
    for version in VERSIONS {
        let subscriber = format!("q2in-sub-{version}");
        ok(b.paho(&["subscribe", version, &subscriber, "q2in/#", "2"]));
        // PUBREC came; the broker is killed before the client's PUBREL.
        assert_eq!(ok(b.paho(&["qos2-send", version, "first"])), "ok\n", "MQTT {version}");
        b.kill_and_restart();
        // The client retries its PUBLISH (DUP) on its session: the same publish, not a new one.
        assert_eq!(ok(b.paho(&["qos2-send", version, "retry"])), "ok\n", "MQTT {version}");
        // Time for a second copy to show, were there one.
        let out = ok(b.paho(&["receive", version, &subscriber, "1", "3"]));
        assert_eq!(out, "session_present=True\nq2in/a once qos=2\n", "MQTT {version}: delivered once");
    }
}

#[test]
fn deliveries_in_flight_at_a_broker_kill_come_again_with_their_packet_ids_dup_or_pubrel_once() {
    if !paho_present() {
        return;
    }
    let mut b = Broker::start();
    for version in VERSIONS {
        // Connected, with a QoS 1 and a QoS 2 delivery unanswered and a QoS 2 one PUBREC'd.
        let mut child =
            scenario(&b.port, &["inflight-restart", version, "before"]).stderr(Stdio::inherit()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let ids: Vec<&str> =
            line.trim().strip_prefix("ready ").expect("the scenario did not get ready").split(' ').collect();
        b.kill_and_restart();
        let _ = child.kill();
        let _ = child.wait();
        // The same packet ids, DUP 1 or PUBREL; each completed, nothing delivered twice as new.
        assert_eq!(ok(b.paho(&["inflight-restart", version, "after", &ids.join(",")])), "ok\n", "MQTT {version}");
        // Completed before the next kill (the durable checkpoint may not be written yet): not
        // sent again.
        b.kill_and_restart();
        assert_eq!(ok(b.paho(&["inflight-restart", version, "final"])), "ok\n", "MQTT {version}, after another kill");
    }
}

/// Starts a paho scenario that prints `ready` (its first line) before it has to be left alone.
fn start_until(port: &str, args: &[&str], ready: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = scenario(port, args).stderr(Stdio::inherit()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), ready, "the scenario did not start");
    (child, stdout)
}

fn rest_of(mut child: Child, mut stdout: BufReader<std::process::ChildStdout>) -> String {
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let _ = child.wait();
    rest
}

#[test]
fn a_paho_clients_will_is_published_when_it_dies_after_its_delay_in_5_0() {
    if !paho_present() {
        return;
    }
    let b = Broker::start();
    for (version, delay, seconds) in [("3", "0", "5"), ("5", "0", "5"), ("5", "2", "8")] {
        let topic = format!("wills/{version}/{delay}");
        let (watcher, watched) = start_until(&b.port, &["watch", version, &topic, "1", seconds], "subscribed");
        let (mut dying, _) = start_until(&b.port, &["hold-will", version, &topic, delay], "connected");
        let killed = std::time::Instant::now();
        dying.kill().unwrap();
        let _ = dying.wait();
        assert_eq!(rest_of(watcher, watched), format!("{topic} gone\n"), "MQTT {version}, will delay {delay}");
        if delay != "0" {
            assert!(killed.elapsed() >= Duration::from_secs(2), "the will waited for its delay");
        }
    }
    // A normal DISCONNECT: no will.
    let topic = "wills/normal";
    let (watcher, watched) = start_until(&b.port, &["watch", "5", topic, "1", "3"], "subscribed");
    for version in VERSIONS {
        assert_eq!(ok(b.paho(&["leave-with-will", version, topic])), "left\n");
    }
    assert_eq!(rest_of(watcher, watched), "", "a will is left out after a normal DISCONNECT");
}

impl Broker {
    /// Waits until the broker let go of every MQTT connection (it leaves `/connz` and the
    /// metrics after a will waiting for its delay is on disk).
    fn wait_mqtt_gone(&self) {
        tidings_testkit::wait_until("the broker let the MQTT connections go", Duration::from_secs(10), || {
            let metrics = self.process.metrics().unwrap_or_default();
            tidings_testkit::metric_value(&metrics, "tidings_connections_by_protocol{protocol=\"mqtt/5\"}") == 0.0
        });
    }
}

/// SIGKILLs a scenario started with [`start_until`]; the moment it died.
fn kill_client(mut client: Child) -> std::time::Instant {
    client.kill().unwrap();
    let _ = client.wait();
    std::time::Instant::now()
}

/// The will delay of [`a_will_delay_outlives_a_broker_kill_and_a_client_back_in_time_cancels_it_across_one`]:
/// long enough for a debug broker's restart and a Python client's start on a loaded machine.
const WILL_DELAY: Duration = Duration::from_secs(6);

/// Fails, as inconclusive, a step that did not happen within the will delay from `killed`.
fn within_delay(killed: std::time::Instant, step: &str) {
    assert!(killed.elapsed() < WILL_DELAY, "{step} took longer than the will delay: inconclusive");
}

/// Sleeps until a second past the will delay from `killed`.
fn past_the_delay(killed: std::time::Instant) {
    std::thread::sleep((WILL_DELAY + Duration::from_secs(1)).saturating_sub(killed.elapsed()));
}

/// A 5.0 will waiting for its delay outlives a broker SIGKILL and restart: sent once, after the
/// delay; and a client that comes back within the delay cancels it, after the restart as
/// before it (MQTT-3.1.3-9).
#[test]
fn a_will_delay_outlives_a_broker_kill_and_a_client_back_in_time_cancels_it_across_one() {
    if !paho_present() {
        return;
    }
    let delay = WILL_DELAY.as_secs().to_string();
    let mut b = Broker::start();
    ok(b.paho(&["subscribe", "5", "will-keeper", "wills/#", "1"]));
    // Session expiry 60 s; the broker killed and restarted within the delay.
    let (dying, _) = start_until(&b.port, &["hold-will", "5", "wills/restart", &delay, "dying"], "connected");
    let killed = kill_client(dying);
    b.wait_mqtt_gone();
    b.kill_and_restart();
    let (watcher, watched) = start_until(&b.port, &["watch", "5", "wills/restart", "1", "20"], "subscribed");
    within_delay(killed, "the restart and a watcher's subscription");
    assert_eq!(rest_of(watcher, watched), "wills/restart gone\n", "the will outlives the broker's restart");
    assert!(killed.elapsed() >= WILL_DELAY, "the will waited for its delay across the restart");
    let out = ok(b.paho(&["receive", "5", "will-keeper", "1", "2"]));
    assert_eq!(out, "session_present=True\nwills/restart gone qos=1\n", "the will is sent once");

    // Back after the restart, within the delay: no will (the keeper's session would get it).
    let (dying, _) = start_until(&b.port, &["hold-will", "5", "wills/back-after", &delay, "back-after"], "connected");
    let killed = kill_client(dying);
    b.wait_mqtt_gone();
    b.kill_and_restart();
    assert_eq!(ok(b.paho(&["come-back", "5", "back-after"])), "back\n");
    within_delay(killed, "the restart and the client's return");
    past_the_delay(killed);

    // Back before the restart: the will's record went with it.
    let (dying, _) = start_until(&b.port, &["hold-will", "5", "wills/back-before", &delay, "back-before"], "connected");
    let killed = kill_client(dying);
    b.wait_mqtt_gone();
    assert_eq!(ok(b.paho(&["come-back", "5", "back-before"])), "back\n");
    b.kill_and_restart();
    within_delay(killed, "the client's return and the restart");
    past_the_delay(killed);
    let out = ok(b.paho(&["receive", "5", "will-keeper", "0", "1"]));
    assert_eq!(out, "session_present=True\n", "a client back within the delay cancels its will, across a restart");
}

#[test]
fn paho_shared_subscriptions_give_each_message_to_one_member() {
    passes_in_each_version("share");
}

#[test]
fn paho_shared_subscriptions_at_qos_1_and_2_give_each_message_to_exactly_one_member() {
    passes_in_each_version("share-qos");
}

#[test]
fn overlapping_subscriptions_get_one_copy_at_their_highest_qos_with_every_identifier() {
    passes_in_each_version("overlap");
}

#[test]
fn a_qos_2_delivery_across_reconnects_comes_again_with_dup_and_its_packet_id_then_as_pubrel() {
    passes_in_each_version("qos2-resume");
}

/// Reads a member's lines (`PAYLOAD DUP`) until it has printed `n`, or to its end.
fn lines_of(stdout: &mut BufReader<std::process::ChildStdout>, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    while lines.len() < n && stdout.read_line(&mut line).unwrap() > 0 {
        lines.push(std::mem::take(&mut line).trim().to_string());
    }
    lines
}

#[test]
fn a_shared_subscription_member_killed_mid_stream_loses_nothing_its_messages_go_to_another_with_dup() {
    if !paho_present() {
        return;
    }
    let b = Broker::start();
    for version in VERSIONS {
        // The slow one holds many messages unacknowledged when it is killed.
        let mut slow = start_until(&b.port, &["share-member", version, "0.05"], "subscribed");
        let fast: Vec<_> =
            (0..2).map(|_| start_until(&b.port, &["share-member", version, "0"], "subscribed")).collect();
        let n = 1000;
        let publisher = scenario(&b.port, &["publish-many", version, "kill/x", &n.to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut printed = lines_of(&mut slow.1, 20);
        assert_eq!(printed.len(), 20, "MQTT {version}: the slow member got too little to be killed mid-stream");
        slow.0.kill().unwrap();
        let _ = slow.0.wait();
        printed.extend(lines_of(&mut slow.1, usize::MAX));
        assert_eq!(ok(tidings_testkit::finish_within(publisher, Duration::from_secs(60))), "published\n");
        let survivors: Vec<String> = fast.into_iter().map(|(child, stdout)| rest_of(child, stdout)).collect();
        let survived: Vec<&str> = survivors.iter().flat_map(|out| out.lines()).collect();
        let mut got = std::collections::BTreeMap::<String, Vec<bool>>::new();
        for line in printed.iter().map(String::as_str).chain(survived.iter().copied()) {
            let (payload, dup) = line.split_once(' ').unwrap();
            got.entry(payload.to_string()).or_default().push(dup == "1");
        }
        let missing: Vec<String> = (0..n).map(|i| format!("m{i}")).filter(|m| !got.contains_key(m)).collect();
        assert!(missing.is_empty(), "MQTT {version}: lost {} messages, first {:?}", missing.len(), missing.first());
        assert_eq!(got.len(), n, "MQTT {version}: only what was published");
        // A message printed twice went to a second member after the kill: that copy says DUP.
        for (payload, dups) in &got {
            assert!(dups.len() == 1 || dups.iter().any(|dup| *dup), "MQTT {version}: {payload} twice, no DUP");
        }
        let redelivered = survived.iter().filter(|line| line.ends_with(" 1")).count();
        assert!(redelivered > 0, "MQTT {version}: the killed member's unacknowledged messages came to no one");
        eprintln!("MQTT {version}: killed member printed {}, survivors got {redelivered} with DUP", printed.len());
    }
}

#[test]
fn paho_5_0_properties_aliases_identifiers_no_local_retain_options_expiry_and_selectors_work() {
    if !paho_present() {
        return;
    }
    let b = Broker::start();
    assert_eq!(ok(b.paho(&["v5-features", "5"])), "ok\n");
}

#[test]
fn paho_5_0_server_keep_alive_no_broker_user_property_and_a_readable_receive_maximum_refusal() {
    if !paho_present() {
        return;
    }
    let b = Broker::start();
    assert_eq!(ok(b.paho(&["conformance", "5"])), "ok\n");
}

#[test]
fn qos_1_and_2_retained_values_are_kept_and_given_at_their_qos() {
    passes_in_each_version("retained-qos");
}

#[test]
fn a_clean_start_discards_what_the_old_sessions_durable_subscriptions_held() {
    passes_in_each_version("clean-discards");
}

#[test]
fn paho_over_websocket_does_qos_1_and_2_and_5_0_features_and_resumes_a_session_made_over_tcp() {
    if !paho_present() {
        return;
    }
    let b = Broker::start();
    for version in VERSIONS {
        // Every client over WebSocket (paho's transport="websockets").
        assert_eq!(ok(paho(&b.ws_port, &["ws-qos", version])), "ok\n", "MQTT {version} over WebSocket");
        // Both listeners reach one session registry: made over TCP, resumed over WebSocket.
        let client = format!("two-doors-{version}");
        assert_eq!(ok(b.paho(&["subscribe", version, &client, "doors/#", "1"])), "session_present=False\n");
        ok(paho(&b.ws_port, &["ws-publish", version, "doors/a", "1", "2", "w"]));
        let out = ok(paho(&b.ws_port, &["ws-receive", version, &client, "2"]));
        assert_eq!(out, "session_present=True\ndoors/a w0 qos=1\ndoors/a w1 qos=1\n", "MQTT {version}");
    }
    // 5.0's properties, topic aliases, options and selectors, over WebSocket.
    assert_eq!(ok(paho(&b.ws_port, &["ws-v5-features", "5"])), "ok\n");
}

/// A broker whose MQTT listener is configured by `mqtt` (lines of `[mqtt]`) and `limits`, and
/// its MQTT port.
fn mqtt_broker(mqtt: &str, limits: &str) -> (BrokerProcess, String) {
    let config = format!("[mqtt]\nlisten = \"127.0.0.1:0\"\n{mqtt}[limits]\n{limits}");
    let b = BrokerProcess::start_configured(gd_common::bin(), &config, &[]).unwrap();
    let port = b.ready.mqtt.expect("the ready line names the MQTT listener").port().to_string();
    (b, port)
}

#[test]
fn a_moved_full_or_stopping_broker_names_the_server_to_use_instead() {
    if !paho_present() {
        return;
    }
    let to = "other.example:1883";
    // Moved: every 5.0 CONNECT is told where; 3.1.1 cannot be, and is told the server is unavailable.
    let (_moved, port) = mqtt_broker(&format!("server_reference = \"{to}\"\nmoved = true\n"), "");
    assert_eq!(ok(paho(&port, &["redirected", "5"])), format!("connack=157 (Server moved) reference={to}\n"));
    let v311 = ok(paho(&port, &["redirected", "3"]));
    assert!(v311.starts_with("connack=") && v311.contains("(Server unavailable) reference=None"), "{v311}");

    // At its connection limit (one), a 5.0 client is sent to the reference; and when the
    // broker stops, the one it served too.
    let (mut full, port) = mqtt_broker(&format!("server_reference = \"{to}\"\n"), "max_connections = 1\n");
    let mut holder = scenario(&port, &["redirected", "5", "hold"]).stderr(Stdio::inherit()).spawn().unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "connack=0 (Success) reference=None");
    assert_eq!(ok(paho(&port, &["redirected", "5"])), format!("connack=156 (Use another server) reference={to}\n"));
    let v311 = ok(paho(&port, &["redirected", "3"]));
    assert!(v311.contains("(Server unavailable) reference=None"), "{v311}");
    assert!(full.terminate(Duration::from_secs(20)).unwrap().is_some(), "the broker did not stop on SIGTERM");
    assert_eq!(lines.next().unwrap().unwrap(), format!("disconnect=156 (Use another server) reference={to}"));
    assert!(tidings_testkit::finish_within(holder, Duration::from_secs(20)).status.success());
}
