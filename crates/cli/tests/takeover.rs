//! Takeover (issue 40, `docs/replication.md`, "Takeover") with real processes: p1, p2 and p3
//! form cell PUB (the publishers' cell of `replicated-cell.toml`), a subscriber listens at s1,
//! outside it and linked to all three. One guaranteed publisher publishes at a steady rate with
//! `--server p1,p2,p3`. The leader of the pubend's group (its host, later a successor) is
//! SIGKILLed mid-stream, again and again: each time a mate takes the pubend over (same id, its
//! records rebuilt from the group), the publisher reconnects to the first live broker of its list
//! and resumes the pubend there, and the killed broker restarts on its own disk as a follower
//! (its log waits for its group to serve there). At the end every acknowledged publish reached
//! the subscriber exactly once, in order, at the acknowledged tick, and every acknowledgement
//! names the one pubend. The default run kills 3 times; the time from each SIGKILL to the
//! successor's first acknowledgement is measured by `tidings bench takeover`, JetStream's beside
//! it (`crates/bench/src/takeover.rs`). And a subscriber set up again
//! while the whole cell is down starts on its pubend once the cell is back: a gap notice for
//! what it missed, never silence. A durable subscriber at a broker of the cell waits for that
//! broker when it dies, never moving to a mate (which would make its subscription anew).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod replica_common;

use std::time::{Duration, Instant};

use replica_common::{caught_up, cluster, links, publishers_cell, replica_group, Lines};
use tidings_testkit::{wait_until, BrokerProcess};

/// Publishes per second: one every 20 ms, so the first acknowledgement after a kill comes
/// within 20 ms of the new leader serving.
const RATE: u64 = 50;
/// Time budgeted to each kill (takeover, restart, catch-up) in the publisher's run.
const PER_KILL: Duration = Duration::from_secs(8);

#[test]
fn a_mate_takes_the_pubend_over_when_its_leader_is_killed_and_the_publisher_resumes_there() {
    let run = takeovers(3, [0, 1, 2]);
    assert_eq!(run.took.len(), 3);
}

/// The publisher lists the brokers `p1,p3,p2`: when p1 (the host) is killed, p2 (the first
/// mate) takes over, and the publisher reconnects to p3, a live follower. p3 refuses its
/// publishes at once, naming p2 (rather than holding them 5 s in case it is elected), and the
/// client moves on to the next broker of its list and sends its window again there.
#[test]
fn a_publisher_refused_by_a_follower_moves_on_to_the_leader() {
    let run = takeovers(1, [0, 2, 1]);
    match run.successors[..] {
        [1] => {
            assert!(run.refusals >= 1, "p3 refused the publisher and named p2: {:?}", run.notes);
            assert!(
                run.took[0] < Duration::from_secs(5),
                "the refusal came at once, not after the hold: {:?}",
                run.took
            );
        }
        // p3 won the election: the publisher reached the leader directly, nothing to move from.
        _ => eprintln!("p3 took over: no refusal to move on from this time"),
    }
}

/// What a run of `takeovers` saw.
struct Run {
    /// Each kill's takeover time.
    took: Vec<Duration>,
    /// Each kill's successor (an index of p1, p2, p3).
    successors: Vec<usize>,
    /// The publisher's moves on a follower's refusal.
    refusals: usize,
    /// The publisher's standard error.
    notes: Vec<String>,
}

