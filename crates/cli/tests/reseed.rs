//! A host whose clock ran ahead (issue 40, `docs/replication.md`, "Serving from the replicas"):
//! p1, p2 and p3 form cell PUB, p1's guaranteed delivery reads its clock 60 s ahead
//! (`[storage] fault_clock_ahead`), and p1 reaches its mates through proxies. A guaranteed
//! publisher publishes at p1 with `--server p1,p2,p3`; the subscriber's broker s1 is stopped, so
//! it is behind. The proxies stall, so p1 logs and syncs publishes its mates never get (never
//! acknowledged), and p1 is SIGKILLed. A mate takes the pubend over and logs the publisher's
//! retries at ticks just past the group's last one: below those p1 synced, its clock being
//! behind p1's. p1 restarts on its own disk, a follower; the successor is SIGKILLed and p1 is
//! elected. Its log lacks the successor's records below its last tick, so it cannot be resumed:
//! before the void record the pubend stayed closed on p1 for good. Now p1 voids the log, seeds
//! it from the group and serves the pubend: s1, running again, fetches what it missed from p1
//! (nacks answered from the re-seeded log), publishing at p1 goes on, and after p1 restarts once
//! more it opens the same log again, with no void. Every acknowledged publish reaches the
//! subscriber exactly once, in order, at its acknowledged tick.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::time::Duration;

use replica_common::{acked, caught_up, cluster, hosted, links, replica_group, Lines, Node};
use serde_json::Value;
use tidings_testkit::{wait_until, BrokerProcess, FaultProxy};

/// Publishes per second.
const RATE: u64 = 50;

/// The name of the broker that leads the group at `b`, if it names one.
fn leader(b: &BrokerProcess) -> Option<String> {
    replica_group(b)["leader"].as_str().map(str::to_string)
}

fn voided(b: &BrokerProcess) -> f64 {
    b.metric("tidings_gd_logs_voided_total").unwrap_or(-1.0)
}

