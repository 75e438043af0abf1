//! A turn's publishes proposed together (`Input::PublishAllAt`) and the commit index left to
//! ride on the next append or heartbeat (`GroupSettings::broadcast_commit` off): what the
//! broker does to pay raft's per-message costs once per turn, pinned on the hand-driven network.
//! Neither may change what is acknowledged, when, or at which tick.
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use raft::eraftpb::MessageType;
use tidings_replica::{Action, Envelope, GroupSettings, Input, Record, ReplicaId};

const ALL: [ReplicaId; 3] = [1, 2, 3];

fn record(seq: u64, tick: u64) -> Record {
    Record { tick, publisher: 7, seq, payload: vec![seq as u8] }
}

/// The entries of each append `from` has on the wire (0: one that only tells the commit), by
/// receiver.
fn appends(c: &Cluster, from: ReplicaId) -> Vec<(ReplicaId, usize)> {
    let mut appends: Vec<_> = c
        .wire
        .iter()
        .filter_map(|(sender, to, msg)| match msg {
            Envelope::Raft(m) if *sender == from && m.get_msg_type() == MessageType::MsgAppend => {
                Some((*to, m.entries.len()))
            }
            _ => None,
        })
        .collect();
    appends.sort_unstable();
    appends
}

/// Five publishes proposed together are one journal write of five entries and one append per
/// follower; each is acknowledged once, only after a quorum synced it, at the tick it came with,
/// and every replica applies them in that order. A repeat inside the batch is proposed once; a
/// batch holding an applied publish answers it from the retry table and logs only the new one.
#[test]
fn publishes_proposed_together_are_one_write_and_one_append_per_follower() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    assert_eq!(c.leader(), Some(1));
    c.wire.clear();
    let writes = c.unsynced.get(&1).map_or(0, Vec::len);
    let batch = (1..=5).map(|seq| record(seq, 100 + seq)).chain([record(3, 103)]).collect();
    c.input(1, Input::PublishAllAt(batch));
    let written = &c.unsynced[&1][writes..];
    assert_eq!(written.iter().map(|w| w.entries.len()).collect::<Vec<_>>(), vec![5], "one write");
    assert_eq!(appends(&c, 1), vec![(2, 5), (3, 5)], "one append per follower");
    c.run(3, &[1]);
    assert!(c.acks.is_empty(), "the leader's own sync is not a quorum");
    c.run(5, &ALL);
    assert_eq!(c.acks, (1..=5).map(|seq| (1, 7, seq, 100 + seq)).collect::<Vec<_>>());
    let expected: Vec<_> = (1..=5).map(|seq| (7, seq, 100 + seq)).collect();
    for id in ALL {
        assert_eq!(c.logged(id), expected, "replica {id}");
    }
    c.acks.clear();
    c.input(1, Input::PublishAllAt(vec![record(2, 500), record(6, 501)]));
    assert_eq!(c.acks, vec![(1, 7, 2, 102)], "an applied publish is answered with its first tick at once");
    c.run(5, &ALL);
    assert_eq!(c.acks, vec![(1, 7, 2, 102), (1, 7, 6, 501)]);
    assert_eq!(c.logged(2).len(), 6, "the applied one is not logged twice");
}

/// A batch reaching a follower, or a fencing replica, is refused whole, naming the leader when
/// known, and nothing of it is logged.
#[test]
fn a_batch_off_the_leader_is_refused_whole() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    c.input(2, Input::PublishAllAt(vec![record(1, 10), record(2, 11)]));
    assert_eq!(c.refused, vec![(2, 1), (2, 2)]);
    let mut fencing = tidings_replica::ReplicaGroup::rejoin(GroupSettings::new(3, ALL.to_vec())).expect("valid");
    let actions = fencing.handle(0, Input::PublishAllAt(vec![record(1, 10)]));
    assert!(matches!(actions.as_slice(), [Action::Refused { seq: 1, leader: None, .. }]));
    c.run(5, &ALL);
    assert!(c.logged(1).is_empty() && c.acks.is_empty());
}

