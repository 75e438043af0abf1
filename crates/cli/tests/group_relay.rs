//! Guaranteed queue groups across relays, with real processes on the Gryphon network
//! (`topologies/gryphon-fig3.toml`): the group kept at p1, five members at s1, s3 and s4, each
//! two hops from p1 (through IB1 = b1, b2 or IB2 = b3, b4), so every GROUP frame between them
//! and the home is handed on by a broker between. Each acknowledged publish reaches one member
//! in total; a member SIGKILLed mid-stream has its leases redelivered, flagged; the relay that
//! carries s3's and s4's frames SIGKILLed mid-stream makes the home let their members go and
//! their brokers join them again through the other broker of IB2, nothing lost and whatever
//! comes twice flagged.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gd_common::fig3::Fig3;
use gd_common::work_queue::{acked, assert_once_in_total, group_acked, wait_for_all, Member, Publish};
use gd_common::{id, publish};
use tidings_testkit::{wait_until, BrokerProcess};

/// Where the five members are: none at the home, none linked to it.
const MEMBERS: [&str; 5] = ["s3", "s3", "s4", "s4", "s1"];

/// The network with p1 the home of the queue groups, and the five members joined there.
fn fig3_with_members() -> (Fig3, tempfile::TempDir, Vec<Member>) {
    let fig = Fig3::up("queue_home = \"p1\"\n");
    let dir = tempfile::tempdir().unwrap();
    let home = &fig.brokers["p1"];
    let mut members = Vec::new();
    for (i, at) in MEMBERS.iter().enumerate() {
        members.push(Member::start_at(&fig.brokers[at], home, dir.path(), &format!("{at}-{i}"), &[]));
        if i == 0 {
            // The group's own subscription starts at its barrier, and only then are members told.
            wait_until("the group is confirmed at its home", Duration::from_secs(30), || {
                home.metric("tidings_gd_subscriptions_confirmed_total").unwrap() >= 1.0
            });
        }
    }
    // The home lists them in /subsz (no connection there does), each with its broker.
    let remote_brokers = || -> Vec<String> {
        let subsz = tidings_testkit::http_get(home.ready.admin.unwrap(), "/subsz").unwrap();
        let subsz: serde_json::Value = serde_json::from_str(&subsz).unwrap();
        let listed = subsz["remote_members"]["w"].as_array().cloned().unwrap_or_default();
        let mut brokers: Vec<String> = listed.iter().map(|m| m["broker"].as_str().unwrap().to_string()).collect();
        brokers.sort_unstable();
        brokers
    };
    wait_until("/subsz at the home lists the five remote members", Duration::from_secs(5), || {
        remote_brokers() == ["s1", "s3", "s3", "s4", "s4"]
    });
    (fig, dir, members)
}

fn metric(b: &BrokerProcess, name: &str) -> f64 {
    b.metric(name).unwrap_or(-1.0)
}

/// GROUP frames handed on by the brokers of IB1 and of IB2: both carried the group's traffic.
fn relayed(fig: &Fig3) -> (f64, f64) {
    let sum = |names: &[&str]| -> f64 {
        names.iter().filter_map(|n| fig.brokers.get(n)).map(|b| metric(b, "tidings_gd_group_relayed_total")).sum()
    };
    (sum(&["b1", "b2"]), sum(&["b3", "b4"]))
}

/// How many publishes to make: the 100,000 with `TIDINGS_GROUP_MESSAGES=100000`.
fn total() -> u64 {
    std::env::var("TIDINGS_GROUP_MESSAGES").ok().and_then(|n| n.parse().ok()).unwrap_or(6_000)
}

