//! The router's protocol, broker by broker: handshakes, liveness, refusals, summaries and the
//! data path's checks. Whole networks are exercised by the simulator in `crates/sim`.

use std::collections::{BTreeMap, VecDeque};

use super::*;
use crate::filter::test_filter::Range;
use crate::message::{Arrival, DataHeader, DropReason, Forwarding, Hop, LocalDelivery};
use crate::names::{PubendId, TreeId};
use crate::summary::{Scope, SummaryDelta};

const LIVENESS: LivenessSettings = LivenessSettings { heartbeat_interval_ms: 100, missed_heartbeats: 3 };

/// A few routers wired directly: links are up or not, messages are queued in order.
struct Wired {
    now: Millis,
    routers: BTreeMap<BrokerName, Router<Range>>,
    queue: VecDeque<(BrokerName, BrokerName, PeerMessage<Range>)>,
    other: Vec<(BrokerName, Action<Range>)>,
    /// Every input settles by the full rebuild (the incremental settles' oracle).
    full: bool,
}

impl Wired {
    fn new(brokers: &[(&str, &str)]) -> Self {
        let routers = brokers
            .iter()
            .map(|(name, cell)| {
                let settings = RouterSettings {
                    name: (*name).into(),
                    cell: (*cell).into(),
                    incarnation: Incarnation(1),
                    liveness: LIVENESS,
                    departed_interest_ms: 0,
                };
                (BrokerName::new(name), Router::new(settings))
            })
            .collect();
        Self { now: Millis(0), routers, queue: VecDeque::new(), other: Vec::new(), full: false }
    }

    fn input(&mut self, at: &str, input: Input<Range>) {
        let mut out = Vec::new();
        let router = self.routers.get_mut(at).unwrap();
        router.dirty.rebuild |= self.full;
        router.handle(self.now, input, &mut out);
        for action in out {
            match action {
                Action::Send { to, message } => self.queue.push_back((at.into(), to, message)),
                action => self.other.push((at.into(), action)),
            }
        }
    }

    fn link(&mut self, a: &str, b: &str) {
        for (me, peer) in [(a, b), (b, a)] {
            let cell = self.routers[peer].cell().clone();
            self.input(me, Input::LinkUp { peer: peer.into(), cell, incarnation: Incarnation(1) });
        }
    }

    fn pump(&mut self) {
        while let Some((from, to, message)) = self.queue.pop_front() {
            if self.routers.contains_key(&to) {
                self.input(to.as_str(), Input::Received { from, message });
            }
        }
    }

    fn router(&self, name: &str) -> &Router<Range> {
        &self.routers[name]
    }

    fn route(&self, at: &str, arrival: Arrival<'_>, value: u32) -> Forwarding {
        let mut out = Forwarding::default();
        self.router(at).route(arrival, &value, &mut out);
        out
    }

    fn taken(&mut self) -> Vec<(BrokerName, Action<Range>)> {
        std::mem::take(&mut self.other)
    }
}

/// a (cell A) - b (cell B) - c (cell C), in a line.
fn line() -> Wired {
    let mut wired = Wired::new(&[("a", "A"), ("b", "B"), ("c", "C")]);
    wired.link("a", "b");
    wired.link("b", "c");
    wired.pump();
    wired.taken();
    wired
}

#[test]
fn linked_brokers_converge_on_one_view_and_one_tree_per_cell() {
    let wired = line();
    let views: Vec<ViewId> = wired.routers.values().map(Router::view).collect();
    assert!(views.windows(2).all(|w| w[0] == w[1]), "{views:?}");
    let snapshot = wired.router("c").snapshot();
    assert_eq!(snapshot.trees.len(), 3);
    assert_eq!(snapshot.trees[&CellName::new("A")].parent, Some(CellName::new("B")));
    assert!(snapshot.metrics.route_recomputations > 0);
    assert_eq!(wired.router("c").upstream_peers(&"A".into()), vec![BrokerName::new("b")]);
    assert!(wired.router("a").upstream_peers(&"A".into()).is_empty());
}

#[test]
fn a_subscription_travels_toward_every_publisher_and_draws_messages_to_it() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let down = wired.route("a", Arrival::Published { pubend: PubendId(1) }, 15);
    assert!(down.deliver_locally);
    assert_eq!(down.sends.len(), 1);
    assert_eq!((down.sends[0].to.as_str(), &down.sends[0].header.hop), ("b", &Hop::Down));
    let header = down.sends[0].header.clone();
    let at_b = wired.route("b", Arrival::Received { from: &"a".into(), header: &header }, 15);
    assert_eq!(at_b.sends.iter().map(|s| s.to.as_str()).collect::<Vec<_>>(), vec!["c"]);
    assert!(wired.route("a", Arrival::Published { pubend: PubendId(1) }, 30).sends.is_empty());
}

