//! Membership changes in the core (issue 40, `members`): a broker added to a running group
//! catches up as a learner from the leader's snapshot and the log's tail while publishes go on,
//! is promoted, and counts in the quorum; a forgotten member is removed and its messages are
//! refused; a restart knows the current members, not the creation voters.
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use raft::eraftpb::{Message, MessageType};
use tidings_replica::{
    Command, Envelope, GroupSettings, Input, Membership, Record, Recovered, ReplicaGroup, ReplicaId,
};

/// Publishes `n` records of 256 B at the leader, in turns of 16, each turn followed by one
/// round in which `membership` (if any) is fed to every `live` replica, as the broker does at
/// each tick (a fencing replica learns from it whom not to wait for), and `live` replicas run.
/// Rounds without a leader only run, and what a deposed leader had not committed is proposed
/// again at the end, as the broker's gate does when it leads in a new term (the group answers
/// a publish it holds from its retry table).
fn publish_while(c: &mut Cluster, seq: &mut u64, n: u64, live: &[ReplicaId], membership: Option<&Membership>) {
    let end = *seq + n;
    let record = |seq: u64| Record { tick: seq, publisher: 1, seq, payload: vec![7; 256] };
    let mut rounds = 0;
    while *seq < end {
        rounds += 1;
        assert!(rounds < 10 * n as usize, "no leader for too long");
        if let Some(leader) = c.leader() {
            let records: Vec<Record> = (*seq + 1..=*seq + 16).map(record).collect();
            *seq += 16;
            c.input(leader, Input::PublishAllAt(records));
            c.input(leader, Input::Propose(Command::Release { up_to: seq.saturating_sub(40) }));
        }
        round(c, live, membership);
    }
    for _ in 0..200 {
        let acked = acked(c);
        let missing: Vec<Record> = (1..=*seq).filter(|s| !acked.contains(s)).map(record).collect();
        if missing.is_empty() {
            return;
        }
        if let Some(leader) = c.leader() {
            c.input(leader, Input::PublishAllAt(missing));
        }
        round(c, live, membership);
    }
}

/// One round: `membership` fed to every `live` replica, then one run of them.
fn round(c: &mut Cluster, live: &[ReplicaId], membership: Option<&Membership>) {
    if let Some(m) = membership {
        for &id in live {
            c.input(id, Input::Membership(m.clone()));
        }
    }
    c.run(1, live);
}

/// The sequence numbers acknowledged so far (each once, however many times answered).
fn acked(c: &Cluster) -> std::collections::BTreeSet<u64> {
    c.acks.iter().map(|&(_, _, seq, _)| seq).collect()
}

/// Settings compacting every 16 KiB of entries, so a replica added later gets a snapshot.
fn small(settings: GroupSettings) -> GroupSettings {
    GroupSettings { compact_bytes: 16 << 10, ..settings }
}

/// Replicas 1-3 that published 800 records (their logs compacted), and replica 4 added to the
/// group in the leader's term (not yet a member: the leader adds it).
fn compacted_with_a_fourth(seq: &mut u64) -> Cluster {
    let mut c = Cluster::with(3, small);
    c.run(30, &[1, 2, 3]);
    publish_while(&mut c, seq, 800, &[1, 2, 3], None);
    assert!(c.groups[&1].status().first_index > 1, "the log was compacted");
    let term = c.groups[&1].status().term;
    c.groups.insert(4, ReplicaGroup::added(small(GroupSettings::new(4, vec![1, 2, 3])), term).expect("valid"));
    c
}

/// Replaces replica 3 (gone for good) with a new replica 4 while publishing: 4 joins as a
/// learner, gets the leader's snapshot (the log was compacted long before) and the tail, is
/// promoted; then 2 is lost too and publishes are still acknowledged by the quorum {1, 4}.
/// Every publish is acknowledged and 4 holds the leader's log.
#[test]
fn a_new_member_catches_up_by_snapshot_and_counts_in_the_quorum() {
    let mut seq = 0;
    let mut c = compacted_with_a_fourth(&mut seq);
    c.cut.insert(3);
    let replace = Membership { target: 3, candidates: vec![4], forgotten: vec![3] };
    publish_while(&mut c, &mut seq, 800, &[1, 2, 4], Some(&replace));
    let status = c.groups[&1].status();
    assert_eq!((status.voters, status.learners), (vec![1, 2, 4], vec![]), "3 removed, 4 promoted");
    assert!(c.groups[&4].status().snapshots.received >= 1, "4 caught up from a snapshot");
    // The leader's last snapshot, taken before 4 was added, does not name it (raft-rs would
    // refuse it): a fresh one is taken for it rather than sent and refused.
    assert_eq!(c.groups[&4].status().snapshots.refused, 0, "a snapshot that does not name 4 was sent");
    assert_eq!(c.groups[&4].members(), (vec![1, 2, 4], vec![]), "4 applied its own promotion");
    // The quorum now includes 4: with 2 gone too, 1 and 4 go on acknowledging.
    c.cut.insert(2);
    let before = acked(&c).len();
    publish_while(&mut c, &mut seq, 160, &[1, 4], Some(&replace));
    assert_eq!(acked(&c).len() - before, 160, "acknowledged by 1 and 4");
    c.run(5, &[1, 4]);
    assert_eq!(acked(&c).len() as u64, seq, "every publish acknowledged");
    assert_eq!(c.groups[&4].state(), c.groups[&1].state(), "the new member holds the leader's state");
}

