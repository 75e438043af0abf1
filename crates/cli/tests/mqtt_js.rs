//! MQTT.js (npm `mqtt`, the client browsers and Node use), a client nobody here wrote, against
//! a `tidings broker` process over both MQTT over TCP (`mqtt://`) and MQTT over WebSocket
//! (`ws://…/mqtt`, `[mqtt] websocket`), in 3.1.1 and 5.0, with the native `tidings` CLI on the
//! other side. The MQTT.js steps are in `mqtt_js/scenarios.mjs`; this file starts the broker
//! and the native commands and checks what each side got. Skipped, saying so, where
//! `mqtt_js/node_modules` is absent (`npm ci --prefix crates/cli/tests/mqtt_js`; `.ci/run` runs
//! it and sets `TIDINGS_REQUIRE_MQTT_CLIENTS=1`, which turns a missing client into a failure).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use patterns_common::{bin, start, text, tidings};
use tidings_testkit::BrokerProcess;

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("mqtt_js")
}

/// Whether `node` and the pinned MQTT.js are installed; says why not otherwise.
fn mqtt_js_present() -> bool {
    let installed = package().join("node_modules").join("mqtt").join("package.json").is_file();
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !(installed && node) && std::env::var_os("TIDINGS_REQUIRE_MQTT_CLIENTS").is_some() {
        panic!("TIDINGS_REQUIRE_MQTT_CLIENTS is set but node or crates/cli/tests/mqtt_js/node_modules is missing");
    }
    if !(installed && node) {
        eprintln!("SKIPPED: MQTT.js not installed (npm ci --prefix crates/cli/tests/mqtt_js) or node not found");
    }
    installed && node
}

/// A broker with both MQTT listeners on OS-chosen ports, and the URL of each for MQTT.js.
fn broker() -> (BrokerProcess, [String; 2]) {
    let config = "[mqtt]\nlisten = \"127.0.0.1:0\"\nwebsocket = \"127.0.0.1:0\"\n";
    let b = BrokerProcess::start_configured(bin(), config, &[]).unwrap();
    let tcp = b.ready.mqtt.expect("the ready line names the MQTT listener");
    let ws = b.ready.mqtt_ws.expect("the ready line names the MQTT over WebSocket listener");
    (b, [format!("mqtt://{tcp}"), format!("ws://{ws}/mqtt")])
}

/// The versions MQTT.js speaks: its `protocolVersion` 4 (3.1.1) and 5.
const VERSIONS: [&str; 2] = ["4", "5"];

/// Runs `case` with each URL (TCP, WebSocket) and MQTT.js version on one broker, unless
/// MQTT.js is not installed.
fn each_door_and_version(case: impl Fn(&BrokerProcess, &str, &str)) {
    if !mqtt_js_present() {
        return;
    }
    let (b, urls) = broker();
    for url in &urls {
        for version in VERSIONS {
            case(&b, url, version);
        }
    }
}

/// A message line of `scenarios.mjs` without its user properties (after ` | `).
fn bare(line: &str) -> &str {
    line.split(" | ").next().unwrap_or(line)
}

/// A short name for `url`'s transport, to keep each case's topics and clients apart.
fn door(url: &str) -> &'static str {
    if url.starts_with("ws:") {
        "ws"
    } else {
        "tcp"
    }
}

