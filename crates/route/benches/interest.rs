//! What one subscription change and one data message cost a router, against the number of
//! subscriptions it already knows: the price must follow the change, not the total.
//!
//! A small network (cells a, b, c, d in a ring, plus `a2`, a cell mate of `a1`) holds N distinct
//! topic subscriptions at `a1`, so every other broker knows them through summaries. Measured:
//! - `subscribe+unsubscribe`: one new subscription and its end through `Router::handle` at `a1`;
//! - `apply summary`: `b1` applying the two summary messages that pair sends it;
//! - `link down+up`: `a1` losing its link to `b1` and linking again (two full rebuilds, and
//!   the whole summary sent to `b1`);
//! - `route hit` / `route miss`: `Router::route` at `b1` for a message published there, against
//!   the child summary of `a1`'s cell (N filters), with and without a matching filter.
//!
//! `cargo bench -p tidings-route --bench interest -- --quick`; sizes come from
//! `INTEREST_SIZES` (default `1000,10000,100000`).

// criterion_group! generates undocumented functions.
#![allow(missing_docs)]

use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tidings_matching::{FilterSet, Pattern, PatternLevel};
use tidings_route::{
    Action, Arrival, BrokerName, Filter, FilterIndex, Forwarding, Incarnation, Input, LivenessSettings, Millis,
    PeerMessage, PubendId, Router, RouterSettings,
};

/// A topic pattern, the broker's filter without selectors, indexed by the matching crate's trie
/// as the broker's is.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Subject {
    pattern: Pattern,
    key: String,
}

