//! A group of replicas on a hand-driven network: messages and syncs move only when a test says
//! so, so each test pins one rule (the acknowledgement rule, the epoch fence, dedup across a
//! takeover, the wiped-replica fences). Seeded faulty runs live in `tidings-sim` (`replica`).
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use tidings_replica::{Action, Entry, GroupSettings, Input, Recovered, ReplicaError, ReplicaGroup, ReplicaId};

const ALL: [ReplicaId; 3] = [1, 2, 3];

/// The replica with the shortest election timeout leads first, a publish is acknowledged once,
/// with its tick, and every replica applies it at that tick.
#[test]
fn a_publish_is_acknowledged_once_a_quorum_has_it_and_applied_everywhere() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    assert_eq!(c.leader(), Some(1));
    assert_eq!(c.leaders, vec![(1, 1)]);
    c.publish(1, 7, 1);
    c.run(5, &ALL);
    let tick = match c.acks.as_slice() {
        [(1, 7, 1, tick)] => *tick,
        other => panic!("expected one ack, got {other:?}"),
    };
    for id in ALL {
        assert_eq!(c.logged(id), vec![(7, 1, tick)], "replica {id}");
    }
    c.publish(2, 7, 2);
    assert_eq!(c.refused, vec![(2, 2)], "a follower refuses and names no false leader");
}

/// Only the leader's disk syncs: no quorum, no acknowledgement; the mutation switch
/// acknowledges anyway, which is the bug the simulator must catch.
#[test]
fn the_leaders_own_sync_is_not_enough_unless_the_mutation_is_on() {
    for (mutation, acked) in [(false, 0), (true, 1)] {
        let mut c = Cluster::new(3, mutation);
        c.run(30, &ALL);
        c.publish(1, 7, 1);
        c.run(10, &[1]);
        assert_eq!(c.acks.len(), acked, "mutation {mutation}");
        assert!(c.logged(1).is_empty(), "nothing is committed without a quorum");
    }
}

/// A leader cut off from its mates acknowledges nothing, a successor takes over in a later term,
/// and a retry of a publish acknowledged before the takeover gets the same tick.
#[test]
fn a_cut_off_leader_acknowledges_nothing_and_a_retry_after_takeover_keeps_its_tick() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    c.publish(1, 7, 1);
    c.run(5, &ALL);
    let first = c.acks.clone();
    assert_eq!(first.len(), 1);
    c.cut.insert(1);
    c.publish(1, 7, 2);
    c.run(40, &ALL);
    assert_eq!(c.acks, first, "the cut-off leader acknowledged a publish");
    let successor = c.leader().expect("a successor leads");
    assert_ne!(successor, 1);
    assert!(c.groups[&1].leading().is_none(), "check-quorum deposes the cut-off leader");
    c.publish(successor, 7, 1);
    c.publish(successor, 7, 2);
    c.run(5, &[1, 2, 3]);
    assert_eq!(c.acks[1], (successor, 7, 1, first[0].3), "a retry after takeover gets the first tick");
    assert_eq!(c.acks.len(), 3);
    c.cut.clear();
    c.run(20, &ALL);
    let reference = c.logged(successor);
    assert_eq!(reference.len(), 2);
    for id in ALL {
        assert_eq!(c.logged(id), reference, "replica {id} after healing");
    }
}

/// A wiped replica asks every mate its term before it steps anything, starts in the highest,
/// grants no vote until its log reaches the last index that term's leader answered with, and
/// then is a voter again.
#[test]
fn a_wiped_replica_fences_its_term_and_withholds_its_vote_until_caught_up() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    c.publish(1, 7, 1);
    c.run(5, &ALL);
    let settings = GroupSettings::new(3, ALL.to_vec());
    c.groups.insert(3, ReplicaGroup::rejoin(settings).expect("valid settings"));
    c.unsynced.remove(&3);
    c.synced.remove(&3);
    c.applied.remove(&3);
    assert!(c.groups[&3].withholding_vote());
    // Mate 2 is unreachable: no fence without every mate's answer.
    c.cut.insert(2);
    c.run(10, &ALL);
    assert!(c.groups[&3].state().is_none(), "fenced with an answer missing");
    // Mate 2 back, the leader cut: 3 fences but cannot catch up, and 2 cannot win with it.
    c.cut.clear();
    c.run(1, &ALL);
    c.cut.insert(1);
    c.run(60, &ALL);
    assert!(c.groups[&3].withholding_vote());
    assert!(c.leader().is_none(), "2 won an election with the vote of a replica that lost its log");
    let fence = c.synced[&3][0].rejoin_term.expect("the fence is written first");
    let index = c.synced[&3][0].rejoin_index;
    assert_eq!(fence, 1, "the highest term a mate answered");
    assert_eq!(index, c.groups[&1].status().last_index, "the last index of that term's leader");
    assert!(index >= 2, "past the publish the leader logged");
    // The leader back: 3 catches up, and then votes and applies like the others.
    c.cut.clear();
    c.run(60, &ALL);
    assert!(!c.groups[&3].withholding_vote());
    assert_eq!(c.logged(3), c.logged(2));
    assert_eq!(c.logged(3).len(), 1);
    // Restarting from what it synced keeps it caught up.
    let synced = c.synced[&3].clone();
    let recovered = Recovered {
        hard_state: synced.iter().rev().find_map(|w| w.hard_state.clone()).unwrap_or_default(),
        entries: synced.iter().flat_map(|w| w.entries.clone()).collect(),
        rejoin_term: fence,
        rejoin_index: index,
        snapshot: None,
        conf: None,
    };
    let restarted = ReplicaGroup::restart(GroupSettings::new(3, ALL.to_vec()), recovered).expect("recovers");
    assert!(!restarted.withholding_vote());
}

