//! The worked examples of gd-protocol §12, one test each, with ticks in milliseconds
//! (`ticks_per_ms = 1`) so that the tick numbers are the document's.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tidings_delivery::memstore::MemStore;
use tidings_delivery::{
    Action, BrokerId, CellId, ChildLink, Engine, Input, Matcher, Message, Millis, PubendId, PublisherId, Settings,
    SilenceKind, StreamRoute, SubendId, Tick, TickRange, TreeTag, UpstreamCell, Verdict,
};

const P: PubendId = PubendId(7);
/// Payload byte 0: bit 0 = passes C's filters (price > 100), bit 1 = passes D's (symbol IBM).
const FOR_C: u8 = 1;
const FOR_D: u8 = 2;

struct BitMatcher {
    children: BTreeMap<CellId, u8>,
    subends: BTreeMap<SubendId, u8>,
}

impl Matcher for BitMatcher {
    fn child(&self, _: PubendId, cell: CellId, payload: &Bytes) -> Verdict {
        match self.children.get(&cell) {
            Some(bits) if payload[0] & bits != 0 => Verdict::Data,
            Some(_) => Verdict::Final,
            None => Verdict::Unsure,
        }
    }
    fn subends(&self, _: PubendId, payload: &Bytes, out: &mut Vec<SubendId>) {
        out.extend(self.subends.iter().filter(|(_, bits)| payload[0] & **bits != 0).map(|(&s, _)| s));
    }
    fn subend(&self, _: PubendId, subend: SubendId, payload: &Bytes) -> bool {
        self.subends.get(&subend).is_some_and(|bits| payload[0] & bits != 0)
    }
    fn epoch(&self) -> u64 {
        0
    }

    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

fn settings() -> Settings {
    Settings {
        ticks_per_ms: 1,
        gap_curiosity_ms: 5,
        nack_repetition_initial_ms: 20,
        nack_repetition_min_ms: 10,
        ack_expected_ms: 100,
        delay_curiosity_ms: None,
        silence_ms: 8,
        ack_propagation_ms: 5,
        release_propagation_ms: 5,
        requested_forgetting_ms: 50,
        lease_chunk_ms: 1000,
        ..Settings::default()
    }
}

/// Engines wired by an instant, in-order wire; a predicate decides which sends are lost.
struct World {
    now: Millis,
    engines: BTreeMap<BrokerId, Engine<BitMatcher>>,
    cells: BTreeMap<BrokerId, CellId>,
    store: MemStore,
    wire: VecDeque<(BrokerId, BrokerId, Message)>,
    sent: Vec<(Millis, BrokerId, BrokerId, Message)>,
    delivered: Vec<(SubendId, Tick)>,
    gaps: Vec<(SubendId, TickRange)>,
    down: Vec<BrokerId>,
}

const A: BrokerId = BrokerId(1);
const B: BrokerId = BrokerId(2);
const C: BrokerId = BrokerId(3);
const D: BrokerId = BrokerId(4);

impl World {
    fn new() -> Self {
        Self {
            now: Millis(1),
            engines: BTreeMap::new(),
            cells: BTreeMap::new(),
            store: MemStore::new(),
            wire: VecDeque::new(),
            sent: Vec::new(),
            delivered: Vec::new(),
            gaps: Vec::new(),
            down: Vec::new(),
        }
    }

    fn add(&mut self, id: BrokerId, cell: u32, children: &[(u32, u8)], subends: &[(u64, u8)], settings: Settings) {
        let matcher = BitMatcher {
            children: children.iter().map(|&(c, bits)| (CellId(c), bits)).collect(),
            subends: subends.iter().map(|&(s, bits)| (SubendId(s), bits)).collect(),
        };
        self.engines.insert(id, Engine::new(settings, matcher));
        self.cells.insert(id, CellId(cell));
    }

    fn feed(&mut self, id: BrokerId, input: Input) {
        let mut out = Vec::new();
        self.engines.get_mut(&id).unwrap().handle(self.now, input, &mut out);
        for action in out {
            match action {
                Action::Send { to, message, .. } => {
                    self.sent.push((self.now, id, to, message.clone()));
                    self.wire.push_back((id, to, message));
                }
                Action::Store(store) => {
                    if let Some(done) = self.store.apply(&store) {
                        self.feed(id, Input::Store(done));
                    }
                }
                Action::Deliver { subend, tick, .. } => self.delivered.push((subend, tick)),
                Action::GapNotice { subend, range, .. } => self.gaps.push((subend, range)),
                Action::PublishAcked { .. } | Action::Free(_) => {}
                Action::PublishRefused { .. } => panic!("no append fails in these examples"),
                Action::Rejected { error } => panic!("{error}"),
                Action::Serve(_) | Action::ServeCancel { .. } => panic!("serve orders are off here"),
            }
        }
    }

