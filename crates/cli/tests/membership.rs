//! A broker replaced in its cell (issue 40, "adding or replacing a broker in a cell catches its
//! replica up from a snapshot plus the log tail, without stopping publishers"), with real
//! processes: p1, p2 and p3 form cell PUB with a small compaction trigger, a guaranteed
//! publisher publishes at p1 throughout and a subscriber listens at s1, outside the cell. p3 is
//! SIGKILLed for good; p4, a new broker with another name, joins the cell; `tidings cell forget
//! p3` on p2 (not the leader: the forget travels to p1) makes the group remove p3, add p4 as a
//! learner, catch it up from a snapshot (the log was compacted long before) and the tail, and
//! promote it. p4's own disk is then wiped: it restarts empty, is fenced as an added member and
//! catches up again. Then p2 is SIGKILLed too: p1 and p4 are a quorum, the publisher goes on, and the
//! subscriber gets every acknowledged message once, in order. Prints the catch-up time and the
//! publisher's refusals and longest wait between acknowledgements. Before p2's kill, p3's
//! machine comes back on its old data directory: its cell refuses its links both ways, it says
//! why and refuses a guaranteed publisher, and the publisher at p1 goes on; then `tidings cell
//! unforget p3` on the three mates re-admits the name, and p3 on a fresh data directory links.
//! And the grow trigger: a group created in a cell of two grows to three when a third broker
//! joins.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::time::{Duration, Instant};

use replica_common::{caught_up, cluster, group_number, links, replica_group, subscribe, wait_for, Lines, Node};
use serde_json::Value;
use tidings_testkit::BrokerProcess;

/// 16 KiB of raft entries: a compaction every couple of hundred publishes, so the new member
/// is far behind the leader's first index and must get a snapshot (in chunks of 256 bytes).
const COMPACT: &str =
    "[storage]\nreplica_compact_bytes = 16384\nreplica_snapshot_chunk = 256\nreplica_snapshot_window = 8192\n";

