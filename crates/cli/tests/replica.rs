//! A pubend's log replicated in its cell (issue 40), with real processes: p1, p2 and p3 form
//! cell PUB, a guaranteed publisher publishes at p1 and a subscriber listens at s1, outside the
//! cell. What p1 acknowledges reaches the subscriber exactly once, in order; p2 SIGKILLed and
//! restarted with its data directory wiped loses nothing acknowledged and rejoins its groups
//! (the term and vote fences); with p2 and p3 stopped a publish p1's own log synced is not
//! acknowledged, and with them down one is refused `unavailable` (a quorum is two of three);
//! p1 SIGKILLed with its data directory wiped gets its replica back from p2 and p3, while the
//! mate elected meanwhile takes the pubend over and serves it from the group (takeover: it keeps
//! the lead, and p1 stays a follower): the subscriber, whose broker s1 was stopped while p1
//! acknowledged a last batch before the wipe, gets that batch from the rebuilt log once s1 runs
//! again (every acknowledged message once, in order, at the ticks p1 first gave them), and what
//! the new leader acknowledges afterwards too.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::process::Child;
use std::time::{Duration, Instant};

use gd_common::publish;
use replica_common::{acked, caught_up, cluster, links, replica_group, subscribe, wait_for, Node};
use tidings_testkit::{finish_within, BrokerProcess};

