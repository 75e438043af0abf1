//! Guaranteed queue groups (work queues), end to end: one real broker on 127.0.0.1, members
//! running `tidings sub --queue w --guaranteed --json` with their lines in files, and
//! `tidings pub --guaranteed --json` publishing. A member SIGKILLed mid-stream has its
//! unacknowledged messages redelivered to the others, flagged; a broker SIGKILLed mid-stream
//! keeps the group and every acknowledged publish, and flags what it delivers again. On three
//! linked brokers, the group kept at its home (`[cluster] queue_home`) and members at all
//! three, each message goes to one member in total, and a member, or a member's whole broker,
//! SIGKILLed mid-stream has its leases redelivered to the members left.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use gd_common::work_queue::{acked, assert_once_in_total, group_acked, tally, wait_for_all, Member, Publish};
use gd_common::{bin, cluster_addr, id, links_up, publish, start_on, Node};
use serde_json::Value;
use tidings_testkit::{wait_until, BrokerProcess};

#[test]
fn a_member_killed_mid_stream_has_its_unacknowledged_messages_redelivered_to_the_others() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<Member> = (0..3).map(|i| Member::start(&b, dir.path(), &format!("m{i}"))).collect();
    let [mut dead, one, two]: [Member; 3] = members.try_into().ok().unwrap();
    let total = 10_000u64;
    // Its output read as it comes: a pipe nobody reads stops it at 64 KiB (about 380 lines).
    let server = b.tcp();
    let publisher = std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--window", "256"])));
    wait_until("the member to kill has work", Duration::from_secs(60), || dead.lines().len() >= 500);
    // Stalled first, so that it dies holding leases whatever the timing: a member killed just as
    // it had acknowledged all it was given would prove nothing (seen once, at load).
    tidings_testkit::send_signal(dead.child.id(), tidings_testkit::Signal::Stop).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    dead.kill();
    let dead_lines = dead.lines();
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged");
    let printed_by_dead: BTreeSet<(String, u64)> = dead_lines.iter().map(id).collect();
    wait_for_all(&[&one, &two], &acked, &printed_by_dead);
    std::thread::sleep(Duration::from_millis(500)); // anything printed twice would show by now

    let (times, flagged) = tally(&[&one, &two]);
    let dead_had: BTreeSet<(String, u64)> = dead_lines.iter().map(id).collect();
    let wanted: BTreeSet<(String, u64)> = acked.iter().map(id).collect();
    // None lost: every acknowledged publish reached a surviving member, or was printed (and so
    // acknowledged) by the member before it died.
    let lost: Vec<_> = wanted.iter().filter(|key| !times.contains_key(*key) && !dead_had.contains(*key)).collect();
    assert!(lost.is_empty(), "{} acknowledged publishes lost, e.g. {:?}", lost.len(), lost.first());
    // None done twice by live members: each message printed at most once by the survivors.
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "printed twice by live members: {twice:?}");
    // The dead member's unacknowledged leases came again, flagged: at least one (it died with
    // work in flight), at most its window, each one the dead member had been leased.
    let redeliveries = b.metric("tidings_gd_group_redeliveries_total").unwrap();
    assert!(redeliveries >= 1.0, "the killed member held no lease: the test proved nothing");
    assert_eq!(flagged.len() as f64, redeliveries, "each given-back lease reached a member once, flagged");
    assert!(flagged.len() <= 256, "at most the member's window: {}", flagged.len());
    let unflagged_before: Vec<_> = flagged.iter().filter(|key| times[*key] != 1).collect();
    assert!(unflagged_before.is_empty(), "a redelivered message had reached a live member before");
    eprintln!(
        "dead member printed {} (then died); survivors {} + {}; {} redelivered flagged, {} of them printed by the dead member",
        dead_lines.len(),
        one.lines().len(),
        two.lines().len(),
        flagged.len(),
        flagged.iter().filter(|key| dead_had.contains(*key)).count()
    );
    // Each message acknowledged in the end: the group's acknowledgement reached the last tick
    // (a message no live member acknowledged would hold it below; past the last tick it moves
    // over ticks that matched nothing).
    let last = acked.iter().map(|a| a["tick"].as_u64().unwrap()).max().unwrap();
    wait_until("the group acknowledged everything", Duration::from_secs(20), || {
        let acked = group_acked(&b);
        acked.len() == 1 && acked[0] >= last
    });
    assert_eq!(b.metric("tidings_gd_group_members").unwrap(), 2.0);
}