fn node(args: &[&str]) -> Command {
    let mut command = Command::new("node");
    command.arg(package().join("scenarios.mjs")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// Runs an MQTT.js step to its end and returns its output, failing with its stderr.
fn run(args: &[&str]) -> String {
    let out = tidings_testkit::finish_within(node(args).spawn().unwrap(), Duration::from_secs(30));
    assert!(out.status.success(), "MQTT.js {args:?} failed: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// An MQTT.js subscriber started and past SUBACK; killed if the test fails first.
struct Subscriber {
    child: Option<Child>,
    stdout: BufReader<ChildStdout>,
    /// Lines printed before `subscribed` (a persistent session's `session_present`).
    before: Vec<String>,
}

impl Subscriber {
    fn start(args: &[&str]) -> Subscriber {
        Subscriber::spawn(node(args), args)
    }

    /// Runs `command` (the `node scenarios.mjs` of `args`) until it printed `subscribed`.
    fn spawn(mut command: Command, args: &[&str]) -> Subscriber {
        let mut child = command.stderr(Stdio::inherit()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut before = Vec::new();
        loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "MQTT.js {args:?} ended before SUBACK: {before:?}");
            match line.trim_end() {
                "subscribed" => break,
                other => before.push(other.to_string()),
            }
        }
        Subscriber { child: Some(child), stdout, before }
    }

    /// The lines it printed after SUBACK, once it got its count and exited successfully.
    fn finish(mut self) -> Vec<String> {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let out = tidings_testkit::finish_within(self.child.take().unwrap(), Duration::from_secs(30));
        assert!(out.status.success(), "the MQTT.js subscriber failed; it printed {rest:?}");
        rest.lines().map(str::to_string).collect()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `tidings ARGS` against `b`'s client port and fails with its stderr if it fails.
fn native(b: &BrokerProcess, args: &[&str]) -> Output {
    let server = b.tcp();
    let out = tidings(&[&args[..1], &["--server", &server], &args[1..]].concat());
    assert!(out.status.success(), "tidings {args:?}: {}", text(&out.stderr));
    out
}

/// Starts a native guaranteed `tidings sub` and returns once the broker confirmed it (a
/// guaranteed subscription is not counted in `tidings_subscriptions`).
fn native_guaranteed_sub(b: &BrokerProcess, pattern: &str) -> Child {
    let confirmed = || b.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0);
    let before = confirmed();
    let server = b.tcp();
    let args = ["sub", "--server", &server, "--guaranteed", pattern, "--json", "--count", "1"];
    let child = Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    tidings_testkit::wait_until("the native guaranteed subscription", Duration::from_secs(10), || confirmed() > before);
    child
}

/// The one JSON line a native `tidings sub --json --count 1` printed.
fn one_json(out: Output) -> serde_json::Value {
    assert!(out.status.success(), "the native subscriber failed: {}", text(&out.stderr));
    serde_json::from_str(text(&out.stdout).trim()).unwrap()
}

#[test]
fn mqtt_js_subscribers_get_native_publishes_at_qos_0_and_1_over_tcp_and_websocket() {
    each_door_and_version(|b, url, version| {
        let topic = format!("native/{}/{version}", door(url));
        let sub = Subscriber::start(&["subscribe", url, version, &format!("{topic}/#"), "1", "2"]);
        let native_topic = topic.replace('/', ".");
        native(b, &["pub", &format!("{native_topic}.zero"), "best effort"]);
        native(b, &["pub", "--guaranteed", &format!("{native_topic}.one"), "guaranteed"]);
        let mut got = sub.finish();
        // Best-effort and guaranteed deliveries take different paths: no order between them.
        got.sort();
        let expected = [
            format!("{topic}/one guaranteed qos=1 retain=false"),
            format!("{topic}/zero best effort qos=0 retain=false"),
        ];
        assert_eq!(got.iter().map(|l| bare(l)).collect::<Vec<_>>(), expected, "{url} MQTT.js version {version}");
        // A native guaranteed publish carries `seq` and `publisher`: 5.0 user properties.
        let crossed = version == "5";
        assert_eq!(got[0].contains(" | seq=1 publisher="), crossed, "{url} version {version}: {}", got[0]);
    });
}

#[test]
fn mqtt_js_publishes_at_qos_0_and_1_reach_native_subscribers_with_v5_user_properties() {
    each_door_and_version(|b, url, version| {
        let server = b.tcp();
        let topic = format!("js/{}/{version}", door(url));
        let pattern = format!("{}.>", topic.replace('/', "."));
        let best_effort = start(b, &["sub", "--server", &server, &pattern, "--json", "--count", "1"], true);
        let guaranteed = native_guaranteed_sub(b, &pattern);
        let zero = format!("{topic}/zero");
        assert_eq!(run(&["publish", url, version, &zero, "0", "0", "room=kitchen"]), "published\n");
        let one = format!("{topic}/one");
        assert_eq!(run(&["publish", url, version, &one, "1", "1", "room=hall", "unit=C"]), "published\n");

        // User properties exist in 5.0 only (MQTT.js sends none in 3.1.1).
        let v5 = version == "5";
        let properties = |line: &serde_json::Value| line.get("properties").cloned().unwrap_or(serde_json::json!({}));
        let line = one_json(best_effort.finish());
        assert_eq!((line["topic"].as_str(), line["payload"].as_str()), (Some(&*zero.replace('/', ".")), Some("0")));
        let expected = if v5 { serde_json::json!({"room": "kitchen"}) } else { serde_json::json!({}) };
        assert_eq!(properties(&line), expected, "{url} version {version}: {line}");
        let line = one_json(tidings_testkit::finish_within(guaranteed, Duration::from_secs(20)));
        assert_eq!((line["topic"].as_str(), line["payload"].as_str()), (Some(&*one.replace('/', ".")), Some("1")));
        assert!(line["tick"].is_u64(), "a QoS 1 publish is a guaranteed one: {line}");
        let expected = if v5 { serde_json::json!({"room": "hall", "unit": "C"}) } else { serde_json::json!({}) };
        assert_eq!(properties(&line), expected, "{url} version {version}: {line}");
    });
}

#[test]
fn an_mqtt_js_retained_value_reaches_later_mqtt_js_and_native_subscribers() {
    if !mqtt_js_present() {
        return;
    }
    let (b, urls) = broker();
    for (n, url) in urls.iter().enumerate() {
        let topic = format!("door/{}", door(url));
        assert_eq!(run(&["publish", url, "5", &topic, "open", "0", "retain"]), "published\n");
        tidings_testkit::wait_until("the value is retained", Duration::from_secs(5), || {
            b.metric("tidings_retained_topics").unwrap() == (n + 1) as f64
        });
        // The retained value may come before SUBACK: take every line the subscriber printed.
        for version in VERSIONS {
            let out = run(&["subscribe", url, version, &topic, "0", "1"]);
            let got: Vec<&str> = out.lines().filter(|line| *line != "subscribed").collect();
            assert_eq!(got, [format!("{topic} open qos=0 retain=true")], "{url} version {version}");
        }
        let line = one_json(native(&b, &["sub", &topic.replace('/', "."), "--json", "--count", "1"]));
        assert_eq!((line["payload"].as_str(), line["retained"].as_bool()), (Some("open"), Some(true)), "{line}");
    }
}

#[test]
fn an_mqtt_js_persistent_session_gets_what_it_missed_on_reconnect() {
    each_door_and_version(|b, url, version| {
        let client = format!("mqtt-js-{}-{version}", door(url));
        let topic = format!("away/{}/{version}", door(url));
        // Subscribe at QoS 1 in a persistent session, and leave (count 0: DISCONNECT at once).
        let sub = Subscriber::start(&["subscribe", url, version, &format!("{topic}/#"), "1", "0", &client]);
        assert_eq!(sub.before, ["session_present=false"], "{url} version {version}: a new session");
        assert!(sub.finish().is_empty());
        // Missed while away: native guaranteed publishes, then an MQTT.js QoS 1 one.
        let native_topic = format!("{}.n", topic.replace('/', "."));
        for i in 0..2 {
            native(b, &["pub", "--guaranteed", &native_topic, &format!("m{i}")]);
        }
        assert_eq!(run(&["publish", url, version, &format!("{topic}/j"), "m2", "1"]), "published\n");
        let out = run(&["resume", url, version, &client, "3"]);
        let got: Vec<&str> = out.lines().map(bare).collect();
        let expected = [
            "session_present=true".to_string(),
            format!("{topic}/n m0 qos=1 retain=false"),
            format!("{topic}/n m1 qos=1 retain=false"),
            format!("{topic}/j m2 qos=1 retain=false"),
        ];
        assert_eq!(got, expected, "{url} MQTT.js version {version}");
    });
}

/// A broker whose MQTT listeners speak TLS with a self-signed certificate for 127.0.0.1 (in
/// `dir`), and the certificate's path for the client to trust.
fn tls_broker(dir: &Path) -> (BrokerProcess, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let config = format!(
        "[tls]\ncert = {cert:?}\nkey = {key:?}\ntcp = false\n[mqtt]\nlisten = \"127.0.0.1:0\"\nwebsocket = \"127.0.0.1:0\"\n"
    );
    (BrokerProcess::start_configured(bin(), &config, &[]).unwrap(), cert.display().to_string())
}

#[test]
fn with_tls_the_websocket_listener_speaks_wss_and_tells_a_plaintext_client_so() {
    if !mqtt_js_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (b, ca) = tls_broker(dir.path());
    let ws = b.ready.mqtt_ws.expect("the ready line names the MQTT over WebSocket listener");
    let url = format!("wss://{ws}/mqtt");
    let secure = |args: &[&str]| {
        let mut command = node(args);
        command.env("MQTT_CA", &ca);
        command
    };
    let args = ["subscribe", &url, "5", "secure/#", "1", "1"];
    let sub = Subscriber::spawn(secure(&args), &args);
    let out = tidings_testkit::finish_within(
        secure(&["publish", &url, "5", "secure/a", "sealed", "1"]).spawn().unwrap(),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "MQTT.js publish over wss: {}", text(&out.stderr));
    assert_eq!(sub.finish(), ["secure/a sealed qos=1 retain=false"], "over wss");

    // A plaintext upgrade request on the TLS listener: an HTTP 400 saying to use wss://.
    let mut plain = std::net::TcpStream::connect(ws).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET /mqtt HTTP/1.1\r\nHost: b\r\n\r\n").unwrap();
    let mut answer = String::new();
    plain.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("use wss://"), "{answer}");
}

#[test]
fn bad_websocket_input_is_refused_saying_why_and_the_mqtt_listeners_share_a_connection_limit() {
    if !mqtt_js_present() {
        return;
    }
    let config = "[limits]\nmax_connections = 2\nmax_connections_per_address = 2\n\
                  [mqtt]\nlisten = \"127.0.0.1:0\"\nwebsocket = \"127.0.0.1:0\"\n";
    let b = BrokerProcess::start_configured(bin(), config, &[]).unwrap();
    let urls = [format!("mqtt://{}", b.ready.mqtt.unwrap()), format!("ws://{}/mqtt", b.ready.mqtt_ws.unwrap())];
    // One client on each MQTT listener takes both places: a third is refused on either.
    let subs = urls.each_ref().map(|url| Subscriber::start(&["subscribe", url, "5", "limit/#", "0", "1"]));
    for url in &urls {
        let out = tidings_testkit::finish_within(
            node(&["publish", url, "5", "limit/x", "refused", "0"]).spawn().unwrap(),
            Duration::from_secs(30),
        );
        assert!(!out.status.success(), "{url}: a third connection was let in: {}", text(&out.stdout));
    }
    // The native listener counts its own: its publish ends both subscribers and frees the places.
    native(&b, &["pub", "limit.x", "native"]);
    for sub in subs {
        assert_eq!(sub.finish(), ["limit/x native qos=0 retain=false"]);
    }
    tidings_testkit::wait_until("a place is free again", Duration::from_secs(10), || {
        let publish = node(&["publish", &urls[1], "5", "limit/x", "let in", "0"]).spawn().unwrap();
        tidings_testkit::finish_within(publish, Duration::from_secs(30)).status.success()
    });
    // Bad input, each connection in a place of its own.
    let expected = "no subprotocol: status=400 MQTT over WebSocket needs the subprotocol \"mqtt\" (or \"mqttv3.1\"); \
                    offered: [\"chat\"]\ntext message: close=1003 MQTT over WebSocket takes binary messages only\n";
    assert_eq!(run(&["refusals", &urls[1], "5"]), expected);
}

/// A users file (written by `tidings passwd`) where carol (password `carol-pw`) may read
/// everything and publish under `orders.` but not to `orders.audit`; `more`, if any, are the
/// arguments of one more `tidings passwd` after the file's name.
fn carol_users(dir: &Path, more: &[&str]) -> PathBuf {
    let users = dir.join("users.toml");
    let file = users.to_str().unwrap();
    let carol = ["carol", "--password", "carol-pw"];
    for args in [carol.as_slice(), more].into_iter().filter(|args| !args.is_empty()) {
        let out = tidings(&[&["passwd", "--file", file], args].concat());
        assert!(out.status.success(), "passwd: {}", text(&out.stderr));
    }
    let rules = "name = \"carol\"\nsubscribe = { allow = [\">\"] }\n\
                 publish = { allow = [\"orders.>\"], deny = [\"orders.audit\"] }";
    let doc = std::fs::read_to_string(&users).unwrap().replace("name = \"carol\"", rules);
    std::fs::write(&users, doc).unwrap();
    users
}

#[test]
fn over_websocket_logins_and_topic_permissions_hold_as_over_tcp() {
    if !mqtt_js_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let users = carol_users(dir.path(), &[]);
    let config =
        format!("[security]\nusers_file = {users:?}\nfailure_delay = \"50ms\"\n[mqtt]\nwebsocket = \"127.0.0.1:0\"\n");
    let b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    let url = format!("ws://{}/mqtt", b.ready.mqtt_ws.expect("the ready line names the WebSocket listener"));
    let as_carol = |password: &str, args: &[&str]| {
        let mut command = node(args);
        command.env("MQTT_USER", "carol").env("MQTT_PASSWORD", password);
        command
    };
    let finish =
        |mut command: Command| tidings_testkit::finish_within(command.spawn().unwrap(), Duration::from_secs(30));

    let wrong = finish(as_carol("nope", &["publish", &url, "5", "orders/new", "x", "0"]));
    assert!(!wrong.status.success(), "a wrong password was let in");
    let anonymous = finish(node(&["publish", &url, "5", "orders/new", "x", "0"]));
    assert!(!anonymous.status.success(), "a client without a login was let in");

    let args = ["subscribe", &url, "5", "orders/#", "1", "1"];
    let sub = Subscriber::spawn(as_carol("carol-pw", &args), &args);
    let denied = finish(as_carol("carol-pw", &["publish", &url, "5", "orders/audit", "audit", "1"]));
    assert!(!denied.status.success(), "a denied QoS 1 publish was acknowledged");
    assert!(text(&denied.stderr).to_lowercase().contains("not authorized"), "{}", text(&denied.stderr));
    let allowed = finish(as_carol("carol-pw", &["publish", &url, "5", "orders/new", "fine", "1"]));
    assert!(allowed.status.success(), "{}", text(&allowed.stderr));
    assert_eq!(sub.finish(), ["orders/new fine qos=1 retain=false"], "only the allowed publish came");
}

#[test]
fn scram_enhanced_authentication_logs_in_re_authenticates_and_applies_the_users_permissions() {
    if !mqtt_js_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `tidings passwd` writes the SCRAM credential beside the argon2id hash; dave has none.
    let users = carol_users(dir.path(), &["dave", "--password", "dave-pw", "--no-scram"]);
    let config = format!(
        "[security]\nusers_file = {users:?}\nfailure_delay = \"50ms\"\n[limits]\nhandshake_timeout = \"1s\"\n\
         [mqtt]\nlisten = \"127.0.0.1:0\"\nwebsocket = \"127.0.0.1:0\"\n"
    );
    let b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    let urls = [format!("mqtt://{}", b.ready.mqtt.unwrap()), format!("ws://{}/mqtt", b.ready.mqtt_ws.unwrap())];
    let finish = |args: &[&str]| tidings_testkit::finish_within(node(args).spawn().unwrap(), Duration::from_secs(30));

    let args = ["subscribe", &urls[0], "5", "orders/#", "1", "2"];
    let mut as_carol = node(&args);
    as_carol.env("MQTT_USER", "carol").env("MQTT_PASSWORD", "carol-pw");
    let sub = Subscriber::spawn(as_carol, &args);
    for url in &urls {
        let topic = format!("orders/{}", door(url));
        let out = run(&["scram", url, "5", "carol", "carol-pw", &topic]);
        assert_eq!(out, "connected verified=true\nreauthenticated verified=true\npublished\n", "{url}");
    }
    assert_eq!(sub.finish(), ["orders/tcp scram qos=1 retain=false", "orders/ws scram qos=1 retain=false"]);

    // The user's permissions hold as for a password login.
    let denied = finish(&["scram", &urls[0], "5", "carol", "carol-pw", "orders/audit"]);
    assert!(!denied.status.success(), "a denied QoS 1 publish was acknowledged");
    assert!(text(&denied.stderr).to_lowercase().contains("not authorized"), "{}", text(&denied.stderr));
    // A wrong password, a user without a SCRAM credential and an unknown one: all 0x87.
    for (user, password) in [("carol", "nope"), ("dave", "dave-pw"), ("mallory", "x")] {
        let out = finish(&["scram", &urls[1], "5", user, password, "orders/x"]);
        assert!(!out.status.success(), "{user} was let in");
        assert_eq!(text(&out.stdout), "refused code=135\n", "{user}: {}", text(&out.stderr));
    }
    // A client that never answers the server's first message is closed at the handshake timeout
    // (1 s here).
    let started = std::time::Instant::now();
    assert_eq!(run(&["scram", &urls[0], "5", "carol", "carol-pw", "orders/x", "stall"]), "closed\n");
    assert!(started.elapsed() < Duration::from_secs(8), "closed after {:?}", started.elapsed());
    // So is a re-authentication never finished, though the client's pings keep it from silence.
    let started = std::time::Instant::now();
    let out = run(&["scram", &urls[1], "5", "carol", "carol-pw", "orders/x", "stall-reauth"]);
    assert_eq!(out, "connected verified=true\nclosed\n");
    assert!(started.elapsed() < Duration::from_secs(8), "closed after {:?}", started.elapsed());
}
