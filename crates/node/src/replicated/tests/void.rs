//! Issue 40, a log its replica group contradicts below its last tick: the deposed host's clock
//! ran ahead of its successor's, so the host synced records at ticks (1030, 1040) that the group
//! never committed, and the successor logged the group's next records at lower ticks (1010,
//! 1016). The log cannot take them (a pubend's ticks only grow in the store), and before the
//! void record the pubend stayed closed on that broker for good (`resume` returns `Err`). Now
//! it is voided and seeded again from the group, on the real store (`tidings-store` on its
//! in-memory file system): it opens with exactly the group's records, answers a nack with them,
//! and a restart opens the same again.

use std::path::Path;
use std::sync::Arc;

use tidings_store::{MemFs, Options, Store, Token};

use super::super::{reopen, reseed};
use super::*;
use crate::journal;

/// The deposed host's log: the group's first records, then two it never committed.
fn deposed_log() -> Vec<StoreAction> {
    let mut writes: Vec<StoreAction> = [(1, 1, 1_000), (2, 1, 1_005), (3, 4, 1_030), (3, 5, 1_040)]
        .into_iter()
        .map(|(publisher, seq, tick)| StoreAction::Append {
            pubend: P,
            tick: Tick(tick),
            record: Bytes::from(format!("m{tick}").into_bytes()),
            publisher: PublisherId(publisher),
            seq,
        })
        .collect();
    writes.push(StoreAction::LeaseRaise { pubend: P, up_to: Tick(1_050) });
    writes.push(StoreAction::ReleasePrefix { pubend: P, tick: Tick(1_002) });
    writes
}

/// Opens the log on `fs`: the store, and what the core is told of `P`.
fn open(fs: &Arc<MemFs>) -> (Store, tidings_delivery::Recovered) {
    let (store, recovered) = Store::open_stepped(fs.clone(), Path::new("/pubends"), Options::default()).expect("opens");
    let opened = journal::opened(&store, recovered).expect("reads");
    let found = opened.pubends.into_iter().find(|(pubend, _)| *pubend == P).map(|(_, r)| r).unwrap_or_default();
    (store, found)
}

/// Submits `writes` as one group and checks every one was logged.
fn write(store: &Store, writes: &[StoreAction]) {
    for (index, write) in writes.iter().enumerate() {
        journal::submit(store, Token(index as u64), write).expect("submitted");
    }
    let done = store.step();
    assert_eq!(done.len(), writes.len());
    assert!(done.iter().all(|c| c.result.is_ok()), "the log refused a write: {done:?}");
}

/// The engine opened from `store` with `recovered`: the data a nack over 1003..=1060 is
/// answered with, read from the store, and the engine.
fn serve(store: &Store, recovered: tidings_delivery::Recovered) -> (Vec<(Tick, Bytes)>, Engine<All>) {
    let mut engine = Engine::new(Settings::default(), All);
    let mut reads = |action: &StoreAction| match action {
        StoreAction::ReadRange { pubend, range } => Some(journal::read(store, *pubend, *range)),
        _ => None,
    };
    let route = StreamRoute { upstream: None, children: vec![ChildLink { cell: CellId(9), broker: CHILD, via: None }] };
    settle_with(&mut engine, &mut reads, 1, Input::Route { pubend: P, route });
    let opened = Input::Store(StoreInput::Opened { pubend: P, recovered });
    let mut sent = settle_with(&mut engine, &mut reads, 5, opened).0;
    for now in [300, 600] {
        sent.extend(settle_with(&mut engine, &mut reads, now, Input::Tick).0);
    }
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(1_003), to: Tick(1_060) }] };
    let received = Input::Received { from: CHILD, from_cell: CellId(9), message: nack };
    sent.extend(settle_with(&mut engine, &mut reads, 700, received).0);
    (data(&sent), engine)
}

fn groups_records(state: &PubendReplica) -> Vec<(Tick, Bytes)> {
    state.records().map(|r| (Tick(r.tick), Bytes::from(r.payload.clone()))).collect()
}

