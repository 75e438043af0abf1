//! A link's first summary of a large set streams a slice per input (`router/stream.rs`): the
//! peer must end with exactly the summary the whole message gave, whatever changed meanwhile,
//! and hear nothing that claims the summary complete before it is.

use std::collections::BTreeSet;

use super::incremental::agrees_with_a_rebuild;
use super::*;
use crate::filter::test_filter::Rng;

/// Subscriptions disjoint from each other, so none covers another and all are kept.
fn disjoint(count: u32) -> Vec<Range> {
    (0..count).map(|i| Range(i * 10, i * 10 + 1)).collect()
}

/// a (cell A) holding `filters`, not linked yet to b (cell B); slices of `slice` filters.
fn unlinked(filters: &[Range], slice: usize) -> Wired {
    let mut wired = Wired::new(&[("a", "A"), ("b", "B")]);
    for router in wired.routers.values_mut() {
        router.stream_slice = slice;
    }
    wired.input("a", Input::SubscribeMany { filters: filters.to_vec() });
    wired
}

/// Filters in the Summary messages queued from `from` since the queue held `since` messages.
fn summary_filters_since(wired: &Wired, from: &str, since: usize) -> usize {
    let from = BrokerName::new(from);
    let fresh = wired.queue.iter().skip(since).filter(|(at, _, _)| *at == from);
    let sizes = fresh.filter_map(|(_, _, message)| match message {
        PeerMessage::Summary(deltas) => Some(deltas.iter().map(|d| d.added.len() + d.removed.len()).sum::<usize>()),
        _ => None,
    });
    sizes.sum()
}

/// Delivers what is queued, one message at a time, checking that no input of `at` queued more
/// than `slice` summary filters; returns how many inputs did queue some.
fn pump_bounded(wired: &mut Wired, at: &str, slice: usize) -> usize {
    let mut sending = 0;
    while let Some((from, to, message)) = wired.queue.pop_front() {
        let since = wired.queue.len();
        wired.input(to.as_str(), Input::Received { from, message });
        let filters = summary_filters_since(wired, at, since);
        assert!(filters <= slice, "one input of {at} sent {filters} summary filters");
        sending += usize::from(filters > 0);
    }
    sending
}

/// What `at` holds from `from`.
fn held(wired: &Wired, at: &str, from: &str) -> crate::summary::Scoped<Range> {
    wired.router(at).received.get(&BrokerName::new(from)).cloned().unwrap_or_default()
}

/// Ticks every router until no stream is under way; returns how many rounds that took.
fn drain(wired: &mut Wired) -> usize {
    let mut rounds = 0;
    while wired.routers.values().any(|router| router.streams.under_way()) {
        for name in ["a", "b"] {
            wired.input(name, Input::Tick);
        }
        wired.pump();
        rounds += 1;
        assert!(rounds < 10_000, "the stream does not end");
    }
    rounds
}

#[test]
fn a_new_link_s_first_summary_goes_a_slice_per_input_and_ends_as_the_whole_summary() {
    let filters = disjoint(5_000);
    let slice = crate::limits::SUMMARY_SLICE;
    let mut sliced = unlinked(&filters, slice);
    sliced.input("a", Input::LinkUp { peer: "b".into(), cell: "B".into(), incarnation: Incarnation(1) });
    sliced.input("b", Input::LinkUp { peer: "a".into(), cell: "A".into(), incarnation: Incarnation(1) });
    let mut sending = pump_bounded(&mut sliced, "a", slice);
    assert!(sliced.router("a").streams.under_way(), "a's summary streams");
    assert_eq!(sliced.router("a").next_deadline(), Some(sliced.now), "the rest is due at once");
    while sliced.router("a").streams.under_way() {
        let since = sliced.queue.len();
        sliced.input("a", Input::Tick);
        assert!(summary_filters_since(&sliced, "a", since) <= slice, "a tick sent more than a slice");
        sending += 1 + pump_bounded(&mut sliced, "a", slice);
        assert!(sending < 1_000, "the stream does not end");
    }
    assert!(sending >= 5_000 / slice, "5,000 filters went in {sending} inputs");
    let mut whole = unlinked(&filters, usize::MAX);
    whole.link("a", "b");
    whole.pump();
    let expected = held(&whole, "b", "a");
    assert_eq!(expected.values().map(BTreeSet::len).sum::<usize>(), 5_000);
    assert_eq!(held(&sliced, "b", "a"), expected, "the peer holds what the whole message gave");
    assert_eq!(sliced.router("a").sent, whole.router("a").sent);
    assert!(sliced.taken().iter().all(|(_, action)| !matches!(action, Action::Rejected { .. })));
}