impl Subject {
    fn new(text: &str) -> Subject {
        let pattern = match Pattern::parse(text) {
            Ok(pattern) => pattern,
            Err(error) => panic!("bench pattern {text}: {error}"),
        };
        let key = pattern
            .levels()
            .map_while(|level| match level {
                PatternLevel::Literal(literal) => Some(literal),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(".");
        Subject { pattern, key }
    }
}

/// The broker's summary index, for patterns alone.
#[derive(Clone, Debug, Default)]
struct SubjectIndex(FilterSet);

impl FilterIndex<Subject> for SubjectIndex {
    fn insert(&mut self, filter: &Subject) {
        self.0.insert(&filter.pattern, None);
    }

    fn remove(&mut self, filter: &Subject) {
        self.0.remove(&filter.pattern, None);
    }

    fn any_match(&self, topic: &str) -> bool {
        self.0.any_match(topic, || &[])
    }
}

impl Filter for Subject {
    type Message = str;
    type Index = SubjectIndex;

    fn matches(&self, topic: &str) -> bool {
        self.pattern.matches(topic)
    }

    fn covers(&self, other: &Self) -> bool {
        self.pattern.covers(&other.pattern)
    }

    fn covering_key(&self) -> &str {
        &self.key
    }
}

/// Routers wired directly, messages delivered in order.
struct Net {
    routers: BTreeMap<BrokerName, Router<Subject>>,
    queue: VecDeque<(BrokerName, BrokerName, PeerMessage<Subject>)>,
}

impl Net {
    fn new() -> Net {
        let brokers = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c"), ("d1", "d")];
        let liveness = LivenessSettings { heartbeat_interval_ms: 1000, missed_heartbeats: 3 };
        let routers = brokers
            .iter()
            .map(|(name, cell)| {
                let settings = RouterSettings {
                    name: (*name).into(),
                    cell: (*cell).into(),
                    incarnation: Incarnation(1),
                    liveness,
                    departed_interest_ms: 0,
                };
                (BrokerName::new(name), Router::new(settings))
            })
            .collect();
        Net { routers, queue: VecDeque::new() }
    }

    /// Brings up every link of the network and lets the routers settle.
    fn link(&mut self) {
        let net = self;
        for (a, b) in [("a1", "a2"), ("a1", "b1"), ("a1", "c1"), ("a2", "c1"), ("b1", "d1"), ("c1", "d1")] {
            for (me, peer) in [(a, b), (b, a)] {
                let cell = net.routers[peer].cell().clone();
                net.input(me, Input::LinkUp { peer: peer.into(), cell, incarnation: Incarnation(1) });
            }
        }
        net.pump();
    }

    fn router(&mut self, name: &str) -> &mut Router<Subject> {
        match self.routers.get_mut(name) {
            Some(router) => router,
            None => panic!("no broker {name}"),
        }
    }

    fn input(&mut self, at: &str, input: Input<Subject>) {
        let mut out = Vec::new();
        self.router(at).handle(Millis(0), input, &mut out);
        for action in out {
            if let Action::Send { to, message } = action {
                self.queue.push_back((at.into(), to, message));
            }
        }
    }

    /// Delivers what is queued, then ticks every router with work due at once (a first
    /// summary streaming, large sets being freed) until none has.
    fn pump(&mut self) {
        loop {
            while let Some((from, to, message)) = self.queue.pop_front() {
                self.input(to.as_str(), Input::Received { from, message });
            }
            let due: Vec<BrokerName> = self
                .routers
                .iter()
                .filter(|(_, router)| router.next_deadline() == Some(Millis(0)))
                .map(|(name, _)| name.clone())
                .collect();
            if due.is_empty() {
                return;
            }
            for name in due {
                self.input(name.as_str(), Input::Tick);
            }
        }
    }
}

fn topic(index: usize) -> String {
    format!("plant.line{}.sensor{index}", index % 64)
}

/// A network where `a1` holds `size` distinct-topic subscriptions, linked only once they are
/// all in (one full summary per link rather than `size` deltas).
fn loaded(size: usize) -> Net {
    let mut net = Net::new();
    for index in 0..size {
        net.input("a1", Input::Subscribe { filter: Subject::new(&topic(index)) });
    }
    net.link();
    net
}

fn sizes() -> Vec<usize> {
    let text = std::env::var("INTEREST_SIZES").unwrap_or_else(|_| "1000,10000,100000".to_string());
    text.split(',').filter_map(|size| size.trim().parse().ok()).collect()
}

fn interest(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("interest");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for size in sizes() {
        let mut net = loaded(size);
        let fresh = Subject::new("plant.fresh.sensor");
        let mut out = Vec::new();
        group.bench_with_input(BenchmarkId::new("subscribe+unsubscribe", size), &size, |bencher, _| {
            bencher.iter(|| {
                let router = net.router("a1");
                out.clear();
                router.handle(Millis(0), Input::Subscribe { filter: fresh.clone() }, &mut out);
                router.handle(Millis(0), Input::Unsubscribe { filter: fresh.clone() }, &mut out);
                black_box(out.len())
            })
        });

        // The two summary messages `b1` gets for one subscribe and unsubscribe at `a1`.
        out.clear();
        net.router("a1").handle(Millis(0), Input::Subscribe { filter: fresh.clone() }, &mut out);
        net.router("a1").handle(Millis(0), Input::Unsubscribe { filter: fresh.clone() }, &mut out);
        let to_b: Vec<PeerMessage<Subject>> = out
            .drain(..)
            .filter_map(|action| match action {
                Action::Send { to, message } if to.as_str() == "b1" => Some(message),
                _ => None,
            })
            .collect();
        assert_eq!(to_b.len(), 2, "one summary message per change");
        let from = BrokerName::new("a1");
        group.bench_with_input(BenchmarkId::new("apply summary", size), &size, |bencher, _| {
            bencher.iter(|| {
                let router = net.router("b1");
                for message in &to_b {
                    out.clear();
                    router.handle(
                        Millis(0),
                        Input::Received { from: from.clone(), message: message.clone() },
                        &mut out,
                    );
                }
                black_box(out.len())
            })
        });

        // A link of `a1` going down and coming up again, and every input due at once after it
        // (the new link's first summary, streamed a slice per input, and the sets the lost
        // link left, freed a slice per input): the whole work of a topology change, however
        // many inputs it is spread over.
        group.bench_with_input(BenchmarkId::new("link down+up", size), &size, |bencher, _| {
            bencher.iter(|| {
                let router = net.router("a1");
                out.clear();
                router.handle(Millis(0), Input::LinkDown { peer: "b1".into(), incarnation: Incarnation(1) }, &mut out);
                let cell = "b".into();
                router.handle(
                    Millis(0),
                    Input::LinkUp { peer: "b1".into(), cell, incarnation: Incarnation(1) },
                    &mut out,
                );
                while router.next_deadline() == Some(Millis(0)) {
                    router.handle(Millis(0), Input::Tick, &mut out);
                }
                black_box(out.len())
            })
        });

        let mut forwarding = Forwarding::default();
        let b1 = net.router("b1").clone();
        for (label, message) in [("route hit", topic(size / 2)), ("route miss", "plant.other.sensor".to_string())] {
            group.bench_with_input(BenchmarkId::new(label, size), &size, |bencher, _| {
                bencher.iter(|| {
                    b1.route(Arrival::Published { pubend: PubendId(7) }, &message, &mut forwarding);
                    black_box(forwarding.sends.len())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, interest);
criterion_main!(benches);
