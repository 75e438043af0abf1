//! The void record: a pubend's log emptied in order with its appends, so a replicated pubend's
//! log that its replica group contradicts can be seeded again from the group's state, at ticks
//! below the ones it held (`docs/store.md`, "Void").

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod support;

use std::path::Path;
use std::sync::Arc;

use support::{payload, record};
use tidings_store::{
    FsyncPolicy, MemFs, OpKind, Options, PubendId, ReadItem, Record, Recovered, Store, StoreError, Tick, TickRange,
    Token,
};

const DIR: &str = "/log";

fn options(fsync: FsyncPolicy) -> Options {
    Options { fsync, segment_bytes: 4096, reserve_bytes: 0, ..Options::default() }
}

fn open(fs: &Arc<MemFs>, fsync: FsyncPolicy) -> (Store, Recovered) {
    Store::open_stepped(fs.clone(), Path::new(DIR), options(fsync)).unwrap()
}

/// [`open`] with segments that never rotate in these tests (a rotation syncs).
fn open_one_segment(fs: &Arc<MemFs>, fsync: FsyncPolicy) -> (Store, Recovered) {
    Store::open_stepped(fs.clone(), Path::new(DIR), Options { segment_bytes: 1 << 20, ..options(fsync) }).unwrap()
}

/// A record of pubend 1 whose payload says which log (`old` or `new`) it was written for.
fn tagged(tick: u64, tag: &str) -> Record {
    let mut body = format!("{tag}:").into_bytes();
    body.extend(payload(1, tick, 60));
    Record { seq: tidings_store::PublisherSeq(tick), ..record(1, tick, &body) }
}

/// Every data record of `pubend` (panics on a lost range: a void must never leave one).
fn records(store: &Store, pubend: u64) -> Vec<Record> {
    let all = TickRange { first: Tick(0), last: Tick(u64::MAX) };
    let items = store.read(PubendId(pubend), all, usize::MAX).unwrap();
    items
        .into_iter()
        .map(|item| match item {
            ReadItem::Data(record) => record,
            ReadItem::Lost(range) => panic!("a lost range {range:?}"),
        })
        .collect()
}

fn appends(store: &Store, records: &[Record]) {
    for r in records {
        store.append(Token(r.tick.0), r.clone()).unwrap();
    }
}

#[test]
fn a_void_empties_the_pubends_log_and_appends_start_again_below_its_old_ticks() {
    let fs = Arc::new(MemFs::new());
    let (store, _) = open(&fs, FsyncPolicy::Always);
    let old: Vec<_> = (100..=110).map(|t| tagged(t, "old")).collect();
    appends(&store, &old);
    appends(&store, &[record(2, 1, b"other"), record(2, 2, b"other")]);
    store.raise_lease(Token(0), PubendId(1), Tick(200)).unwrap();
    store.release(Token(0), PubendId(1), Tick(102)).unwrap();
    assert!(store.step().iter().all(|c| c.result.is_ok()));

    // In one group: a record before the void is voided with the rest, those after it stay.
    store.append(Token(111), tagged(111, "old")).unwrap();
    store.void(Token(1), PubendId(1)).unwrap();
    let new: Vec<_> = (5..=7).map(|t| tagged(t, "new")).collect();
    appends(&store, &new);
    let done = store.step();
    let kinds: Vec<_> = done.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [OpKind::Append, OpKind::Void, OpKind::Append, OpKind::Append, OpKind::Append]);
    assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
    assert_eq!(records(&store, 1), new);
    assert_eq!(records(&store, 2).len(), 2, "another pubend keeps its records");

    // The ticks go up again from the re-seeded log's last one.
    store.append(Token(7), tagged(7, "new")).unwrap();
    let refused = store.step().remove(0).result;
    assert!(matches!(refused, Err(StoreError::TickNotIncreasing { tick: 7, last: 7 })), "{refused:?}");

    // A restart (the stepped store's drop is a process crash: everything above was synced).
    drop(store);
    let (store, recovered) = open(&fs, FsyncPolicy::Always);
    let log = &recovered.pubends[&PubendId(1)];
    assert_eq!((log.lease, log.released, log.highest, log.records), (Tick(0), Tick(0), Tick(7), 3));
    let dedup: Vec<_> = log.dedup.values().map(|t| t.0).collect();
    assert_eq!(dedup, [5, 6, 7], "the dedup table holds only what follows the void");
    assert_eq!(records(&store, 1), new);
    assert_eq!(recovered.pubends[&PubendId(2)].records, 2);
    assert_eq!(recovered.corrupt_spans, 0);
}

#[test]
fn a_void_left_as_the_last_record_opens_the_pubend_empty() {
    let fs = Arc::new(MemFs::new());
    let (store, _) = open(&fs, FsyncPolicy::Always);
    appends(&store, &(10..=12).map(|t| tagged(t, "old")).collect::<Vec<_>>());
    store.step();
    store.void(Token(1), PubendId(1)).unwrap();
    assert!(store.step()[0].result.is_ok());
    assert!(records(&store, 1).is_empty(), "no read returns a voided record");
    drop(store);
    let (store, recovered) = open(&fs, FsyncPolicy::Always);
    let log = &recovered.pubends[&PubendId(1)];
    assert_eq!((log.records, log.highest, log.lease), (0, Tick(0), Tick(0)));
    assert!(records(&store, 1).is_empty());
    appends(&store, &[tagged(1, "new")]);
    assert!(store.step()[0].result.is_ok(), "any tick may follow a void, even across a restart");
}