#[test]
fn a_log_the_group_contradicts_is_voided_then_seeded_with_the_groups_state() {
    let state = replica();
    let found = tidings_delivery::Recovered {
        lease: Tick(1_050),
        release: Tick(1_002),
        logged: vec![Tick(1_005), Tick(1_030), Tick(1_040)],
        publishers: vec![(PublisherId(2), 1), (PublisherId(3), 5)],
        lost: vec![TickRange { from: Tick(1_031), to: Tick(1_035) }],
    };
    assert_eq!(resume(P, &state, found.clone()), Err(Tick(1_010)), "the log cannot be resumed");
    let seed = reopen(P, &state, found.clone());
    assert_eq!(seed, reseed(P, &state, found, Tick(1_010)));
    assert_eq!(seed.voided, Some(Tick(1_010)));
    let append = |publisher, seq, tick: u64| StoreAction::Append {
        pubend: P,
        tick: Tick(tick),
        record: Bytes::from(format!("m{tick}").into_bytes()),
        publisher: PublisherId(publisher),
        seq,
    };
    assert_eq!(
        seed.writes,
        [
            StoreAction::Void { pubend: P },
            append(2, 1, 1_005),
            append(1, 2, 1_010),
            append(1, 3, 1_016),
            StoreAction::LeaseRaise { pubend: P, up_to: Tick(1_050) },
            StoreAction::ReleasePrefix { pubend: P, tick: Tick(1_002) },
        ],
        "the void first, then the group's records above the release point, lease and release"
    );
    assert_eq!(seed.dropped, [Tick(1_030), Tick(1_040)], "never committed: a retry of either is new");
    let recovered = &seed.recovered;
    assert_eq!(recovered.logged, [Tick(1_005), Tick(1_010), Tick(1_016)]);
    assert_eq!(recovered.lease, Tick(1_050), "no tick the log held is given again");
    assert!(recovered.lost.is_empty(), "the log's damage is voided with it");
    assert_eq!(recovered.publishers, [(PublisherId(1), 3), (PublisherId(2), 1)], "the group's table");
}

/// The deposed host's log on a fresh file system, opened again at its restart, and how it is
/// reopened once its group serves there (voided and re-seeded).
fn deposed_host_restarts() -> (PubendReplica, Arc<MemFs>, Store, super::super::Seed) {
    let state = replica();
    let fs = Arc::new(MemFs::new());
    let (store, _) = open(&fs);
    write(&store, &deposed_log());
    drop(store);
    let (store, found) = open(&fs);
    assert_eq!(found.logged, [Tick(1_005), Tick(1_030), Tick(1_040)]);
    let seed = reopen(P, &state, found);
    assert_eq!(seed.voided, Some(Tick(1_010)));
    (state, fs, store, seed)
}

#[test]
fn a_voided_and_reseeded_log_serves_the_groups_records_and_opens_the_same_after_a_restart() {
    let (state, fs, store, seed) = deposed_host_restarts();
    write(&store, &seed.writes);
    let (answer, mut engine) = serve(&store, seed.recovered.clone());
    assert_eq!(answer, groups_records(&state), "exactly the group's records, at their ticks");
    let view = engine.inspect(P).expect("the pubend is open");
    for tick in [1_030, 1_040] {
        assert_eq!(view.knowledge(Tick(tick)), Some(Know::Final), "tick {tick} was never committed");
    }
    let retry = Input::Publish { pubend: P, publisher: PublisherId(3), seq: 4, payload: Bytes::from_static(b"again") };
    let (_, appended) = settle_with(&mut engine, &mut |_| None, 800, retry);
    assert!(matches!(appended.as_slice(), [tick] if *tick > Tick(1_050)), "{appended:?}");
    drop(store);

    // A restart of that broker: the log now is the group's, resumed as it is.
    let (store, found) = open(&fs);
    assert_eq!(found, seed.recovered, "the same log after the restart");
    let again = reopen(P, &state, found);
    assert_eq!((again.voided, again.writes.len(), again.dropped.len()), (None, 0, 0));
    assert_eq!(again.recovered, seed.recovered);
    assert_eq!(serve(&store, again.recovered).0, groups_records(&state));
}

/// A crash between the void and the re-seed: the void is durable, none of the group's records
/// are. The next start finds the pubend empty and seeds it from the group alone.
#[test]
fn a_crash_between_the_void_and_the_reseed_reopens_from_the_group() {
    let (state, fs, store, seed) = deposed_host_restarts();
    write(&store, &seed.writes[..1]);
    drop(store);

    let (store, found) = open(&fs);
    assert!(found.logged.is_empty() && found.lease == Tick(0), "the voided log: {found:?}");
    let resumed = reopen(P, &state, found);
    assert_eq!(resumed.voided, None, "an empty log lacks nothing below its last tick");
    write(&store, &resumed.writes);
    assert_eq!(resumed.recovered.logged, [Tick(1_005), Tick(1_010), Tick(1_016)]);
    assert_eq!(serve(&store, resumed.recovered).0, groups_records(&state));
}