#[test]
fn changes_while_the_first_summary_streams_reach_the_peer_in_order() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let filters = disjoint(60);
        let mut wired = unlinked(&filters, 7);
        let mut subscribed = filters.clone();
        wired.link("a", "b");
        let mut synced_early = false;
        for _ in 0..40 {
            match rng.below(4) {
                0 if !subscribed.is_empty() => {
                    let filter = subscribed.swap_remove(rng.below(subscribed.len() as u32) as usize);
                    wired.input("a", Input::Unsubscribe { filter });
                }
                1 => {
                    // Some cover others, so kept filters come and go behind the cursor too.
                    let lo = rng.below(700);
                    let filter = Range(lo, lo + rng.below(40));
                    subscribed.push(filter);
                    wired.input("a", Input::Subscribe { filter });
                }
                _ => wired.input("a", Input::Tick),
            }
            let streaming = wired.router("a").streams.under_way();
            let from_a = wired.queue.iter().filter(|(at, _, _)| at.as_str() == "a");
            synced_early |= streaming && from_a.into_iter().any(|(_, _, m)| matches!(m, PeerMessage::Synced(_)));
            agrees_with_a_rebuild(wired.router("a"), &format!("seed {seed}"));
            wired.pump();
        }
        drain(&mut wired);
        assert!(!synced_early, "seed {seed}: a vouched for its summary while it still streamed");
        let mut whole = unlinked(&subscribed, usize::MAX);
        whole.link("a", "b");
        whole.pump();
        assert_eq!(held(&wired, "b", "a"), held(&whole, "b", "a"), "seed {seed}");
        assert!(wired.taken().iter().all(|(_, action)| !matches!(action, Action::Rejected { .. })), "seed {seed}");
        let synced = |w: &Wired| w.router("b").synced.get(&BrokerName::new("a")).cloned();
        assert_eq!(synced(&wired), synced(&whole), "seed {seed}: the vouch follows the stream");
    }
}

#[test]
fn a_link_lost_in_mid_stream_leaves_nothing_streaming_and_a_new_one_starts_over() {
    let filters = disjoint(50);
    let mut wired = unlinked(&filters, 8);
    wired.link("a", "b");
    wired.pump();
    wired.input("a", Input::LinkDown { peer: "b".into(), incarnation: Incarnation(1) });
    wired.input("b", Input::LinkDown { peer: "a".into(), incarnation: Incarnation(1) });
    assert!(!wired.router("a").streams.under_way());
    assert_ne!(wired.router("a").next_deadline(), Some(wired.now), "nothing is due at once");
    wired.pump();
    wired.link("a", "b");
    wired.pump();
    drain(&mut wired);
    let total: usize = held(&wired, "b", "a").values().map(BTreeSet::len).sum();
    assert_eq!(total, 50);
}

#[test]
fn a_received_summary_fed_in_pieces_leaves_what_the_whole_message_leaves() {
    let filters = disjoint(3_000);
    let mut whole = unlinked(&filters, usize::MAX);
    let mut pieces = unlinked(&filters, usize::MAX);
    whole.link("a", "b");
    pieces.link("a", "b");
    whole.pump();
    let mut fed = 0;
    while let Some((from, to, message)) = pieces.queue.pop_front() {
        let PeerMessage::Summary(deltas) = message else {
            pieces.input(to.as_str(), Input::Received { from, message });
            continue;
        };
        for piece in pieces.router(to.as_str()).summary_pieces(&from, deltas, 100) {
            assert!(piece.iter().map(|d| d.added.len() + d.removed.len()).sum::<usize>() <= 100);
            pieces.input(to.as_str(), Input::Received { from: from.clone(), message: PeerMessage::Summary(piece) });
            fed += 1;
        }
    }
    assert!(fed >= 30, "3,000 filters in {fed} pieces");
    assert_eq!(held(&pieces, "b", "a"), held(&whole, "b", "a"));
    assert_eq!(pieces.router("b").sent, whole.router("b").sent);
    for value in [0, 10, 15, 29_990] {
        let (p, w) = (
            pieces.route("b", Arrival::Published { pubend: PubendId(1) }, value).sends.len(),
            whole.route("b", Arrival::Published { pubend: PubendId(1) }, value).sends.len(),
        );
        assert_eq!(p, w, "value {value}");
    }
    // Refused whole stays whole: `Local` scope from another cell.
    let local = vec![SummaryDelta { scopes: vec![Scope::Local], added: filters.clone(), removed: Vec::new() }];
    assert_eq!(pieces.router("b").summary_pieces(&"a".into(), local, 100).len(), 1);
}

#[cfg(feature = "matching")]
mod timed {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    use std::time::{Duration, Instant};

