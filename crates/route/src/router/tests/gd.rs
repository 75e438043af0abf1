//! What guaranteed delivery asks of routing: per-pubend routes, verdicts per child, reports
//! of moved pubends, and subscription barriers.

use super::*;
use crate::message::Verdict;
use crate::names::Tick;
use crate::router::{GdAction, PubendChild, PubendRef, Via};

fn pubend(home: &str) -> PubendRef {
    PubendRef { id: PubendId::derive(&home.into(), "p"), home: home.into() }
}

/// Delivers queued messages and answers every tick request with `tick`, until quiet.
fn pump_answering(wired: &mut Wired, tick: u64) -> Vec<(BrokerName, GdAction)> {
    pump_counting(wired, tick, &mut BTreeMap::new())
}

/// As `pump_answering`, counting barriers per sender.
fn pump_counting(wired: &mut Wired, tick: u64, barriers: &mut BTreeMap<String, usize>) -> Vec<(BrokerName, GdAction)> {
    let mut seen = Vec::new();
    loop {
        while let Some((from, to, message)) = wired.queue.pop_front() {
            if matches!(message, PeerMessage::Barrier { .. }) {
                *barriers.entry(from.to_string()).or_default() += 1;
            }
            wired.input(to.as_str(), Input::Received { from, message });
        }
        let actions = wired.taken();
        if actions.is_empty() && wired.queue.is_empty() {
            return seen;
        }
        for (at, action) in actions {
            let Action::Guaranteed(gd) = action else { continue };
            if let GdAction::NextTicksWanted { round, pubends } = &gd {
                let ticks = pubends.iter().map(|p| (*p, Tick(tick))).collect();
                wired.input(at.as_str(), Input::NextTicks { round: *round, ticks });
            }
            seen.push((at, gd));
        }
    }
}

#[test]
fn a_pubend_route_names_its_upstream_children_and_mates_without_a_message() {
    let wired = line();
    let p = pubend("a");
    let at_a = wired.router("a").pubend_route(&p).unwrap();
    assert_eq!((at_a.root.as_str(), at_a.entry.as_str()), ("A", "a"));
    assert!(at_a.upstream.is_empty(), "the home has no upstream");
    let b = PubendChild { cell: "B".into(), broker: "b".into(), via: Some(Via::Direct) };
    assert_eq!(at_a.children, vec![b]);
    let at_c = wired.router("c").pubend_route(&p).unwrap();
    assert_eq!(at_c.upstream, vec![BrokerName::new("b")]);
    assert!(at_c.children.is_empty() && at_c.mates.is_empty());
    assert!(wired.router("c").pubend_route(&pubend("nowhere")).is_none());
}

#[test]
fn a_filtered_child_is_listed_for_silence_and_a_matching_one_is_sent_as_d() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let mut out = Forwarding::default();
    let router = wired.router("a");
    router.route_with_verdicts(Arrival::Published { pubend: PubendId(1) }, &30, &mut out);
    assert!(out.sends.is_empty());
    assert_eq!(out.filtered.iter().map(|s| (s.to.as_str(), s.verdict)).collect::<Vec<_>>(), [("b", Verdict::Filtered)]);
    router.route_with_verdicts(Arrival::Published { pubend: PubendId(1) }, &15, &mut out);
    assert!(out.filtered.is_empty());
    assert_eq!(out.sends.iter().map(|s| (s.to.as_str(), s.verdict)).collect::<Vec<_>>(), [("b", Verdict::Deliver)]);
    router.route(Arrival::Published { pubend: PubendId(1) }, &30, &mut out);
    assert!(out.filtered.is_empty(), "best effort does not pay for the filtered list");
}

#[test]
fn a_child_that_has_not_vouched_is_sent_everything_as_unsure() {
    let mut wired = Wired::new(&[("a", "A"), ("b", "B")]);
    wired.link("a", "b");
    // Deliver only the adverts, not b's `Synced`.
    while let Some((from, to, message)) = wired.queue.pop_front() {
        if !matches!(message, PeerMessage::Synced(_)) {
            wired.input(to.as_str(), Input::Received { from, message });
        }
    }
    let mut out = Forwarding::default();
    wired.router("a").route_with_verdicts(Arrival::Published { pubend: PubendId(1) }, &5, &mut out);
    assert_eq!(out.sends.iter().map(|s| (s.to.as_str(), s.verdict)).collect::<Vec<_>>(), [("b", Verdict::Unsure)]);
}

#[test]
fn only_tracked_pubends_whose_route_moved_are_reported() {
    let mut wired = Wired::new(&[("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")]);
    for (x, y) in [("a", "b"), ("b", "c"), ("a", "d")] {
        wired.link(x, y);
    }
    wired.pump();
    wired.taken();
    // At c: a's pubend comes from b; d's pubend too (d - a - b - c).
    wired.input("c", Input::TrackPubend { pubend: pubend("a") });
    wired.input("c", Input::TrackPubend { pubend: pubend("b") });
    wired.link("c", "a");
    wired.pump();
    let moved: Vec<Vec<PubendId>> = wired
        .taken()
        .into_iter()
        .filter(|(at, _)| at.as_str() == "c")
        .filter_map(|(_, action)| match action {
            Action::Guaranteed(GdAction::PubendsMoved { pubends }) => Some(pubends),
            _ => None,
        })
        .collect();
    assert_eq!(moved.concat(), vec![pubend("a").id], "a's pubend now comes straight from a; b's did not move");
    assert_eq!(wired.router("c").pubend_route(&pubend("a")).unwrap().upstream, vec![BrokerName::new("a")]);
}