/// The crash guarantee, at every point of a void and its re-seed: a power loss keeps a prefix of
/// the unsynced writes and tears the last one. Before the void is durable the old log comes back
/// intact; after, only what was appended after it, and never an old record.
#[test]
fn a_power_loss_anywhere_in_a_void_and_its_reseed_leaves_the_old_log_or_a_prefix_of_the_new() {
    let old: Vec<_> = (10..=40).map(|t| tagged(t, "old")).collect();
    let new: Vec<_> = (1..=20).map(|t| tagged(t, "new")).collect();
    let (mut kept_old, mut partial, mut whole) = (0, 0, 0);
    for seed in 0..200u64 {
        let fs = Arc::new(MemFs::new());
        let (store, _) = open_one_segment(&fs, FsyncPolicy::Always);
        appends(&store, &old);
        store.raise_lease(Token(0), PubendId(1), Tick(1000)).unwrap();
        store.release(Token(0), PubendId(1), Tick(12)).unwrap();
        store.step();
        drop(store);
        // Nothing of the void and the re-seed is synced (no lease raise, no segment rotation):
        // each step is one write the power loss may keep, tear or drop.
        let (store, _) = open_one_segment(&fs, FsyncPolicy::Never);
        store.void(Token(0), PubendId(1)).unwrap();
        store.step();
        for chunk in new.chunks(3) {
            appends(&store, chunk);
            store.step();
        }
        fs.power_loss(seed);
        drop(store);
        fs.restart();
        let (store, recovered) = open_one_segment(&fs, FsyncPolicy::Always);
        assert_eq!(recovered.corrupt_spans, 0, "seed {seed}: a torn write was taken for damage");
        let back = records(&store, 1);
        let log = &recovered.pubends[&PubendId(1)];
        if back.first().is_some_and(|r| r.tick == Tick(13)) {
            assert_eq!(back, old[3..], "seed {seed}: the old log came back altered");
            assert_eq!((log.lease, log.released), (Tick(1000), Tick(12)), "seed {seed}");
            kept_old += 1;
            // The caller voids again, and this time it holds.
            store.void(Token(0), PubendId(1)).unwrap();
            appends(&store, &new);
            assert!(store.step().iter().all(|c| c.result.is_ok()), "seed {seed}");
            drop(store);
            let (store, _) = open_one_segment(&fs, FsyncPolicy::Always);
            assert_eq!(records(&store, 1), new, "seed {seed}: the second void");
            continue;
        }
        assert_eq!(back, new[..back.len()], "seed {seed}: not a prefix of the re-seed");
        assert_eq!((log.released, log.lease), (Tick(0), Tick(0)), "seed {seed}: the old lease and release are void");
        match back.len() == new.len() {
            true => whole += 1,
            false => partial += 1,
        }
        // The re-seed is resumed from where the power loss left it.
        appends(&store, &new[back.len()..]);
        assert!(store.step().iter().all(|c| c.result.is_ok()), "seed {seed}");
        assert_eq!(records(&store, 1), new, "seed {seed}: the resumed re-seed");
    }
    assert!(kept_old > 0 && partial > 0 && whole > 0, "every case met: {kept_old} {partial} {whole}");
}

#[test]
fn segments_holding_only_voided_records_are_deleted_like_released_ones() {
    let fs = Arc::new(MemFs::new());
    let (store, _) = open(&fs, FsyncPolicy::Always);
    let old: Vec<_> = (1..=120).map(|t| tagged(t, "old")).collect();
    for chunk in old.chunks(5) {
        appends(&store, chunk);
        store.step();
    }
    let segments = || fs.list_names(Path::new(DIR)).iter().filter(|name| name.ends_with(".log")).count();
    let before = segments();
    assert!(before >= 3, "the old log spans {before} segments");
    store.void(Token(0), PubendId(1)).unwrap();
    assert!(store.step()[0].result.is_ok());
    assert_eq!(segments(), 1, "only the active segment is left");
    assert_eq!(store.stats().segments_deleted, before as u64 - 1);
    drop(store);
    let (store, recovered) = open(&fs, FsyncPolicy::Always);
    assert_eq!(recovered.segments, 1);
    assert_eq!(recovered.pubends[&PubendId(1)].records, 0);
    assert!(records(&store, 1).is_empty());
}

/// A segment that also holds another pubend's unreleased records stays until they are released.
#[test]
fn a_segment_shared_with_a_live_pubend_is_kept_after_a_void() {
    let fs = Arc::new(MemFs::new());
    let (store, _) = open(&fs, FsyncPolicy::Always);
    for t in 1..=60 {
        appends(&store, &[tagged(t, "old"), record(2, t, b"live")]);
        store.step();
    }
    let segments = || fs.list_names(Path::new(DIR)).iter().filter(|name| name.ends_with(".log")).count();
    let before = segments();
    store.void(Token(0), PubendId(1)).unwrap();
    store.step();
    assert_eq!(segments(), before, "pubend 2's records pin them");
    assert_eq!(records(&store, 2).len(), 60);
    store.release(Token(0), PubendId(2), Tick(60)).unwrap();
    store.step();
    assert_eq!(segments(), 1);
}
