//! `tidings bench tput` and `latency`: short runs against a broker the command starts, read
//! back through the typed JSON rows (`$TIDINGS_BENCH_JSON`). No timing is asserted; what is
//! checked holds whatever the machine's speed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> (Output, Value) {
    // Numbered, as two tests may run the same experiment at once.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = std::env::temp_dir().join(format!("tidings-bench-test-{}-{}-{run}.json", std::process::id(), args[0]));
    let out = Command::new(Path::new(env!("CARGO_BIN_EXE_tidings")))
        .arg("bench")
        .args(args)
        .env("TIDINGS_BENCH_JSON", &json)
        .output()
        .unwrap();
    let value = std::fs::read_to_string(&json).map(|t| serde_json::from_str(&t).unwrap()).unwrap_or(Value::Null);
    let _ = std::fs::remove_file(&json);
    (out, value)
}

fn figure(row: &Value, name: &str) -> f64 {
    row["figures"].as_array().unwrap().iter().find(|f| f[0] == name).and_then(|f| f[1].as_f64()).unwrap()
}

#[test]
fn throughput_counts_every_numbered_message_once() {
    let (out, json) = bench(&["tput", "--reps", "1", "--duration", "0.3", "--max", "20000", "--subs", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = &json["rows"][0];
    assert_eq!(row["system"], "tidings");
    assert!(figure(row, "sent") > 0.0);
    assert_eq!((figure(row, "lost"), figure(row, "duplicates")), (0.0, 0.0));
    assert!(row["load_before"].is_number() && row["load_after"].is_number());
}

#[test]
fn latency_from_the_intended_send_time_is_never_below_latency_from_the_actual_one() {
    let (out, json) = bench(&["latency", "--reps", "1", "--duration", "0.5", "--subs", "3", "--rate", "500"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = &json["rows"][0];
    // Each message's intended time is at or before its actual send, so every quantile of the
    // first distribution is at least the same quantile of the second.
    for (intended, actual) in [("p50_us", "send_p50_us"), ("p99_us", "send_p99_us"), ("max_us", "send_max_us")] {
        assert!(figure(row, intended) >= figure(row, actual), "{intended} < {actual}: {row}");
    }
    assert!(figure(row, "achieved_rate") > 0.0);
    assert_eq!(figure(row, "lost"), 0.0);
}

#[test]
fn nats_that_cannot_be_found_is_a_clear_error() {
    let (out, _) = bench(&["latency", "--reps", "1", "--duration", "0.2", "--nats", "--nats-server", "/nonexistent"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn acked_publishing_counts_every_publish_acknowledged_after_its_sync_and_leaves_no_log_behind() {
    let dir = std::env::temp_dir().join(format!("tidings-bench-acked-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_text = dir.display().to_string();
    let (out, json) = bench(&["acked", "--reps", "1", "--duration", "0.5", "--window", "32", "--dir", &dir_text]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = &json["rows"][0];
    assert_eq!(row["system"], "tidings");
    assert!(figure(row, "acked") > 0.0, "{row}");
    assert_eq!(figure(row, "acked"), figure(row, "published"), "every publish was acknowledged: {row}");
    assert_eq!(figure(row, "errors"), 0.0);
    assert!(figure(row, "p50_us") <= figure(row, "p99_us") && figure(row, "p99_us") <= figure(row, "max_us"));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "the scratch log is removed: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench acked --window 1` counts the broker's context switches per publish: one at a time,
/// the log writer waits for each publish and is woken for it, so there is at least one; the
/// best-effort comparison answers every publish with its PING barrier; `--csv` holds the rows.
#[test]
fn acked_one_at_a_time_counts_the_brokers_switches_and_best_effort_is_answered_by_its_barrier() {
    let dir = std::env::temp_dir().join(format!("tidings-bench-switches-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_text = dir.display().to_string();
    let csv = std::env::temp_dir().join(format!("tidings-bench-switches-{}.csv", std::process::id()));
    let csv_text = csv.display().to_string();
    let args = ["acked", "--reps", "1", "--duration", "0.5", "--window", "1", "--dir", &dir_text, "--csv", &csv_text];
    let (out, json) = bench(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = &json["rows"][0];
    assert!(figure(row, "acked") > 0.0, "{row}");
    assert!(figure(row, "broker_switches_per_1k") >= 1000.0, "{row}");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.contains(",tidings,1,broker_switches_per_1k,"), "{text}");
    let (out, json) = bench(&["acked", "--best-effort", "--reps", "1", "--duration", "0.5", "--dir", &dir_text]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["point"], "best-effort+ping size=256");
    let row = &json["rows"][0];
    assert!(figure(row, "acked") > 0.0, "{row}");
    assert_eq!(figure(row, "acked"), figure(row, "published"), "every barrier came back: {row}");
    assert!(figure(row, "broker_switches_per_1k") > 0.0, "{row}");
    std::fs::remove_file(&csv).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench acked --replicas 3`: a cell of three brokers, the publisher on the first; every
/// publish acknowledged, and every replica applied them all (the bench's own check, read from
/// each broker's `/state`, would fail the run otherwise). The scratch data directories go.
#[test]
fn acked_on_a_three_replica_cell_is_acknowledged_and_applied_by_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().display().to_string();
    let args = ["acked", "--replicas", "3", "--reps", "1", "--duration", "0.5", "--window", "32", "--dir", &dir_text];
    let (out, json) = bench(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["point"], "acked size=256 window=32 fsync=always replicas=3");
    let row = &json["rows"][0];
    assert_eq!(row["system"], "tidings");
    let acked = figure(row, "acked");
    assert!(acked > 0.0, "{row}");
    assert_eq!(acked, figure(row, "published"), "every publish was acknowledged: {row}");
    assert_eq!(figure(row, "errors"), 0.0);
    // The warm-up publish and at least the first leader's empty entry are in the log too.
    assert!(figure(row, "replica_applied") >= acked + 2.0, "{row}");
    assert!(figure(row, "replica_extra_entries") >= 1.0, "{row}");
    assert!(figure(row, "p50_us") <= figure(row, "p99_us") && figure(row, "p99_us") <= figure(row, "max_us"));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the cell's data directories are removed: {left:?}");
}

/// `bench takeover`: each kill struck the leader the brokers agreed on and was answered by a
/// successor (the bench fails otherwise), every acknowledged publish was acknowledged once, of
/// one pubend, and is applied on every replica; the per-kill CSV has a row per kill.
#[test]
fn takeover_kills_the_leader_and_times_the_successors_first_acknowledgement() {
    let dir = tempfile::tempdir().unwrap();
    let (dir_text, csv) = (dir.path().display().to_string(), dir.path().join("kills.csv"));
    let csv_text = csv.display().to_string();
    let args = ["takeover", "--kills", "2", "--reps", "1", "--dir", &dir_text, "--csv", &csv_text];
    let (out, json) = bench(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = &json["rows"][0];
    assert_eq!(row["system"], "tidings");
    assert_eq!(figure(row, "kills"), 2.0, "{row}");
    assert!(figure(row, "acked") >= 20.0, "{row}");
    assert!(figure(row, "min_ms") <= figure(row, "median_ms") && figure(row, "median_ms") <= figure(row, "max_ms"));
    assert!(figure(row, "min_ms") > 2.0, "no answer counts within the grace after the kill: {row}");
    let rows: Vec<String> = std::fs::read_to_string(&csv).unwrap().lines().map(str::to_string).collect();
    assert_eq!(rows[0], "system,rep,kill,killed,took_ms");
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows[1].starts_with("tidings,1,1,p"), "{rows:?}");
    std::fs::remove_file(&csv).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the cell's data directories are removed: {left:?}");
}

/// Runs `bench NAME --quick --out OUT` and asserts that it succeeded, that `summary.json` says
/// the experiment completed, and that all of its `checks` internal checks held.
fn quick_suite_held(name: &str, out: &Path, checks: usize) {
    let out_text = out.display().to_string();
    let (run, _) = bench(&[name, "--quick", "--out", &out_text]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let status = summary.as_array().unwrap().iter().find(|s| s["experiment"] == name).unwrap();
    assert_eq!(status["completed"], true, "{status}");
    let held = status["checks"].as_array().unwrap();
    assert_eq!(held.len(), checks, "{status}");
    assert!(held.iter().all(|c| c["passed"] == true), "{status}");
}

/// `bench failures --quick`: the seed's three faults in `gryphon-fig3-replicated.toml` (the
/// publishers' cell p1, p2, p3 replicating each pubend's log); every internal check (exactly
/// once and in order at both subscribers, recovery after each fault, every fault injected, the
/// publishers going on at a mate before p1 was back) held, and the time series, the
/// publishers' crash rows and the plots were written. No timing is asserted beyond the
/// takeover coming before p1's restart.
#[test]
fn failures_quick_delivers_every_acknowledged_publish_once_in_order_through_the_faults() {
    let out_dir = tempfile::tempdir().unwrap();
    quick_suite_held("failures", out_dir.path(), 4);
    let csv = std::fs::read_to_string(out_dir.path().join("failures.csv")).unwrap();
    assert!(csv.starts_with("t_s,s1_deliveries,s1_latency_p50_ms"), "{}", &csv[..80.min(csv.len())]);
    let takeover = std::fs::read_to_string(out_dir.path().join("failures-takeover.csv")).unwrap();
    assert!(takeover.lines().any(|l| l.starts_with("1,tidings,") && l.ends_with(",true,true")), "{takeover}");
    for fault in ["b1-s1 link cut", "b1 crash", "p1 crash"] {
        assert!(csv.contains(&format!("fail: {fault}")), "{fault} is marked in the series");
    }
    for ext in ["png", "svg"] {
        assert!(out_dir.path().join(format!("failures.{ext}")).is_file());
    }
}

/// `bench overhead --quick`: best effort and guaranteed on `two-brokers.toml` with 10 and 100
/// subscribers; every internal check (each subscriber got all of its share, none twice or out
/// of order, every guaranteed publish acknowledged) held, and the rows and plots were written.
/// No timing is asserted.
#[test]
fn overhead_quick_delivers_every_subscribers_share_in_both_modes() {
    let out_dir = tempfile::tempdir().unwrap();
    quick_suite_held("overhead", out_dir.path(), 4);
    let csv = std::fs::read_to_string(out_dir.path().join("overhead.csv")).unwrap();
    for mode in ["best-effort", "guaranteed"] {
        assert!(csv.lines().any(|l| l.starts_with(mode)), "a {mode} row: {csv}");
    }
    for ext in ["png", "svg"] {
        assert!(out_dir.path().join(format!("overhead.{ext}")).is_file());
    }
}

#[test]
fn bench_store_writes_the_rows_it_prints_as_csv() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("store.csv");
    let out = Command::new(Path::new(env!("CARGO_BIN_EXE_tidings")))
        .args(["bench", "store", "--in-flight", "1,4", "--seconds", "0.2", "--raw-count", "20", "--fsync", "never"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--out")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column =
        |name: &str| header.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no {name} in {header:?}"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // The raw write + fdatasync reference, then one row per in-flight value, as printed.
    let in_flight: Vec<&str> = rows.iter().map(|r| r[column("in_flight")]).collect();
    assert_eq!(in_flight, ["1", "1", "4"], "{text}");
    let printed = String::from_utf8_lossy(&out.stdout);
    for row in &rows {
        assert_eq!(row.len(), header.len(), "{text}");
        assert_eq!(row[column("fsync")], "never");
        assert_eq!(row[column("size_b")], "256");
        let (engine, acked) = (row[column("engine")], row[column("acked_per_s")]);
        assert!(
            printed.contains(&format!("| {engine} | {} | {acked} |", row[column("in_flight")])),
            "{printed}\n{text}"
        );
        assert!(row[column("acked")].parse::<u64>().unwrap() > 0, "{text}");
    }
    // The scratch logs are gone; only the CSV is left.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("store.csv")]);
}

#[test]
fn security_quick_counts_tls_messages_permissions_and_password_logins() {
    let dir = std::env::temp_dir().join(format!("tidings-bench-security-test-{}", std::process::id()));
    let dir_text = dir.display().to_string();
    let (out, json) = bench(&["security", "--quick", "--rules", "200", "--out", &dir_text]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tls = &json["tls"]["rows"][0];
    assert_eq!(tls["point"], "tls tput 1->1 size=256");
    assert!(figure(tls, "sent") > 0.0, "{tls}");
    assert_eq!((figure(tls, "lost"), figure(tls, "duplicates")), (0.0, 0.0), "{tls}");
    for side in ["base", "loaded"] {
        let row = &json["permissions"][side][0];
        assert!(figure(row, "sent") > 0.0 && figure(row, "lost") == 0.0, "{side}: {row}");
    }
    assert!(json["permissions"]["ratio"].as_f64().unwrap() > 0.0);
    let connects = json["connect"]["rows"].as_array().unwrap();
    assert_eq!(connects.len(), 2, "argon2id and bcrypt, no NATS without --nats");
    for row in connects {
        // Every connection got its WELCOME after the password verified: none refused.
        assert_eq!((figure(row, "sequential"), figure(row, "errors")), (10.0, 0.0), "{row}");
        assert!(figure(row, "concurrent") > 0.0, "{row}");
    }
    for part in ["tls", "permissions", "connect"] {
        let csv = std::fs::read_to_string(dir.join(format!("security-{part}.csv"))).unwrap();
        assert!(csv.lines().count() >= 2, "{part}: {csv}");
    }
    // One part alone: the others are left out (null), not run.
    let (out, json) = bench(&["security", "--quick", "--parts", "permissions", "--rules", "20", "--out", &dir_text]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(json["tls"].is_null() && json["connect"].is_null(), "{json}");
    assert!(json["permissions"]["ratio"].as_f64().unwrap() > 0.0, "{json}");
    std::fs::remove_dir_all(&dir).unwrap();
}
