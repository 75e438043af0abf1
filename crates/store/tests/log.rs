//! The log's behaviour on a healthy disk: round trip, recovery, lease, dedup, release, lock.

mod support;

use std::sync::Arc;

use support::{open, payload, record};
use tidings_store::{
    FsyncPolicy, MemFs, OpKind, Options, PubendId, PublisherId, PublisherSeq, ReadItem, StdFs, StoreError, Tick,
    TickRange, Token,
};

/// Power loss with the store still running, then power back on.
fn crash(fs: &MemFs, h: support::Harness) {
    fs.power_loss(42);
    drop(h);
    fs.restart();
}

fn small_segments() -> Options {
    Options { fsync: FsyncPolicy::Always, segment_bytes: 4096, reserve_bytes: 0, ..Options::default() }
}

#[test]
fn appended_records_read_back_byte_for_byte_before_and_after_a_restart() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    let records: Vec<_> = (1..=300).map(|t| record(t % 3, t, &payload(t % 3, t, 256))).collect();
    let h = open(fs.clone(), dir, small_segments()).unwrap();
    let done = h.append_in_groups(&records, 8);
    assert!(done.iter().all(|c| c.result.is_ok() && c.kind == OpKind::Append));
    let expected = |p: u64| records.iter().filter(|r| r.pubend.0 == p).cloned().collect::<Vec<_>>();
    assert_eq!(h.records(1), expected(1));
    drop(h);
    let h = open(fs, dir, small_segments()).unwrap();
    assert!(h.recovered.segments > 1, "4 KiB segments should have rotated");
    for p in 0..3 {
        assert_eq!(h.records(p), expected(p));
        assert_eq!(h.recovered.pubends[&PubendId(p)].records, expected(p).len());
    }
}

#[test]
fn a_range_read_returns_only_ticks_in_range_and_at_most_max_records() {
    let fs = Arc::new(MemFs::new());
    let h = open(fs, "/log".as_ref(), Options::default()).unwrap();
    let records: Vec<_> = (1..=50).map(|t| record(1, t * 10, b"x")).collect();
    h.append_all(&records);
    let range = TickRange { first: Tick(95), last: Tick(205) };
    let items = h.store.read(PubendId(1), range, 5).unwrap();
    let ticks: Vec<u64> = items
        .iter()
        .map(|i| match i {
            ReadItem::Data(r) => r.tick.0,
            ReadItem::Lost(_) => 0,
        })
        .collect();
    assert_eq!(ticks, vec![100, 110, 120, 130, 140]);
}

#[test]
fn the_lease_survives_a_restart_and_ticks_stay_above_it_when_the_clock_steps_back() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    // The clock reads 1_000_000 µs; the pubend leases 2 s ahead and logs two messages.
    let h = open(fs.clone(), dir, Options::default()).unwrap();
    assert!(h.lease(7, 3_000_000).result.is_ok());
    h.append_all(&[record(7, 1_000_000, b"a"), record(7, 1_000_001, b"b")]);
    // The machine loses power (unsynced bytes go), then comes back with its clock stepped back.
    crash(&fs, h);
    // After the crash the clock has stepped back to 500_000 µs.
    let stepped_back_now = 500_000;
    let h = open(fs.clone(), dir, Options::default()).unwrap();
    let state = &h.recovered.pubends[&PubendId(7)];
    assert_eq!(state.lease, Tick(3_000_000));
    let next = stepped_back_now.max(state.tick_floor().0 + 1);
    assert!(next > 3_000_000, "a new tick must be above every tick that may have been used");
    // A lower lease never lowers it.
    assert!(h.lease(7, 10).result.is_ok());
    drop(h);
    let h = open(fs, dir, Options::default()).unwrap();
    assert_eq!(h.recovered.pubends[&PubendId(7)].lease, Tick(3_000_000));
}

