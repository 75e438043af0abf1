//! A replica caught up from a snapshot plus the log's tail (issue 40, "Compaction"), with real
//! processes: p1, p2 and p3 form cell PUB with a small compaction trigger, a guaranteed
//! publisher publishes at p1 and a subscriber listens at s1, outside the cell. After enough
//! publishes that every replica compacted its log, p2 is SIGKILLed, its data directory wiped,
//! and restarted: its log is empty, below the leader's first index, so it catches up from a
//! snapshot sent in chunks of 256 bytes, one unacknowledged at a time (its `/state` counts the
//! snapshot and the chunks it received) while the publisher goes on. Then the leader (p1,
//! or p3 when the lead moved while p2 rejoined) is SIGKILLed, and in turn the mate that took
//! over if it is not p2 (once the killed one is back): p2 takes the pubend over and serves it
//! from the state the snapshot gave it, the publisher resumes there, and the subscriber gets every
//! acknowledged message once, in order. A killed leader then restarts from its own journal,
//! whose checkpoint names a snapshot saved apart.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::time::{Duration, Instant};

use gd_common::publish;
use replica_common::{
    acked, caught_up, cluster, group_number, links, publishers_cell_with, replica_group, subscribe, wait_for,
};

/// 16 KiB of raft entries: a compaction every couple of hundred publishes; snapshots sent in
/// chunks of 256 bytes, so the wiped replica's comes in many, 32 of them a tick (8 KiB per
/// 100 ms), so it leaves over several ticks (pacing).
const COMPACT: &str =
    "[storage]\nreplica_compact_bytes = 16384\nreplica_snapshot_chunk = 256\nreplica_snapshot_window = 256\n";

