//! `tidings bench mqtt --quick`: every point against a tidings broker process, and beside it
//! Debian's mosquitto when installed (this test alone may leave the peer out; the bench itself
//! refuses to run without a peer it was asked for, checked here too). No speed is asserted;
//! what is checked holds on any machine: messages arrived, every QoS 1 publish was acknowledged,
//! the idle connections were all held, and the CSV has every broker's rows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn bench(args: &[&str], out: &Path) -> (Output, Value) {
    let json = out.join("summary.json");
    let output = Command::new(env!("CARGO_BIN_EXE_tidings"))
        .args(["bench", "mqtt", "--quick", "--out"])
        .arg(out)
        .args(args)
        .env("TIDINGS_BENCH_JSON", &json)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let value = std::fs::read_to_string(&json).map(|t| serde_json::from_str(&t).unwrap()).unwrap_or(Value::Null);
    (output, value)
}

fn figure(row: &Value, name: &str) -> f64 {
    row["figures"].as_array().unwrap().iter().find(|f| f[0] == name).and_then(|f| f[1].as_f64()).unwrap()
}

fn mosquitto_installed() -> bool {
    let found = Command::new("mosquitto").arg("-h").stdout(Stdio::null()).status().is_ok()
        || Path::new("/usr/sbin/mosquitto").is_file();
    if !found {
        eprintln!("mosquitto (the broker) is not installed: tidings is measured alone");
    }
    found
}

#[test]
fn the_quick_mqtt_bench_measures_every_point_and_writes_its_csv() {
    let dir = tempfile::tempdir().unwrap();
    let with_peer = mosquitto_installed();
    let (out, json) = bench(&["--peers", if with_peer { "mosquitto" } else { "none" }], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let rows = json["rows"].as_array().unwrap();
    let systems: &[&str] = if with_peer { &["tidings", "mosquitto"] } else { &["tidings"] };
    for system in systems {
        let of = |prefix: &str| {
            rows.iter()
                .find(|r| r["system"] == *system && r["point"].as_str().unwrap().starts_with(prefix))
                .unwrap_or_else(|| panic!("no {system} row for {prefix}: {stderr}"))
        };
        for point in ["qos0 1->1 ", "qos0 1->10 "] {
            let row = of(point);
            assert!(figure(row, "sent") > 0.0 && figure(row, "received") > 0.0, "{system} {point}: {row}");
            assert_eq!(figure(row, "dropped_subscribers"), 0.0, "{system} {point}: {row}");
            assert!(figure(row, "received") <= figure(row, "sent") * if point.contains("10") { 10.0 } else { 1.0 });
        }
        let qos1 = of("qos1 ");
        assert!(figure(qos1, "published") > 0.0, "{system}: {qos1}");
        assert_eq!(figure(qos1, "acked"), figure(qos1, "published"), "{system}: every QoS 1 publish acknowledged");
        let idle = of("idle ");
        assert_eq!(figure(idle, "connections"), 200.0);
        assert!(figure(idle, "rss_after_bytes") > 0.0 && figure(idle, "bytes_per_connection").is_finite());
    }
    let csv = std::fs::read_to_string(dir.path().join("mqtt.csv")).unwrap();
    assert!(csv.starts_with("point,system,rep,figure,value,load_before,load_after\n"));
    for system in systems {
        assert!(csv.contains(&format!("qos1 window=100 size=256,{system},1,acked_msg_s,")), "{csv}");
    }
    let md = std::fs::read_to_string(dir.path().join("mqtt.md")).unwrap();
    assert!(md.contains("QUICK RUN") && md.contains("| qos0 1->1 size=256 | received_msg_s |"), "{md}");
}

#[test]
fn the_bench_refuses_to_run_without_the_peer_it_was_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = bench(&["--peers", "mosquitto", "--mosquitto", "/nonexistent/mosquitto"], dir.path());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the peer mosquitto is missing"), "{stderr}");
    assert!(!dir.path().join("mqtt.csv").exists(), "nothing is measured without the peer");
}
