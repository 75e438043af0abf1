//! A deposed host that did not die (issue 40, `docs/replication.md`, "Takeover"): p1, p2 and p3
//! form cell PUB, a durable subscriber listens at s1 (cell S, linked to all three), and one
//! guaranteed publisher publishes at a steady rate with `--server p1,p2,p3`. The pubend's host
//! and leader, p1, is frozen (SIGSTOP) for 5 s mid-stream: its mates elect one of them, which
//! takes the pubend over, and the publisher moves there. When p1 thaws, its group no longer
//! follows it, so its engine closes the pubend's log: it must neither serve nor advertise the
//! pubend any more (its `/state` shows the pubend not hosted, a mate leading), and whatever it
//! sent late changes nothing: the subscriber gets every acknowledged publish exactly once, in
//! order, at its acknowledged tick.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::time::Duration;

use replica_common::{hosted, publishers_cell, replica_group, Lines};
use serde_json::Value;
use tidings_testkit::{wait_until, BrokerProcess};

/// Publishes per second.
const RATE: u64 = 50;
/// How long p1 stays frozen.
const FROZEN: Duration = Duration::from_secs(5);

#[test]
fn a_host_frozen_past_its_term_closes_the_pubend_when_it_thaws_and_nothing_is_duplicated() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let (_nodes, brokers, bs) = publishers_cell(scratch.path());
    let sub = Lines::follow(gd_common::spawn(&["sub", "--server", &bs.tcp(), "--durable", "d", "--json", "g.>"]));
    wait_until("the subscription is confirmed", Duration::from_secs(20), || {
        bs.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
    });

    let servers = brokers.iter().map(BrokerProcess::tcp).collect::<Vec<_>>().join(",");
    let count = RATE * 20;
    let rate = RATE.to_string();
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", count, &["--rate", &rate, "--window", "64"]));
    wait_until("p1 acknowledges", Duration::from_secs(20), || publisher.count() >= 20);
    wait_until("p1 leads", Duration::from_secs(20), || replica_group(&brokers[0])["leader"] == "p1");
    let pubend = replica_group(&brokers[0])["pubend"].as_str().unwrap().to_string();
    assert_eq!(hosted(&brokers[0], &pubend), Some(true));

    brokers[0].pause().unwrap();
    std::thread::sleep(FROZEN);
    let mate_leads = |b: &BrokerProcess| matches!(replica_group(b)["leader"].as_str(), Some("p2" | "p3"));
    assert!(mate_leads(&brokers[1]), "a mate took the pubend over while p1 was frozen: {}", replica_group(&brokers[1]));
    brokers[0].resume().unwrap();

    // p1 thaws: a follower of its group now, its log of the pubend closed.
    wait_until("p1 follows the new leader", Duration::from_secs(20), || mate_leads(&brokers[0]));
    wait_until("p1 no longer hosts the pubend", Duration::from_secs(20), || {
        hosted(&brokers[0], &pubend) == Some(false)
    });
    let leader = replica_group(&brokers[1])["leader"].as_str().unwrap().to_string();
    let at = if leader == "p2" { 1 } else { 2 };
    assert_eq!(hosted(&brokers[at], &pubend), Some(true), "{leader} serves the pubend");

    let (acked, status, stderr) = publisher.finish(Duration::from_secs(90));
    assert!(status.success(), "not every publish was acknowledged ({} were): {stderr}", acked.len());
    assert_eq!(acked.len() as u64, count);
    let pubends: std::collections::BTreeSet<&str> = acked.iter().map(|a| a["pubend"].as_str().unwrap()).collect();
    assert_eq!(pubends.len(), 1, "the publisher resumed its pubend on the successor: {pubends:?}");
    assert_eq!(hosted(&brokers[0], &pubend), Some(false), "p1 never took the pubend back");
    wait_until("the subscriber got every acknowledged publish", Duration::from_secs(60), || sub.count() >= acked.len());
    std::thread::sleep(Duration::from_millis(1_000));
    let got: Vec<Value> = sub.timed().into_iter().map(|(_, line)| line).collect();
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
}