#[test]
fn a_broker_killed_mid_stream_keeps_the_group_and_every_acknowledged_publish() {
    let scratch = tempfile::tempdir().unwrap();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    std::fs::write(&config, "").unwrap();
    let mut b = start_on(&data, "127.0.0.1:0", &config);
    let listen = b.tcp();
    let members: Vec<Member> = (0..2).map(|i| Member::start(&b, scratch.path(), &format!("m{i}"))).collect();
    let total = 3000u64;
    let server = listen.clone();
    let publisher =
        std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--rate", "600", "--window", "16"])));
    wait_until("the stream is under way", Duration::from_secs(30), || {
        members.iter().map(|m| m.lines().len()).sum::<usize>() >= 800
    });
    b.kill();
    let b = start_on(&data, &listen, &config);
    assert!(b.metric("tidings_gd_durables").unwrap() >= 1.0, "the group came back with its broker");
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged in the end");
    let refs: Vec<&Member> = members.iter().collect();
    wait_for_all(&refs, &acked, &BTreeSet::new());
    let (times, flagged) = tally(&refs);
    let again = times.values().filter(|n| **n > 1).count();
    // At least once across a restart: what was above the group's checkpoint came again,
    // flagged redelivered (every message the log held at the restart is: leases are not
    // recorded), and what was published after the restart is not flagged.
    eprintln!(
        "after the broker's restart, {again} of {total} messages were printed twice (none lost), {} flagged",
        flagged.len()
    );
    assert!(again < total as usize / 2, "only what was above the group's checkpoint comes again: {again}");
    let unflagged: Vec<&Publish> =
        times.iter().filter(|(k, n)| **n > 1 && !flagged.contains(*k)).map(|(k, _)| k).collect();
    assert!(
        unflagged.is_empty(),
        "printed twice, never flagged redelivered: {:?}",
        &unflagged[..unflagged.len().min(5)]
    );
    assert!(flagged.len() < total as usize, "messages published after the restart are not flagged");
}

/// Publishes 40 messages for each of the keys `k` = 0..8, acknowledged, one publisher per key.
fn publish_keyed(server: &str) -> Vec<Value> {
    let publishers: Vec<Child> =
        (0..8).map(|k| publish(server, "jobs.k", 40, &["-p", &format!("k={k}"), "--window", "8"])).collect();
    publishers.into_iter().flat_map(acked).collect()
}

/// Per member, the keys of the messages it printed (from the `seq` `from` on of each publisher
/// it got).
fn keys(members: &[&Member], skip: &BTreeSet<Publish>) -> Vec<BTreeSet<i64>> {
    let key = |line: &Value| line["properties"]["k"].as_i64().unwrap();
    members.iter().map(|m| m.lines().iter().filter(|l| !skip.contains(&id(l))).map(key).collect()).collect()
}

/// `sub --queue w --guaranteed --queue-key k`: each key's messages go to one member; when a
/// member is killed, its keys go to the others and theirs stay; a member with another key is
/// refused.
#[test]
fn a_keyed_work_queue_keeps_each_key_on_one_member_and_a_dead_member_moves_only_its_keys() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keyed = ["--queue-key", "k"];
    let mut members: Vec<Member> =
        (0..3).map(|i| Member::start_with(&b, dir.path(), &format!("m{i}"), &keyed)).collect();
    let server = b.tcp();
    let other = Command::new(bin())
        .args(["sub", "--server", &server, "--queue", "w", "--guaranteed", "--queue-key", "j", "jobs.>"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success() && stderr.contains("share one key"), "{stderr}");

    let first_round = publish_keyed(&server);
    let all: Vec<&Member> = members.iter().collect();
    wait_for_all(&all, &first_round, &BTreeSet::new());
    let first = keys(&all, &BTreeSet::new());
    for (i, mine) in first.iter().enumerate() {
        for (j, theirs) in first.iter().enumerate().skip(i + 1) {
            assert!(mine.is_disjoint(theirs), "members {i} and {j} share keys: {first:?}");
        }
    }
    assert_eq!(first.iter().map(BTreeSet::len).sum::<usize>(), 8, "{first:?}");
    assert!(first.iter().filter(|mine| !mine.is_empty()).count() >= 2, "the keys are shared out: {first:?}");

    // Member 1 dies: its keys go to the others, theirs stay.
    let before = b.metric("tidings_gd_group_members").unwrap();
    members[1].kill();
    wait_until("the member left", Duration::from_secs(10), || b.metric("tidings_gd_group_members").unwrap() < before);
    let done: BTreeSet<Publish> = first_round.iter().map(id).collect();
    let second_round = publish_keyed(&server);
    let left: Vec<&Member> = [0, 2].iter().map(|&i| &members[i]).collect();
    wait_for_all(&left, &second_round, &done);
    let second = keys(&left, &done);
    assert!(second[0].is_disjoint(&second[1]), "{second:?}");
    assert!(first[0].is_subset(&second[0]) && first[2].is_subset(&second[1]), "{first:?} then {second:?}");
    assert_eq!(second[0].len() + second[1].len(), 8, "every key still served: {second:?}");
}

