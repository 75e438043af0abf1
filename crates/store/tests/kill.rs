//! SIGKILL at random moments: a child process appends and prints each acknowledgement; the
//! parent kills it 50 times and then checks that every acknowledged record reads back byte for
//! byte. The child is this test binary run again with `STORE_KILL_CHILD_DIR` set.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{open, payload, record};
use tidings_store::{Completion, FsyncPolicy, Options, StdFs, Store, Token};

const CHILD_DIR: &str = "STORE_KILL_CHILD_DIR";

fn options() -> Options {
    Options { fsync: FsyncPolicy::Always, segment_bytes: 64 * 1024, reserve_bytes: 4096, ..Options::default() }
}

/// The payload of tick `t`: its length varies so records straddle sector boundaries.
fn payload_of(t: u64) -> Vec<u8> {
    payload(1, t, 40 + (t as usize * 37) % 300)
}

/// The child's body (a no-op unless the parent set `STORE_KILL_CHILD_DIR`): append forever,
/// 64 in flight, printing `ack <tick>` once each acknowledgement arrives.
#[test]
fn kill_child_appends_and_prints_acknowledgements() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
    let (tx, done) = std::sync::mpsc::channel::<Completion>();
    let sink = move |group: Vec<Completion>| {
        let mut lines = String::new();
        for c in &group {
            if c.result.is_ok() {
                lines.push_str(&format!("ack {}\n", c.tick.0));
            }
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(lines.as_bytes());
        let _ = out.flush();
        for c in group {
            let _ = tx.send(c);
        }
    };
    let (store, recovered) = Store::open(Path::new(&dir), options(), sink).unwrap();
    let mut tick = recovered.pubends.values().map(|p| p.tick_floor().0).max().unwrap_or(0);
    println!("ready");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut in_flight = 0;
    while Instant::now() < deadline {
        while in_flight < 64 {
            tick += 1;
            store.append(Token(tick), record(1, tick, &payload_of(tick))).unwrap();
            in_flight += 1;
        }
        done.recv().unwrap();
        in_flight -= 1;
    }
}

fn wait_for_ready(stdout: &mut impl Read, seen: &mut Vec<u8>) {
    let mut byte = [0];
    while !seen.ends_with(b"ready\n") && stdout.read(&mut byte).unwrap_or(0) == 1 {
        seen.push(byte[0]);
    }
}

fn acknowledged(stdout: &[u8]) -> Vec<u64> {
    let text = String::from_utf8_lossy(stdout);
    // Only whole lines: the kill may cut the last one.
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete.lines().filter_map(|l| l.strip_prefix("ack ")?.parse().ok()).collect()
}

#[test]
fn every_acknowledged_record_survives_50_sigkills_at_random_moments() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = std::env::var("STORE_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let mut rng = fastrand::Rng::with_seed(seed);
    let exe = std::env::current_exe().unwrap();
    let mut acked = BTreeSet::new();
    for round in 0..50 {
        let mut child = Command::new(&exe)
            .args(["--exact", "kill_child_appends_and_prints_acknowledgements", "--nocapture"])
            .env(CHILD_DIR, tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Most kills land while appending; one in five lands anywhere, start-up included.
        let mut stdout = child.stdout.take().unwrap();
        let mut seen = Vec::new();
        if round % 5 != 0 {
            wait_for_ready(&mut stdout, &mut seen);
        }
        std::thread::sleep(Duration::from_millis(rng.u64(1..40)));
        child.kill().unwrap();
        stdout.read_to_end(&mut seen).unwrap();
        child.wait().unwrap();
        let got = acknowledged(&seen);
        eprintln!("round {round}: {} acknowledged", got.len());
        acked.extend(got);
    }
    assert!(acked.len() > 50, "the children acknowledged almost nothing (seed {seed})");
    let h = open(Arc::new(StdFs), tmp.path(), options()).unwrap();
    let records = h.records(1);
    let present: BTreeSet<u64> = records.iter().map(|r| r.tick.0).collect();
    for r in &records {
        assert_eq!(r.payload.as_ref(), payload_of(r.tick.0), "tick {} altered", r.tick.0);
    }
    let missing: Vec<_> = acked.difference(&present).take(10).collect();
    assert!(missing.is_empty(), "acknowledged but gone (seed {seed}): {missing:?}");
    assert_eq!(h.recovered.corrupt_spans, 0);
}