#[test]
fn a_group_two_hops_from_its_home_gets_each_message_once_and_a_killed_member_s_leases_go_to_the_others() {
    let (fig, _dir, mut members) = fig3_with_members();
    let home = &fig.brokers["p1"];
    // A member with another key, two hops from the home, is refused through the relays, at
    // once (its client is told when the REFUSED comes, not when its wait for SUBSCRIBED ends).
    let asked = Instant::now();
    let other = std::process::Command::new(gd_common::bin())
        .args(["sub", "--server", &fig.brokers["s4"].tcp(), "--queue", "w", "--guaranteed", "--queue-key", "j"])
        .arg("jobs.>")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success() && stderr.contains("share one key"), "{stderr}");
    assert!(asked.elapsed() < Duration::from_secs(8), "refused at once, not after the wait: {:?}", asked.elapsed());
    let total = total();
    let started = Instant::now();
    let server = home.tcp();
    let publisher = std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--window", "256"])));
    // A member at s3 dies holding leases (stalled first, so it dies with work in flight).
    wait_until("the member to kill has work", Duration::from_secs(120), || members[1].lines().len() >= 300);
    tidings_testkit::send_signal(members[1].child.id(), tidings_testkit::Signal::Stop).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    members[1].kill();
    let dead_had: BTreeSet<Publish> = members[1].lines().iter().map(id).collect();
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged");
    let live: Vec<&Member> = [0, 2, 3, 4].iter().map(|&i| &members[i]).collect();
    let redeliveries = metric(home, "tidings_gd_group_redeliveries_total");
    assert_once_in_total(&live, &acked, &dead_had, redeliveries);
    let took = started.elapsed();
    for (i, member) in live.iter().enumerate() {
        assert!(!member.lines().is_empty(), "live member {i} got work: each broker's members take part");
    }
    let (ib1, ib2) = relayed(&fig);
    assert!(ib1 > 0.0 && ib2 > 0.0, "the frames went through IB1 ({ib1}) and IB2 ({ib2})");
    let last = acked.iter().map(|a| a["tick"].as_u64().unwrap()).max().unwrap();
    wait_until("the group acknowledged everything", Duration::from_secs(30), || {
        let acked = group_acked(home);
        acked.len() == 1 && acked[0] >= last
    });
    assert_eq!(metric(home, "tidings_gd_group_members"), 4.0);
    eprintln!(
        "{total} messages through relays to 5 members (one killed) in {:.1} s; {redeliveries} redelivered; relayed {ib1} by IB1, {ib2} by IB2",
        took.as_secs_f64()
    );
}

/// Per publish, how many times live members printed it without the redelivered flag.
fn unflagged_prints(members: &[&Member]) -> BTreeMap<Publish, usize> {
    let mut times = BTreeMap::new();
    for line in members.iter().flat_map(|m| m.lines()) {
        assert_eq!(line["missed"], 0, "no gap: {line}");
        *times.entry(id(&line)).or_insert(0) += usize::from(line["redelivered"] != true);
    }
    times
}

#[test]
fn the_relay_of_two_member_brokers_killed_mid_stream_loses_nothing_and_they_join_again_around_it() {
    let (mut fig, _dir, members) = fig3_with_members();
    let total = total();
    let server = fig.brokers["p1"].tcp();
    let publisher =
        std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--rate", "1000", "--window", "64"])));
    wait_until("the members at s3 and s4 have work", Duration::from_secs(120), || {
        members[..4].iter().all(|m| m.lines().len() >= 100)
    });
    // The broker of IB2 that hands on s3's and s4's frames (the lower-named of a tie).
    let relay = ["b3", "b4"].into_iter().max_by(|a, b| {
        let frames = |n: &str| metric(&fig.brokers[n], "tidings_gd_group_relayed_total");
        frames(a).total_cmp(&frames(b))
    });
    let relay = relay.unwrap();
    assert!(metric(&fig.brokers[relay], "tidings_gd_group_relayed_total") > 0.0, "{relay} relays");
    let before: Vec<usize> = members[..4].iter().map(|m| m.lines().len()).collect();
    fig.brokers.get_mut(relay).unwrap().kill();
    fig.brokers.remove(relay);
    let home = &fig.brokers["p1"];
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged");
    let all: Vec<&Member> = members.iter().collect();
    wait_for_all(&all, &acked, &BTreeSet::new());
    std::thread::sleep(Duration::from_millis(500)); // anything printed twice would show by now
    let prints = unflagged_prints(&all);
    let twice: Vec<_> = prints.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "printed twice unflagged: {:?}", &twice[..twice.len().min(5)]);
    let after: Vec<usize> = members[..4].iter().map(|m| m.lines().len()).collect();
    assert!(
        before.iter().zip(&after).any(|(b, a)| a > b),
        "the members at s3 and s4 got work again through the other relay: {before:?} then {after:?}"
    );
    assert!(metric(home, "tidings_gd_group_breaks_total") >= 1.0, "the home heard of the break");
    assert!(metric(home, "tidings_gd_group_redeliveries_total") >= 1.0, "the break gave leases back");
    wait_until("the five members are joined again", Duration::from_secs(30), || {
        metric(home, "tidings_gd_group_members") == 5.0
    });
    let last = acked.iter().map(|a| a["tick"].as_u64().unwrap()).max().unwrap();
    wait_until("the group acknowledged everything", Duration::from_secs(30), || {
        let acked = group_acked(home);
        acked.len() == 1 && acked[0] >= last
    });
    eprintln!(
        "killed {relay}: members at s3, s4 printed {before:?} before, {after:?} in all; {} redelivered",
        metric(home, "tidings_gd_group_redeliveries_total")
    );
}