#[test]
fn a_wiped_replica_catches_up_from_a_snapshot_and_serves_after_a_takeover() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let ([p1, p2, p3], [b1, b2, b3], bs) = publishers_cell_with(scratch.path(), COMPACT);
    let total = 3_000;
    let sub = subscribe(&bs, total);

    // Enough publishes that every replica compacted its log (and the journal behind it).
    let mut all = acked(publish(&b1.tcp(), "g.a", 1_000, &["--window", "64"]), 1_000);
    wait_for("every replica compacted", Duration::from_secs(20), || {
        [&b1, &b2, &b3].iter().all(|b| group_number(b, "snapshots_taken") >= 1 && group_number(b, "first_index") > 1)
    });
    let pubend = all[0]["pubend"].as_str().unwrap().to_string();

    // p2's disk wiped while a publisher is publishing at p1 (it is not stopped: p1 and p3 are
    // a quorum): p2 restarts empty, behind p1's first index. The publisher knows the cell, so
    // it fails over when p1 dies below.
    let servers = [&b1, &b2, &b3].map(|b| b.tcp()).join(",");
    let more = publish(&servers, "g.b", 2_000, &["--window", "64", "--rate", "150"]);
    wait_for("the second publisher is under way", Duration::from_secs(20), || sub.count() >= 1_050);
    let mut b2 = b2;
    b2.kill();
    std::fs::remove_dir_all(&p2.data).unwrap();
    let b2 = p2.restart(&b2, &[cluster(&b3), cluster(&b1)]);
    let linked = Instant::now();
    wait_for("p2 links again", Duration::from_secs(20), || links(&b2) >= 2.0);
    // One chunk unacknowledged at a time (the window above): the transfer goes at the pace of
    // p2's acknowledgements, each the next chunk's go. Were they lost, each chunk would wait
    // for the stall (10 ticks, 1 s) and the 139-551 chunks would not arrive within the wait.
    // How many chunks a mate had queued is printed; it is 0 when every poll of `/state` fell
    // between transfers (the window's bound is the pure tests' matter).
    let queued = std::cell::Cell::new(0);
    wait_for("p2 caught up from a snapshot", Duration::from_secs(30), || {
        let now = group_number(&b1, "snapshot_chunks_queued").max(group_number(&b3, "snapshot_chunks_queued"));
        queued.set(queued.get().max(now));
        caught_up(&b2, &b1) && group_number(&b2, "snapshots_received") >= 1
    });
    eprintln!(
        "p2 caught up {:?} after it restarted: first index {}, applied {}, snapshots received {}, chunks {}, \
         most queued seen {}",
        linked.elapsed(),
        group_number(&b2, "first_index"),
        group_number(&b2, "applied"),
        group_number(&b2, "snapshots_received"),
        group_number(&b2, "snapshot_chunks_received"),
        queued.get(),
    );
    assert!(group_number(&b2, "snapshot_chunks_received") >= 2, "the snapshot came in chunks");
    // Sent by the leader of the moment: p1, or p3 when p2's term fence moved the lead to it for
    // an election (seen in 2 of 5 runs on a loaded machine).
    // The sender counts it when it starts sending; the `/state` it is read from may lag.
    let sent = || group_number(&b1, "snapshots_sent") + group_number(&b3, "snapshots_sent");
    wait_for("a mate counts the snapshot sent", Duration::from_secs(10), || sent() >= 1);
    assert_eq!(group_number(&b2, "snapshots_refused"), 0);
    assert!(group_number(&b1, "snapshot_chunks_sent") + group_number(&b3, "snapshot_chunks_sent") >= 2);
    let metric = format!("tidings_gd_replica_snapshots{{event=\"received\",pubend=\"{pubend}\"}}");
    assert!(b2.metric(&metric).unwrap_or(0.0) >= 1.0, "the metric counts the snapshot p2 received");

    // The leader SIGKILLed while the publisher goes on, until p2, whose state came from the
    // snapshot, takes the pubend over and serves it, and the publisher resumes its pubend there.
    // The leader is p1, or p3 when p2's term fence moved the lead to it for an election (brokers
    // do not hand the lead back; 2 of 17 runs). A mate that leads and is not p2 is killed in
    // turn, once the one killed before is back on its disk and caught up, so a quorum stays.
    let (mut b1, mut b3) = (b1, b3);
    for _ in 0..3 {
        let leader = replica_group(&b2)["leader"].as_str().unwrap_or_default().to_string();
        if leader == "p2" {
            break;
        }
        let (killed, node, survivor) = match leader.as_str() {
            "p3" => (&mut b3, &p3, &b1),
            _ => (&mut b1, &p1, &b3),
        };
        killed.kill();
        eprintln!("killed the leader {leader}");
        // The two left agree on a leader other than the one killed.
        wait_for("a mate leads", Duration::from_secs(20), || {
            let (mine, theirs) = (replica_group(&b2)["leader"].clone(), replica_group(survivor)["leader"].clone());
            mine == theirs && mine.as_str().is_some_and(|name| name != leader)
        });
        if replica_group(&b2)["leader"] == "p2" {
            break;
        }
        // The other mate took over: the one killed comes back before that mate is killed.
        let back = node.restart(killed, &[cluster(&b2), cluster(survivor)]);
        *killed = back;
        wait_for("the killed mate links again", Duration::from_secs(20), || links(killed) >= 2.0);
        wait_for("the killed mate caught up", Duration::from_secs(30), || caught_up(killed, &b2));
        assert_eq!(replica_group(killed)["started"], "journal", "restarted from its own journal");
    }
    assert_eq!(replica_group(&b2)["leader"], "p2", "the mate caught up from the snapshot took over");
    all.extend(acked(more, 2_000));
    let (got, ..) = sub.finish(Duration::from_secs(60));
    gd_common::assert_exactly_once_in_order(&got, &all.iter().collect::<Vec<_>>());

    // The leader killed last restarts from its own journal, whose last checkpoint names a
    // snapshot saved apart (`<data dir>/replica-snapshots`): read back whole, not rebuilt from
    // its mates (which `started` would say).
    // It dials both mates: p3 dials nobody, and a replica rebuilt from its mates would wait
    // for every creation voter's term.
    let down = |b: &mut tidings_testkit::BrokerProcess| b.wait_timeout(Duration::ZERO).ok().flatten().is_some();
    let back = match (down(&mut b1), down(&mut b3)) {
        (true, _) => Some(p1.restart(&b1, &[cluster(&b2), cluster(&b3)])),
        (_, true) => Some(p3.restart(&b3, &[cluster(&b1), cluster(&b2)])),
        _ => None,
    };
    if let Some(back) = back {
        eprintln!("restarted a killed leader from its disk");
        wait_for("the killed leader caught up", Duration::from_secs(30), || caught_up(&back, &b2));
        assert_eq!(replica_group(&back)["started"], "journal", "restarted from its own journal");
    }
    drop(b3);
}
