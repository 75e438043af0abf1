//! The journal on the real store (`tidings-store`, stepped, on `MemFs`): a replica restarts from
//! exactly the writes that were synced, a power loss drops the rest, and a damaged record makes
//! the journal refuse to serve rather than hand back a shorter log.
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

use std::path::Path;
use std::sync::Arc;

use tidings_replica::{Entry, HardState, Journal, JournalError, Recovered, Write};
use tidings_store::{MemFs, Options, PubendId, Store, Tick, Token};

const DIR: &str = "/data/replica";
/// The snapshots' store, beside the journal's.
const SNAPSHOTS: &str = "/data/replica-snapshots";
const PUBEND: PubendId = PubendId(7);

/// A journal read back, or why not.
type Opened = Result<(Journal, Option<Recovered>), JournalError>;

/// The journal's store, the snapshots' store, and the journal read back.
fn open(fs: &MemFs) -> (Store, Store, Opened) {
    let options = Options { reserve_bytes: 0, ..Options::default() };
    let (store, _) = Store::open_stepped(Arc::new(fs.clone()), Path::new(DIR), options).expect("the store opens");
    let (snapshots, _) =
        Store::open_stepped(Arc::new(fs.clone()), Path::new(SNAPSHOTS), options).expect("the snapshots' store opens");
    let journal = Journal::open(&store, &snapshots, PUBEND);
    (store, snapshots, journal)
}

/// Appends the records of `w`, numbering their tokens from `token * 100`.
fn append(store: &Store, journal: &mut Journal, token: u64, w: &Write) {
    for (i, record) in journal.records(w).into_iter().enumerate() {
        store.append(Token(token * 100 + i as u64), record).expect("append");
    }
}

/// Opens the store and its journal (which must read), with parts of 100 bytes.
fn open_parted(fs: &MemFs) -> (Store, Journal) {
    let (store, _, journal) = open(fs);
    let (mut journal, _) = journal.expect("the journal reads");
    journal.set_part_bytes(100);
    (store, journal)
}

/// Appends `records` (tokens from `token`), syncs them and closes the store.
fn sync_and_close(store: Store, records: Vec<tidings_store::Record>, token: u64) {
    for (i, record) in records.into_iter().enumerate() {
        store.append(Token(token + i as u64), record).expect("append");
    }
    assert!(store.step().iter().all(|c| c.result.is_ok()));
}

fn write(number: u64, first: u64, term: u64) -> Write {
    let entries =
        (first..first + 2).map(|index| Entry { index, term, data: vec![index as u8].into(), ..Entry::default() });
    Write {
        number,
        entries: entries.collect(),
        hard_state: Some(HardState { term, vote: 1, commit: first, ..HardState::default() }),
        rejoin_term: None,
        rejoin_index: 0,
        snapshot: None,
        snapshot_apart: false,
        conf: None,
    }
}

#[test]
fn a_restart_recovers_the_synced_writes_and_a_power_loss_drops_the_rest() {
    let fs = MemFs::new();
    let (store, _, journal) = open(&fs);
    let (mut journal, recovered) = journal.expect("an empty journal reads");
    assert!(recovered.is_none(), "an empty journal means a new or wiped replica");
    let synced = [Write::default(), write(1, 1, 1), write(2, 3, 1), write(3, 2, 2)];
    for (token, w) in synced.iter().enumerate() {
        append(&store, &mut journal, token as u64, w);
    }
    assert!(store.step().iter().all(|c| c.result.is_ok()));
    append(&store, &mut journal, 9, &write(4, 4, 2));
    drop(store);
    fs.power_loss(1);
    fs.restart();

    let (_, _, reopened) = open(&fs);
    let (mut journal, recovered) = reopened.expect("the journal reads");
    let mut expected = Recovered::default();
    synced.into_iter().for_each(|w| expected.fold(w));
    assert_eq!(recovered, Some(expected.clone()));
    // Entry 2 was replaced by the term-2 write; the unsynced write is gone.
    let terms: Vec<_> = expected.entries.iter().map(|e| (e.index, e.term)).collect();
    assert_eq!(terms, vec![(1, 1), (2, 2), (3, 2)]);
    // The journal numbers on after what it recovered (the store refuses ticks that go back).
    assert_eq!(journal.records(&Write::default())[0].tick.0, 5);
}

