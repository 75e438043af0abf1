//! A replica whose disk was damaged while it was down (issue 40, "Bad input"), with real
//! processes: p1, p2 and p3 form cell PUB with a small compaction trigger, so every replica's
//! journal holds a checkpoint naming a snapshot saved apart (`<data dir>/replica-snapshots`). A
//! guaranteed publisher publishes at p1 and a subscriber listens at s1. p3 is SIGKILLed, its
//! saved snapshots damaged (a byte in every 64 flipped), and it restarts while the publisher goes on: the
//! damage is found, the replica is rebuilt from its mates (`/state` says `rebuilt`), never
//! served, and catches up. Then the leader p1 is SIGKILLed: the publisher resumes on a mate,
//! and the subscriber gets every acknowledged message once, in order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::path::Path;
use std::time::{Duration, Instant};

use gd_common::publish;
use replica_common::{
    acked, caught_up, cluster, group_number, links, publishers_cell_with, replica_group, subscribe, wait_for,
};

/// 16 KiB of raft entries: a compaction every couple of hundred publishes.
const COMPACT: &str = "[storage]\nreplica_compact_bytes = 16384\n";

/// Flips a byte every 64 past the first 4 KiB of the largest segment of `dir` (a store's
/// directory): whichever of its records is the snapshot the journal names (older ones, released,
/// share the segment), it is damaged.
fn damage(dir: &Path) {
    let segment = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let used = bytes.iter().rposition(|&b| b != 0).expect("records in the segment");
    assert!(used > 4096, "the segment holds snapshots past its first 4 KiB");
    for at in (4096..=used).step_by(64) {
        bytes[at] ^= 0x40;
    }
    std::fs::write(&segment, bytes).unwrap();
}

#[test]
fn a_replica_whose_saved_snapshot_was_damaged_is_rebuilt_from_its_mates() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let ([_, _, p3], [b1, b2, b3], bs) = publishers_cell_with(scratch.path(), COMPACT);
    let total = 2_500;
    let sub = subscribe(&bs, total);
    let mut all = acked(publish(&b1.tcp(), "g.a", 1_000, &["--window", "64"]), 1_000);
    wait_for("every replica compacted", Duration::from_secs(20), || {
        [&b1, &b2, &b3].iter().all(|b| group_number(b, "snapshots_taken") >= 1 && group_number(b, "first_index") > 1)
    });
    let saved = p3.data.join("replica-snapshots");

    // p3 down, its saved snapshot damaged, up again while a publisher goes on.
    let servers = [&b1, &b2, &b3].map(|b| b.tcp()).join(",");
    let more = publish(&servers, "g.b", 1_500, &["--window", "64", "--rate", "150"]);
    wait_for("the second publisher is under way", Duration::from_secs(20), || sub.count() >= 1_050);
    let mut b3 = b3;
    b3.kill();
    damage(&saved);
    let b3 = p3.restart(&b3, &[cluster(&b1), cluster(&b2)]);
    let restarted = Instant::now();
    wait_for("p3 links again", Duration::from_secs(20), || links(&b3) >= 2.0);
    assert_eq!(replica_group(&b3)["started"], "rebuilt", "the damage was found at start");
    let shown = tidings_testkit::finish_within(
        gd_common::spawn(&["info", "--admin", &b3.ready.admin.unwrap().to_string()]),
        Duration::from_secs(20),
    );
    let info = String::from_utf8_lossy(&shown.stdout);
    assert!(info.contains("rebuilt from its mates"), "tidings info says so: {info}");
    wait_for("p3 rebuilt from its mates", Duration::from_secs(30), || caught_up(&b3, &b1));
    eprintln!("p3 rebuilt and caught up {:?} after its restart", restarted.elapsed());

    // The leader killed: a mate takes over and the publisher resumes there.
    let mut b1 = b1;
    b1.kill();
    wait_for("a mate leads", Duration::from_secs(20), || {
        let (two, three) = (replica_group(&b2)["leader"].clone(), replica_group(&b3)["leader"].clone());
        two == three && two.as_str().is_some_and(|name| name != "p1")
    });
    all.extend(acked(more, 1_500));
    let (got, ..) = sub.finish(Duration::from_secs(60));
    gd_common::assert_exactly_once_in_order(&got, &all.iter().collect::<Vec<_>>());
}