/// Three brokers in a line, `a - h - b`, every one naming `h` the home of the queue groups.
fn line_of_three(scratch: &Path) -> [BrokerProcess; 3] {
    let node = |name: &str| Node::configured(scratch, name, name, "queue_home = \"h\"\n");
    let h = node("h").start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let a = node("a").start("127.0.0.1:0", "127.0.0.1:0", &[cluster_addr(&h)]);
    let b = node("b").start("127.0.0.1:0", "127.0.0.1:0", &[cluster_addr(&h)]);
    wait_until("a - h - b link up", Duration::from_secs(20), || {
        links_up(&h, 2.0)() && links_up(&a, 1.0)() && links_up(&b, 1.0)()
    });
    [a, h, b]
}

/// Five members on three brokers (two at `a`, one at the home `h`, two at `b`), the group
/// confirmed at the home before anything is published. Returns them in that order.
fn five_members(brokers: &[BrokerProcess; 3], dir: &Path) -> Vec<Member> {
    let [a, h, b] = brokers;
    let first = Member::start_at(a, h, dir, "a0", &[]);
    // The group's own subscription starts at its barrier, and only then are members told.
    wait_until("the group is confirmed at its home", Duration::from_secs(20), || {
        h.metric("tidings_gd_subscriptions_confirmed_total").unwrap() >= 1.0
    });
    let mut members = vec![first, Member::start_at(a, h, dir, "a1", &[])];
    members.push(Member::start_at(h, h, dir, "h0", &[]));
    members.extend((0..2).map(|i| Member::start_at(b, h, dir, &format!("b{i}"), &[])));
    members
}