#[test]
fn a_barrier_confirms_a_burst_of_subscriptions_with_the_publishers_next_ticks() {
    let mut wired = line();
    wired.input("a", Input::TrackPubend { pubend: pubend("a") });
    let mut numbers = Vec::new();
    let mut out = Vec::new();
    for low in [10, 40, 60] {
        wired.input("c", Input::Subscribe { filter: Range(low, low + 10) });
        numbers.push(wired.routers.get_mut("c").unwrap().request_barrier(&mut out));
    }
    for action in out {
        if let Action::Send { to, message } = action {
            wired.queue.push_back(("c".into(), to, message));
        }
    }
    let mut barriers = BTreeMap::new();
    let seen = pump_counting(&mut wired, 7, &mut barriers);
    assert_eq!(barriers["c"], 4, "trees A and B, one round for the first request and one for the other two");
    let confirmed: Vec<u64> = seen
        .iter()
        .filter(|(at, _)| at.as_str() == "c")
        .filter_map(|(_, gd)| match gd {
            GdAction::BarrierConfirmed { number, ticks } => {
                assert_eq!(ticks, &vec![(pubend("a").id, Tick(7))]);
                Some(*number)
            }
            _ => None,
        })
        .collect();
    assert_eq!(confirmed, numbers);
    // By then every broker up to the publisher holds all three subscriptions.
    for value in [15, 45, 65] {
        assert_eq!(wired.route("a", Arrival::Published { pubend: PubendId(1) }, value).sends.len(), 1);
    }
}

#[test]
fn a_barrier_waits_for_an_ack_and_a_new_parent_is_asked_when_the_old_link_dies() {
    let mut wired = Wired::new(&[("a", "A"), ("b1", "B"), ("b2", "B"), ("c", "C")]);
    for (x, y) in [("a", "b1"), ("a", "b2"), ("b1", "b2"), ("b1", "c")] {
        wired.link(x, y);
    }
    wired.pump();
    wired.taken();
    wired.input("c", Input::Subscribe { filter: Range(1, 2) });
    let mut out = Vec::new();
    let number = wired.routers.get_mut("c").unwrap().request_barrier(&mut out);
    assert!(out.iter().any(|a| matches!(a, Action::Send { message: PeerMessage::Barrier { .. }, .. })));
    // The barrier is lost with the link; c then links to b2 and asks it instead.
    wired.input("c", Input::LinkDown { peer: "b1".into(), incarnation: Incarnation(1) });
    wired.input("b1", Input::LinkDown { peer: "c".into(), incarnation: Incarnation(1) });
    wired.link("c", "b2");
    let seen = pump_answering(&mut wired, 1);
    assert!(seen.iter().any(
        |(at, gd)| at.as_str() == "c" && matches!(gd, GdAction::BarrierConfirmed { number: n, .. } if *n == number)
    ));
}

#[test]
fn a_hosted_pubend_is_advertised_to_every_broker_with_its_home_and_withdrawn_when_untracked() {
    let mut wired = line();
    wired.taken();
    wired.input("a", Input::TrackPubend { pubend: pubend("a") });
    wired.pump();
    let advertised = |wired: &mut Wired| -> Vec<(String, Vec<PubendRef>)> {
        wired
            .taken()
            .into_iter()
            .filter_map(|(at, action)| match action {
                Action::Guaranteed(GdAction::PubendsAdvertised { pubends }) => Some((at.to_string(), pubends)),
                _ => None,
            })
            .collect()
    };
    let seen = advertised(&mut wired);
    for broker in ["a", "b", "c"] {
        let last = seen.iter().rev().find(|(at, _)| at == broker).map(|(_, p)| p.clone());
        assert_eq!(last, Some(vec![pubend("a")]), "{broker} learns a's pubend and its home");
    }
    // Tracking a remote pubend does not advertise it.
    wired.input("c", Input::TrackPubend { pubend: pubend("a") });
    wired.pump();
    assert!(advertised(&mut wired).is_empty());
    wired.input("a", Input::UntrackPubend { pubend: pubend("a") });
    wired.pump();
    let seen = advertised(&mut wired);
    assert!(seen.iter().any(|(at, p)| at == "c" && p.is_empty()), "the withdrawal reaches c: {seen:?}");
}

#[test]
fn a_cell_cut_off_is_unreachable_in_the_tree_and_reachable_again_through_another_path() {
    let mut wired = Wired::new(&[("a", "A"), ("b", "B"), ("c", "C")]);
    for (x, y) in [("a", "b"), ("b", "c")] {
        wired.link(x, y);
    }
    wired.pump();
    let (root, c) = (CellName::new("A"), CellName::new("C"));
    assert!(wired.router("a").cell_reachable(&root, &c));
    assert!(!wired.router("a").cell_reachable(&root, &CellName::new("nowhere")));
    wired.input("b", Input::LinkDown { peer: "c".into(), incarnation: Incarnation(1) });
    wired.input("c", Input::LinkDown { peer: "b".into(), incarnation: Incarnation(1) });
    wired.pump();
    assert!(!wired.router("a").cell_reachable(&root, &c), "c is cut off");
    wired.link("a", "c");
    wired.pump();
    assert!(wired.router("a").cell_reachable(&root, &c), "c is back, now as a's own child");
}