#[test]
fn the_dedup_table_of_unreleased_records_survives_a_restart() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    let h = open(fs.clone(), dir, Options::default()).unwrap();
    h.append_all(&[record(1, 10, b"a"), record(1, 20, b"b"), record(1, 30, b"c")]);
    assert!(h.release(1, 10).result.is_ok());
    crash(&fs, h);
    let h = open(fs, dir, Options::default()).unwrap();
    let dedup = &h.recovered.pubends[&PubendId(1)].dedup;
    let key = |seq| (PublisherId(1001), PublisherSeq(seq));
    assert_eq!(dedup.get(&key(20)), Some(&Tick(20)));
    assert_eq!(dedup.get(&key(30)), Some(&Tick(30)));
    assert_eq!(dedup.get(&key(10)), None, "released records leave the dedup table");
    assert_eq!(h.recovered.pubends[&PubendId(1)].released, Tick(10));
}

/// A publisher's acknowledgement can be lost in a crash after every record of it was released
/// (delivered everywhere) and the segments holding them deleted: its retry after the restart
/// must still be known as a retry, so the high-water mark outlives the records.
#[test]
fn a_publishers_high_water_mark_survives_the_release_and_deletion_of_all_its_records() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    let h = open(fs.clone(), dir, small_segments()).unwrap();
    // Pubend 1's publisher logs seq 1..=40, then pubend 2 fills later segments.
    let early: Vec<_> = (1..=40).map(|t| record(1, t, &[1; 256])).collect();
    h.append_in_groups(&early, 4);
    let late: Vec<_> = (41..=120).map(|t| record(2, t, &[2; 256])).collect();
    h.append_in_groups(&late, 4);
    assert!(h.release(1, 40).result.is_ok());
    assert!(h.release(2, 80).result.is_ok());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while h.store.stats().segments_deleted < 4 {
        assert!(std::time::Instant::now() < deadline, "the released segments were never deleted");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    crash(&fs, h);
    let h = open(fs, dir, small_segments()).unwrap();
    assert!(h.records(1).is_empty() && h.records(2).first().is_some_and(|r| r.tick.0 > 80));
    let state = &h.recovered.pubends[&PubendId(1)];
    assert_eq!(state.records, 0, "every record of pubend 1 is released");
    assert!(state.dedup.is_empty());
    assert_eq!(state.highest, Tick(0), "no record of pubend 1 is left in any segment");
    assert_eq!(state.publishers.get(&PublisherId(1001)), Some(&PublisherSeq(40)));
    assert_eq!(h.recovered.pubends[&PubendId(2)].publishers.get(&PublisherId(2001)), Some(&PublisherSeq(120)));
}

#[test]
fn with_room_on_the_disk_released_segments_are_deleted_off_the_writer_thread() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    let h = open(fs.clone(), dir, Options { reserve_bytes: 1024, ..small_segments() }).unwrap();
    let records: Vec<_> = (1..=200).map(|t| record(0, t, &[7; 256])).collect();
    h.append_in_groups(&records, 4);
    let before = fs.list_names(dir).len();
    assert!(h.release(0, 150).result.is_ok());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while h.store.stats().segments_deleted == 0 {
        assert!(std::time::Instant::now() < deadline, "released segments were never deleted");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    while fs.list_names(dir).len() >= before {
        assert!(std::time::Instant::now() < deadline, "the files are still there");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let left: Vec<u64> = h.records(0).iter().map(|r| r.tick.0).collect();
    assert_eq!(left, (151..=200).collect::<Vec<_>>());
}

#[test]
fn release_deletes_whole_segments_only_once_every_record_in_them_is_released() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    let h = open(fs.clone(), dir, small_segments()).unwrap();
    // Two pubends interleaved, ~300 B per record: about 13 records per 4 KiB segment.
    let records: Vec<_> = (1..=200).map(|t| record(t % 2, t, &[7; 256])).collect();
    h.append_in_groups(&records, 4);
    let segments = |fs: &MemFs| fs.list_names(dir);
    let before = segments(&fs);
    // Releasing pubend 1 alone frees nothing: every segment also holds pubend 0.
    assert!(h.release(1, 200).result.is_ok());
    assert_eq!(segments(&fs), before);
    // Releasing pubend 0 up to 100 frees the segments holding ticks up to about 100.
    assert!(h.release(0, 100).result.is_ok());
    let after = segments(&fs);
    assert!(after.len() < before.len(), "{} -> {}", before.len(), after.len());
    assert!(h.store.stats().segments_deleted > 0);
    let left: Vec<u64> = h.records(0).iter().map(|r| r.tick.0).collect();
    assert_eq!(left, (102..=200).step_by(2).collect::<Vec<_>>());
    drop(h);
    let h = open(fs, dir, small_segments()).unwrap();
    assert_eq!(h.records(0).iter().map(|r| r.tick.0).collect::<Vec<_>>(), left);
    assert_eq!(h.recovered.pubends[&PubendId(1)].released, Tick(200));
    assert_eq!(h.recovered.pubends[&PubendId(0)].released, Tick(100));
}