/// Summary messages queued from `from`.
fn summaries_from(wired: &Wired, from: &str) -> usize {
    let from = BrokerName::new(from);
    wired.queue.iter().filter(|(at, _, message)| *at == from && matches!(message, PeerMessage::Summary(_))).count()
}

#[test]
fn many_subscriptions_at_once_reach_the_peer_as_one_summary_and_route_as_one_by_one() {
    let filters: Vec<Range> = (0..1_500).map(|i| Range(i * 10, i * 10 + 1)).collect();
    let mut batched = line();
    batched.pump();
    batched.input("c", Input::SubscribeMany { filters: filters.clone() });
    let sent = summaries_from(&batched, "c");
    assert_eq!(sent, 1_500usize.div_ceil(crate::limits::SUMMARY_SLICE), "one summary, in slices");
    batched.pump();
    let mut single = line();
    single.pump();
    for filter in &filters {
        single.input("c", Input::Subscribe { filter: *filter });
    }
    assert_eq!(summaries_from(&single, "c"), 1_500, "one message per subscription");
    single.pump();
    for value in [0, 5, 10, 11, 14_990, 14_995] {
        let (a, b) = (
            batched.route("a", Arrival::Published { pubend: PubendId(1) }, value).sends.len(),
            single.route("a", Arrival::Published { pubend: PubendId(1) }, value).sends.len(),
        );
        assert_eq!(a, b, "value {value}");
    }
    assert_eq!(batched.route("a", Arrival::Published { pubend: PubendId(1) }, 14_990).sends.len(), 1);
    batched.input("c", Input::UnsubscribeMany { filters });
    batched.pump();
    assert!(batched.route("a", Arrival::Published { pubend: PubendId(1) }, 14_990).sends.is_empty());
    assert_eq!(batched.router("a").metrics().summary_size_received[&BrokerName::new("b")], 0);
}

#[test]
fn interest_shrinks_only_when_the_last_equal_subscription_ends() {
    let mut wired = line();
    for _ in 0..2 {
        wired.input("c", Input::Subscribe { filter: Range(1, 5) });
    }
    wired.input("c", Input::Unsubscribe { filter: Range(1, 5) });
    wired.pump();
    assert_eq!(wired.route("a", Arrival::Published { pubend: PubendId(1) }, 3).sends.len(), 1);
    wired.input("c", Input::Unsubscribe { filter: Range(1, 5) });
    wired.pump();
    assert!(wired.route("a", Arrival::Published { pubend: PubendId(1) }, 3).sends.is_empty());
    assert_eq!(wired.router("a").metrics().summary_size_received[&BrokerName::new("b")], 0);
}

#[test]
fn a_covered_subscription_adds_nothing_to_the_summary() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(0, 100) });
    wired.pump();
    let sent_before = wired.router("c").metrics().summary_deltas_sent;
    wired.input("c", Input::Subscribe { filter: Range(5, 6) });
    wired.pump();
    assert_eq!(wired.router("c").metrics().summary_deltas_sent, sent_before, "only changes travel");
}

#[test]
fn unsubscribing_what_was_never_subscribed_is_refused() {
    let mut wired = line();
    wired.input("a", Input::Unsubscribe { filter: Range(1, 1) });
    let taken = wired.taken();
    assert!(matches!(&taken[..], [(_, Action::Rejected { error: RouteError::NotSubscribed { .. } })]), "{taken:?}");
}

#[test]
fn a_silent_link_is_declared_down_after_the_configured_missed_heartbeats() {
    let mut wired = line();
    assert_eq!(wired.router("a").next_deadline(), Some(Millis(0)), "first heartbeat is due at once");
    for now in [0, 100, 200, 299] {
        wired.now = Millis(now);
        wired.input("a", Input::Tick);
        wired.queue.clear(); // b's heartbeats never arrive, nor do a's
    }
    assert!(wired.taken().is_empty(), "still within three intervals");
    assert_eq!(wired.router("a").next_deadline(), Some(Millis(300)));
    wired.now = Millis(300);
    wired.input("a", Input::Tick);
    let taken = wired.taken();
    assert!(
        taken.iter().any(|(_, a)| matches!(a, Action::CloseLink { reason: CloseReason::MissedHeartbeats, .. })),
        "{taken:?}"
    );
    assert!(taken.iter().any(|(_, a)| matches!(a, Action::RoutesChanged { .. })));
    assert_eq!(wired.router("a").peers().count(), 0);
    // No link timers any more: only the age-out of the adverts held (200 intervals).
    assert_eq!(wired.router("a").next_deadline(), Some(Millis(20_000)));
}