/// A message from a removed member is refused before raft-rs sees it; one from a member is
/// not.
#[test]
fn a_removed_members_messages_are_refused() {
    let mut c = Cluster::new(3, false);
    c.run(30, &[1, 2, 3]);
    let forget = Membership { target: 3, candidates: vec![], forgotten: vec![3] };
    for _ in 0..10 {
        c.input(1, Input::Membership(forget.clone()));
        c.run(1, &[1, 2, 3]);
    }
    assert_eq!(c.groups[&1].members(), (vec![1, 2], vec![]));
    assert_eq!(c.removed, vec![3], "3, alive, applied its own removal");
    let term = c.groups[&1].status().term;
    let heartbeat_response = |from| {
        let mut m = Message { from, to: 1, term, ..Message::default() };
        m.set_msg_type(MessageType::MsgHeartbeatResponse);
        Envelope::Raft(m)
    };
    assert!(c.groups[&1].check(3, &heartbeat_response(3)).is_err(), "the removed member is refused");
    assert!(c.groups[&1].check(2, &heartbeat_response(2)).is_ok(), "a member is heard");
}

/// A group created with two replicas grows to three when a third is a candidate: the learner
/// catches up from the log (no compaction) and is promoted.
#[test]
fn a_small_group_grows_to_its_target() {
    let mut c = Cluster::new(2, false);
    c.run(30, &[1, 2]);
    let mut seq = 0;
    publish_while(&mut c, &mut seq, 64, &[1, 2], None);
    let term = c.groups[&1].status().term;
    c.groups.insert(3, ReplicaGroup::added(GroupSettings::new(3, vec![1, 2]), term).expect("valid settings"));
    let grow = Membership { target: 3, candidates: vec![3, 9], forgotten: vec![] };
    publish_while(&mut c, &mut seq, 320, &[1, 2, 3], Some(&grow));
    assert_eq!(c.groups[&1].members(), (vec![1, 2, 3], vec![]), "grown to 3, not past it");
    assert_eq!(c.groups[&1].status().term, term, "the added member fenced in the leader's term: no election");
    assert_eq!(c.logged(3), c.logged(1));
}

/// A restart rebuilds the current members from the journal (the members at its checkpoint and
/// the conf changes after it), not from the creation voters it is configured with: with the
/// log compacted after the change and without compaction.
#[test]
fn a_restart_restores_the_current_members() {
    for compact_bytes in [16 << 10, u64::MAX] {
        let settings = move |settings| GroupSettings { compact_bytes, ..settings };
        let mut c = Cluster::with(3, settings);
        c.run(30, &[1, 2, 3]);
        let term = c.groups[&1].status().term;
        c.groups.insert(4, ReplicaGroup::added(settings(GroupSettings::new(4, vec![1, 2, 3])), term).expect("valid"));
        let mut seq = 0;
        let replace = Membership { target: 3, candidates: vec![4], forgotten: vec![3] };
        c.cut.insert(3);
        publish_while(&mut c, &mut seq, 800, &[1, 2, 4], Some(&replace));
        for id in [1, 2, 4] {
            assert_eq!(c.groups[&id].members(), (vec![1, 2, 4], vec![]), "replica {id}");
            let mut recovered = Recovered::default();
            c.live_journal(id).iter().cloned().for_each(|w| recovered.fold(w));
            let mut restarted =
                ReplicaGroup::restart(settings(GroupSettings::new(id, vec![1, 2, 3])), recovered).expect("restarts");
            restarted.handle(c.now, Input::Tick); // replays the committed entries after the checkpoint
            assert_eq!(restarted.members(), (vec![1, 2, 4], vec![]), "replica {id}, compact_bytes {compact_bytes}");
        }
    }
}

/// An append carrying a conf change this build never proposes (garbage, or a v2 change) is
/// refused before raft-rs sees it; a sound one passes.
#[test]
fn only_sound_conf_changes_pass_the_check() {
    use protobuf::Message as _;
    use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};
    let mut c = Cluster::new(3, false);
    c.run(30, &[1, 2, 3]);
    let status = c.groups[&2].status();
    let append = |ty: EntryType, data: Vec<u8>| {
        let mut entry =
            Entry { index: status.last_index + 1, term: status.term, data: data.into(), ..Entry::default() };
        entry.set_entry_type(ty);
        let mut m = Message {
            from: 1,
            to: 2,
            term: status.term,
            log_term: status.term,
            index: status.last_index,
            commit: status.commit,
            ..Message::default()
        };
        m.set_msg_type(MessageType::MsgAppend);
        m.set_entries(vec![entry].into());
        Envelope::Raft(m)
    };
    let mut add = ConfChange { node_id: 4, ..ConfChange::default() };
    add.set_change_type(ConfChangeType::AddLearnerNode);
    let sound = add.write_to_bytes().expect("encodes");
    assert!(c.groups[&2].check(1, &append(EntryType::EntryConfChange, sound)).is_ok());
    assert!(c.groups[&2].check(1, &append(EntryType::EntryConfChange, vec![0xff, 0x01])).is_err());
    assert!(c.groups[&2].check(1, &append(EntryType::EntryConfChangeV2, Vec::new())).is_err());
}

/// The leader's last snapshot was taken before the new member was added and does not name it
/// (raft-rs refuses such a snapshot): the leader compacts again at once rather than waiting for
/// enough new entries, so a member added to an idle group catches up too.
#[test]
fn a_member_added_to_an_idle_group_gets_a_fresh_snapshot() {
    let mut c = compacted_with_a_fourth(&mut 0);
    let grow = Membership { target: 4, candidates: vec![4], forgotten: vec![] };
    for _ in 0..80 {
        round(&mut c, &[1, 2, 3, 4], Some(&grow));
    }
    assert_eq!(c.groups[&1].members(), (vec![1, 2, 3, 4], vec![]), "4 caught up and promoted without new publishes");
    assert_eq!(c.groups[&4].state(), c.groups[&1].state());
}