#[test]
fn a_group_with_members_on_three_brokers_gets_each_message_once_and_a_killed_member_s_leases_go_to_the_others() {
    let scratch = tempfile::tempdir().unwrap();
    let brokers = line_of_three(scratch.path());
    let members = five_members(&brokers, scratch.path());
    let [a, h, b] = &brokers;
    // A member with another key, at a broker that is not the home, is refused by the home
    // (after the member's PONG): its client is told when the REFUSED comes, not when its
    // 10 s wait for SUBSCRIBED ends.
    let asked = std::time::Instant::now();
    let other = Command::new(bin())
        .args(["sub", "--server", &b.tcp(), "--queue", "w", "--guaranteed", "--queue-key", "j", "jobs.>"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success() && stderr.contains("share one key"), "{stderr}");
    assert!(asked.elapsed() < Duration::from_secs(8), "refused at once, not after the wait: {:?}", asked.elapsed());
    // The 100,000 with TIDINGS_GROUP_MESSAGES=100000 (about a minute in debug).
    let total: u64 = std::env::var("TIDINGS_GROUP_MESSAGES").ok().and_then(|n| n.parse().ok()).unwrap_or(6_000);
    let server = a.tcp();
    let publisher = std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--window", "256"])));
    // A member at b, remote from the home, dies holding leases (stalled first, as above).
    let dead = &members[3];
    wait_until("the member to kill has work", Duration::from_secs(60), || dead.lines().len() >= 300);
    tidings_testkit::send_signal(dead.child.id(), tidings_testkit::Signal::Stop).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut members = members;
    members[3].kill();
    let dead_had: BTreeSet<Publish> = members[3].lines().iter().map(id).collect();
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged");
    let live: Vec<&Member> = [0, 1, 2, 4].iter().map(|&i| &members[i]).collect();
    let redeliveries = h.metric("tidings_gd_group_redeliveries_total").unwrap();
    assert_once_in_total(&live, &acked, &dead_had, redeliveries);
    for (i, member) in live.iter().enumerate() {
        assert!(!member.lines().is_empty(), "live member {i} got work: each broker's members take part");
    }
    let last = acked.iter().map(|a| a["tick"].as_u64().unwrap()).max().unwrap();
    wait_until("the group acknowledged everything", Duration::from_secs(20), || {
        let acked = group_acked(h);
        acked.len() == 1 && acked[0] >= last
    });
    assert_eq!(h.metric("tidings_gd_group_members").unwrap(), 4.0);
}

/// The broker of two members (`b`, not the home) is SIGKILLed mid-stream: the home sees its
/// link go down and gives their leases to the members at `a` and `h`; nothing acknowledged is
/// lost, and nothing is printed twice by the members left.
#[test]
fn a_member_s_broker_killed_mid_stream_has_its_members_leases_go_to_the_others() {
    let scratch = tempfile::tempdir().unwrap();
    let mut brokers = line_of_three(scratch.path());
    let mut members = five_members(&brokers, scratch.path());
    let total = 6_000u64;
    let server = brokers[0].tcp();
    let publisher = std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--window", "256"])));
    wait_until("the members at b have work", Duration::from_secs(60), || {
        members[3].lines().len() >= 300 && !members[4].lines().is_empty()
    });
    // Both members at b stalled first, so the broker dies with their leases in flight.
    for member in &members[3..] {
        tidings_testkit::send_signal(member.child.id(), tidings_testkit::Signal::Stop).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    brokers[2].kill();
    let mut dead_had = BTreeSet::new();
    for member in &mut members[3..] {
        member.kill();
        dead_had.extend(member.lines().iter().map(id));
    }
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged");
    let h = &brokers[1];
    wait_until("the home let b's members go", Duration::from_secs(10), || {
        h.metric("tidings_gd_group_members").unwrap() == 3.0
    });
    let live: Vec<&Member> = members[..3].iter().collect();
    let redeliveries = h.metric("tidings_gd_group_redeliveries_total").unwrap();
    assert_once_in_total(&live, &acked, &dead_had, redeliveries);
}

/// A broker with links and no `[cluster] queue_home` has nowhere to keep a group: its
/// guaranteed member is refused at once, saying what to configure.
#[test]
fn a_linked_broker_without_a_queue_home_refuses_a_guaranteed_member() {
    let scratch = tempfile::tempdir().unwrap();
    let h = Node::new(scratch.path(), "h").start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let a = Node::new(scratch.path(), "a").start("127.0.0.1:0", "127.0.0.1:0", &[cluster_addr(&h)]);
    wait_until("a - h link up", Duration::from_secs(20), || links_up(&a, 1.0)() && links_up(&h, 1.0)());
    let refused = Command::new(bin())
        .args(["sub", "--server", &a.tcp(), "--queue", "w", "--guaranteed", "jobs.>"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("unsupported_delivery_mode") && stderr.contains("queue_home"), "{stderr}");
    assert_eq!(a.metric("tidings_gd_group_members").unwrap(), 0.0);
}

/// The home itself SIGKILLed mid-stream and restarted on its data directory and ports: the
/// group resumes from its checkpoint, the members at `a` and `b` are joined again over the new
/// links and the one at `h` comes back with its client; every acknowledged publish reaches a
/// member, and whatever comes twice is flagged redelivered (at least once across the restart).
#[test]
fn the_home_killed_and_restarted_mid_stream_loses_nothing_and_flags_what_comes_again() {
    let scratch = tempfile::tempdir().unwrap();
    let node = |name: &str| Node::configured(scratch.path(), name, name, "queue_home = \"h\"\n");
    let home = node("h");
    let h = home.start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let (h_tcp, h_cluster) = (h.tcp(), cluster_addr(&h));
    let a = node("a").start("127.0.0.1:0", "127.0.0.1:0", std::slice::from_ref(&h_cluster));
    let b = node("b").start("127.0.0.1:0", "127.0.0.1:0", std::slice::from_ref(&h_cluster));
    wait_until("a - h - b link up", Duration::from_secs(20), || {
        links_up(&h, 2.0)() && links_up(&a, 1.0)() && links_up(&b, 1.0)()
    });
    let mut brokers = [a, h, b];
    let members = five_members(&brokers, scratch.path());
    let total = 3_000u64;
    let server = brokers[0].tcp();
    let publisher =
        std::thread::spawn(move || acked(publish(&server, "jobs.a", total, &["--rate", "600", "--window", "16"])));
    wait_until("the stream is under way", Duration::from_secs(30), || {
        members.iter().map(|m| m.lines().len()).sum::<usize>() >= 800
    });
    brokers[1].kill();
    brokers[1] = home.start(&h_tcp, &h_cluster, &[]);
    let acked = publisher.join().unwrap();
    assert_eq!(acked.len() as u64, total, "every publish was acknowledged");
    let all: Vec<&Member> = members.iter().collect();
    wait_for_all(&all, &acked, &BTreeSet::new());
    std::thread::sleep(Duration::from_millis(500));
    let (times, flagged) = tally(&all);
    let again: Vec<&Publish> = times.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k).collect();
    let unflagged: Vec<&&Publish> = again.iter().filter(|k| !flagged.contains(**k)).collect();
    eprintln!("after the home's restart, {} of {total} printed twice, {} flagged", again.len(), flagged.len());
    assert!(unflagged.is_empty(), "printed twice, never flagged: {:?}", &unflagged[..unflagged.len().min(5)]);
    assert!(again.len() < total as usize / 2, "only what was above the group's checkpoint comes again");
}