/// A member back with an empty log in the leader's own term (a wiped replica fences in the
/// highest term its mates answered, at the leader's last index, not in a new one: `rejoin`) is
/// caught up: the leader, which believed it held everything it once acknowledged, takes its rejection
/// for the truth instead of ignoring it as stale (raft-rs would), and sends it the log again.
#[test]
fn a_member_back_empty_in_the_leaders_term_is_caught_up() {
    // A small compaction trigger: the leader's snapshot ends below what the member had
    // acknowledged, so the snapshot alone does not bring it back.
    let mut c = Cluster::with(3, |settings| GroupSettings { compact_bytes: 1 << 10, ..settings });
    c.run(30, &ALL);
    let leader = c.leader().expect("a leader");
    let lost = if leader == 3 { 2 } else { 3 };
    let mut seq = 0;
    let mut publish = |c: &mut Cluster, count: u64| {
        for _ in 0..count {
            seq += 1;
            c.input(leader, Input::Publish { publisher: 7, seq, payload: vec![seq as u8; 100] });
            c.run(1, &ALL);
        }
    };
    publish(&mut c, 40);
    assert!(c.groups[&leader].status().first_index > 1, "the leader compacted its log");
    publish(&mut c, 3);
    let term = c.groups[&leader].status().term;
    let settings = GroupSettings::new(lost, ALL.to_vec());
    c.groups.insert(lost, ReplicaGroup::added(settings, term).expect("valid settings"));
    c.unsynced.remove(&lost);
    c.applied.remove(&lost);
    publish(&mut c, 10);
    c.run(20, &ALL);
    assert_eq!(c.leader(), Some(leader), "no election: the leader's term is the fence");
    let (back, theirs) = (c.groups[&lost].status(), c.groups[&leader].status());
    assert_eq!(back.applied, theirs.commit, "the member back empty caught up: {back:?} against {theirs:?}");
}

/// What a disk hands back is input: a log with a hole, or a replica outside its group, is
/// refused with an error rather than started (raft-rs would panic on it).
#[test]
fn a_broken_recovered_log_or_a_stranger_is_refused() {
    let voters = ALL.to_vec();
    let entry = |index, term| Entry { index, term, ..Entry::default() };
    let holed = Recovered { entries: vec![entry(1, 1), entry(3, 1)], ..Recovered::default() };
    assert_eq!(
        ReplicaGroup::restart(GroupSettings::new(1, voters.clone()), holed).err(),
        Some(ReplicaError::BrokenLog)
    );
    let backwards = Recovered { entries: vec![entry(1, 2), entry(2, 1)], ..Recovered::default() };
    assert_eq!(
        ReplicaGroup::restart(GroupSettings::new(1, voters.clone()), backwards).err(),
        Some(ReplicaError::BrokenLog)
    );
    assert!(matches!(ReplicaGroup::bootstrap(GroupSettings::new(9, voters.clone())), Err(ReplicaError::Settings(_))));
    assert!(matches!(ReplicaGroup::rejoin(GroupSettings::new(9, voters)), Err(ReplicaError::Settings(_))));
    // A fencing replica refuses publishes and names no leader: it knows none yet.
    let mut fencing = ReplicaGroup::rejoin(GroupSettings::new(3, ALL.to_vec())).expect("valid settings");
    let refused = fencing.handle(0, Input::Publish { publisher: 1, seq: 1, payload: Vec::new() });
    assert_eq!(refused, vec![Action::Refused { publisher: 1, seq: 1, leader: None }]);
}

