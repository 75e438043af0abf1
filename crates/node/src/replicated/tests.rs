//! A pubend opened from a replica's state ([`super::seed`]) serves what the
//! group holds exactly as the old host's log did: every record at its tick with its payload,
//! silence where the group made it true, nothing below the release point, and a retry of a
//! logged publish is not logged again.
#![allow(clippy::expect_used)] // a failed step is a failed test

use bytes::Bytes;
use tidings_delivery::memstore::MemStore;
use tidings_delivery::{
    Action, BrokerId, CellId, ChildLink, Engine, Input, Know, Message, Millis, PubendId, PublisherId, Settings,
    StoreAction, StoreInput, StreamRoute, Tick, TickRange,
};
use tidings_replica::{Command, PubendReplica};

use super::{resume, seed};
use crate::durables::tests::Nothing as All;

mod void;

const P: PubendId = PubendId(5);
const CHILD: BrokerId = BrokerId(9);

/// A group's state: four records (the first released), silence up to 1020.
fn replica() -> PubendReplica {
    let mut state = PubendReplica::default();
    for (publisher, seq, tick) in [(1, 1, 1_000), (2, 1, 1_005), (1, 2, 1_010), (1, 3, 1_016)] {
        let payload = format!("m{tick}").into_bytes();
        state.apply(Some(Command::Publish { publisher, seq, tick, payload }));
    }
    state.apply(Some(Command::Silence { up_to: 1_020 }));
    state.apply(Some(Command::Release { up_to: 1_002 }));
    state
}

/// Feeds `input`, answers every read the core asks for from `store`, and returns the messages
/// it sent and the ticks it appended.
fn settle(engine: &mut Engine<All>, store: &mut MemStore, now: u64, input: Input) -> (Vec<Message>, Vec<Tick>) {
    settle_with(engine, &mut |action| store.apply(action), now, input)
}

/// [`settle`] with the store actions carried out by `store`.
fn settle_with(
    engine: &mut Engine<All>,
    store: &mut dyn FnMut(&StoreAction) -> Option<StoreInput>,
    now: u64,
    input: Input,
) -> (Vec<Message>, Vec<Tick>) {
    let (mut sent, mut appended, mut inputs) = (Vec::new(), Vec::new(), vec![input]);
    while let Some(input) = inputs.pop() {
        let mut out = Vec::new();
        engine.handle(Millis(now), input, &mut out);
        for action in out {
            match action {
                Action::Send { message, .. } => sent.push(message),
                Action::Store(store_action) => {
                    if let StoreAction::Append { tick, .. } = &store_action {
                        appended.push(*tick);
                    }
                    inputs.extend(store(&store_action).map(Input::Store));
                }
                _ => {}
            }
        }
    }
    (sent, appended)
}

fn data(sent: &[Message]) -> Vec<(Tick, Bytes)> {
    let mut data: Vec<_> = sent
        .iter()
        .filter_map(|m| match m {
            Message::Data { tick, payload, .. } => Some((*tick, payload.clone())),
            _ => None,
        })
        .collect();
    data.sort();
    data.dedup();
    data
}

#[test]
fn a_pubend_opened_from_a_replica_answers_nacks_with_the_groups_records_at_their_ticks() {
    let state = replica();
    let seed = seed(P, &state);
    let mut store = MemStore::new();
    for write in &seed.writes {
        store.apply(write);
    }
    store.sync();
    // The log the writes made is the one the core is told about.
    assert_eq!(store.open(P), StoreInput::Opened { pubend: P, recovered: seed.recovered.clone() });
    let held: Vec<(Tick, Bytes)> = state.records().map(|r| (Tick(r.tick), Bytes::from(r.payload.clone()))).collect();
    assert_eq!(held.iter().map(|(t, _)| t.0).collect::<Vec<_>>(), vec![1_005, 1_010, 1_016]);
    assert_eq!(seed.ticks.len(), 3);

    let mut engine = Engine::new(Settings::default(), All);
    let route = StreamRoute { upstream: None, children: vec![ChildLink { cell: CellId(9), broker: CHILD, via: None }] };
    settle(&mut engine, &mut store, 1, Input::Route { pubend: P, route });
    let opened = Input::Store(StoreInput::Opened { pubend: P, recovered: seed.recovered });
    let (mut sent, _) = settle(&mut engine, &mut store, 5, opened);
    for now in [300, 600] {
        sent.extend(settle(&mut engine, &mut store, now, Input::Tick).0);
    }

    // Knowledge: D where the group holds a record, F elsewhere up to its silence.
    let view = engine.inspect(P).expect("the pubend is open");
    for tick in 1_003..=1_020 {
        let expected = match held.iter().any(|(t, _)| t.0 == tick) {
            true => Know::Data,
            false => Know::Final,
        };
        assert_eq!(view.knowledge(Tick(tick)), Some(expected), "tick {tick}");
    }
    assert_eq!(view.release(), Some(Tick(1_002)));
    assert!(view.next_tick() > Some(Tick(1_020)), "no tick the group holds or silenced is given again");

    // A nack over everything above the release point is answered with every record.
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(1_003), to: Tick(1_020) }] };
    let received = Input::Received { from: CHILD, from_cell: CellId(9), message: nack };
    let (answer, _) = settle(&mut engine, &mut store, 700, received);
    assert_eq!(data(&answer), held, "the nack's answer: {answer:?}");
    assert_eq!(data(&sent).iter().filter(|d| !held.contains(d)).count(), 0, "nothing but the group's records");

    // A retry of a logged publish gets no second tick; a new one lands past the silence.
    let retry = Input::Publish { pubend: P, publisher: PublisherId(1), seq: 2, payload: Bytes::from_static(b"x") };
    assert!(settle(&mut engine, &mut store, 800, retry).1.is_empty(), "a retry was logged again");
    let new = Input::Publish { pubend: P, publisher: PublisherId(1), seq: 4, payload: Bytes::from_static(b"y") };
    let (_, appended) = settle(&mut engine, &mut store, 800, new);
    assert!(matches!(appended.as_slice(), [tick] if *tick > Tick(1_020)), "{appended:?}");
}

