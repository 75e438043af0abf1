//! The stepped store (no writer thread): groups are committed only when the caller steps, and a
//! crash of the caller's process or of the machine leaves what the threaded store would.

mod support;

use std::path::Path;
use std::sync::Arc;

use support::record;
use tidings_store::{FsyncPolicy, MemFs, OpKind, Options, PubendId, ReadItem, Store, Tick, TickRange, Token};

fn options() -> Options {
    Options { fsync: FsyncPolicy::Always, segment_bytes: 4096, reserve_bytes: 0, ..Options::default() }
}

fn ticks(store: &Store) -> Vec<u64> {
    let all = TickRange { first: Tick(1), last: Tick(u64::MAX) };
    let items = store.read(PubendId(1), all, usize::MAX).unwrap_or_default();
    items
        .into_iter()
        .map(|item| match item {
            ReadItem::Data(r) => r.tick.0,
            ReadItem::Lost(_) => 0,
        })
        .collect()
}

#[test]
fn nothing_is_written_until_a_step_and_a_step_completes_everything_queued_in_order() {
    let fs = Arc::new(MemFs::new());
    let dir = Path::new("/log");
    let (store, recovered) = Store::open_stepped(fs.clone(), dir, options()).unwrap();
    assert!(recovered.pubends.is_empty());
    for tick in 1..=3 {
        store.append(Token(tick), record(1, tick, b"m")).unwrap();
    }
    assert!(ticks(&store).is_empty(), "not readable before its group is committed");
    let done = store.step();
    assert_eq!(done.iter().map(|c| c.token.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(done.iter().all(|c| c.result.is_ok() && c.kind == OpKind::Append));
    assert_eq!(ticks(&store), vec![1, 2, 3]);
    assert!(store.step().is_empty(), "an idle step completes nothing");
}

/// A store on a fresh file system with record 1 committed and record 2 queued.
fn one_synced_one_queued() -> (Arc<MemFs>, &'static Path, Store) {
    let fs = Arc::new(MemFs::new());
    let dir = Path::new("/log");
    let opened = Store::open_stepped(fs.clone(), dir, options());
    let Ok((store, _)) = opened else { panic!("opening: {opened:?}") };
    let first = store.append(Token(1), record(1, 1, b"a"));
    store.step();
    let second = store.append(Token(2), record(1, 2, b"b"));
    assert!(first.is_ok() && second.is_ok());
    (fs, dir, store)
}

#[test]
fn a_process_crash_loses_what_was_not_stepped_and_a_power_loss_keeps_what_was_synced() {
    let (fs, dir, store) = one_synced_one_queued();
    drop(store);
    let (store, recovered) = Store::open_stepped(fs.clone(), dir, options()).unwrap();
    assert_eq!(recovered.pubends[&PubendId(1)].highest, Tick(1));
    assert_eq!(ticks(&store), vec![1]);
    // Many groups, rotating segments, then the power goes: every synced record survives.
    for tick in 2..=200 {
        store.append(Token(tick), record(1, tick, &[7; 64])).unwrap();
        store.step();
    }
    fs.power_loss(9);
    drop(store);
    fs.restart();
    let (store, recovered) = Store::open_stepped(fs, dir, options()).unwrap();
    assert!(recovered.segments > 1, "4 KiB segments should have rotated");
    assert_eq!(ticks(&store), (1..=200).collect::<Vec<_>>());
}

/// Found by the simulator (seed 1010 of the seed networks' faults and churn): a process that
/// died between a group's write and its sync left the records in the page cache; the next open
/// recovered them (the core then acknowledges a publisher's retry of one as a duplicate) without
/// syncing them, so a power loss soon after took acknowledged records back.
#[test]
fn what_an_open_recovers_survives_a_power_loss_right_after_it() {
    let (fs, dir, store) = one_synced_one_queued();
    // The process dies inside the commit: written, the sync never returned.
    fs.fail_syncs(true);
    assert!(store.step().iter().all(|c| c.result.is_err()));
    fs.fail_syncs(false);
    drop(store);
    let (store, recovered) = Store::open_stepped(fs.clone(), dir, options()).unwrap();
    assert_eq!(recovered.pubends[&PubendId(1)].highest, Tick(2), "the page cache kept the write");
    assert_eq!(ticks(&store), vec![1, 2]);
    fs.power_loss(3);
    drop(store);
    fs.restart();
    let (store, _) = Store::open_stepped(fs, dir, options()).unwrap();
    assert_eq!(ticks(&store), vec![1, 2], "a record the open claimed was lost to a power loss");
}