/// Runs the cell through `kills` SIGKILLs of the group's leader, with the publisher's server
/// list in the order `list` (indexes of p1, p2, p3), and checks that every acknowledged publish
/// arrived exactly once and in order.
fn takeovers(kills: usize, list: [usize; 3]) -> Run {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let (nodes, mut brokers, bs) = publishers_cell(scratch.path());
    let sub = Lines::follow(gd_common::spawn(&["sub", "--server", &bs.tcp(), "--guaranteed", "--json", "g.>"]));
    wait_until("the subscription is confirmed", Duration::from_secs(20), || {
        bs.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
    });

    let servers = list.iter().map(|&i| brokers[i].tcp()).collect::<Vec<_>>().join(",");
    let count = RATE * (5 + PER_KILL.as_secs() * kills as u64);
    let rate = RATE.to_string();
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", count, &["--rate", &rate, "--window", "64"]));
    wait_until("p1 acknowledges", Duration::from_secs(20), || publisher.count() >= 20);

    let mut takeovers = Vec::new();
    let mut successors = Vec::new();
    for kill in 0..kills {
        let leader = leader_index(&brokers);
        let reconnects_before = reconnects(&publisher).len();
        brokers[leader].kill();
        let killed_at = Instant::now();
        // The first acknowledgement read after the publisher reconnected (to a successor): an
        // acknowledgement the dead leader sent just before the kill, read late, does not count.
        let mut first = None;
        let acknowledged = |first: &mut Option<Instant>| {
            let Some(&back) = reconnects(&publisher).get(reconnects_before) else { return false };
            *first = publisher.timed().into_iter().map(|(at, _)| at).find(|at| *at > back.max(killed_at));
            first.is_some()
        };
        while !acknowledged(&mut first) && killed_at.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if first.is_none() {
            // What the publisher and the survivors' groups said, to tell a lost election from a
            // publisher that never reached the successor.
            for (at, note) in publisher.notes().into_iter().filter(|(at, _)| *at >= killed_at) {
                eprintln!("  +{:?} publisher: {note}", at.duration_since(killed_at));
            }
            for (i, b) in brokers.iter().enumerate().filter(|&(i, _)| i != leader) {
                eprintln!("  {}: {}", nodes[i].name, replica_group(b));
            }
            let last = publisher.timed().last().map(|(_, v)| v.clone());
            eprintln!("  acknowledged {}, the last: {last:?}", publisher.count());
            panic!("kill {kill}: no acknowledgement from the successor within 15 s of killing {}", nodes[leader].name);
        }
        let took = first.unwrap().duration_since(killed_at);
        eprintln!("kill {kill}: {} SIGKILLed, first acknowledgement after {took:?}", nodes[leader].name);
        for (at, note) in publisher.notes().into_iter().filter(|(at, _)| *at >= killed_at) {
            eprintln!("  +{:?} publisher: {note}", at.duration_since(killed_at));
        }
        takeovers.push(took);
        let successor = leader_among(&brokers, leader);
        successors.push(successor);
        // The killed broker restarts on its own disk, a follower, and catches up before the next kill.
        let others: Vec<String> = (0..3).filter(|&i| i != leader).map(|i| cluster(&brokers[i])).collect();
        brokers[leader] = nodes[leader].restart(&brokers[leader], &others);
        wait_until("the cell links again", Duration::from_secs(20), || brokers.iter().all(|b| links(b) == 3.0));
        let now = leader_index(&brokers);
        assert_eq!(now, successor, "the lead moved again when the killed broker came back");
        wait_until("the restarted broker caught up", Duration::from_secs(20), || {
            brokers.iter().all(|b| caught_up(b, &brokers[now]))
        });
    }

    let notes: Vec<String> = publisher.notes().into_iter().map(|(_, line)| line).collect();
    let refusals = notes.iter().filter(|n| n.starts_with("disconnected") && n.contains("does not lead")).count();
    let (acked, status, stderr) = publisher.finish(Duration::from_secs(PER_KILL.as_secs() * kills as u64 + 60));
    if !status.success() {
        eprintln!("acknowledged {}, the last: {:?}", acked.len(), acked.last());
    }
    assert!(status.success(), "not every publish was acknowledged: {stderr}");
    assert_eq!(acked.len() as u64, count);
    let pubends: std::collections::BTreeSet<&str> = acked.iter().map(|a| a["pubend"].as_str().unwrap()).collect();
    assert_eq!(pubends.len(), 1, "the publisher resumed its pubend on every successor: {pubends:?}");
    wait_until("the subscriber got every acknowledged publish", Duration::from_secs(60), || sub.count() >= acked.len());
    std::thread::sleep(Duration::from_millis(500));
    let got: Vec<serde_json::Value> = sub.timed().into_iter().map(|(_, line)| line).collect();
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());

    Run { took: takeovers, successors, refusals, notes }
}

/// When the publisher's standard error said it reconnected, in order.
fn reconnects(publisher: &Lines) -> Vec<Instant> {
    publisher.notes().into_iter().filter(|(_, line)| line.starts_with("reconnected to")).map(|(at, _)| at).collect()
}

/// The broker that leads the pubend's group once the two brokers other than `killed` agree on
/// it: never the killed one.
fn leader_among(brokers: &[BrokerProcess; 3], killed: usize) -> usize {
    let live: Vec<usize> = (0..3).filter(|&i| i != killed).collect();
    let mut found = None;
    wait_until("the survivors agree on a new leader", Duration::from_secs(20), || {
        let names: Vec<Option<String>> =
            live.iter().map(|&i| replica_group(&brokers[i])["leader"].as_str().map(str::to_string)).collect();
        found = names[0]
            .as_deref()
            .filter(|_| names[0] == names[1])
            .and_then(|n| ["p1", "p2", "p3"].iter().position(|p| *p == n))
            .filter(|&i| i != killed);
        found.is_some()
    });
    found.unwrap()
}