#[test]
fn a_tick_not_above_the_last_one_is_refused_and_the_rest_of_the_group_is_logged() {
    let fs = Arc::new(MemFs::new());
    let h = open(fs, "/log".as_ref(), Options::default()).unwrap();
    let done = h.append_all(&[record(1, 5, b"a"), record(1, 5, b"b"), record(1, 6, b"c")]);
    assert!(done[0].result.is_ok());
    assert_eq!(done[1].result, Err(StoreError::TickNotIncreasing { tick: 5, last: 5 }));
    assert!(done[2].result.is_ok());
    assert_eq!(h.records(1).len(), 2);
}

#[test]
fn a_second_store_on_the_same_directory_is_refused_until_the_first_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open(Arc::new(StdFs), tmp.path(), Options::default()).unwrap();
    let second = open(Arc::new(StdFs), tmp.path(), Options::default());
    assert!(matches!(second, Err(StoreError::Locked { .. })), "{:?}", second.err());
    drop(first);
    assert!(open(Arc::new(StdFs), tmp.path(), Options::default()).is_ok());
}

#[test]
fn the_real_file_system_round_trips_records_across_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let records: Vec<_> = (1..=100).map(|t| record(1, t, &payload(1, t, 300))).collect();
    let h = open(Arc::new(StdFs), tmp.path(), small_segments()).unwrap();
    h.append_in_groups(&records, 8);
    drop(h);
    let h = open(Arc::new(StdFs), tmp.path(), small_segments()).unwrap();
    assert_eq!(h.records(1), records);
}

#[test]
fn append_many_completes_each_record_in_submission_order() {
    let fs = Arc::new(MemFs::new());
    let h = open(fs, "/log".as_ref(), Options::default()).unwrap();
    let records: Vec<_> = (1..=50).map(|t| record(2, t, &payload(2, t, 64))).collect();
    let batch = records.iter().enumerate().map(|(i, r)| (Token(i as u64), r.clone()));
    h.store.append_many(batch).unwrap();
    let done = h.wait(50);
    let tokens: Vec<u64> = done.iter().map(|c| c.token.0).collect();
    assert_eq!(tokens, (0..50).collect::<Vec<_>>());
    assert!(done.iter().all(|c| c.result.is_ok()));
    assert_eq!(h.records(2), records);
}

#[test]
fn reads_of_pubends_interleaved_across_segments_return_each_pubends_records_in_order() {
    // Two pubends append in turn into small segments: one pubend's neighbouring records are
    // read a span at a time, skipping the other's, and spans stop at segment ends.
    let fs = Arc::new(MemFs::new());
    let h = open(fs, "/log".as_ref(), small_segments()).unwrap();
    let records: Vec<_> =
        (1..=300).flat_map(|t| [1, 2].map(|p| record(p, t, &payload(p, t, 1 + t as usize % 90)))).collect();
    for group in records.chunks(7) {
        h.append_all(group);
    }
    for pubend in [1, 2] {
        let mine: Vec<_> = records.iter().filter(|r| r.pubend.0 == pubend).cloned().collect();
        assert_eq!(h.records(pubend), mine, "pubend {pubend}");
        let range = TickRange { first: Tick(101), last: Tick(250) };
        let read = h.store.read(PubendId(pubend), range, 40).unwrap();
        let expected: Vec<_> = mine[100..140].iter().cloned().map(ReadItem::Data).collect();
        assert_eq!(read, expected, "pubend {pubend}");
    }
}