/// With the commit index not broadcast, the leader still acknowledges once a quorum synced,
/// sends no append of its own for a new commit, and the followers apply at the next heartbeat.
#[test]
fn followers_learn_the_commit_from_the_next_heartbeat_when_it_is_not_broadcast() {
    let mut c = Cluster::with(3, |settings| GroupSettings { broadcast_commit: false, ..settings });
    c.run(30, &ALL);
    assert_eq!(c.leader(), Some(1));
    c.wire.clear();
    c.input(1, Input::PublishAllAt(vec![record(1, 100), record(2, 200)]));
    // Deliver the appends, sync everywhere, deliver the answers: the leader commits.
    for _ in 0..5 {
        if !c.acks.is_empty() {
            break;
        }
        c.deliver_once();
        for id in ALL {
            c.sync(id);
        }
    }
    assert_eq!(c.acks, vec![(1, 7, 1, 100), (1, 7, 2, 200)]);
    assert_eq!(appends(&c, 1), vec![], "no append only to tell the commit");
    assert!(c.logged(2).is_empty() && c.logged(3).is_empty(), "followers have not heard the commit yet");
    c.run(3, &ALL);
    for id in ALL {
        assert_eq!(c.logged(id), vec![(7, 1, 100), (7, 2, 200)], "replica {id}");
    }
}

/// Two appends stepped together at a follower (`handle_all`, what the broker does with a
/// turn's messages) are one journal write, and neither is answered before that write is synced.
#[test]
fn appends_stepped_together_are_one_write_answered_after_its_sync() {
    let mut c = Cluster::new(3, false);
    c.run(30, &ALL);
    c.wire.clear();
    c.input(1, Input::PublishAllAt(vec![record(1, 100)]));
    c.input(1, Input::PublishAllAt(vec![record(2, 200)]));
    let to_two: Vec<Input> = c
        .wire
        .iter()
        .filter(|(_, to, _)| *to == 2)
        .map(|(from, _, msg)| Input::Message { from: *from, msg: msg.clone() })
        .collect();
    assert_eq!(to_two.len(), 2, "two appends on the wire to replica 2");
    let now = c.now;
    let follower = c.groups.get_mut(&2).expect("replica 2");
    let actions = follower.handle_all(now, to_two);
    let writes: Vec<(u64, usize)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Persist(w) => Some((w.number, w.entries.len())),
            _ => None,
        })
        .collect();
    assert!(matches!(writes.as_slice(), [(_, 2)]), "one write of both entries: {writes:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::Send { .. })), "nothing answered before the sync");
    let answers = follower.handle(now, Input::Persisted { number: writes[0].0 });
    let acked: Vec<u64> = answers
        .iter()
        .filter_map(|a| match a {
            Action::Send { to: 1, msg: Envelope::Raft(m) } if m.get_msg_type() == MessageType::MsgAppendResponse => {
                Some(m.index)
            }
            _ => None,
        })
        .collect();
    let last = follower.status().last_index;
    assert_eq!(acked.last(), Some(&last), "the answers acknowledge both entries once synced: {acked:?}");
}

/// With exact ticks (the broker's setting), a publish proposed at a tick the group has passed
/// is refused, not moved: the group never holds a record at a tick the host's engine did not
/// give it (a moved one takes the tick the engine gives the next record, and every later one
/// moves in turn). Without, it moves past (the simulator's clock-driven worlds).
#[test]
fn a_publish_at_a_tick_the_group_passed_is_refused_with_exact_ticks_and_moved_without() {
    for exact in [true, false] {
        let mut c = Cluster::with(3, |settings| GroupSettings { exact_ticks: exact, ..settings });
        c.run(30, &ALL);
        assert_eq!(c.leader(), Some(1));
        c.input(1, Input::PublishAllAt(vec![record(1, 100), record(2, 200)]));
        c.run(5, &ALL);
        // A retry logged by the engine at 150, never proposed, comes after 200.
        c.input(1, Input::PublishAllAt(vec![record(3, 150), record(4, 300)]));
        c.run(5, &ALL);
        let logged: Vec<(u64, u64)> = c.logged(1).into_iter().map(|(_, seq, tick)| (seq, tick)).collect();
        if exact {
            assert_eq!(logged, [(1, 100), (2, 200), (4, 300)], "nothing logged at a tick the engine did not give");
            assert_eq!(c.refused, [(1, 3)]);
        } else {
            assert_eq!(logged, [(1, 100), (2, 200), (3, 201), (4, 300)], "moved past the last tick");
        }
    }
}