/// The broker that leads the pubend's group now, once every broker's `/state` names it.
fn leader_index(brokers: &[BrokerProcess; 3]) -> usize {
    let mut found = None;
    wait_until("the brokers agree on a leader", Duration::from_secs(20), || {
        let names: Vec<Option<String>> =
            brokers.iter().map(|b| replica_group(b)["leader"].as_str().map(str::to_string)).collect();
        let agreed = names.windows(2).all(|pair| pair[0] == pair[1]);
        found = names[0].as_deref().filter(|_| agreed).and_then(|n| ["p1", "p2", "p3"].iter().position(|p| *p == n));
        found.is_some()
    });
    found.unwrap()
}

/// A publisher given brokers of two cells (`--server a,b`, a in cell A, b in cell B) stays with
/// its pubend while its host is down: b neither replicates a's pubend nor can deduplicate with
/// it, so it refuses the publisher (`storage_unavailable`, naming a) instead of taking it
/// into a pubend of its own, where a retry of a publish a logged before its SIGKILL would be
/// logged again (a duplicate once a is back), and the publisher's next publishes would reach
/// subscribers ahead of what a still held for them (out of order). Once a restarts on its disk,
/// the publisher resumes there: every acknowledgement names a's pubend, and a durable
/// subscriber at b gets every acknowledged publish exactly once, in order.
#[test]
fn a_publisher_given_two_cells_waits_for_its_pubend_rather_than_moving_to_another() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let (a_node, b_node) =
        (replica_common::Node::new(scratch.path(), "a", "A"), replica_common::Node::new(scratch.path(), "b", "B"));
    let mut a = a_node.start("127.0.0.1:0", "127.0.0.1:0", &[]);
    let b = b_node.start("127.0.0.1:0", "127.0.0.1:0", &[cluster(&a)]);
    wait_until("a and b are linked", Duration::from_secs(20), || links(&a) == 1.0 && links(&b) == 1.0);
    let sub = Lines::follow(gd_common::spawn(&["sub", "--server", &b.tcp(), "--durable", "d", "--json", "g.>"]));
    wait_until("the subscription is confirmed", Duration::from_secs(20), || {
        b.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
    });

    let servers = format!("{},{}", a.tcp(), b.tcp());
    let count = RATE * 8;
    let rate = RATE.to_string();
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", count, &["--rate", &rate, "--window", "16"]));
    wait_until("a acknowledges", Duration::from_secs(20), || publisher.count() >= 20);
    a.kill();
    let down = Instant::now();
    // Down for less than the client's patience with refusals (5 s, `failover.rs`), after which
    // the refusal would go to the publisher as an error.
    std::thread::sleep(Duration::from_secs(2));
    let while_down = publisher.timed().into_iter().filter(|(at, _)| *at > down + Duration::from_millis(50)).count();
    assert_eq!(while_down, 0, "nothing was acknowledged while the pubend's host was down");
    let a = a_node.restart(&a, &[]);

    let (acked, status, stderr) = publisher.finish(Duration::from_secs(90));
    assert!(status.success(), "not every publish was acknowledged ({} were): {stderr}", acked.len());
    assert_eq!(acked.len() as u64, count);
    let pubends: std::collections::BTreeSet<&str> = acked.iter().map(|a| a["pubend"].as_str().unwrap()).collect();
    assert_eq!(pubends.len(), 1, "every publish was logged in the publisher's one pubend: {pubends:?}");
    assert!(stderr.contains("hosted by a"), "b refused the publisher, naming its pubend's host: {stderr}");
    wait_until("the subscriber got every acknowledged publish", Duration::from_secs(60), || sub.count() >= acked.len());
    std::thread::sleep(Duration::from_millis(1_000));
    let got: Vec<serde_json::Value> = sub.timed().into_iter().map(|(_, line)| line).collect();
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop(a);
}

