//! What a replica keeps as its pubend lives (issue 40, "Compaction"): the entries raft-rs's
//! storage holds in memory and the journal bytes still live on disk, after many publishes that
//! subscribers released as they went. Prints its figures (docs/replication.md, "Compaction"):
//! `cargo test -p tidings-replica --test growth -- --nocapture`.
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use tidings_replica::{Command, GroupSettings, Input, Record, ReplicaId, COMPACT_BYTES};

const ALL: [ReplicaId; 3] = [1, 2, 3];
/// Publishes of 256 B, released 100 ticks behind, in turns of 64: about 29 MB of log.
const PUBLISHES: u64 = 100_000;

/// Runs the cell with `compact_bytes` (`u64::MAX`: never, as before compaction) and returns,
/// per replica, (entries held, bytes held, journal bytes live, snapshots taken).
fn grow(compact_bytes: u64) -> Vec<(u64, u64, u64, u64)> {
    let mut c = Cluster::with(3, |settings| GroupSettings { compact_bytes, ..settings });
    c.run(30, &ALL);
    let leader = c.leader().expect("a leader");
    let mut seq = 0;
    while seq < PUBLISHES {
        let records: Vec<Record> = (0..64)
            .map(|i| Record { tick: seq + i + 1, publisher: 1, seq: seq + i + 1, payload: vec![7; 256] })
            .collect();
        seq += 64;
        c.input(leader, Input::PublishAllAt(records));
        c.input(leader, Input::Propose(Command::Release { up_to: seq.saturating_sub(100) }));
        c.run(1, &ALL);
    }
    c.run(5, &ALL);
    assert_eq!(c.acks.len() as u64, seq, "every publish acknowledged");
    ALL.iter()
        .map(|id| {
            let status = c.groups[id].status();
            let entries = status.last_index + 1 - status.first_index;
            let journal: u64 = c.live_journal(*id).iter().map(|w| w.encode().len() as u64).sum();
            (entries, status.log_bytes, journal, status.snapshots.taken)
        })
        .collect()
}

/// The log a replica holds stays bounded by the compaction trigger, whatever the number of
/// publishes, once subscribers release what they have; without compaction it holds them all.
#[test]
fn the_log_held_stays_bounded_as_publishes_go_on() {
    for (name, compact_bytes) in [("no compaction", u64::MAX), ("compaction at 8 MiB", COMPACT_BYTES)] {
        let held = grow(compact_bytes);
        for (id, (entries, bytes, journal, taken)) in ALL.iter().zip(&held) {
            println!(
                "{name}: replica {id}: {entries} entries ({bytes} B) held in memory, {journal} journal B live, \
                 {taken} snapshots, after {PUBLISHES} publishes of 256 B"
            );
            match compact_bytes {
                u64::MAX => assert!(*entries > PUBLISHES, "every entry held without compaction"),
                _ => {
                    assert!(*taken >= 2, "replica {id} compacted");
                    assert!(*bytes < 4 * COMPACT_BYTES && *journal < 5 * COMPACT_BYTES, "replica {id} bounded");
                }
            }
        }
    }
}