    use super::super::LIVENESS;
    use crate::matching::{FilterText, RouteFilter};
    use crate::router::{Action, Input, Router, RouterSettings};
    use crate::{BrokerName, Incarnation, Millis, PeerMessage};

    /// Routers of the broker's real filter, each input timed.
    struct Timed {
        routers: BTreeMap<BrokerName, Router<RouteFilter>>,
        queue: VecDeque<(BrokerName, BrokerName, PeerMessage<RouteFilter>)>,
        slowest: BTreeMap<String, Duration>,
    }

    impl Timed {
        fn feed(&mut self, at: &str, input: Input<RouteFilter>) {
            let kind = match &input {
                Input::Received { message: PeerMessage::Summary(_), .. } => "summary",
                Input::Received { message: PeerMessage::Adverts(_), .. } => "adverts",
                Input::Received { message: PeerMessage::Synced(_), .. } => "synced",
                Input::Received { .. } => "other message",
                Input::LinkUp { .. } => "link up",
                Input::LinkDown { .. } => "link down",
                Input::Tick => "tick",
                _ => "subscribe",
            };
            let mut out = Vec::new();
            let started = Instant::now();
            self.routers.get_mut(at).unwrap().handle(Millis(0), input, &mut out);
            let spent = started.elapsed();
            let worst = self.slowest.entry(format!("{at} {kind}")).or_default();
            *worst = (*worst).max(spent);
            for action in out {
                if let Action::Send { to, message } = action {
                    self.queue.push_back((at.into(), to, message));
                }
            }
        }

        /// Feeds `ops`, then delivers and ticks until nothing is queued or streaming.
        fn run(&mut self, ops: Vec<(&str, Input<RouteFilter>)>) {
            for (at, input) in ops {
                self.feed(at, input);
            }
            loop {
                while let Some((from, to, message)) = self.queue.pop_front() {
                    self.feed(to.as_str(), Input::Received { from, message });
                }
                let streaming: Vec<BrokerName> =
                    self.routers.iter().filter(|(_, r)| r.streams.under_way()).map(|(name, _)| name.clone()).collect();
                if streaming.is_empty() {
                    break;
                }
                for name in streaming {
                    self.feed(name.as_str(), Input::Tick);
                }
            }
        }

        fn held(&self, at: &str, from: &str) -> usize {
            self.routers[at].received[&BrokerName::new(from)].values().map(BTreeSet::len).sum()
        }
    }

    fn up<'a>(me: &'a str, peer: &str, cell: &str) -> (&'a str, Input<RouteFilter>) {
        (me, Input::LinkUp { peer: peer.into(), cell: cell.into(), incarnation: Incarnation(1) })
    }

    /// The longest single input at `a` and at its peers while `a`, holding
    /// `TIMED_SUBSCRIPTIONS` (100,000) of the broker's real filters, loses its peer `b` and
    /// links to a new one, `c`: a debug-build view of what the broker's lock is held for.
    /// `cargo test -p tidings-route --features matching --lib -- --ignored --nocapture
    /// slowest_input`.
    #[test]
    #[ignore = "a measurement: prints the slowest inputs"]
    fn slowest_input_while_a_large_summary_changes_peers() {
        let n: usize = std::env::var("TIMED_SUBSCRIPTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
        let routers = [("a", "A"), ("b", "B"), ("c", "C")]
            .into_iter()
            .map(|(name, cell)| {
                let settings = RouterSettings {
                    name: name.into(),
                    cell: cell.into(),
                    incarnation: Incarnation(1),
                    liveness: LIVENESS,
                    departed_interest_ms: 0,
                };
                (BrokerName::new(name), Router::new(settings))
            })
            .collect();
        let mut timed = Timed { routers, queue: VecDeque::new(), slowest: BTreeMap::new() };
        let filters: Vec<RouteFilter> = (0..n)
            .map(|i| {
                RouteFilter::try_from(FilterText {
                    pattern: format!("plant.line{i}.sensor"),
                    selector: None,
                    group: None,
                })
            })
            .collect::<Result<_, _>>()
            .unwrap();
        for chunk in filters.chunks(256) {
            timed.feed("a", Input::SubscribeMany { filters: chunk.to_vec() });
        }
        timed.run(vec![up("a", "b", "B"), up("b", "a", "A")]);
        assert_eq!(timed.held("b", "a"), n);
        timed.slowest.clear();
        let down = ("a", Input::LinkDown { peer: "b".into(), incarnation: Incarnation(1) });
        timed.run(vec![down, up("a", "c", "C"), up("c", "a", "A")]);
        assert_eq!(timed.held("c", "a"), n);
        for (kind, spent) in &timed.slowest {
            eprintln!("slowest {kind}: {spent:?}");
        }
    }
}
