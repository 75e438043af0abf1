//! Log compaction and snapshots on the hand-driven network (issue 40): a replica's state comes
//! back from its snapshot bytes unchanged and damaged bytes are refused; a follower behind the
//! leader's first index catches up from the snapshot plus the log's tail, and a corrupt snapshot
//! on the way is refused, counted and sent again, never applied; a replica restarted from its
//! journal after a checkpoint holds the same state.
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use tidings_replica::{
    Command, Envelope, GroupSettings, Input, PubendReplica, Record, Recovered, ReplicaGroup, ReplicaId,
};

const ALL: [ReplicaId; 3] = [1, 2, 3];

/// A small trigger, so a few dozen publishes compact the log, and a small slice, so each
/// compaction is encoded over several turns (about one record of 100 B a turn) while the group
/// goes on publishing and releasing.
fn compacting() -> Cluster {
    Cluster::with(3, |settings| GroupSettings { compact_bytes: 1 << 10, compact_slice: 150, ..settings })
}

/// Publishes `count` records of 100 B from publisher 7 at the leader, releasing all but the
/// last 5 as it goes, in turns of 4.
fn publish(c: &mut Cluster, from_seq: u64, count: u64) {
    let leader = c.leader().expect("a leader");
    for turn in (from_seq..from_seq + count).step_by(4) {
        let records = (turn..turn + 4)
            .map(|seq| Record { tick: c.now + seq, publisher: 7, seq, payload: vec![seq as u8; 100] })
            .collect();
        c.input(leader, Input::PublishAllAt(records));
        c.run(1, &ALL);
        let state = c.groups[&leader].state().expect("running");
        let ticks: Vec<u64> = state.records().map(|r| r.tick).collect();
        let up_to = ticks.len().checked_sub(6).map_or(0, |i| ticks[i]);
        c.input(leader, Input::Propose(Command::Release { up_to }));
        c.run(1, &ALL);
    }
}

fn state(c: &Cluster, id: ReplicaId) -> PubendReplica {
    c.groups[&id].state().expect("running").clone()
}