    /// Runs to `until`, one ms at a time; `lose` picks the sends that vanish.
    fn run(&mut self, until: u64, lose: &dyn Fn(BrokerId, BrokerId, &Message) -> bool) {
        while self.now.0 < until {
            self.now = self.now.after(1);
            for done in self.store.sync() {
                self.feed(A, Input::Store(done));
            }
            while let Some((from, to, message)) = self.wire.pop_front() {
                if lose(from, to, &message) || self.down.contains(&to) || self.down.contains(&from) {
                    continue;
                }
                let from_cell = self.cells[&from];
                self.feed(to, Input::Received { from, from_cell, message });
            }
            let due: Vec<BrokerId> = self
                .engines
                .iter()
                .filter(|(_, e)| e.next_deadline().is_some_and(|d| d <= self.now))
                .map(|(&id, _)| id)
                .collect();
            for id in due {
                if !self.down.contains(&id) {
                    self.feed(id, Input::Tick);
                }
            }
        }
    }

    fn publish(&mut self, at: u64, bits: u8, seq: u64) {
        self.run(at - 1, &|_, _, _| false);
        self.now = Millis(at);
        self.feed(
            A,
            Input::Publish { pubend: P, publisher: PublisherId(1), seq, payload: Bytes::from(vec![bits, seq as u8]) },
        );
    }

    fn delivered_to(&self, subend: u64) -> Vec<u64> {
        self.delivered.iter().filter(|(s, _)| s.0 == subend).map(|(_, t)| t.0).collect()
    }