#[test]
fn a_damaged_record_is_refused() {
    let fs = MemFs::new();
    let (store, _, journal) = open(&fs);
    let (mut journal, _) = journal.expect("an empty journal reads");
    for (token, w) in [Write::default(), write(1, 1, 1), write(2, 3, 1)].iter().enumerate() {
        append(&store, &mut journal, token as u64, w);
    }
    store.step();
    drop(store);
    let segment = fs.list_names(Path::new(DIR)).into_iter().find(|n| n.ends_with(".log")).expect("a segment");
    let path = Path::new(DIR).join(segment);
    let contents = fs.contents(&path).unwrap_or_default();
    let payload = write(1, 1, 1).encode();
    let at = contents.windows(payload.len()).position(|w| w == payload.as_slice()).expect("the record is on disk");
    // Flip a byte inside the middle record's payload.
    fs.corrupt(&path, at + payload.len() / 2, 0x40);
    let (store, snapshots, reopened) = open(&fs);
    assert!(matches!(reopened, Err(JournalError::Damaged(_))), "got {:?}", reopened.map(|(_, r)| r));
    // Opened to be rebuilt: the replica counts as wiped, the damaged records are released, and
    // the journal goes on after them; a restart then reads only what followed.
    let (mut journal, recovered, release) = Journal::open_or_wipe(&store, &snapshots, PUBEND).expect("reads");
    assert_eq!((recovered, release), (None, Some(Tick(3))));
    store.release(Token(10), PUBEND, Tick(3)).expect("release");
    let fence = Write { number: 0, rejoin_term: Some(5), rejoin_index: 42, ..Write::default() };
    append(&store, &mut journal, 11, &fence);
    assert!(store.step().iter().all(|c| c.result.is_ok()));
    drop((store, snapshots));
    let (_, _, reopened) = open(&fs);
    let (_, recovered) = reopened.expect("the rebuilt journal reads");
    assert_eq!(recovered.map(|r| (r.rejoin_term, r.rejoin_index)), Some((5, 42)), "the fence, index and all");
}

/// A checkpoint whose snapshot is larger than a part is written in parts and read back whole;
/// a checkpoint whose last record (the write) never made it leaves its parts unread, and a
/// damaged part makes the journal refuse to serve.
#[test]
fn a_snapshot_in_parts_reads_back_whole_or_not_at_all() {
    let fs = MemFs::new();
    let (store, mut journal) = open_parted(&fs);
    for w in [Write::default(), write(1, 1, 1), write(2, 3, 1)] {
        append(&store, &mut journal, w.number, &w);
    }
    let state: bytes::Bytes = (0..1000u32).map(|i| (i * 13) as u8).collect();
    let checkpoint = Write { snapshot: Some((4, 2, state.clone())), ..write(3, 5, 2) };
    let records = journal.records(&checkpoint);
    assert_eq!(records.len(), 11, "ten parts and the write");
    assert_eq!(Journal::release_below(&checkpoint, &records), Some(Tick(3)), "everything before the first part");
    sync_and_close(store, records, 50);
    let (_, _, reopened) = open(&fs);
    let (_, recovered) = reopened.expect("the journal reads");
    let recovered = recovered.expect("a journal");
    assert_eq!(recovered.snapshot, Some((4, 2, state.clone())));

    // A crash before the write's record: the parts alone change nothing.
    let (store, mut journal) = open_parted(&fs);
    let later = Write { snapshot: Some((9, 3, vec![7u8; 500].into())), ..write(9, 10, 3) };
    let mut records = journal.records(&later);
    records.pop();
    sync_and_close(store, records, 80);
    let (_, _, reopened) = open(&fs);
    assert_eq!(reopened.expect("reads").1.expect("a journal").snapshot, Some((4, 2, state)));

    // A part flipped on disk: refused, never served.
    let segment = fs.list_names(Path::new(DIR)).into_iter().find(|n| n.ends_with(".log")).expect("a segment");
    let path = Path::new(DIR).join(segment);
    let contents = fs.contents(&path).unwrap_or_default();
    let piece: Vec<u8> = (200..300u32).map(|i| (i * 13) as u8).collect();
    let at = contents.windows(piece.len()).position(|w| w == piece.as_slice()).expect("the part is on disk");
    fs.corrupt(&path, at + 50, 0x40);
    let (_, _, reopened) = open(&fs);
    assert!(matches!(reopened, Err(JournalError::Damaged(_))), "got {:?}", reopened.map(|(_, r)| r));
}