/// A guaranteed subscriber whose connection is lost while its publishers' whole cell is down
/// (every broker SIGKILLed) is set up again at once: its new subscription is confirmed with the
/// pubend unstarted, its home out of view. Once the cell is back the pubend starts: the
/// subscriber gets what is acknowledged from then on, and the ticks it missed come as a gap
/// notice, never silently. The barrier asked for the pubend can come back without it (the
/// broker the routes lead to does not serve it again yet); routes need not move again after
/// that, and before `Driver::unstarted_turn` asked again the subscription never started and its
/// client was never told (the nemesis, seed 464 with client faults: 802 acknowledged messages
/// missing without a word).
#[test]
fn a_subscription_set_up_again_while_the_publishers_cell_is_down_starts_when_it_is_back() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let (nodes, brokers, s1) = publishers_cell(scratch.path());
    let confirmed = || s1.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0);
    let to_s1 = tidings_testkit::FaultProxy::start(s1.tcp().parse().unwrap()).unwrap();
    let proxy = to_s1.addr().to_string();
    let sub = Lines::follow(gd_common::spawn(&["sub", "--server", &proxy, "--guaranteed", "--json", "g.>"]));
    wait_until("the subscription is confirmed", Duration::from_secs(20), || confirmed() >= 1.0);
    let servers = brokers.iter().map(BrokerProcess::tcp).collect::<Vec<_>>().join(",");
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", 600, &["--rate", "100", "--window", "16"]));
    wait_until("deliveries flow", Duration::from_secs(20), || sub.count() >= 100);

    to_s1.cut();
    let mut brokers = brokers;
    for broker in &mut brokers {
        broker.kill();
    }
    to_s1.heal();
    wait_until("the subscriber is set up again", Duration::from_secs(20), || confirmed() >= 2.0);
    let peers = |of: &[&BrokerProcess]| of.iter().map(|b| cluster(b)).collect::<Vec<_>>();
    let b3 = nodes[2].restart(&brokers[2], &[]);
    let b2 = nodes[1].restart(&brokers[1], &peers(&[&b3]));
    let b1 = nodes[0].restart(&brokers[0], &peers(&[&b2, &b3]));
    let restarted = Instant::now();

    let (acked, status, notes) = publisher.finish(Duration::from_secs(90));
    assert!(status.success(), "the publisher failed: {notes}");
    let last = gd_common::id(acked.last().unwrap());
    let got_last = |lines: &[(Instant, serde_json::Value)]| {
        lines.iter().any(|(_, line)| line.get("gap").is_none() && gd_common::id(line) == last)
    };
    wait_until("the subscriber gets the last acknowledged message", Duration::from_secs(30), || got_last(&sub.timed()));
    eprintln!("the last acknowledged message arrived {:?} after the cell restarted", restarted.elapsed());
    let (got, ..) = sub.finish(Duration::from_millis(200));
    let gd_common::Accounted { delivered, missed, gaps, silent } = gd_common::account(&got, &acked);
    eprintln!("delivered {delivered}, missed {missed}, gap notices {gaps:?}");
    assert!(silent.is_empty(), "{} acknowledged publishes missing without a gap notice: {silent:?}", silent.len());
    drop((b1, b2, b3, s1));
}

/// A durable subscriber at p2, a broker of the cell, given p2 alone: p2 tells it its mates'
/// addresses (SERVERS), which a publisher fails over to, but a durable subscription's record
/// and checkpoints are on p2's disk alone, so when p2 is SIGKILLed the subscriber passes over
/// the mates it reaches and waits for p2. Back, its subscription resumes from its checkpoint:
/// every acknowledged publish once, in order, none flagged a gap. Before the client passed
/// over them it reconnected to a mate at once, which made a durable subscription of that name
/// anew (the nemesis, `gryphon-fig3-double.toml` seed 601: 853 acknowledged messages lost
/// without a word by a durable subscriber whose broker was killed).
#[test]
fn a_durable_subscriber_waits_for_its_broker_rather_than_moving_to_a_mate() {
    let _serial = tidings_testkit::one_at_a_time();
    let scratch = tempfile::tempdir().unwrap();
    let (nodes, brokers, s1) = publishers_cell(scratch.path());
    let [b1, b2, b3] = brokers;
    let total = 1_500;
    let args = ["sub", "--server", &b2.tcp(), "--guaranteed", "--durable", "d", "--json", "g.>"];
    let sub = Lines::follow(gd_common::spawn(&[&args[..], &["--count", &total.to_string()]].concat()));
    wait_until("the durable subscription is confirmed", Duration::from_secs(20), || {
        b2.metric("tidings_gd_subscriptions_confirmed_total").unwrap_or(0.0) >= 1.0
    });
    let servers = [&b1, &b2, &b3].map(|b| b.tcp()).join(",");
    let publisher = Lines::follow(gd_common::publish(&servers, "g.a", total as u64, &["--rate", "100"]));
    wait_until("deliveries flow", Duration::from_secs(20), || sub.count() >= 200);

    let mut b2 = b2;
    b2.kill();
    let at_kill = publisher.count();
    wait_until("p1 and p3 acknowledge 500 more", Duration::from_secs(30), || publisher.count() >= at_kill + 500);
    let b2 = nodes[1].restart(&b2, &[cluster(&b1), cluster(&b3)]);
    let (acked, status, notes) = publisher.finish(Duration::from_secs(60));
    assert!(status.success(), "the publisher failed: {notes}");
    let (got, _, notes) = sub.finish(Duration::from_secs(60));
    let elsewhere: Vec<&str> =
        notes.lines().filter(|l| l.contains("(broker \"p1\")") || l.contains("(broker \"p3\")")).collect();
    assert!(elsewhere.is_empty(), "the durable subscriber connected to a mate: {elsewhere:?}\n{notes}");
    assert!(notes.contains("reconnected") && notes.contains("(broker \"p2\")"), "it came back to p2: {notes}");
    gd_common::assert_exactly_once_in_order(&got, &acked.iter().collect::<Vec<_>>());
    drop((b1, b2, b3, s1));
}