/// A host whose log holds the group's first records (and one the group never committed) resumes
/// from it: only the records a successor logged past the log's last tick are added, the lease
/// rises to the group's silence, and the publishers' highest sequence numbers are the group's.
/// A log that lacks a record below its last tick cannot be resumed (`reopen` voids it and seeds
/// it again then: `void.rs`).
#[test]
fn a_host_log_found_at_start_takes_only_what_the_successor_added() {
    let state = replica();
    let found = tidings_delivery::Recovered {
        lease: Tick(1_006),
        release: Tick(1_002),
        logged: vec![Tick(1_005), Tick(1_006)],
        publishers: vec![(PublisherId(2), 1), (PublisherId(3), 4)],
        lost: Vec::new(),
    };
    let resumed = resume(P, &state, found.clone()).expect("the log lacks nothing below its last tick");
    let appended: Vec<Tick> = resumed
        .writes
        .iter()
        .filter_map(|w| match w {
            StoreAction::Append { tick, .. } => Some(*tick),
            _ => None,
        })
        .collect();
    assert_eq!(appended, [Tick(1_010), Tick(1_016)]);
    assert!(resumed.writes.contains(&StoreAction::LeaseRaise { pubend: P, up_to: Tick(1_020) }));
    assert_eq!(resumed.recovered.lease, Tick(1_020));
    assert_eq!(resumed.recovered.logged, [Tick(1_005), Tick(1_010), Tick(1_016)], "1006 was never committed");
    assert_eq!(resumed.dropped, [Tick(1_006)]);
    assert_eq!(resumed.recovered.publishers, [(PublisherId(1), 3), (PublisherId(2), 1)], "the group's table");
    assert_eq!(resumed.ticks, [((PublisherId(1), 2), Tick(1_010)), ((PublisherId(1), 3), Tick(1_016))]);

    let holed = tidings_delivery::Recovered { logged: vec![Tick(1_016)], ..found };
    assert_eq!(resume(P, &state, holed), Err(Tick(1_005)), "1005 is the group's, not the log's");
}

/// Issue 40, a log found at start holding a record its group never committed (its host synced
/// it, then died or was deposed before a quorum had it): the pubend resumed from that log never
/// serves it. A nack over its tick is answered F (the successor told it silent), never D, and a
/// new publish lands past it. Resuming with the log's records as they were (the code before)
/// answers the nack with the record: a duplicate of the publisher's retry, which the successor
/// logged at another tick.
#[test]
fn a_record_the_group_never_committed_is_never_served_after_a_resume() {
    let state = replica();
    let mut store = MemStore::new();
    // The host's own log: the group's records up to 1010, and 1012, which the group lacks.
    let mut found_writes = Vec::new();
    for (publisher, seq, tick) in [(2, 1, 1_005), (1, 2, 1_010), (3, 4, 1_012)] {
        let record = Bytes::from(format!("m{tick}").into_bytes());
        found_writes.push(StoreAction::Append {
            pubend: P,
            tick: Tick(tick),
            record,
            publisher: PublisherId(publisher),
            seq,
        });
    }
    found_writes.push(StoreAction::ReleasePrefix { pubend: P, tick: Tick(1_002) });
    for write in &found_writes {
        store.apply(write);
    }
    store.sync();
    let StoreInput::Opened { recovered: found, .. } = store.open(P) else { panic!("opened") };
    assert_eq!(found.logged, [Tick(1_005), Tick(1_010), Tick(1_012)]);
    let resumed = resume(P, &state, found).expect("resumes");
    let dropped = resumed.dropped.clone();
    for write in &resumed.writes {
        store.apply(write);
    }
    store.sync();

    let mut engine = Engine::new(Settings::default(), All);
    let route = StreamRoute { upstream: None, children: vec![ChildLink { cell: CellId(9), broker: CHILD, via: None }] };
    settle(&mut engine, &mut store, 1, Input::Route { pubend: P, route });
    let opened = Input::Store(StoreInput::Opened { pubend: P, recovered: resumed.recovered });
    let (mut sent, _) = settle(&mut engine, &mut store, 5, opened);
    sent.extend(settle(&mut engine, &mut store, 300, Input::Tick).0);
    let nack = Message::Nack { pubend: P, ranges: vec![TickRange { from: Tick(1_003), to: Tick(1_020) }] };
    let received = Input::Received { from: CHILD, from_cell: CellId(9), message: nack };
    sent.extend(settle(&mut engine, &mut store, 700, received).0);

    let view = engine.inspect(P).expect("the pubend is open");
    assert_eq!(view.knowledge(Tick(1_012)), Some(Know::Final), "the group holds no record at 1012");
    let served: Vec<Tick> = data(&sent).into_iter().map(|(tick, _)| tick).collect();
    assert_eq!(served, [Tick(1_005), Tick(1_010), Tick(1_016)], "only the group's records");
    let new = Input::Publish { pubend: P, publisher: PublisherId(3), seq: 4, payload: Bytes::from_static(b"retry") };
    let (_, appended) = settle(&mut engine, &mut store, 800, new);
    assert!(
        matches!(appended.as_slice(), [tick] if *tick > Tick(1_020)),
        "a retry of 1012's publish is new: {appended:?}"
    );
    assert_eq!(dropped, [Tick(1_012)], "the caller forgets 1012's publish");
}