#[test]
fn heartbeats_from_the_peer_keep_a_link_up() {
    let mut wired = line();
    for step in 1..=10 {
        wired.now = Millis(step * 100);
        for broker in ["a", "b", "c"] {
            wired.input(broker, Input::Tick);
        }
        wired.pump();
    }
    assert_eq!(wired.router("a").peers().count(), 1);
    assert!(wired.taken().iter().all(|(_, a)| !matches!(a, Action::CloseLink { .. })));
}

#[test]
fn a_handshake_from_an_older_incarnation_is_refused_and_a_late_close_is_ignored() {
    let mut wired = line();
    wired.input("b", Input::LinkUp { peer: "a".into(), cell: "A".into(), incarnation: Incarnation(5) });
    wired.taken();
    wired.input("b", Input::LinkUp { peer: "a".into(), cell: "A".into(), incarnation: Incarnation(4) });
    let taken = wired.taken();
    assert!(matches!(&taken[0].1, Action::Rejected { error: RouteError::StaleIncarnation { .. } }), "{taken:?}");
    assert!(matches!(&taken[1].1, Action::CloseLink { reason: CloseReason::Refused, .. }));
    // The close of the connection the restart replaced names the old incarnation: ignored.
    wired.input("b", Input::LinkDown { peer: "a".into(), incarnation: Incarnation(1) });
    assert_eq!(wired.router("b").peers().count(), 2);
    wired.input("b", Input::LinkDown { peer: "a".into(), incarnation: Incarnation(5) });
    assert_eq!(wired.router("b").peers().count(), 1);
}

#[test]
fn a_link_to_ourselves_is_refused() {
    let mut wired = line();
    wired.input("a", Input::LinkUp { peer: "a".into(), cell: "A".into(), incarnation: Incarnation(1) });
    let taken = wired.taken();
    assert!(matches!(&taken[0].1, Action::Rejected { error: RouteError::LinkToSelf { .. } }), "{taken:?}");
}

#[test]
fn control_messages_from_a_peer_without_a_link_are_refused() {
    let mut wired = line();
    wired.input("a", Input::Received { from: "c".into(), message: PeerMessage::Heartbeat });
    let taken = wired.taken();
    assert!(matches!(&taken[0].1, Action::Rejected { error: RouteError::UnknownPeer { .. } }), "{taken:?}");
}

#[test]
fn a_summary_that_does_not_fit_closes_the_link_for_a_fresh_start() {
    let mut wired = line();
    let bad = SummaryDelta { scopes: vec![Scope::Tree("A".into())], added: vec![], removed: vec![Range(1, 2)] };
    wired.input("a", Input::Received { from: "b".into(), message: PeerMessage::Summary(vec![bad]) });
    let taken = wired.taken();
    assert!(matches!(&taken[0].1, Action::Rejected { error: RouteError::SummaryOutOfSync { .. } }), "{taken:?}");
    assert!(matches!(&taken[1].1, Action::CloseLink { reason: CloseReason::OutOfSync, .. }));
    assert_eq!(wired.router("a").peers().count(), 0);
}

#[test]
fn local_interest_is_accepted_only_from_cell_mates() {
    let mut wired = line();
    let local = SummaryDelta { scopes: vec![Scope::Local], added: vec![Range(1, 2)], removed: vec![] };
    wired.input("a", Input::Received { from: "b".into(), message: PeerMessage::Summary(vec![local]) });
    let taken = wired.taken();
    assert!(matches!(&taken[0].1, Action::Rejected { error: RouteError::LocalScopeFromOtherCell { .. } }));
}

#[test]
fn data_routed_under_an_unknown_tree_or_from_outside_the_tree_is_dropped() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(0, 9) });
    wired.pump();
    let sent = wired.route("a", Arrival::Published { pubend: PubendId(2) }, 1);
    let mut header = sent.sends[0].header.clone();
    let from_c = wired.route("b", Arrival::Received { from: &"c".into(), header: &header }, 1);
    assert_eq!(from_c.dropped, Some(DropReason::NotFromParent));
    let within = DataHeader { hop: Hop::Within { deliver: LocalDelivery::Deliver, across: vec![] }, ..header.clone() };
    let not_mate = wired.route("b", Arrival::Received { from: &"a".into(), header: &within }, 1);
    assert_eq!(not_mate.dropped, Some(DropReason::NotFromMate));
    header.tree = TreeId(header.tree.0 ^ 1);
    let stale = wired.route("b", Arrival::Received { from: &"a".into(), header: &header }, 1);
    assert_eq!(stale.dropped, Some(DropReason::UnknownTreeId));
    header.root = "Z".into();
    let unknown = wired.route("b", Arrival::Received { from: &"a".into(), header: &header }, 1);
    assert_eq!(unknown.dropped, Some(DropReason::UnknownRoot));
}

