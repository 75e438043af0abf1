//! Black-box tests of the `tidings` command line: the contract scripts rely on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tidings_testkit::BrokerProcess;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

fn tidings(args: &[&str]) -> Output {
    let child = Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    finish(child)
}

/// Waits at most 20 s for `child`; kills it and fails the test past that.
fn finish(child: Child) -> Output {
    tidings_testkit::finish_within(child, Duration::from_secs(20))
}

/// Starts `tidings ARGS` with stdout and stderr captured.
fn spawn(args: &[&str]) -> Child {
    Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Waits (at most 10 s) until the broker's metric `name` reaches `at_least`.
fn wait_metric(b: &BrokerProcess, name: &str, at_least: f64, what: &str) {
    let what = format!("{what}: {name} stayed below {at_least}");
    tidings_testkit::wait_until(&what, Duration::from_secs(10), || b.metric(name).unwrap() >= at_least);
}

/// Starts `tidings sub ...` and returns once its subscription is active: the broker's
/// subscription gauge has grown by one.
fn start_sub(b: &BrokerProcess, args: &[&str]) -> Child {
    let before = b.metric("tidings_subscriptions").unwrap();
    let child = spawn(args);
    wait_metric(b, "tidings_subscriptions", before + 1.0, "subscriber did not subscribe");
    child
}

/// Waits for a `sub` to exit and parses its JSON lines.
fn lines(child: Child) -> Vec<serde_json::Value> {
    let out = finish(child);
    assert!(out.status.success(), "sub failed: {}", String::from_utf8_lossy(&out.stderr));
    BufReader::new(&out.stdout[..]).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect()
}

#[test]
fn sub_json_prints_the_documented_fields_and_exits_after_count() {
    let b = broker(&[]);
    let server = b.tcp();
    let sub = start_sub(&b, &["sub", "--server", &server, "plant.>", "--count", "2", "--json"]);
    let p = tidings(&["pub", "--server", &server, "plant.line3.temp", "21.5C", "-p", "sym=IBM", "-p", "price=120"]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let p = tidings(&["pub", "--server", &server, "plant.line4.temp", "-p", "ok=true", "-p", "code='042'"]);
    assert!(p.status.success());
    let got = lines(sub);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["topic"], "plant.line3.temp");
    assert_eq!(got[0]["payload"], "21.5C");
    assert_eq!(got[0]["properties"]["sym"], "IBM");
    assert_eq!(got[0]["properties"]["price"], 120);
    assert!(got[0]["sent_us"].as_u64().unwrap() > 1_600_000_000_000_000);
    assert!(got[0]["latency_us"].as_u64().unwrap() < 10_000_000);
    assert_eq!(got[1]["properties"]["ok"], true);
    assert_eq!(got[1]["properties"]["code"], "042");
    assert_eq!(got[1]["payload"], "");
}

#[test]
fn binary_payloads_are_printed_as_base64() {
    let b = broker(&[]);
    let server = b.tcp();
    let sub = start_sub(&b, &["sub", "--server", &server, "bin", "--count", "1", "--json"]);
    // A UDP publish of a payload padded with 'x' is text; craft a non-UTF-8 payload via the raw client.
    let mut raw = tidings_testkit::RawConnection::handshake(&server).unwrap();
    let m = tidings_wire::Message::new("bin", &[], bytes::Bytes::from_static(&[0xff, 0xfe, 0x00]), 1).unwrap();
    raw.send(&tidings_wire::Frame::Publish(m)).unwrap();
    let got = lines(sub);
    assert_eq!(got[0]["payload_base64"], "//4A");
    assert!(got[0].get("payload").is_none());
}

#[test]
fn wildcards_select_topics_through_the_cli() {
    let b = broker(&[]);
    let server = b.tcp();
    let star = start_sub(&b, &["sub", "--server", &server, "a.*.c", "--count", "1", "--json"]);
    for topic in ["a.b.d", "a.b.c.d", "a.b.c"] {
        assert!(tidings(&["pub", "--server", &server, topic, topic]).status.success());
    }
    let got = lines(star);
    assert_eq!(got[0]["topic"], "a.b.c", "the first two do not match a.*.c");
}

#[test]
fn udp_publish_and_subscribe_through_the_cli() {
    let b = broker(&[]);
    let udp = b.udp();
    let sub = start_sub(&b, &["sub", "--udp", "--server", &udp, "u.>", "--count", "3", "--json"]);
    let p = tidings(&["pub", "--udp", "--server", &udp, "u.x", "hi", "--count", "3", "--rate", "200"]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let got = lines(sub);
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|g| g["payload"] == "hi"));
}