/// A checkpoint's parts are slices of its snapshot's bytes, not copies (a 100 MB snapshot
/// copied into parts held the broker's driver for 150 ms); a checkpoint written right after
/// a torn one (its parts and no write: a crash) reads back whole, its parts not mixed with
/// the torn ones.
#[test]
fn parts_share_the_snapshot_and_a_torn_checkpoint_does_not_spoil_the_next() {
    let fs = MemFs::new();
    let (store, mut journal) = open_parted(&fs);
    append(&store, &mut journal, 1, &Write::default());
    let torn = Write { snapshot: Some((4, 2, vec![9u8; 450].into())), ..write(2, 5, 2) };
    let mut records = journal.records(&torn);
    records.pop();
    sync_and_close(store, records, 200);

    let (store, mut journal) = open_parted(&fs);
    let state: bytes::Bytes = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let checkpoint = Write { snapshot: Some((6, 3, state.clone())), ..write(3, 7, 3) };
    let records = journal.records(&checkpoint);
    assert_eq!(records.len(), 11, "ten parts and the write");
    assert_eq!(records[3].payload.as_ptr(), state[300..].as_ptr(), "a part is the snapshot's bytes, shared");
    sync_and_close(store, records, 300);
    let (_, _, reopened) = open(&fs);
    assert_eq!(reopened.expect("reads").1.expect("a journal").snapshot, Some((6, 3, state)));
}