/// What a command printed in `time`; it is killed then if still running.
fn stop_after(child: Child, time: Duration) -> String {
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(time);
        let _ = tidings_testkit::send_signal(pid, tidings_testkit::Signal::Kill);
    });
    let out = child.wait_with_output().unwrap();
    killer.join().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_replicated_pubend_keeps_what_it_acknowledged_through_a_wiped_replica() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let p1 = Node::new(scratch.path(), "p1", "PUB");
    let p2 = Node::new(scratch.path(), "p2", "PUB");
    let p3 = Node::new(scratch.path(), "p3", "PUB");
    let s1 = Node::new(scratch.path(), "s1", "S");
    let any = "127.0.0.1:0";
    let b3 = p3.start(any, any, &[]);
    let mut b2 = p2.start(any, any, &[cluster(&b3)]);
    let b1 = p1.start(any, any, &[cluster(&b2), cluster(&b3)]);
    let bs = s1.start(any, any, &[cluster(&b1)]);
    wait_for("the cell and s1 link up", Duration::from_secs(20), || {
        links(&b1) == 3.0 && links(&b2) == 2.0 && links(&b3) == 2.0 && links(&bs) == 1.0
    });
    let sub = subscribe(&bs, 600);

    // (a) Acknowledged publishes: every one was synced by a quorum of the cell's journals.
    let mut all = acked(publish(&b1.tcp(), "g.a", 200, &["--window", "16"]), 200);
    for node in [&p2, &p3] {
        let groups = std::fs::read_to_string(node.data.join("replica-groups")).unwrap_or_default();
        assert_eq!(groups.lines().count(), 1, "{} holds a replica of p1's pubend", node.name);
    }
    // /state shows the group at p1: led by p1, voters p1 first, both followers caught up.
    wait_for("/state shows p1's group caught up", Duration::from_secs(10), || {
        let group = replica_group(&b1);
        group["leader"] == "p1"
            && group["voters"] == serde_json::json!(["p1", "p2", "p3"])
            && group["commit"].as_u64() >= Some(200)
            && group["lag"] == serde_json::json!([["p2", 0], ["p3", 0]])
    });
    let pubend = all[0]["pubend"].as_str().unwrap().to_string();
    let gauge = |b: &BrokerProcess, name: &str| b.metric(&format!("tidings_gd_{name}{{pubend=\"{pubend}\"}}")).ok();
    wait_for("the metrics show p1 leading, p2 following the commits", Duration::from_secs(10), || {
        gauge(&b1, "replica_leading") == Some(1.0)
            && gauge(&b2, "replica_leading") == Some(0.0)
            && gauge(&b2, "replica_commit") >= Some(200.0)
            && gauge(&b1, "replica_elections_won_total") >= Some(1.0)
    });

    // (b) p2's disk is wiped: SIGKILL, empty data directory, restart. It rejoins behind the
    // fences and the group keeps acknowledging (a quorum is p1 and p3, then p2 again).
    b2.kill();
    std::fs::remove_dir_all(&p2.data).unwrap();
    b2 = p2.restart(&b2, &[cluster(&b3)]);
    wait_for("p2 links again", Duration::from_secs(20), || links(&b2) == 2.0 && links(&b1) == 3.0);
    all.extend(acked(publish(&b1.tcp(), "g.b", 100, &["--window", "16"]), 100));
    // One wipe at a time: p2 must be past its fences before another replica loses its disk.
    wait_for("p2 caught up behind its fences", Duration::from_secs(20), || caught_up(&b2, &b1));

    // Quorum, not the host's own sync: p2 and p3 stopped while their links still look up, so
    // a publish is proposed and p1's own log syncs it at once; it is not acknowledged. (On a
    // topic the subscriber does not take: p1's engine logs it, and its ack may come later.)
    let mut b3 = b3;
    b2.pause().unwrap();
    b3.pause().unwrap();
    let stalled = stop_after(publish(&b1.tcp(), "h.stalled", 1, &[]), Duration::from_secs(2));
    assert!(stalled.trim().is_empty(), "acknowledged with only the host's sync: {stalled}");
    b2.resume().unwrap();
    b3.resume().unwrap();
    // With p2 and p3 down, a publish is refused at once as unavailable.
    b2.kill();
    b3.kill();
    wait_for("p1 sees its mates gone", Duration::from_secs(20), || links(&b1) == 1.0);
    let lonely = finish_within(publish(&b1.tcp(), "g.c", 1, &[]), Duration::from_secs(30));
    let (stdout, stderr) = (String::from_utf8_lossy(&lonely.stdout), String::from_utf8_lossy(&lonely.stderr));
    assert!(stdout.trim().is_empty(), "a publish was acknowledged without a quorum: {stdout}");
    assert!(!lonely.status.success());
    assert!(stderr.contains("unavailable"), "refused as unavailable: {stderr}");

    // Both back (p3 on its disk, p2 on the one it rebuilt): acknowledgements resume.
    let b3 = p3.restart(&b3, &[]);
    let b2 = p2.restart(&b2, &[cluster(&b3)]);
    wait_for("the cell links again", Duration::from_secs(20), || {
        links(&b1) == 3.0 && links(&b2) == 2.0 && links(&b3) == 2.0
    });
    all.extend(acked(publish(&b1.tcp(), "g.d", 100, &["--window", "16"]), 100));
    wait_for("p2 and p3 caught up", Duration::from_secs(20), || caught_up(&b2, &b1) && caught_up(&b3, &b1));

    // (c) The subscriber falls behind: s1 stopped (SIGSTOP), and p1 acknowledges one more
    // batch once its link to s1 is down, so nothing of it waits in a socket buffer for s1.
    bs.pause().unwrap();
    wait_for("p1 sees s1 gone", Duration::from_secs(20), || links(&b1) == 2.0);
    all.extend(acked(publish(&b1.tcp(), "g.f", 100, &["--window", "16"]), 100));
    wait_for("p2 and p3 caught up", Duration::from_secs(20), || caught_up(&b2, &b1) && caught_up(&b3, &b1));
    let committed = replica_group(&b1)["commit"].as_u64().unwrap();

    // p1, the host, SIGKILLed and restarted with its data directory wiped: its replica of the
    // group comes back from p2 and p3 (it rejoins behind the fences and applies the whole
    // committed log), the lead comes back to it, it rebuilds its pubend log from the group,
    // and publishing resumes. Then s1 runs again and catches up from the rebuilt log.
    let mut b1 = b1;
    b1.kill();
    std::fs::remove_dir_all(&p1.data).unwrap();
    let b1 = p1.restart(&b1, &[cluster(&b2), cluster(&b3)]);
    wait_for("p1 links to p2 and p3 again (s1 is stopped)", Duration::from_secs(20), || links(&b1) == 2.0);
    let back = Instant::now();
    wait_for("p1's replica rebuilt from its mates, a mate leading", Duration::from_secs(30), || {
        let group = replica_group(&b1);
        let mate = group["leader"] == "p2" || group["leader"] == "p3";
        mate && group["applied"].as_u64() >= Some(committed) && group["fenced"] == false
    });
    eprintln!("p1 rebuilt its replica {:?} after it linked", back.elapsed());
    // Takeover (docs/replication.md): the mate elected while p1 was down serves the pubend,
    // rebuilt from the group, and keeps it; the wiped host stays a follower.
    let leader = if replica_group(&b1)["leader"] == "p2" { &b2 } else { &b3 };
    bs.resume().unwrap();
    wait_for("s1 links to p1 again", Duration::from_secs(20), || links(&bs) == 1.0 && links(&b1) == 3.0);
    wait_for("s1 caught up with the batch acknowledged before the wipe", Duration::from_secs(30), || {
        sub.count() >= all.len()
    });
    assert_ne!(replica_group(&b1)["leader"], "p1", "the wiped host took the pubend back");
    all.extend(acked(publish(&leader.tcp(), "g.e", 100, &["--window", "16"]), 100));

    let (got, ..) = sub.finish(Duration::from_secs(30));
    gd_common::assert_exactly_once_in_order(&got, &all.iter().collect::<Vec<_>>());
}