#[test]
fn a_cell_mate_gets_a_copy_only_for_its_own_subscribers() {
    let mut wired = Wired::new(&[("x1", "X"), ("x2", "X"), ("x3", "X")]);
    wired.link("x1", "x2");
    wired.link("x1", "x3");
    wired.link("x2", "x3");
    wired.input("x2", Input::Subscribe { filter: Range(0, 9) });
    wired.pump();
    let out = wired.route("x1", Arrival::Published { pubend: PubendId(9) }, 4);
    assert_eq!(out.sends.len(), 1);
    assert_eq!(out.sends[0].to.as_str(), "x2");
    assert_eq!(out.sends[0].header.hop, Hop::Within { deliver: LocalDelivery::Deliver, across: vec![] });
    let at_x2 = wired.route("x2", Arrival::Received { from: &"x1".into(), header: &out.sends[0].header }, 4);
    assert!(at_x2.deliver_locally && at_x2.sends.is_empty());
}

#[test]
fn a_matching_copy_with_no_link_to_its_entry_broker_is_counted_unreachable() {
    // x1 and x2 (cell X) each reach one broker of cell A. Cut from its mate, x1 cannot carry a
    // copy into A where the cell's hashing enters it at a2: best effort loses it, counted.
    let mut wired = Wired::new(&[("x1", "X"), ("x2", "X"), ("a1", "A"), ("a2", "A")]);
    for (one, other) in [("x1", "x2"), ("x1", "a1"), ("x2", "a2"), ("a1", "a2")] {
        wired.link(one, other);
    }
    wired.input("a1", Input::Subscribe { filter: Range(0, 9) });
    wired.pump();
    let route = |wired: &Wired, value| -> Vec<Forwarding> {
        (0..32).map(|p| wired.route("x1", Arrival::Published { pubend: PubendId(p) }, value)).collect()
    };
    assert!(route(&wired, 4).iter().all(|out| out.sends.len() == 1 && out.unreachable == 0), "all through");
    wired.input("x1", Input::LinkDown { peer: "x2".into(), incarnation: Incarnation(1) });
    wired.pump();
    let routed = route(&wired, 4);
    let (cut, direct): (Vec<&Forwarding>, Vec<&Forwarding>) = routed.iter().partition(|out| out.sends.is_empty());
    assert!(!cut.is_empty() && !direct.is_empty(), "the hashing spreads 32 pubends over a1 and a2");
    assert!(cut.iter().all(|out| out.unreachable == 1), "{cut:?}");
    assert!(direct.iter().all(|out| out.unreachable == 0 && out.sends[0].to.as_str() == "a1"));
    assert!(route(&wired, 50).iter().all(|out| out.sends.is_empty() && out.unreachable == 0), "no interest, no loss");
}

#[test]
fn the_state_view_and_the_wire_messages_serialize() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(3, 4) });
    let (_, _, message) = wired.queue.back().cloned().unwrap();
    let json = serde_json::to_string(&message).unwrap();
    let back: PeerMessage<Range> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, message);
    wired.pump();
    let state = serde_json::to_value(wired.router("b").snapshot()).unwrap();
    assert_eq!(state["name"], "b");
    assert!(state["trees"]["C"]["parent_of"].is_object());
    assert!(state["received"]["c"].is_array());
}

mod adverts;
mod departed;
mod gd;
mod incremental;
mod reshape;
mod stream;
mod sync;
mod verdicts;

#[test]
fn next_hops_lead_along_shortest_paths_and_around_a_lost_link() {
    // a in A; b1, b2 in B; c in C: a - {b1, b2} - c, b1 and b2 mates.
    let mut wired = Wired::new(&[("a", "A"), ("b1", "B"), ("b2", "B"), ("c", "C")]);
    for (x, y) in [("a", "b1"), ("a", "b2"), ("b1", "b2"), ("b1", "c"), ("b2", "c")] {
        wired.link(x, y);
    }
    wired.pump();
    let hops = |wired: &Wired, at: &str, to: &str| -> Vec<String> {
        wired.router(at).next_hops(&to.into()).iter().map(|b| b.as_str().to_string()).collect()
    };
    assert_eq!(hops(&wired, "c", "a"), ["b1", "b2"], "both ways are shortest");
    assert_eq!(hops(&wired, "c", "b2"), ["b2"], "a linked broker is its own hop");
    assert!(hops(&wired, "c", "c").is_empty() && hops(&wired, "c", "z").is_empty());
    for (me, peer) in [("c", "b1"), ("b1", "c")] {
        wired.input(me, Input::LinkDown { peer: peer.into(), incarnation: Incarnation(1) });
    }
    wired.pump();
    assert_eq!(hops(&wired, "c", "a"), ["b2"], "around the lost link");
    assert_eq!(hops(&wired, "a", "c"), ["b2"]);
}