#[test]
fn under_always_steady_appends_share_one_sync_when_the_writer_lingers() {
    // One append, then forty more in quick succession: the writer, having committed a group a
    // moment ago, waits its linger for the rest, so a handful of syncs carry them all, and every
    // one is still completed only after the sync that covers it (MemFs drops unsynced bytes).
    let fs = Arc::new(MemFs::new());
    let options = Options { linger: std::time::Duration::from_millis(50), ..small_segments() };
    let h = open(fs.clone(), "/log".as_ref(), options).unwrap();
    let records: Vec<_> = (1..=41).map(|t| record(1, t, &payload(1, t, 64))).collect();
    assert!(h.append_all(&records[..1])[0].result.is_ok());
    let before = h.store.stats().syncs;
    for (index, record) in records[1..].iter().enumerate() {
        h.store.append(Token(index as u64), record.clone()).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let done = h.wait(40);
    assert!(done.iter().all(|c| c.result.is_ok()));
    let syncs = h.store.stats().syncs - before;
    assert!(syncs <= 20, "40 steady appends took {syncs} syncs");
    crash(&fs, h);
    let h = open(fs, "/log".as_ref(), small_segments()).unwrap();
    assert_eq!(h.records(1), records, "every completed append was synced");
}

#[test]
fn the_sink_hears_each_sync_and_how_long_it_took_before_the_completions_it_covers() {
    // A broker shows the disk's share of its ack latency from these reports, so there must be
    // one per fdatasync, told before the group it made durable is completed.
    #[derive(Debug, PartialEq)]
    enum Heard {
        Synced,
        Completed(usize),
    }
    struct Recorder(std::sync::mpsc::Sender<Heard>);
    impl tidings_store::CompletionSink for Recorder {
        fn complete(&mut self, group: Vec<tidings_store::Completion>) {
            let _ = self.0.send(Heard::Completed(group.len()));
        }
        fn synced(&mut self, took: std::time::Duration) {
            assert!(took < std::time::Duration::from_secs(60), "a sync time that is not one: {took:?}");
            let _ = self.0.send(Heard::Synced);
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let fs = Arc::new(MemFs::new());
    let (store, _) = tidings_store::Store::open_with(fs, "/log".as_ref(), small_segments(), Recorder(tx)).unwrap();
    let mut completed = 0;
    let mut heard = Vec::new();
    for tick in 1..=30 {
        store.append(Token(tick), record(1, tick, &payload(1, tick, 100))).unwrap();
        if tick % 10 == 0 {
            while completed < tick as usize {
                let event = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap();
                if let Heard::Completed(n) = event {
                    completed += n;
                }
                heard.push(event);
            }
        }
    }
    let syncs = store.stats().syncs;
    assert_eq!(heard.iter().filter(|h| **h == Heard::Synced).count() as u64, syncs, "one report per sync");
    for (index, event) in heard.iter().enumerate() {
        if let Heard::Completed(_) = event {
            assert_eq!(heard.get(index.wrapping_sub(1)), Some(&Heard::Synced), "a group completed unsynced: {heard:?}");
        }
    }
}

#[test]
fn a_segment_whose_deletion_a_crash_cut_short_is_removed_at_open_and_loses_nothing() {
    let fs = Arc::new(MemFs::new());
    let dir = std::path::Path::new("/log");
    let h = open(fs.clone(), dir, small_segments()).unwrap();
    let records: Vec<_> = (1..=200).map(|t| record(0, t, &[7; 256])).collect();
    h.append_in_groups(&records, 4);
    assert!(h.release(0, 150).result.is_ok());
    drop(h);
    // What a deletion leaves when the process dies halfway: the segment renamed and shortened
    // (its last record cut in two).
    let dying = dir.join("00000000000000000000.deleting");
    fs.open_file(dying.to_str().unwrap()).write_all_at(&record_bytes_torn(), 0).unwrap();
    let h = open(fs.clone(), dir, small_segments()).unwrap();
    assert!(!fs.list_names(dir).iter().any(|n| n.ends_with(".deleting")), "{:?}", fs.list_names(dir));
    assert_eq!(h.recovered.corrupt_spans, 0);
    assert!(h.recovered.pubends[&PubendId(0)].lost.is_empty());
    let left: Vec<u64> = h.records(0).iter().map(|r| r.tick.0).collect();
    assert_eq!(left, (151..=200).collect::<Vec<_>>());
}

/// Bytes that are no valid log (a record torn mid-way would look the same to the scanner).
fn record_bytes_torn() -> Vec<u8> {
    vec![0xA5; 1000]
}
