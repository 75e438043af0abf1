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

/// Starts `tidings sub ...` and returns once its subscription is active: the broker's
/// subscription gauge has grown by one.
fn start_sub(b: &BrokerProcess, args: &[&str]) -> Child {
    let before = b.metric("tidings_subscriptions").unwrap();
    let child = Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.metric("tidings_subscriptions").unwrap() <= before {
        assert!(Instant::now() < deadline, "subscriber did not subscribe");
        std::thread::sleep(Duration::from_millis(20));
    }
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

#[test]
fn bad_arguments_get_clear_errors_and_a_nonzero_exit() {
    let b = broker(&[]);
    let server = b.tcp();
    let out = tidings(&["sub", "--server", &server, "a.>.b"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid pattern"));
    let out = tidings(&["pub", "--server", &server, "a.*", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid topic"));
    let out = tidings(&["pub", "--server", &server, "a", "-p", "novalue"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));
    let out = tidings(&["pub", "--server", "127.0.0.1:1", "a", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
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

fn broker(extra: &[&str]) -> BrokerProcess {
    BrokerProcess::start(bin(), extra).expect("broker starts")
}