#[test]
fn a_host_whose_log_the_group_contradicts_voids_it_and_serves_the_groups_records() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let p1 = Node::with_config(scratch.path(), "p1", "PUB", "[storage]\nfault_clock_ahead = \"60s\"\n");
    let mates = [Node::new(scratch.path(), "p2", "PUB"), Node::new(scratch.path(), "p3", "PUB")];
    let any = "127.0.0.1:0";
    let b3 = mates[1].start(any, any, &[]);
    let b2 = mates[0].start(any, any, &[cluster(&b3)]);
    let proxies = [&b2, &b3].map(|b| FaultProxy::start(b.ready.cluster.unwrap()).unwrap());
    let b1 = p1.start(any, any, &proxies.each_ref().map(|p| p.addr().to_string()));
    let mut bs = Node::new(scratch.path(), "s1", "S").start(any, any, &[cluster(&b1), cluster(&b2), cluster(&b3)]);
    let mut mates_up = [b2, b3];
    wait_until("the cell and s1 link up", Duration::from_secs(20), || {
        links(&b1) == 3.0 && mates_up.iter().all(|b| links(b) == 3.0) && links(&bs) == 3.0
    });
    let sub = Lines::follow(gd_common::spawn(&["sub", "--server", &bs.tcp(), "--guaranteed", "--json", "g.>"]));
    wait_until("the subscription is confirmed", Duration::from_secs(20), || {
        bs.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
    });

    let servers = [&b1, &mates_up[0], &mates_up[1]].map(|b| b.tcp()).join(",");
    let (count, rate) = (RATE * 20, RATE.to_string());
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", count, &["--rate", &rate, "--window", "64"]));
    wait_until("p1 acknowledges", Duration::from_secs(20), || publisher.count() >= 20);
    wait_until("p1 leads", Duration::from_secs(20), || leader(&b1).as_deref() == Some("p1"));
    let pubend = replica_group(&b1)["pubend"].as_str().unwrap().to_string();

    // s1 falls behind: stopped, and p1 goes on once its link to s1 is down.
    bs.pause().unwrap();
    wait_until("p1 sees s1 gone", Duration::from_secs(20), || links(&b1) == 2.0);
    let before = publisher.count();
    wait_until("p1 acknowledges without s1", Duration::from_secs(20), || publisher.count() >= before + 20);

    // The proxies stall: p1 logs and syncs what its mates never get, then dies with it.
    proxies.iter().for_each(FaultProxy::stall);
    std::thread::sleep(Duration::from_millis(300));
    let acked_by_p1 = publisher.count();
    proxies.iter().for_each(FaultProxy::cut);
    let mut b1 = b1;
    b1.kill();
    wait_until("a mate leads", Duration::from_secs(20), || {
        let named = [leader(&mates_up[0]), leader(&mates_up[1])];
        named[0] == named[1] && matches!(named[0].as_deref(), Some("p2" | "p3"))
    });
    let successor = usize::from(leader(&mates_up[0]).as_deref() == Some("p3"));
    wait_until("the successor acknowledges", Duration::from_secs(20), || publisher.count() >= acked_by_p1 + 50);
    assert_eq!(hosted(&mates_up[successor], &pubend), Some(true), "the successor serves the pubend");

    // p1 back on its own disk: a follower, its log found at start waiting for its group.
    let b1 = p1.restart(&b1, &mates_up.each_ref().map(cluster));
    wait_until("p1 links to its mates (s1 is stopped)", Duration::from_secs(20), || links(&b1) == 2.0);
    wait_until("p1 caught up", Duration::from_secs(20), || caught_up(&b1, &mates_up[successor]));
    assert_ne!(hosted(&b1, &pubend), Some(true), "p1 serves a pubend a mate leads");

    // The successor dies: p1, the host, is elected, and its log is voided and re-seeded.
    mates_up[successor].kill();
    let other = &mates_up[1 - successor];
    wait_until("p1 leads again", Duration::from_secs(20), || {
        leader(&b1).as_deref() == Some("p1") && leader(other).as_deref() == Some("p1")
    });
    wait_until("p1 serves the pubend from its group", Duration::from_secs(20), || hosted(&b1, &pubend) == Some(true));
    assert_eq!(voided(&b1), 1.0, "p1's log was voided: the group held records below its last tick");

    let (mut all, status, stderr) = publisher.finish(Duration::from_secs(90));
    assert!(status.success(), "not every publish was acknowledged ({} were): {stderr}", all.len());
    assert_eq!(all.len() as u64, count);
    all.extend(acked(gd_common::publish(&b1.tcp(), "g.b", 50, &["--window", "16"]), 50));
    let pubends: std::collections::BTreeSet<&str> = all.iter().map(|a| a["pubend"].as_str().unwrap()).collect();
    assert_eq!(pubends.len(), 1, "one pubend throughout: {pubends:?}");

    // s1 runs again and fetches what it missed from p1, the only broker serving the pubend.
    bs.resume().unwrap();
    wait_until("s1 links again", Duration::from_secs(20), || links(&bs) == 2.0);
    wait_until("s1 caught up from p1's re-seeded log", Duration::from_secs(60), || sub.count() >= all.len());

    // p1 restarts once more: the log is the group's now, and opens without a void.
    let mut b1 = b1;
    b1.kill();
    let b1 = p1.restart(&b1, &[cluster(other)]);
    wait_until("p1 leads after its restart", Duration::from_secs(30), || leader(&b1).as_deref() == Some("p1"));
    wait_until("p1 serves the pubend again", Duration::from_secs(20), || hosted(&b1, &pubend) == Some(true));
    assert_eq!(voided(&b1), 0.0, "the re-seeded log was resumed as it is");
    all.extend(acked(gd_common::publish(&b1.tcp(), "g.c", 50, &["--window", "16"]), 50));
    wait_until("the subscriber got every acknowledged publish", Duration::from_secs(60), || sub.count() >= all.len());
    std::thread::sleep(Duration::from_millis(500));
    let got: Vec<Value> = sub.timed().into_iter().map(|(_, line)| line).collect();
    gd_common::assert_exactly_once_in_order(&got, &all.iter().collect::<Vec<_>>());
    bs.kill();
}