    fn sends(&self, from: BrokerId, to: BrokerId) -> impl Iterator<Item = &(Millis, BrokerId, BrokerId, Message)> {
        self.sent.iter().filter(move |(_, f, t, _)| *f == from && *t == to)
    }
}

fn up(cell: u32, brokers: &[BrokerId]) -> Option<UpstreamCell> {
    Some(UpstreamCell { cell: CellId(cell), brokers: brokers.to_vec() })
}

fn link(cell: u32, broker: BrokerId) -> ChildLink {
    ChildLink { cell: CellId(cell), broker, via: None }
}

fn data_tick(message: &Message) -> Option<(u64, bool)> {
    match message {
        Message::Data { tick, requested_only, .. } => Some((tick.0, *requested_only)),
        _ => None,
    }
}

/// A -> B -> {C, D}; s1 at C wants FOR_C, s2 at D wants FOR_D; both start at 900.
fn examples_world() -> World {
    let mut world = World::new();
    world.add(A, 0, &[(1, FOR_C | FOR_D)], &[], settings());
    world.add(B, 1, &[(2, FOR_C), (3, FOR_D)], &[], settings());
    world.add(C, 2, &[], &[(1, FOR_C)], settings());
    world.add(D, 3, &[], &[(2, FOR_D)], settings());
    world.feed(A, Input::Route { pubend: P, route: StreamRoute { upstream: None, children: vec![link(1, B)] } });
    let open = world.store.open(P);
    world.feed(A, Input::Store(open));
    world.feed(
        B,
        Input::Route {
            pubend: P,
            route: StreamRoute { upstream: up(0, &[A]), children: vec![link(2, C), link(3, D)] },
        },
    );
    for (id, subend) in [(C, 1), (D, 2)] {
        world.feed(id, Input::Route { pubend: P, route: StreamRoute { upstream: up(1, &[B]), children: vec![] } });
        world.feed(
            id,
            Input::SubendAttach { pubend: P, subend: SubendId(subend), start: Some(Tick(900)), durable: false },
        );
    }
    world.run(900, &|_, _, _| false);
    world
}

#[test]
fn example_1_a_gap_is_filled_by_a_nack_answered_from_the_intermediate_cache() {
    let mut world = examples_world();
    world.publish(1000, FOR_C, 1);
    world.publish(1005, FOR_C, 2);
    let lose_1005 =
        |from: BrokerId, to: BrokerId, m: &Message| from == B && to == C && data_tick(m) == Some((1005, false));
    world.run(1011, &lose_1005);
    world.publish(1012, FOR_C, 3);
    world.run(1013, &lose_1005);
    assert_eq!(world.delivered_to(1), vec![1000], "m3 is held behind the gap");
    world.run(1100, &lose_1005);
    assert_eq!(world.delivered_to(1), vec![1000, 1005, 1012]);
    let nacks: Vec<_> = world.sends(C, B).filter(|(_, _, _, m)| matches!(m, Message::Nack { .. })).collect();
    assert!(
        matches!(&nacks[0].3, Message::Nack { ranges, .. } if ranges.iter().any(|r| r.from.0 <= 1005 && r.to.0 >= 1005))
    );
    let answer =
        world.sends(B, C).find(|(_, _, _, m)| data_tick(m) == Some((1005, true))).expect("B answers from its cache");
    assert!(matches!(&answer.3, Message::Data { final_from, .. } if final_from.0 <= 1001));
    assert_eq!(
        world.sends(B, A).filter(|(_, _, _, m)| matches!(m, Message::Nack { .. })).count(),
        0,
        "nothing went upstream"
    );
    assert!(world.sends(B, D).all(|(_, _, _, m)| data_tick(m).is_none()), "D's filter rejects all three");
    assert!(world.sends(C, B).any(|(_, _, _, m)| matches!(m, Message::Ack { ack_prefix, .. } if ack_prefix.0 >= 1012)));
}

#[test]
fn example_2_filtered_data_becomes_silence_and_two_nacks_consolidate_into_one() {
    let mut world = examples_world();
    world.publish(1000, FOR_C, 1);
    world.publish(1020, FOR_D, 2);
    world.run(1029, &|_, _, _| false);
    assert_eq!(world.delivered_to(1), vec![1000]);
    assert_eq!(world.delivered_to(2), vec![1020]);
    assert!(world.sends(B, D).any(|(_, _, _, m)| data_tick(m) == Some((1020, false))), "m4 reaches D");
    assert!(
        world.sends(B, D).all(|(_, _, _, m)| data_tick(m).map(|d| d.0) != Some(1000)),
        "D learns the filtered m1 only as F"
    );
    assert!(world.engines[&D].inspect(P).unwrap().horizon().0 > 1020);
    world.publish(1030, FOR_C | FOR_D, 3);
    let lose_m5 =
        |from: BrokerId, to: BrokerId, m: &Message| from == A && to == B && data_tick(m) == Some((1030, false));
    world.run(1039, &lose_m5);
    world.publish(1040, FOR_C | FOR_D, 4);
    world.run(1200, &lose_m5);
    assert_eq!(world.delivered_to(1), vec![1000, 1030, 1040]);
    assert_eq!(world.delivered_to(2), vec![1020, 1030, 1040]);
    let upstream_nacks = world.sends(B, A).filter(|(_, _, _, m)| matches!(m, Message::Nack { .. })).count();
    assert_eq!(upstream_nacks, 1, "the second nack is absorbed by the first");
    assert!(world.engines[&B].counters().nack_ticks_absorbed > 0);
}

#[test]
fn example_2_variant_a_retransmitted_data_reaches_a_filtered_child_as_silence() {
    let mut world = examples_world();
    world.publish(1000, FOR_C | FOR_D, 1);
    world.publish(1030, FOR_C, 2);
    let lose_m5 =
        |from: BrokerId, to: BrokerId, m: &Message| from == A && to == B && data_tick(m) == Some((1030, false));
    world.run(1039, &lose_m5);
    world.publish(1040, FOR_C | FOR_D, 3);
    world.run(1200, &lose_m5);
    assert_eq!(world.delivered_to(1), vec![1000, 1030, 1040]);
    assert_eq!(world.delivered_to(2), vec![1000, 1040]);
    assert!(world.sends(B, D).all(|(_, _, _, m)| data_tick(m).map(|d| d.0) != Some(1030)), "D never sees m5");
    let answered = world.sends(B, D).any(|(_, _, _, m)| {
        matches!(m, Message::Silence { ranges, requested_only: true, kind: SilenceKind::Final, .. } if ranges.iter().any(|r| r.from.0 <= 1030 && r.to.0 >= 1030))
    });
    assert!(answered, "D's nack for 1030 is answered with requested-only silence");
}

#[test]
fn example_3_an_entry_broker_crash_stalls_then_fails_over_and_the_nack_follows_the_new_upstream() {
    const B1: BrokerId = BrokerId(21);
    const B2: BrokerId = BrokerId(22);
    let mut world = World::new();
    world.add(A, 0, &[(1, FOR_C)], &[], settings());
    world.add(B1, 1, &[(2, FOR_C)], &[], settings());
    world.add(B2, 1, &[(2, FOR_C)], &[], settings());
    world.add(C, 2, &[], &[(1, FOR_C)], settings());
    world.feed(A, Input::Route { pubend: P, route: StreamRoute { upstream: None, children: vec![link(1, B1)] } });
    let open = world.store.open(P);
    world.feed(A, Input::Store(open));
    world
        .feed(B1, Input::Route { pubend: P, route: StreamRoute { upstream: up(0, &[A]), children: vec![link(2, C)] } });
    world.feed(C, Input::Route { pubend: P, route: StreamRoute { upstream: up(1, &[B1, B2]), children: vec![] } });
    world.feed(C, Input::SubendAttach { pubend: P, subend: SubendId(1), start: Some(Tick(1900)), durable: false });
    world.publish(2000, FOR_C, 1);
    world.run(2005, &|_, _, _| false);
    assert_eq!(world.delivered_to(1), vec![2000]);
    world.down.push(B1);
    world.publish(2010, FOR_C, 2);
    world.publish(2030, FOR_C, 3);
    world.run(2045, &|_, _, _| false);
    assert_eq!(world.delivered_to(1), vec![2000], "stall");
    // Failover: A and C reroute P through B2; B2 starts with an empty istream.
    world.feed(A, Input::Route { pubend: P, route: StreamRoute { upstream: None, children: vec![link(1, B2)] } });
    world
        .feed(B2, Input::Route { pubend: P, route: StreamRoute { upstream: up(0, &[A]), children: vec![link(2, C)] } });
    world.feed(C, Input::Route { pubend: P, route: StreamRoute { upstream: up(1, &[B2]), children: vec![] } });
    world.publish(2050, FOR_C, 4);
    world.run(2300, &|_, _, _| false);
    assert_eq!(world.delivered_to(1), vec![2000, 2010, 2030, 2050]);
    let relayed = world
        .sends(B2, A)
        .any(|(_, _, _, m)| matches!(m, Message::Nack { ranges, .. } if ranges.iter().any(|r| r.from.0 <= 2010)));
    assert!(relayed, "C's nack reached A through B2");
}

#[test]
fn example_4_a_lost_tail_is_recovered_by_silence_or_by_ack_expected() {
    for drop_silence in [false, true] {
        let mut world = examples_world();
        world.publish(3000, FOR_C, 1);
        let lose = move |from: BrokerId, to: BrokerId, m: &Message| {
            let tail = from == B && to == C && data_tick(m) == Some((3000, false));
            let silence = drop_silence && to == C && matches!(m, Message::Silence { requested_only: false, .. });
            tail || silence
        };
        world.run(3400, &lose);
        assert_eq!(world.delivered_to(1), vec![3000], "drop_silence = {drop_silence}");
        if drop_silence {
            assert!(world.sends(A, B).any(|(_, _, _, m)| matches!(m, Message::AckExpected { .. })), "AET fired");
            assert!(world.sends(B, C).any(|(_, _, _, m)| matches!(m, Message::AckExpected { .. })), "B forwarded it");
        }
    }
}

#[test]
fn example_5_early_release_past_a_pinned_subscriber_ends_in_one_gap_notice_then_order() {
    let mut world = examples_world();
    for (i, at) in (4000..5500).step_by(50).enumerate() {
        if at == 4200 {
            // s1's client stops reading: its subend pins C's acks, hence A's log, at ~4200.
            world.run(4199, &|_, _, _| false);
            world.feed(C, Input::OutboxFull { subend: SubendId(1) });
        }
        if at == 5000 {
            world.run(4999, &|_, _, _| false);
            assert!(
                world.engines[&A].inspect(P).unwrap().release().unwrap().0 <= 4200,
                "the blocked subend pins the log"
            );
            world.feed(A, Input::EarlyRelease { pubend: P, up_to: Tick(4800) });
            // B restarts (its cache is gone) and a new subscriber s3 joins at D with σ = 4201.
            world.add(B, 1, &[(2, FOR_C), (3, FOR_D)], &[], settings());
            world.feed(
                B,
                Input::Route {
                    pubend: P,
                    route: StreamRoute { upstream: up(0, &[A]), children: vec![link(2, C), link(3, D)] },
                },
            );
            world.add(D, 3, &[], &[(3, FOR_D)], settings());
            world.feed(D, Input::Route { pubend: P, route: StreamRoute { upstream: up(1, &[B]), children: vec![] } });
            world.feed(
                D,
                Input::SubendAttach { pubend: P, subend: SubendId(3), start: Some(Tick(4201)), durable: false },
            );
        }
        world.publish(at, FOR_C | FOR_D, i as u64 + 1);
    }
    world.run(5600, &|_, _, _| false);
    let notices: Vec<TickRange> = world.gaps.iter().filter(|(s, _)| s.0 == 3).map(|(_, r)| *r).collect();
    assert_eq!(notices.first().map(|r| r.from), Some(Tick(4201)), "{notices:?}");
    assert!(notices.windows(2).all(|w| w[0].to.next() == w[1].from), "{notices:?}");
    assert_eq!(notices.last().map(|r| r.to), Some(Tick(4800)), "{notices:?}");
    let after: Vec<u64> = (4850..5500).step_by(50).collect();
    assert_eq!(world.delivered_to(3), after, "then (4800, ...] in order");
    world.feed(C, Input::OutboxReady { subend: SubendId(1) });
    world.run(5700, &|_, _, _| false);
    let all: Vec<u64> = (4000..5500).step_by(50).collect();
    assert_eq!(world.delivered_to(1), all, "the pinned subscriber catches up from C's cache, in order");
}