#[test]
fn pub_as_a_load_generator_pads_payloads_and_reports_its_rate() {
    let b = broker(&[]);
    let server = b.tcp();
    let sub = start_sub(&b, &["sub", "--server", &server, "load", "--count", "500", "--json"]);
    let p = tidings(&["pub", "--server", &server, "load", "--count", "500", "--size", "64"]);
    assert!(p.status.success());
    assert!(String::from_utf8_lossy(&p.stderr).contains("published 500 messages of 64 B"));
    let got = lines(sub);
    assert_eq!(got.len(), 500);
    assert_eq!(got[0]["payload"].as_str().unwrap().len(), 64);
}

#[test]
fn ping_reports_the_round_trip_distribution() {
    let b = broker(&[]);
    for args in [
        vec!["ping", "--server", &b.tcp(), "--count", "3"],
        vec!["ping", "--udp", "--server", &b.udp(), "--count", "3"],
    ] {
        let out = tidings(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("3 round trips: min") && text.contains("p99"), "{text}");
    }
}

/// Asserts a usage error: exit status 2 and a message containing `says`.
fn assert_usage_error(args: &[&str], says: &str) {
    let out = tidings(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err:?} does not say {says:?}");
}

#[test]
fn usage_errors_exit_2_naming_the_flag_and_connection_failures_exit_1() {
    let b = broker(&[]);
    let server = b.tcp();
    assert_usage_error(&["sub", "--server", &server, "a.>.b"], "<PATTERNS>");
    assert_usage_error(&["pub", "--server", &server, "a.*", "x"], "<TOPIC>");
    assert_usage_error(&["pub", "--server", &server, "a", "-p", "novalue"], "KEY=VALUE");
    assert_usage_error(
        &["pub", "--server", &server, "a", "--rate", "0"],
        "--rate <MSGS_PER_SEC>': must be a number above 0",
    );
    assert_usage_error(&["pub", "--server", &server, "a", "--count", "0"], "--count <COUNT>': must be at least 1");
    assert_usage_error(&["sub", "--server", &server, "a", "--count", "0"], "must be at least 1");
    assert_usage_error(&["ping", "--server", &server, "--count", "0"], "must be at least 1");
    assert_usage_error(&["bench", "tput", "--reps", "0"], "--reps <REPS>': must be at least 1");
    assert_usage_error(&["pub", "--server", "nats://x:4222", "a"], "unknown scheme");
    assert_usage_error(&["broker", "--listen", "nowhere"], "listen.tcp");
    assert_usage_error(&["pub", "--server", &server, "a", "--log-level", "loud=="], "--log-level");
    let out = tidings(&["pub", "--server", "127.0.0.1:1", "a", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect") && err.matches("Connection refused").count() == 1, "{err}");
}

#[test]
fn a_client_pointed_at_the_admin_port_is_told_so() {
    let b = broker(&[]);
    let admin = b.ready.admin.unwrap().to_string();
    let out = tidings(&["ping", "--server", &admin, "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("looks like the admin port"));
}

#[test]
fn the_server_may_be_a_url_or_come_from_the_environment() {
    let b = broker(&[]);
    let url = format!("tidings://{}", b.tcp());
    assert!(tidings(&["ping", "--server", &url, "--count", "1"]).status.success());
    let child = Command::new(bin())
        .args(["ping", "--count", "1"])
        .env("TIDINGS_SERVER", b.tcp())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_closed_stdout_ends_a_command_quietly_with_status_0() {
    let b = broker(&[]);
    let mut child = Command::new(bin())
        .args(["ping", "--server", &b.tcp(), "--count", "100000", "--interval-ms", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("pong"), "{first}");
    // The reader is gone (as `| head -1` leaves): the next write fails with EPIPE.
    let out = finish(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn pub_from_standard_input_round_trips_a_binary_payload_and_sub_takes_several_patterns() {
    use std::io::Write;
    let b = broker(&[]);
    let server = b.tcp();
    let sub = start_sub(&b, &["sub", "--server", &server, "a.>", "b.*", "--count", "2", "--json"]);
    // Two subscriptions: wait for the second as well.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.metric("tidings_subscriptions").unwrap() < 2.0 {
        assert!(Instant::now() < deadline, "the second pattern did not subscribe");
        std::thread::sleep(Duration::from_millis(20));
    }
    let payload: Vec<u8> = (0..=255u8).rev().collect();
    let mut publisher = Command::new(bin())
        .args(["pub", "--server", &server, "a.x.y", "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    publisher.stdin.take().unwrap().write_all(&payload).unwrap();
    assert!(finish(publisher).status.success());
    let file = std::env::temp_dir().join(format!("tidings-payload-{}", std::process::id()));
    std::fs::write(&file, b"from a file").unwrap();
    assert!(tidings(&["pub", "--server", &server, "b.z", "--file", file.to_str().unwrap()]).status.success());
    let _ = std::fs::remove_file(&file);
    let got = lines(sub);
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD.decode(got[0]["payload_base64"].as_str().unwrap()).unwrap();
    assert_eq!((got[0]["topic"].as_str(), decoded), (Some("a.x.y"), payload));
    assert_eq!((got[1]["topic"].as_str(), got[1]["payload"].as_str()), (Some("b.z"), Some("from a file")));
}

#[test]
fn a_broker_log_written_to_a_file_has_no_escape_codes_and_can_be_json() {
    for (format, check) in [("text", "broker started"), ("json", "\"level\":\"INFO\"")] {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let mut child = Command::new(bin())
            .args(["broker", "--listen", "127.0.0.1:0", "--udp", "off", "--admin", "off", "--log-format", format])
            .arg("--data")
            .arg(dir.path().join("data"))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        tidings_testkit::send_signal(child.id(), tidings_testkit::Signal::Term).unwrap();
        assert!(finish(child).status.success());
        let text = std::fs::read_to_string(dir.path().join("log")).unwrap();
        assert!(!text.contains('\x1b'), "escape codes in {text:?}");
        assert!(text.contains(check), "{format}: {text}");
    }
}

#[test]
fn print_config_shows_the_effective_configuration() {
    let out = tidings(&["broker", "--print-config", "--listen", "127.0.0.1:7000", "--udp", "off"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tcp = \"127.0.0.1:7000\""), "{text}");
    assert!(text.contains("udp = \"\""), "{text}");
    assert!(text.contains("[slow_consumer]"), "{text}");
}

#[test]
fn a_bad_config_file_is_refused_with_every_problem() {
    let path = std::env::temp_dir().join(format!("tidings-bad-{}.toml", std::process::id()));
    std::fs::write(&path, "[listen]\ntcp = \"nowhere\"\n[slow_consumer]\nmax_messages = 0\n").unwrap();
    let out = tidings(&["broker", "--config", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listen.tcp") && err.contains("slow_consumer.max_messages"), "{err}");
}

#[test]
fn worker_threads_sets_how_many_threads_run_sessions() {
    let one = broker(&["--worker-threads", "1"]);
    let three = broker(&["--worker-threads", "3"]);
    assert_eq!(one.threads_named("tokio-rt-worker").unwrap(), 1);
    assert_eq!(three.threads_named("tokio-rt-worker").unwrap(), 3);
    let out = tidings(&["broker", "--print-config", "--worker-threads", "2"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("worker_threads = 2"));
}

fn broker(extra: &[&str]) -> BrokerProcess {
    BrokerProcess::start(bin(), extra).expect("broker starts")
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_itself() {
    let out = tidings(&["completions", "bash"]);
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("_tidings") && script.contains("--log-level"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    assert!(tidings(&["man", "--out", dir.path().to_str().unwrap()]).status.success());
    for page in ["tidings.1", "tidings-net-fault.1", "tidings-pub.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap_or_default();
        assert!(text.contains(".TH"), "{page} is not a manual page");
    }
}

#[test]
fn every_help_has_examples_and_the_top_level_lists_every_command() {
    let top = String::from_utf8_lossy(&tidings(&["--help"]).stdout).to_string();
    for command in ["broker", "pub", "sub", "ping", "net", "bench", "completions", "man"] {
        assert!(top.contains(&format!("  {command} ")), "top-level help lacks {command}");
    }
    for command in
        [&["--help"][..], &["pub", "--help"], &["sub", "--help"], &["broker", "--help"], &["net", "fault", "--help"]]
    {
        let help = String::from_utf8_lossy(&tidings(command).stdout).to_string();
        assert!(help.contains("Examples:"), "{command:?} has no examples");
        assert!(!help.to_lowercase().contains("seed 0"), "{command:?} speaks of seeds");
    }
}

#[test]
fn sub_says_on_stderr_when_its_broker_goes_and_comes_back_and_keeps_receiving() {
    let first = broker(&[]);
    let server = first.tcp();
    let mut sub = start_sub(&first, &["sub", "--server", &server, "t.>", "--count", "1", "--json"]);
    let scratch = tempfile::tempdir().unwrap();
    drop(first); // SIGKILL
    let second = broker_on(&server, scratch.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while second.metric("tidings_subscriptions").unwrap() < 1.0 {
        assert!(Instant::now() < deadline, "sub did not resubscribe");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(tidings(&["pub", "--server", &server, "t.after", "back"]).status.success());
    let stdout = sub.stdout.take().unwrap();
    let out = finish(sub);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for said in ["connected to", "disconnected from", "reconnecting to", "reconnected to"] {
        assert!(err.contains(said), "stderr lacks {said:?}: {err}");
    }
    let lines: Vec<String> = BufReader::new(stdout).lines().map(Result::unwrap).collect();
    let gap: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!((gap["gap"].as_bool(), gap["unknown"].as_bool()), (Some(true), Some(true)), "{lines:?}");
    assert!(lines[1].contains("\"t.after\""), "{lines:?}");
}

#[test]
fn a_udp_port_that_refuses_fails_at_once() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = Instant::now();
    let out = tidings(&["ping", "--udp", "--server", &format!("127.0.0.1:{port}"), "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(4), "waited for the 5 s handshake timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_changed_limit_to_a_live_broker_without_dropping_its_clients() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, "[limits]\nmax_subscriptions_per_session = 2\n").unwrap();
    let data = dir.path().join("data");
    let args = ["broker", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:0", "--udp", "off"];
    let all: Vec<&str> = args.into_iter().chain(["--admin", "127.0.0.1:0", "--data", data.to_str().unwrap()]).collect();
    let b = BrokerProcess::start_with_args(bin(), &all).unwrap();
    let client = tidings_client::Client::connect(b.tcp()).await.unwrap();
    let _one = client.subscribe("a").await.unwrap();
    let _two = client.subscribe("b").await.unwrap();
    assert!(client.subscribe("c").await.is_err(), "the limit of 2 holds");
    // A refused frame closes the connection; the client reconnects and subscribes again.
    let subscribed = || b.metric("tidings_subscriptions").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while subscribed() < 2.0 {
        assert!(Instant::now() < deadline, "the client did not resubscribe");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opened = || b.metric("tidings_connections_opened_total{transport=\"tcp\"}").unwrap();
    let before = opened();

    std::fs::write(&config, "[limits]\nmax_subscriptions_per_session = 3\n[listen]\ntcp = \"127.0.0.1:1\"\n").unwrap();
    b.signal(tidings_testkit::Signal::Hup).unwrap();
    while b.metric("tidings_config_reloads_total").unwrap() < 1.0 {
        assert!(Instant::now() < deadline, "the broker did not reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let third = client.subscribe("c").await.expect("the new limit of 3 applies");
    assert_eq!(opened(), before, "the reload dropped no client");
    assert_eq!(subscribed(), 3.0);
    assert!(client.subscribe("d").await.is_err(), "the new limit of 3 holds");
    drop(third);
}

/// A broker on `tcp` (an address a killed broker had), as soon as the port is free again.
fn broker_on(tcp: &str, dir: &Path) -> BrokerProcess {
    let data = dir.join("data");
    let args = ["broker", "--listen", tcp, "--udp", "off", "--admin", "127.0.0.1:0", "--data", data.to_str().unwrap()];
    for _ in 0..50 {
        if let Ok(b) = BrokerProcess::start_with_args(bin(), &args) {
            return b;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no broker could bind {tcp} again");
}

#[test]
fn a_publisher_whose_broker_restarts_says_what_the_drop_cost() {
    let first = broker(&[]);
    let server = first.tcp();
    let publisher = spawn(&["pub", "--server", &server, "t.x", "y", "--count", "60000", "--rate", "20000"]);
    wait_metric(&first, "tidings_messages_in_total", 1000.0, "the publisher did not start");
    let scratch = tempfile::tempdir().unwrap();
    drop(first); // SIGKILL mid-run
    let _second = broker_on(&server, scratch.path());
    let out = finish(publisher);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dropped 1 time(s)") && err.contains("of 60000 messages were never sent"), "{err}");
    let unsent: u64 = err.split("time(s): ").nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
    assert_eq!(out.status.code(), Some(if unsent > 0 { 1 } else { 0 }), "{err}");
}

/// A broker whose log goes to a file the test reads (stderr captured, `RUST_LOG=warn`).
struct LoggedBroker {
    child: Child,
    log: std::path::PathBuf,
    ready: serde_json::Value,
    _dir: tempfile::TempDir,
}

impl LoggedBroker {
    fn start(args: &[&str]) -> LoggedBroker {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let data = dir.path().join("data");
        let mut child = Command::new(bin())
            .args(["broker", "--listen", "127.0.0.1:0", "--udp", "off", "--admin", "off", "--data"])
            .arg(&data)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        LoggedBroker { child, log, ready: serde_json::from_str(&line).unwrap(), _dir: dir }
    }

    /// The log once it contains `text` (at most 10 s), then `settle` later.
    fn log_with(&self, text: &str, settle: Duration) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&self.log).unwrap_or_default().contains(text) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(settle);
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LoggedBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_peer_that_cannot_be_reached_is_a_warning_in_the_log() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let b = LoggedBroker::start(&["--cluster-insecure", "--cluster-listen", "127.0.0.1:0", "--peer", &closed]);
    // Several redials (from 100 ms apart) happen in the second after the first: none may warn.
    let text = b.log_with("cannot reach peer", Duration::from_secs(1));
    assert!(text.contains("cannot reach peer") && text.contains(&closed), "{text}");
    assert_eq!(text.matches("cannot reach peer").count(), 1, "repeated within 30 s: {text}");
}

#[test]
fn a_slow_consumer_and_a_refused_client_are_named_in_the_log_once_not_per_message() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("b.toml");
    std::fs::write(&config, "[slow_consumer]\nmax_messages = 16\nmax_stall = \"1ms\"\n").unwrap();
    let b = LoggedBroker::start(&["--config", config.to_str().unwrap()]);
    let tcp = b.ready["tcp"].as_str().unwrap().to_string();
    let mut stalled = tidings_testkit::RawConnection::handshake(&tcp).unwrap();
    let subscribe = tidings_wire::Frame::Subscribe(tidings_wire::Subscribe {
        queue_key: None,
        id: tidings_wire::SubId(1),
        pattern: "t.>".into(),
        selector: None,
        mode: tidings_wire::DeliveryMode::BestEffort,
        durable: None,
        group: None,
    });
    stalled.send(&subscribe).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let out = tidings(&["pub", "--server", &tcp, "t.x", "--count", "20000", "--size", "2000"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut bad = std::net::TcpStream::connect(&tcp).unwrap();
    bad.write_all(&[0, 0, 0, 1, 0x7e]).unwrap(); // an unknown frame type before HELLO
    let text = b.log_with("refused a frame", Duration::from_millis(200));
    assert_eq!(text.matches("slow consumer:").count(), 1, "{text}");
    assert!(text.contains("127.0.0.1:") && text.contains("(raw)"), "the client is named by address and name: {text}");
    assert!(text.contains("refused a frame") && text.contains("unknown_frame_type"), "{text}");
}

#[test]
fn a_request_that_trickles_its_headers_is_cut_off_and_the_admin_port_keeps_serving() {
    use std::io::{Read, Write};
    let b = broker(&[]);
    let admin = b.ready.admin.unwrap();
    let mut slow = std::net::TcpStream::connect(admin).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap(); // never finished
    assert!(tidings_testkit::http_get(admin, "/healthz").is_ok(), "the port answers others meanwhile");
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    assert!(started.elapsed() < Duration::from_secs(15), "a trickling request held its connection");
    assert!(!String::from_utf8_lossy(&answer).contains(" 200 "), "{}", String::from_utf8_lossy(&answer));
}

#[test]
fn readyz_says_ready_only_once_the_configured_peers_are_linked() {
    let alone = broker(&[]);
    let body = tidings_testkit::http_get(alone.ready.admin.unwrap(), "/readyz").unwrap();
    assert!(body.contains("\"ready\":true"), "{body}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let waiting = broker(&["--cluster-insecure", "--cluster-listen", "127.0.0.1:0", "--peer", &closed]);
    let refused = tidings_testkit::http_get(waiting.ready.admin.unwrap(), "/readyz").unwrap_err().to_string();
    assert!(refused.contains("503"), "{refused}");
}

#[test]
fn state_shows_a_page_of_each_filter_list_and_every_size() {
    let b = broker(&["--cluster-insecure", "--cluster-listen", "127.0.0.1:0"]);
    let mut raw = tidings_testkit::RawConnection::handshake(&b.tcp()).unwrap();
    for id in 0..150u32 {
        let subscribe = tidings_wire::Frame::Subscribe(tidings_wire::Subscribe {
            queue_key: None,
            id: tidings_wire::SubId(id),
            pattern: format!("t.{id}"),
            selector: None,
            mode: tidings_wire::DeliveryMode::BestEffort,
            durable: None,
            group: None,
        });
        raw.send(&subscribe).unwrap();
    }
    wait_metric(&b, "tidings_subscriptions", 150.0, "the subscriptions did not register");
    let admin = b.ready.admin.unwrap();
    let state = |query: &str| -> serde_json::Value {
        serde_json::from_str(&tidings_testkit::http_get(admin, &format!("/state{query}")).unwrap()).unwrap()
    };
    let first = state("");
    assert_eq!(first["router"]["local"].as_array().unwrap().len(), 100, "a page by default");
    assert_eq!(first["router"]["metrics"]["local_filters"], 150, "the size is always there");
    assert_eq!(state("?filters=10&offset=145")["router"]["local"].as_array().unwrap().len(), 5);
    assert_eq!(state("?filters=all")["router"]["local"].as_array().unwrap().len(), 150);
}

/// `/state` with 100,000 subscriptions (it was 17.9 MiB and took 3.4 s, slowing every client):
/// a page is small and quick, and a client beside it keeps its latency. Prints the broker's
/// memory per subscription too.
#[test]
fn state_with_100000_subscriptions_is_small_quick_and_slows_no_one() {
    let b = broker(&["--cluster-insecure", "--cluster-listen", "127.0.0.1:0"]);
    let rss = || b.rss().unwrap();
    let before = rss();
    let mut holders = Vec::new();
    for half in 0..2u32 {
        let mut raw = tidings_testkit::RawConnection::handshake(&b.tcp()).unwrap();
        let mut burst = Vec::new();
        for id in 0..50_000u32 {
            let subscribe = tidings_wire::Frame::Subscribe(tidings_wire::Subscribe {
                queue_key: None,
                id: tidings_wire::SubId(id),
                pattern: format!("t.{half}.{id}"),
                selector: None,
                mode: tidings_wire::DeliveryMode::BestEffort,
                durable: None,
                group: None,
            });
            burst.extend_from_slice(&subscribe.to_bytes().unwrap());
        }
        raw.send_bytes(&burst).unwrap();
        holders.push(raw);
    }
    tidings_testkit::wait_until("100,000 subscriptions registered", Duration::from_secs(120), || {
        b.metric("tidings_subscriptions").ok() == Some(100_000.0)
    });
    let per_subscription = (rss() - before) / 100_000.0;
    let admin = b.ready.admin.unwrap();
    let idle = tidings_testkit::Neighbour::measure(&b.tcp(), Duration::from_secs(1)).unwrap();
    let neighbour = tidings_testkit::Neighbour::start(&b.tcp()).unwrap();
    let (mut slowest, mut largest) = (Duration::ZERO, 0);
    tidings_testkit::attack(|| {
        for _ in 0..5 {
            let started = Instant::now();
            let body = tidings_testkit::http_get(admin, "/state").unwrap();
            slowest = slowest.max(started.elapsed());
            largest = largest.max(body.len());
        }
    });
    eprintln!(
        "100,000 subscriptions: {per_subscription:.0} bytes of RSS each; /state at most {largest} bytes, {slowest:?}"
    );
    neighbour.stop().assert_unharmed(&idle, "/state with 100,000 subscriptions, 5 times");
    assert!(largest < 1 << 20, "/state is {largest} bytes");
    assert!(slowest < Duration::from_secs(2), "/state took {slowest:?}");
}

#[test]
fn info_reads_a_running_broker_from_its_admin_port() {
    let b = broker(&[]);
    let admin = b.ready.admin.unwrap().to_string();
    let _client = tidings_testkit::RawConnection::handshake(&b.tcp()).unwrap();
    let out = tidings(&["info", "--admin", &admin]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("alive true, ready true") && text.contains("connections 1,"), "{text}");
    assert_usage_error(&["info", "--admin", "nowhere"], "--admin");
}

#[test]
fn connz_and_subsz_list_connections_and_subscriptions_a_page_at_a_time() {
    let b = broker(&[]);
    let admin = b.ready.admin.unwrap();
    let get = |path: &str| -> serde_json::Value {
        serde_json::from_str(&tidings_testkit::http_get(admin, path).unwrap()).unwrap()
    };
    let server = b.tcp();
    let mut subs: Vec<Child> = ["orders.>", "prices.eu"]
        .iter()
        .map(|pattern| spawn(&["sub", "--server", &server, pattern, "--where", "qty > 2"]))
        .collect();
    let mut raw = tidings_testkit::RawConnection::handshake(&server).unwrap();
    for id in 0..3u32 {
        raw.send(&tidings_wire::Frame::Subscribe(tidings_wire::Subscribe {
            queue_key: None,
            id: tidings_wire::SubId(id),
            pattern: format!("raw.{id}"),
            selector: None,
            mode: tidings_wire::DeliveryMode::BestEffort,
            durable: None,
            group: None,
        }))
        .unwrap();
    }
    wait_metric(&b, "tidings_subscriptions", 5.0, "the subscriptions did not register");
    let all = get("/connz");
    assert_eq!(all["total"], 3, "{all}");
    let items = all["items"].as_array().unwrap();
    assert!(items.iter().all(|c| c["transport"] == "tcp" && c["client"].as_str().unwrap().contains("127.0.0.1")));
    let counts: Vec<u64> = items.iter().map(|c| c["subscriptions"].as_u64().unwrap()).collect();
    assert_eq!(counts.iter().sum::<u64>(), 5, "{all}");
    let second = get("/connz?offset=1&limit=1");
    assert_eq!((second["total"].as_u64(), second["items"].as_array().unwrap().len()), (Some(3), 1));
    assert_eq!(second["items"][0]["id"], items[1]["id"], "pages follow one order");
    let orders = get("/subsz?pattern=orders");
    assert_eq!(orders["total"], 1, "{orders}");
    assert_eq!(orders["items"][0]["pattern"], "orders.>");
    assert_eq!(orders["items"][0]["selector"], "qty > 2");
    assert_eq!(orders["items"][0]["mode"], "best-effort");
    assert_eq!(get("/subsz?limit=2")["items"].as_array().unwrap().len(), 2);
    // Unsubscribing and leaving show at once.
    raw.send(&tidings_wire::Frame::Unsubscribe(tidings_wire::Unsubscribe { id: tidings_wire::SubId(0) })).unwrap();
    wait_metric_at_most(&b, "tidings_subscriptions", 4.0);
    assert_eq!(get("/subsz?pattern=raw.")["total"], 2);
    let admin = admin.to_string();
    let out = tidings(&["info", "--admin", &admin, "--subscriptions", "--pattern", "orders.>"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("best-effort orders.> where qty > 2"), "{text}");
    assert!(text.contains("1 of 1 subscriptions"), "{text}");
    let out = tidings(&["info", "--admin", &admin, "--connections", "--limit", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 of 3 connections"), "{text}");
    for sub in &mut subs {
        let _ = sub.kill();
        let _ = sub.wait();
    }
    drop(raw);
    wait_metric_at_most(&b, "tidings_connections", 0.0);
    assert_eq!(get("/connz")["total"], 0, "closed connections leave the list");
}

/// Waits until `metric` is at most `value`.
fn wait_metric_at_most(b: &BrokerProcess, metric: &str, value: f64) {
    let what = format!("{metric} stayed above {value}");
    tidings_testkit::wait_until(&what, Duration::from_secs(10), || b.metric(metric).unwrap_or(f64::MAX) <= value);
}