/// The snapshot bytes carry the whole state, and any flipped byte or cut is refused.
#[test]
fn a_state_round_trips_through_its_snapshot_and_damage_is_refused() {
    let mut c = compacting();
    c.run(30, &ALL);
    publish(&mut c, 1, 40);
    let original = state(&c, 1);
    assert!(original.records().count() >= 5 && original.released_up_to() > 0);
    let bytes = original.encode();
    assert_eq!(bytes.len(), original.encoded_len());
    assert_eq!(PubendReplica::decode(&bytes), Ok(original.clone()));
    for at in [0, 9, bytes.len() / 2, bytes.len() - 1] {
        let mut damaged = bytes.clone();
        damaged[at] ^= 1;
        assert!(PubendReplica::decode(&damaged).is_err(), "a flip at {at} was read");
    }
    assert!(PubendReplica::decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(PubendReplica::decode(&[]).is_err());
    // A retry of a released publish is a duplicate whose tick is forgotten; of a kept one, its tick.
    assert_eq!(original.logged(7, 1), Some(None));
    let kept = original.records().last().expect("a record");
    assert_eq!(original.logged(7, kept.seq), Some(Some(kept.tick)));
    assert_eq!(original.logged(7, 1_000), None);
    assert_eq!(original.publishers(), vec![(7, 40)]);
}

/// Replica 3, cut off while the others compact past what it has, catches up from the leader's
/// snapshot plus the tail; the first snapshot is corrupted on the way, refused and counted, and
/// the leader sends another. Afterwards it has the leader's state and applies new publishes.
#[test]
fn a_follower_behind_the_first_index_catches_up_from_a_snapshot_and_a_corrupt_one_is_refused() {
    let mut c = compacting();
    leave_replica_3_behind(&mut c);
    c.corrupt_snapshots = 1;
    c.cut.clear();
    c.run(30, &ALL);
    let (caught, leader) = (c.groups[&3].status(), c.groups[&1].status());
    assert_eq!(caught.snapshots.refused, 1, "the corrupt snapshot was refused: {caught:?}");
    assert!(caught.snapshots.received >= 1, "a sound one was installed: {caught:?}");
    assert!(leader.snapshots.sent >= 2, "the leader sent another: {leader:?}");
    assert_eq!(caught.snapshots.chunks_received + leader.snapshots.chunks_sent, 0, "one message each");
    caught_up_and_going_on(&mut c);
}

/// Replica 3 cut off while the others publish 60 records and compact past what it has.
fn leave_replica_3_behind(c: &mut Cluster) {
    c.run(30, &ALL);
    assert_eq!(c.leader(), Some(1));
    publish(c, 1, 8);
    c.cut.insert(3);
    publish(c, 9, 60);
    let behind = c.groups[&3].status();
    let leader = c.groups[&1].status();
    assert!(leader.snapshots.taken >= 1, "the leader compacted: {leader:?}");
    assert!(behind.last_index + 1 < leader.first_index, "replica 3 is behind the first index: {behind:?}");
}

/// Replica 3 has the leader's state, and the tail goes on from there.
fn caught_up_and_going_on(c: &mut Cluster) {
    assert_eq!(c.groups[&3].status().applied, c.groups[&1].status().applied);
    assert_eq!(state(c, 3), state(c, 1));
    publish(c, 69, 4);
    assert_eq!(c.acks.len(), 72);
    assert_eq!(state(c, 3), state(c, 1));
    assert_eq!(c.groups[&3].status().applied, c.groups[&1].status().applied);
}

/// As above with snapshots of several chunks: replica 3 gets its first chunked snapshot with a
/// byte flipped in its second chunk (refused whole, never applied), the next one loses its
/// second chunk (the assembly waits), and the third fills the gap: installed, replica 3 has the
/// leader's state and goes on from the tail.
#[test]
fn a_follower_catches_up_from_a_snapshot_in_chunks_after_a_corrupt_and_a_lost_chunk() {
    let mut c = Cluster::with(3, |settings| GroupSettings { compact_bytes: 1 << 10, snapshot_chunk: 64, ..settings });
    leave_replica_3_behind(&mut c);
    assert!(state(&c, 1).encoded_len() > 4 * 64, "the state takes several chunks");
    (c.corrupt_snapshots, c.lose_chunks) = (1, 1);
    c.cut.clear();
    c.run(60, &ALL);
    let (caught, leader) = (c.groups[&3].status(), c.groups[&1].status());
    assert_eq!((c.corrupt_snapshots, c.lose_chunks), (0, 0), "both faults happened");
    assert_eq!(caught.snapshots.refused, 1, "the corrupt snapshot was refused whole: {caught:?}");
    assert!(caught.snapshots.received >= 1, "a sound one was installed: {caught:?}");
    assert!(leader.snapshots.sent >= 3 && leader.snapshots.chunks_sent >= 3 * 4, "sent again, in chunks: {leader:?}");
    assert!(caught.snapshots.chunks_received >= 4, "{caught:?}");
    caught_up_and_going_on(&mut c);
}

/// A state over one REPLICA frame (and over one journal record's part) is compacted, not
/// skipped, and a follower behind catches up from it in 1 MiB chunks (the default). Prints the
/// catch-up's wall time (docs/replication.md, "Snapshots in chunks"):
/// `cargo test --release -p tidings-replica --test snapshot -- --nocapture large`.
#[test]
fn a_large_state_is_compacted_and_sent_in_chunks() {
    const RECORDS: u64 = 192; // of 64 KiB: 12 MiB unreleased
    let mut c = Cluster::with(3, |settings| GroupSettings { compact_bytes: 1 << 20, ..settings });
    c.run(30, &ALL);
    let leader = c.leader().expect("a leader");
    c.cut.insert(3);
    for turn in (1..=RECORDS).step_by(8) {
        let now = c.now;
        let records = (turn..turn + 8).map(|seq| Record {
            tick: now + seq,
            publisher: 7,
            seq,
            payload: vec![seq as u8; 64 << 10],
        });
        c.input(leader, Input::PublishAllAt(records.collect()));
        c.run(1, &ALL);
    }
    let size = state(&c, 1).encoded_len();
    let status = c.groups[&1].status();
    assert!(size > 12 << 20, "{size} B of state");
    assert!(status.snapshots.taken >= 1 && status.snapshots.too_large == 0, "compacted: {status:?}");
    assert!(c.groups[&3].status().last_index + 1 < status.first_index, "replica 3 is behind the first index");
    c.cut.clear();
    let start = std::time::Instant::now();
    let mut rounds = 0;
    while c.groups[&3].status().applied < c.groups[&1].status().applied && rounds < 100 {
        c.run(1, &ALL);
        rounds += 1;
    }
    let (caught, leader) = (c.groups[&3].status(), c.groups[&1].status());
    println!(
        "a follower caught up from a {size}-byte snapshot in {} chunks ({} sent) in {:?} ({rounds} ticks)",
        caught.snapshots.chunks_received,
        leader.snapshots.chunks_sent,
        start.elapsed()
    );
    assert_eq!(caught.applied, leader.applied);
    assert!(caught.snapshots.received >= 1 && caught.snapshots.chunks_received >= 4, "{caught:?}");
    assert_eq!(state(&c, 3), state(&c, 1));
}

/// A state over the maximum is not compacted: counted, told once per doubling of the log, and
/// the log grows.
#[test]
fn a_state_over_the_maximum_is_not_compacted() {
    let mut c = Cluster::with(3, |settings| GroupSettings { compact_bytes: 1 << 10, max_snapshot: 512, ..settings });
    c.run(30, &ALL);
    let leader = c.leader().expect("a leader");
    for seq in 1..=40 {
        let record = Record { tick: c.now + seq, publisher: 7, seq, payload: vec![1; 100] };
        c.input(leader, Input::PublishAllAt(vec![record]));
        c.run(1, &ALL);
    }
    let status = c.groups[&leader].status();
    assert!(state(&c, leader).encoded_len() > 4 * 512);
    assert!(status.snapshots.too_large >= 1 && c.too_large >= 3, "{status:?}, {} told", c.too_large);
    assert_eq!((status.snapshots.taken, status.first_index), (0, 1), "nothing compacted: {status:?}");
}

/// A replica restarted from what its journal still holds (its last checkpoint and the writes
/// after it) comes back with the state it had.
#[test]
fn a_replica_restarts_from_its_last_checkpoint() {
    let mut c = compacting();
    c.run(30, &ALL);
    publish(&mut c, 1, 60);
    c.run(5, &ALL);
    for id in ALL {
        let journal = c.live_journal(id);
        assert!(journal[0].snapshot.is_some(), "replica {id} checkpointed");
        let mut recovered = Recovered::default();
        journal.iter().cloned().for_each(|w| recovered.fold(w));
        let settings = GroupSettings::new(id, ALL.to_vec());
        let mut restarted = ReplicaGroup::restart(settings, recovered).expect("restarts");
        restarted.handle(c.now, Input::Tick); // applies the committed entries after the snapshot
        let (before, after) = (c.groups[&id].status(), restarted.status());
        assert_eq!(restarted.state(), c.groups[&id].state(), "replica {id}");
        assert_eq!((after.first_index, after.last_index), (before.first_index, before.last_index));
    }
}

/// A leader whose snapshot is saved apart slowly (`Action::SaveSnapshot`) goes on writing its
/// journal meanwhile and starts no second compaction; the checkpoint written once the save is
/// done holds the log and hard state as they are then, not as at the compaction: it replaces
/// the writes made meanwhile, so a restart from it has the same state.
#[test]
fn a_checkpoint_written_after_a_slow_save_holds_the_log_as_it_is_then() {
    let mut c = compacting();
    c.run(30, &ALL);
    let leader = c.leader().expect("a leader");
    c.slow_saves.insert(leader);
    publish(&mut c, 1, 60);
    c.run(5, &ALL);
    let taken = c.groups[&leader].status().snapshots.taken;
    assert_eq!((taken, c.saving[&leader].len()), (1, 1), "one compaction, its save held");
    let written = c.synced[&leader].len();
    assert!(c.synced[&leader].iter().all(|w| w.snapshot.is_none()), "no checkpoint before the save is done");
    let index = c.saving.get_mut(&leader).expect("held").remove(0);
    c.input(leader, Input::SnapshotSaved { index });
    c.sync(leader);
    let journal = c.live_journal(leader);
    let checkpoint = &journal[0];
    assert!(checkpoint.snapshot_apart && c.synced[&leader].len() > written);
    let (snapshot_index, ..) = checkpoint.snapshot.clone().expect("a checkpoint");
    let last = checkpoint.entries.last().map(|e| e.index).expect("entries after the snapshot");
    assert!(last > snapshot_index + 20, "the log written while the save was held: {snapshot_index}..{last}");
    let mut recovered = Recovered::default();
    journal.iter().cloned().for_each(|w| recovered.fold(w));
    let mut restarted = ReplicaGroup::restart(GroupSettings::new(leader, ALL.to_vec()), recovered).expect("restarts");
    restarted.handle(c.now, Input::Tick);
    assert_eq!(restarted.state(), c.groups[&leader].state());
    c.slow_saves.clear();
    publish(&mut c, 61, 60);
    assert!(c.groups[&leader].status().snapshots.taken > taken, "compactions go on once the save is done");
}

/// Replica 3 left behind the first index by a group whose snapshots go in `chunk`-byte chunks
/// with a window of `window` bytes unacknowledged, its cut mended: the leader sends it a
/// snapshot at the next round.
fn pacing(chunk: usize, window: usize) -> Cluster {
    let mut c = Cluster::with(3, |settings| GroupSettings {
        compact_bytes: 1 << 10,
        snapshot_chunk: chunk,
        snapshot_window: window,
        ..settings
    });
    leave_replica_3_behind(&mut c);
    c.cut.clear();
    c
}

/// One step of the network, slower than [`Cluster::run`]: what is on the wire now is delivered
/// and every write synced, or, with nothing on the wire, every replica ticks.
fn step(c: &mut Cluster) {
    match c.wire.is_empty() {
        true => {
            c.now += 10;
            ALL.iter().for_each(|&id| c.input(id, Input::Tick));
        }
        false => c.deliver_once(),
    }
    ALL.iter().for_each(|&id| c.sync(id));
}

/// Chunks on the wire to replica 3 now: sent, not yet received.
fn chunks_in_flight(c: &Cluster) -> usize {
    c.wire.iter().filter(|(_, to, msg)| *to == 3 && matches!(msg, Envelope::Chunk { .. })).count()
}

/// Pacing (issue 40, "pacing of chunks"): a snapshot of many chunks under a window of 2 never
/// has more than 2 chunks unacknowledged on the wire; each acknowledgement lets the next go, so
/// it leaves as fast as replica 3 takes it, not a window per tick. raft-rs sends it once (it
/// waits for the last chunk before it probes replica 3 again), nothing is lost, and replica 3
/// assembles and installs it.
#[test]
fn a_large_snapshot_keeps_a_window_unacknowledged_and_is_assembled() {
    const WINDOW: usize = 2;
    let mut c = pacing(64, WINDOW * 64);
    let chunks = state(&c, 1).encoded_len().div_ceil(64) as u64;
    assert!(chunks > 4 * WINDOW as u64, "the state takes more than four windows: {chunks} chunks");
    let (mut most, mut ticks, mut steps) = (0, 0, 0);
    while c.groups[&3].status().applied < c.groups[&1].status().applied && steps < 5_000 {
        most = most.max(chunks_in_flight(&c));
        ticks += usize::from(c.wire.is_empty());
        step(&mut c);
        steps += 1;
    }
    let (caught, leader) = (c.groups[&3].status(), c.groups[&1].status());
    assert_eq!(most, WINDOW, "at most a window of chunks unacknowledged, and a full one at times");
    assert!(ticks < 20, "the transfer went at the pace of the acknowledgements, not of ticks: {ticks} ticks");
    assert_eq!((leader.snapshots.sent, leader.snapshots.chunks_sent, leader.snapshots.chunks_queued), (1, chunks, 0));
    assert_eq!((caught.snapshots.received, caught.snapshots.chunks_received), (1, chunks), "{caught:?}");
    caught_up_and_going_on(&mut c);
}

/// A transfer stops when it cannot go on: replica 3's link drops mid-snapshot (its queue goes,
/// raft-rs hears of a failure and sends a new snapshot once the link is back), and a leader
/// cut off from both mates steps down and drops its queue.
#[test]
fn a_dropped_link_or_a_lost_lead_drops_the_queue_and_a_new_snapshot_follows() {
    let mut c = pacing(16, 16);
    c.input(1, Input::Links { up: vec![2, 3] });
    for _ in 0..200 {
        if c.groups[&1].status().snapshots.chunks_queued > 10 {
            break;
        }
        step(&mut c);
    }
    let queued = c.groups[&1].status().snapshots.chunks_queued;
    assert!(queued > 10, "a snapshot in flight: {queued} chunks queued");
    c.cut.insert(3);
    c.input(1, Input::Links { up: vec![2] });
    let sent = c.groups[&1].status().snapshots;
    assert_eq!(sent.chunks_queued, 0, "the queue went with the link");
    c.run(5, &ALL);
    assert_eq!(c.groups[&1].status().snapshots.chunks_sent, sent.chunks_sent, "nothing more to replica 3");
    c.cut.clear();
    c.input(1, Input::Links { up: vec![2, 3] });
    c.run(3, &ALL);
    assert!(c.groups[&1].status().snapshots.chunks_sent > sent.chunks_sent, "a new transfer");
    assert_eq!(c.groups[&1].status().snapshots.sent, sent.sent + 1);
    // The leader cut off from both mates loses its lead within an election timeout, and its queue.
    c.cut.insert(1);
    c.run(25, &ALL);
    let deposed = c.groups[&1].status();
    assert!(c.groups[&1].leading().is_none(), "{deposed:?}");
    assert_eq!(deposed.snapshots.chunks_queued, 0);
    // A new leader (2) catches replica 3 up, and the old one rejoins.
    c.cut.clear();
    c.run(120, &ALL);
    let leader = c.leader().expect("a leader");
    assert_eq!(c.groups[&3].status().applied, c.groups[&leader].status().applied);
    assert_eq!(state(&c, 3), state(&c, leader));
}

/// Replica 3 encodes one record a turn, so it is still encoding a compaction of 60 records
/// when, cut off meanwhile, it gets the leader's snapshot: its compaction ends there (never
/// compacting its new log to an index the snapshot replaced), it takes the leader's state, and
/// its next compaction, from that state, is whole.
#[test]
fn a_snapshot_installed_ends_a_compaction_in_progress() {
    let slow = |s: GroupSettings| GroupSettings {
        compact_bytes: 20 << 10,
        compact_slice: if s.id == 3 { 1 } else { 1 << 20 },
        ..s
    };
    let mut c = Cluster::with(3, slow);
    c.run(30, &ALL);
    assert_eq!(c.leader(), Some(1));
    let mut seq = 0;
    let mut publish_big = |c: &mut Cluster, turns: u64, per_turn: u64| {
        for _ in 0..turns {
            let records = (seq + 1..=seq + per_turn)
                .map(|seq| Record { tick: c.now + seq, publisher: 7, seq, payload: vec![seq as u8; 1000] })
                .collect();
            seq += per_turn;
            c.input(1, Input::PublishAllAt(records));
            c.run(1, &ALL);
        }
    };
    // A first compaction at about 20 records, the next at about 40 more (twice the first).
    publish_big(&mut c, 62, 1);
    assert_eq!(c.groups[&3].status().snapshots.taken, 1, "{:?}", c.groups[&3].status());
    c.cut.insert(3);
    publish_big(&mut c, 5, 26);
    c.run(15, &ALL);
    let behind = c.groups[&3].status();
    let first = c.groups[&1].status().first_index;
    assert!(behind.last_index + 1 < first, "replica 3 is behind the first index {first}: {behind:?}");
    assert_eq!(behind.snapshots.taken, 1, "replica 3 is still encoding: {behind:?}");
    c.cut.clear();
    c.run(30, &ALL);
    let caught = c.groups[&3].status();
    assert_eq!((caught.snapshots.aborted, caught.snapshots.received), (1, 1), "{caught:?}");
    assert_eq!(state(&c, 3), state(&c, 1));
    publish_big(&mut c, 60, 4);
    c.run(300, &ALL);
    let caught = c.groups[&3].status();
    assert!(caught.snapshots.taken >= 2, "replica 3 compacted its new log: {caught:?}");
    assert_eq!(state(&c, 3), state(&c, 1));
    assert_eq!(c.acks.len(), 62 + 130 + 240);
}