/// The term is the epoch: a leader whose publish was committed only after it lost the lead never
/// acknowledges it, neither as a follower nor after leading again; a retry at the new leader
/// gets the committed tick.
#[test]
fn a_publish_committed_after_its_leader_lost_the_lead_is_not_acknowledged_by_it() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    assert_eq!(c.leader(), Some(1));
    c.publish(1, 7, 1);
    c.deliver_once();
    // The appends reached 2 and 3; their acknowledgements will not reach 1.
    c.cut.insert(1);
    c.run(40, &ALL);
    let successor = c.leader().expect("a successor leads");
    assert_eq!(c.logged(successor).len(), 1, "the successor committed the publish");
    c.cut.clear();
    c.run(40, &ALL);
    assert_eq!(c.logged(1), c.logged(successor));
    assert!(c.acks.is_empty(), "acknowledged outside the term it was proposed in: {:?}", c.acks);
    let leader = c.leader().expect("a leader");
    c.publish(leader, 7, 1);
    assert_eq!(c.acks, vec![(leader, 7, 1, c.logged(leader)[0].2)]);
}

/// A leader offers its state to open the pubend from only once it applied an entry of its own
/// term (never at the election itself, when committed entries may still be unapplied), and that
/// state holds every acknowledged record at the tick the host's engine gave it, after a takeover
/// too. Followers and fencing replicas offer nothing.
#[test]
fn a_leader_serves_once_its_term_is_applied_with_every_acknowledged_record_at_its_tick() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    assert_eq!(c.groups[&1].serving().map(|(term, _)| term), Some(1));
    assert!(c.groups[&2].serving().is_none() && c.groups[&3].serving().is_none(), "followers serve nothing");
    for (seq, tick) in [(1, 100), (2, 250)] {
        c.input(1, Input::PublishAt { publisher: 7, seq, tick, payload: vec![seq as u8] });
    }
    c.run(5, &ALL);
    assert_eq!(c.acks, vec![(1, 7, 1, 100), (1, 7, 2, 250)], "acknowledged at the engine's ticks");
    // Committed on 2 and 3 but not yet acknowledged to 1: the successor serves it all the same.
    c.input(1, Input::PublishAt { publisher: 7, seq: 3, tick: 300, payload: vec![3] });
    c.deliver_once();
    c.cut.insert(1);
    c.run(40, &ALL);
    let successor = c.leader().expect("a successor leads");
    let (_, state) = c.groups[&successor].serving().expect("the successor serves once its term is applied");
    let records: Vec<_> = state.records().map(|r| (r.publisher, r.seq, r.tick, r.payload.clone())).collect();
    assert_eq!(records, vec![(7, 1, 100, vec![1]), (7, 2, 250, vec![2]), (7, 3, 300, vec![3])]);
    assert_eq!(state.publishers(), vec![(7, 3)]);
    assert!(c.groups[&1].serving().is_none(), "a deposed leader serves nothing");
    assert!(
        c.serving_when_elected.len() >= 2 && c.serving_when_elected.iter().all(|&s| !s),
        "{:?}",
        c.serving_when_elected
    );
    let fencing = ReplicaGroup::rejoin(GroupSettings::new(3, ALL.to_vec())).expect("valid settings");
    assert!(fencing.serving().is_none());
}

/// Takeover in a broker: the first voter, cut off, loses the lead to a successor. When it is back
/// and caught up, it gets the lead back only with hand-back on; with it off (a broker that takes
/// pubends over) the successor keeps it, and the first voter is a follower that offers no state
/// to serve from, so one broker alone serves the pubend.
#[test]
fn a_successor_keeps_the_lead_when_hand_back_is_off() {
    for hand_back in [true, false] {
        let mut c = Cluster::with(3, |settings| GroupSettings { hand_back, ..settings });
        c.run(30, &ALL);
        assert_eq!(c.leader(), Some(1));
        c.cut.insert(1);
        c.run(40, &ALL);
        let successor = c.leader().expect("a successor leads");
        assert_ne!(successor, 1);
        c.publish(successor, 7, 1);
        c.run(5, &ALL);
        assert!(c.groups[&successor].serving().is_some(), "the successor serves");
        c.cut.clear();
        c.run(60, &ALL);
        let expected = if hand_back { 1 } else { successor };
        assert_eq!(c.leader(), Some(expected), "hand_back {hand_back}");
        let first = &c.groups[&1];
        assert_eq!(first.serving().is_some(), hand_back, "the first voter serves only with hand-back");
        assert_eq!(c.logged(1), c.logged(successor), "the first voter caught up either way");
    }
}