/// A checkpoint whose snapshot was saved apart (`Journal::save`, the snapshots' store) is one
/// small journal record that names it, and reads back whole; the snapshots' store is released
/// below the snapshot a synced checkpoint names, so the one before stays until then; a
/// snapshot saved and never named changes nothing; and a named one that is missing is damage.
#[test]
fn a_snapshot_saved_apart_reads_back_and_a_missing_one_is_damage() {
    let fs = MemFs::new();
    let (store, snapshots, journal) = open(&fs);
    let (mut journal, _) = journal.expect("an empty journal reads");
    journal.set_part_bytes(100);
    for w in [Write::default(), write(1, 1, 1), write(2, 3, 1)] {
        append(&store, &mut journal, w.number, &w);
    }
    let state: bytes::Bytes = (0..1000u32).map(|i| (i * 11) as u8).collect();
    let saved = journal.save(4, &state);
    assert_eq!(saved.len(), 10, "ten parts, each naming the index");
    assert!(saved.iter().all(|r| r.seq.0 == 4));
    assert_eq!(saved[2].payload.as_ptr(), state[200..].as_ptr(), "a part is the snapshot's bytes, shared");
    sync_and_close(snapshots, saved, 10);
    let checkpoint = Write { snapshot: Some((4, 2, state.clone())), snapshot_apart: true, ..write(3, 5, 2) };
    let records = journal.records(&checkpoint);
    assert_eq!(records.len(), 1, "only the write: the snapshot is apart");
    assert!(records[0].payload.len() < 200, "the write names the snapshot, it does not hold it");
    assert_eq!(Journal::release_below(&checkpoint, &records), Some(Tick(3)), "every journal record before it");
    assert_eq!(journal.saved_release_below(&checkpoint), None, "nothing saved before this snapshot");
    sync_and_close(store, records, 50);
    let (store, snapshots, reopened) = open(&fs);
    let (mut journal, recovered) = reopened.expect("the journal reads");
    assert_eq!(recovered.expect("a journal").snapshot, Some((4, 2, state.clone())));

    // A second snapshot saved and its checkpoint synced: the first one's parts go. The journal
    // is not released here (a crash between the two stores' releases): the first checkpoint,
    // its snapshot gone, is still read, and the second replaces it.
    journal.set_part_bytes(100);
    let second: bytes::Bytes = vec![5u8; 250].into();
    sync_and_close(snapshots, journal.save(9, &second), 100);
    let checkpoint = Write { snapshot: Some((9, 3, second.clone())), snapshot_apart: true, ..write(4, 10, 3) };
    assert_eq!(journal.saved_release_below(&checkpoint), Some(Tick(10)), "below the second snapshot's first part");
    sync_and_close(store, journal.records(&checkpoint), 150);
    let (store, snapshots, reopened) = open(&fs);
    snapshots.release(Token(200), PUBEND, Tick(10)).expect("release");
    assert!(snapshots.step().iter().all(|c| c.result.is_ok()));
    let (mut journal, _) = reopened.expect("reads");
    journal.set_part_bytes(100);

    // A third saved, and a crash before its checkpoint: the second is still the one read.
    sync_and_close(snapshots, journal.save(12, &vec![6u8; 300].into()), 300);
    drop(store);
    let (_, snapshots, reopened) = open(&fs);
    assert_eq!(reopened.expect("reads").1.expect("a journal").snapshot, Some((9, 3, second.clone())));

    // The snapshots' store loses the named one: refused, never served.
    snapshots.release(Token(400), PUBEND, Tick(16)).expect("release");
    assert!(snapshots.step().iter().all(|c| c.result.is_ok()));
    drop(snapshots);
    let (store, snapshots, reopened) = open(&fs);
    assert!(matches!(reopened, Err(JournalError::Damaged(_))), "got {:?}", reopened.map(|(_, r)| r));
    // Rebuilt: the snapshots' store, every record of it released, numbers on after them.
    let (mut journal, ..) = Journal::open_or_wipe(&store, &snapshots, PUBEND).expect("reads");
    assert_eq!(journal.save(20, &second)[0].tick, Tick(17), "above the released ticks");
}

#[test]
fn a_group_left_and_joined_again_numbers_on_after_its_released_journal() {
    let fs = MemFs::new();
    let (store, _, journal) = open(&fs);
    let (mut journal, _) = journal.expect("an empty journal reads");
    for (token, w) in [write(1, 1, 1), write(2, 3, 1)].iter().enumerate() {
        append(&store, &mut journal, token as u64, w);
    }
    assert!(store.step().iter().all(|c| c.result.is_ok()));
    // Removed from the group: the broker releases the whole journal.
    let last = journal.last_tick();
    store.release(Token(50), PUBEND, last).expect("release");
    assert!(store.step().iter().all(|c| c.result.is_ok()));
    // Added again, while the store is still open: the journal reads empty (a new replica) and
    // its first record lands above every tick the store took, which the store accepts.
    let (mut rejoined, recovered) = Journal::open(&store, &store_snapshots(&fs), PUBEND).expect("reads");
    assert!(recovered.is_none(), "a released journal is a new replica's");
    let records = rejoined.records(&write(1, 1, 5));
    assert!(records[0].tick > last, "{:?} after {last:?}", records[0].tick);
    sync_and_close(store, records, 60);
    // And after a restart, the rejoined replica's write is what the journal holds.
    let (_, _, reopened) = open(&fs);
    let recovered = reopened.expect("reads").1.expect("a journal");
    assert_eq!(recovered.entries.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), [(1, 5), (2, 5)]);
}

/// A second handle on the snapshots' store (empty in these tests).
fn store_snapshots(fs: &MemFs) -> Store {
    let options = Options { reserve_bytes: 0, ..Options::default() };
    Store::open_stepped(Arc::new(fs.clone()), Path::new(SNAPSHOTS), options).expect("opens").0
}