fn names(group: &Value, field: &str) -> Vec<String> {
    group[field].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

fn refused(brokers: &[&BrokerProcess]) -> f64 {
    brokers.iter().map(|b| b.metric("tidings_gd_publishes_refused_total").unwrap_or(0.0)).sum()
}

/// The longest wait between two acknowledgements the publisher printed.
fn longest_wait(publisher: &Lines) -> Duration {
    let times: Vec<Instant> = publisher.timed().into_iter().map(|(at, _)| at).collect();
    times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
}

#[test]
fn a_replaced_broker_catches_up_and_counts_in_the_quorum() {
    let scratch = tempfile::tempdir().unwrap();
    let [p1, p2, p3, p4] = ["p1", "p2", "p3", "p4"].map(|name| Node::with_config(scratch.path(), name, "PUB", COMPACT));
    let any = "127.0.0.1:0";
    let b3 = p3.start(any, any, &[]);
    let b2 = p2.start(any, any, &[cluster(&b3)]);
    let b1 = p1.start(any, any, &[cluster(&b2), cluster(&b3)]);
    let bs = Node::new(scratch.path(), "s1", "S").start(any, any, &[cluster(&b1), cluster(&b2), cluster(&b3)]);
    wait_for("the cell and s1 link up", Duration::from_secs(20), || {
        [&b1, &b2, &b3, &bs].iter().all(|b| links(b) == 3.0)
    });
    let total = 8_000;
    let sub = subscribe(&bs, total);

    // One publisher at p1 throughout (200/s for 40 s), the cell's brokers as its servers.
    let servers = [&b1, &b2, &b3].map(|b| b.tcp()).join(",");
    let publisher =
        Lines::follow(gd_common::publish(&servers, "g.a", total as u64, &["--window", "64", "--rate", "200"]));
    wait_for("every replica compacted", Duration::from_secs(30), || {
        [&b1, &b2, &b3].iter().all(|b| group_number(b, "snapshots_taken") >= 1 && group_number(b, "first_index") > 1)
    });
    assert_eq!(replica_group(&b1)["leader"], "p1", "the host leads");

    // p3 lost for good; p4, a new broker, joins the cell.
    let mut b3 = b3;
    let old_p3 = b3.tcp();
    b3.kill();
    let b4 = p4.start(any, any, &[cluster(&b1), cluster(&b2)]);
    wait_for("p4 links to p1 and p2", Duration::from_secs(20), || links(&b4) >= 2.0);
    assert!(replica_group(&b4).is_null(), "p4 is in no group before p3 is forgotten");
    let refused_before = refused(&[&b1, &b2]);

    // Forgotten on p2, which does not lead: the forget travels to p1.
    let admin = b2.ready.admin.unwrap().to_string();
    let forgotten = Instant::now();
    let out = tidings_testkit::finish_within(
        gd_common::spawn(&["cell", "forget", "p3", "--admin", &admin]),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "cell forget: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
    let seen_learner = std::cell::Cell::new(false);
    wait_for("p4 is a voter and caught up", Duration::from_secs(60), || {
        let group = replica_group(&b1);
        seen_learner.set(seen_learner.get() || names(&group, "learners") == ["p4"]);
        let mut voters = names(&group, "voters");
        voters.sort();
        voters == ["p1", "p2", "p4"]
            && names(&group, "learners").is_empty()
            && group_number(&b4, "applied") >= group_number(&b1, "commit").saturating_sub(64)
            && group_number(&b4, "applied") > 0
    });
    let caught_up = forgotten.elapsed();
    eprintln!(
        "p4 a voter and caught up {caught_up:?} after `cell forget p3`: leader commit {}, p4 applied {}, \
         snapshots received {}, chunks {}; the publisher had {} acknowledged",
        group_number(&b1, "commit"),
        group_number(&b4, "applied"),
        group_number(&b4, "snapshots_received"),
        group_number(&b4, "snapshot_chunks_received"),
        publisher.count()
    );
    assert!(group_number(&b4, "snapshots_received") >= 1, "p4 caught up from a snapshot");
    assert!(publisher.count() < total, "the publisher was still publishing: the change did not stop it");
    let shown = tidings_testkit::finish_within(
        gd_common::spawn(&["info", "--admin", &b4.ready.admin.unwrap().to_string()]),
        Duration::from_secs(20),
    );
    let info = String::from_utf8_lossy(&shown.stdout);
    assert!(info.contains("replica group") && info.contains("p4"), "tidings info shows the members: {info}");
    let b4 = p4_wiped(&p4, b4, &b1, &b2);

    p3_comes_back(&p3, &old_p3, [&b1, &b2, &b4], &publisher);
    let b3 = p3_readmitted(scratch.path(), [&b1, &b2, &b4]);

    // p2 killed too: the quorum is p1 and p4 now, and the publisher goes on.
    let mut b2 = b2;
    let at_kill = publisher.count();
    b2.kill();
    wait_for("acknowledgements go on with p1 and p4", Duration::from_secs(30), || publisher.count() >= at_kill + 200);
    let refusals = refused(&[&b1]) - refused_before;
    let wait = longest_wait(&publisher);
    let (acked, status, notes) = publisher.finish(Duration::from_secs(90));
    assert!(status.success(), "the publisher failed: {notes}");
    assert_eq!(acked.len(), total);
    eprintln!("publisher: {refusals} refusals at p1 from the forget on; longest wait between acks {wait:?}");
    let (got, ..) = sub.finish(Duration::from_secs(60));
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop((b3, b4));
}

/// p4's disk lost once it is a voter (the replacement's own disk wiped): it restarts empty on
/// its old addresses, learns the group again from the leader's first message as an added
/// member, which neither campaigns nor votes until its log holds an entry of the leader's term
/// (`ReplicaGroup::added`: an old self of the same id may have voted in a term the leader's log
/// already passed), and catches up from a snapshot; the publisher at p1 goes on meanwhile (p1
/// and p2 are a quorum). Then it counts in the quorum again (p2's kill below).
fn p4_wiped(p4: &Node, b4: BrokerProcess, leader: &BrokerProcess, mate: &BrokerProcess) -> BrokerProcess {
    let mut b4 = b4;
    b4.kill();
    std::fs::remove_dir_all(&p4.data).unwrap();
    let wiped = Instant::now();
    let b4 = p4.restart(&b4, &[cluster(leader), cluster(mate)]);
    wait_for("the wiped p4 links again", Duration::from_secs(20), || links(&b4) >= 2.0);
    wait_for("the wiped p4 caught up", Duration::from_secs(60), || caught_up(&b4, leader));
    assert_eq!(replica_group(&b4)["started"], "new", "an empty journal: p4 started as an added member");
    let mut voters = names(&replica_group(leader), "voters");
    voters.sort();
    assert_eq!(voters, ["p1", "p2", "p4"], "p4 is still a voter");
    eprintln!("the wiped p4 caught up {:?} after its restart", wiped.elapsed());
    b4
}

/// p3's machine comes back after the replace, started on its old data directory and dialling
/// its old mates (on new ports, so only its own dials reach them): the cell refuses it. No link
/// between p3 and a mate comes up either way, p3's `/state` says why, a guaranteed publisher at
/// p3 is refused with that reason, no group names p3 and no mate tells clients `old_p3` (p3's
/// old client address), while the publisher at p1 goes on being acknowledged.
fn p3_comes_back(p3: &Node, old_p3: &str, mates: [&BrokerProcess; 3], publisher: &Lines) {
    let any = "127.0.0.1:0";
    let started = Instant::now();
    let b3 = p3.start(any, any, &mates.map(cluster));
    let up = started.elapsed();
    wait_for("p3 is told its cell forgot it", Duration::from_secs(20), || {
        state(&b3)["forgotten_here"].as_str().is_some_and(|why| why.contains("forgotten by cell PUB"))
    });
    let told = started.elapsed();
    let shown = tidings_testkit::finish_within(
        gd_common::spawn(&["info", "--admin", &b3.ready.admin.unwrap().to_string()]),
        Duration::from_secs(20),
    );
    let info = String::from_utf8_lossy(&shown.stdout);
    assert!(info.contains("REFUSED BY ITS CELL, forgotten by cell PUB"), "tidings info: {info}");
    let acked_before = publisher.count();
    let publishing = Instant::now();
    let refused = tidings_testkit::finish_within(gd_common::publish(&b3.tcp(), "g.b", 1, &[]), Duration::from_secs(30));
    let publish_refused = publishing.elapsed();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a guaranteed publish at the forgotten p3 was acknowledged");
    assert!(said.contains("unavailable") && said.contains("forgotten by cell PUB"), "the refusal: {said}");
    for _ in 0..10 {
        assert_eq!(links(&b3), 0.0, "p3 holds a link");
        for mate in mates {
            let state = state(mate);
            let linked = state["connections"].as_array().into_iter().flatten().any(|c| c["peer"] == "p3");
            assert!(!linked, "{} linked p3", state["name"]);
            let told = state["told_servers"].as_array().cloned().unwrap_or_default();
            assert!(!told.iter().any(|a| a == old_p3), "{} tells clients p3's address: {told:?}", state["name"]);
            let group = replica_group(mate);
            assert!(!names(&group, "voters").contains(&"p3".to_string()), "p3 a voter: {group}");
            assert!(!names(&group, "learners").contains(&"p3".to_string()), "p3 a learner: {group}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let established = b3.metric("tidings_links_established_total").unwrap_or(-1.0);
    assert_eq!(established, 0.0, "a link came up at p3, if only for a moment");
    wait_for("p1 goes on acknowledging", Duration::from_secs(20), || publisher.count() >= acked_before + 100);
    eprintln!(
        "p3 back on its old disk: ready {up:?}, told it is forgotten {told:?} after its start; a guaranteed \
         publisher at p3 refused in {publish_refused:?}; p3 says {}",
        state(&b3)["forgotten_here"]
    );
}

/// The name re-used: `tidings cell unforget p3` on each of `mates`, and p3 started on a fresh
/// data directory links to all three. Returns it, running.
fn p3_readmitted(scratch: &std::path::Path, mates: [&BrokerProcess; 3]) -> BrokerProcess {
    for mate in mates {
        let admin = mate.ready.admin.unwrap().to_string();
        let out = tidings_testkit::finish_within(
            gd_common::spawn(&["cell", "unforget", "p3", "--admin", &admin]),
            Duration::from_secs(20),
        );
        assert!(out.status.success(), "cell unforget: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("no longer forgotten here"));
    }
    let fresh = scratch.join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    let any = "127.0.0.1:0";
    let started = Instant::now();
    let b3 = Node::with_config(&fresh, "p3", "PUB", COMPACT).start(any, any, &mates.map(cluster));
    wait_for("p3 on a fresh data directory links to its mates", Duration::from_secs(20), || links(&b3) == 3.0);
    eprintln!(
        "p3 on a fresh data directory, re-admitted: linked to its 3 mates {:?} after its start",
        started.elapsed()
    );
    assert!(state(&b3)["forgotten_here"].is_null(), "{}", state(&b3)["forgotten_here"]);
    b3
}

fn state(b: &BrokerProcess) -> Value {
    serde_json::from_str(&tidings_testkit::http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap()
}

/// Cell PUB with two of its three brokers up (p1 and p2, linked, with the small compaction
/// trigger): p3's node, not started, and p1's and p2's processes.
fn two_of_three(scratch: &std::path::Path, config: &str) -> (Node, BrokerProcess, BrokerProcess) {
    let [p1, p2, p3] = ["p1", "p2", "p3"].map(|name| Node::with_config(scratch, name, "PUB", config));
    let any = "127.0.0.1:0";
    let b2 = p2.start(any, any, &[]);
    let b1 = p1.start(any, any, &[cluster(&b2)]);
    wait_for("p1 and p2 link up", Duration::from_secs(20), || links(&b1) == 1.0 && links(&b2) == 1.0);
    (p3, b1, b2)
}

/// p2 SIGKILLed: p1 and p3 are the quorum, and the publisher goes on to its last of `total`
/// acknowledgements, which are returned.
fn p2_killed_p1_and_p3_go_on(b2: BrokerProcess, publisher: Lines, total: usize) -> Vec<Value> {
    let mut b2 = b2;
    let at_kill = publisher.count();
    b2.kill();
    wait_for("acknowledgements go on with p1 and p3", Duration::from_secs(30), || publisher.count() >= at_kill + 200);
    let (acked, status, notes) = publisher.finish(Duration::from_secs(60));
    assert!(status.success(), "the publisher failed: {notes}");
    assert_eq!(acked.len(), total);
    acked
}

/// A group created while its cell had two brokers grows when a third joins (its target is 3,
/// or the whole cell if smaller): p3 is added as a learner, caught up and promoted, and with
/// p2 then SIGKILLed, p1 and p3 go on acknowledging.
#[test]
fn a_group_of_two_grows_when_a_third_broker_joins() {
    let scratch = tempfile::tempdir().unwrap();
    let (p3, b1, b2) = two_of_three(scratch.path(), COMPACT);
    let any = "127.0.0.1:0";
    let servers = [&b1, &b2].map(|b| b.tcp()).join(",");
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", 2_000, &["--window", "64", "--rate", "200"]));
    wait_for("a group of two", Duration::from_secs(20), || names(&replica_group(&b1), "voters").len() == 2);
    let b3 = p3.start(any, any, &[cluster(&b1), cluster(&b2)]);
    let joined = Instant::now();
    wait_for("p3 a voter and caught up", Duration::from_secs(60), || {
        let group = replica_group(&b1);
        let mut voters = names(&group, "voters");
        voters.sort();
        voters == ["p1", "p2", "p3"]
            && group_number(&b3, "applied") + 64 >= group_number(&b1, "commit")
            && group_number(&b3, "applied") > 0
    });
    eprintln!("p3 a voter and caught up {:?} after it started", joined.elapsed());
    p2_killed_p1_and_p3_go_on(b2, publisher, 2_000);
    drop(b3);
}

/// The replacement's disk lost before its promotion: a group of two, compacted, grows to three
/// when p3 joins; while p3 is a learner part-way through the snapshot (stopped there with
/// SIGSTOP, so it cannot be promoted meanwhile), it is SIGKILLed and its data directory
/// deleted. Restarted empty, it is caught up from a snapshot again and promoted, and with p2
/// then SIGKILLed, p1 and p3 go on acknowledging; a subscriber outside the cell gets every
/// acknowledged message once, in order.
#[test]
fn a_learner_wiped_before_its_promotion_is_caught_up_and_promoted() {
    let scratch = tempfile::tempdir().unwrap();
    // One chunk of 256 B in flight at a time, and payloads of 1 KiB: the snapshot p3 gets leaves
    // a chunk per round trip, so p3 is a learner part-way through it long enough to be seen and
    // stopped there (with 32 chunks in flight a small snapshot left in one go, and CI once saw
    // p3 promoted before it could be stopped).
    let one_chunk = COMPACT.replace("replica_snapshot_window = 8192", "replica_snapshot_window = 256");
    let (p3, b1, b2) = two_of_three(scratch.path(), &one_chunk);
    let any = "127.0.0.1:0";
    let bs = Node::new(scratch.path(), "s1", "S").start(any, any, &[cluster(&b1), cluster(&b2)]);
    wait_for("s1 links to p1 and p2", Duration::from_secs(20), || links(&bs) == 2.0);
    let total = 4_000;
    let sub = subscribe(&bs, total);
    let servers = [&b1, &b2].map(|b| b.tcp()).join(",");
    let args = ["--window", "64", "--rate", "200", "--size", "1024"];
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", total as u64, &args));
    wait_for("a group of two, compacted", Duration::from_secs(30), || {
        names(&replica_group(&b1), "voters").len() == 2 && group_number(&b1, "first_index") > 1
    });

    // p3 joins; stopped as a learner once it has some of the snapshot.
    let b3 = p3.start(any, any, &[cluster(&b1), cluster(&b2)]);
    wait_for("p3 a learner, part-way through the snapshot", Duration::from_secs(30), || {
        names(&replica_group(&b1), "learners") == ["p3"] && group_number(&b3, "snapshot_chunks_received") >= 4
    });
    b3.pause().unwrap();
    let chunks = group_number(&b1, "snapshot_chunks_sent");
    assert_eq!(names(&replica_group(&b1), "learners"), ["p3"], "p3 was stopped before its promotion");
    let mut b3 = b3;
    b3.kill();
    std::fs::remove_dir_all(&p3.data).unwrap();
    let wiped = Instant::now();
    let b3 = p3.restart(&b3, &[cluster(&b1), cluster(&b2)]);
    wait_for("the wiped p3 a voter and caught up", Duration::from_secs(60), || {
        let mut voters = names(&replica_group(&b1), "voters");
        voters.sort();
        voters == ["p1", "p2", "p3"] && caught_up(&b3, &b1)
    });
    eprintln!(
        "the wiped p3 a voter and caught up {:?} after its restart; {} chunks sent before the wipe, {} received after",
        wiped.elapsed(),
        chunks,
        group_number(&b3, "snapshot_chunks_received")
    );
    assert!(group_number(&b3, "snapshots_received") >= 1, "the wiped p3 caught up from a snapshot");

    let acked = p2_killed_p1_and_p3_go_on(b2, publisher, total);
    let (got, ..) = sub.finish(Duration::from_secs(60));
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop(b3);
}
