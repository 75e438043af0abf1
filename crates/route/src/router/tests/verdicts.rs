//! Verdicts per downstream of a pubend's stream without an arriving copy (what guaranteed
//! delivery's filter edges ask when they judge stored ticks).

use super::*;
use crate::message::Verdict;
use crate::names::Tick;
use crate::router::PubendRef;

fn pubend(home: &str) -> PubendRef {
    PubendRef { id: PubendId::derive(&home.into(), "p"), home: home.into() }
}

/// Message queued between two brokers: from, to, message.
type Queued = (BrokerName, BrokerName, PeerMessage<Range>);

/// Delivers queued messages except `Synced` ones, which it returns undelivered.
fn pump_holding_synced(wired: &mut Wired) -> Vec<Queued> {
    let mut held = Vec::new();
    while let Some((from, to, message)) = wired.queue.pop_front() {
        if matches!(message, PeerMessage::Synced(_)) {
            held.push((from, to, message));
        } else {
            wired.input(to.as_str(), Input::Received { from, message });
        }
    }
    held
}

/// `brokers` linked as `links`, with one subscription at a broker, everything delivered.
fn settled(brokers: &[(&str, &str)], links: &[(&str, &str)], (at, filter): (&str, Range)) -> Wired {
    let mut wired = Wired::new(brokers);
    for (one, other) in links {
        wired.link(one, other);
    }
    wired.input(at, Input::Subscribe { filter });
    wired.pump();
    wired
}

#[test]
fn a_child_cell_is_f_only_where_its_vouched_summary_rules_the_message_out() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let p = pubend("a");
    for (at, child) in [("a", "B"), ("b", "C")] {
        let router = wired.router(at);
        assert_eq!(router.child_cell_verdict(&p, &child.into(), &30), Verdict::Filtered, "{at}");
        assert_eq!(router.child_cell_verdict(&p, &child.into(), &15), Verdict::Deliver, "{at}");
    }
    let router = wired.router("a");
    assert_eq!(router.child_cell_verdict(&p, &"C".into(), &30), Verdict::Unsure, "not a child of A");
    assert_eq!(router.child_cell_verdict(&pubend("nowhere"), &"B".into(), &30), Verdict::Unsure);
}

#[test]
fn a_restarted_relay_is_unsure_until_its_child_vouches_again() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let settings = RouterSettings {
        name: "b".into(),
        cell: "B".into(),
        incarnation: Incarnation(2),
        liveness: LIVENESS,
        departed_interest_ms: 0,
    };
    wired.routers.insert("b".into(), Router::new(settings));
    for peer in ["a", "c"] {
        wired.input(peer, Input::LinkUp { peer: "b".into(), cell: "B".into(), incarnation: Incarnation(2) });
        let cell = wired.router(peer).cell().clone();
        wired.input("b", Input::LinkUp { peer: peer.into(), cell, incarnation: Incarnation(1) });
    }
    let held = pump_holding_synced(&mut wired);
    let p = pubend("a");
    assert_eq!(wired.router("b").child_cell_verdict(&p, &"C".into(), &30), Verdict::Unsure);
    assert_eq!(wired.router("a").child_cell_verdict(&p, &"B".into(), &30), Verdict::Unsure);
    // Once c vouches again, the relay may say F (and so may a, once b vouched in turn).
    for (from, to, message) in held.into_iter().filter(|(from, _, _)| from.as_str() == "c") {
        wired.input(to.as_str(), Input::Received { from, message });
    }
    wired.pump();
    assert_eq!(wired.router("b").child_cell_verdict(&p, &"C".into(), &30), Verdict::Filtered);
    assert_eq!(wired.router("b").child_cell_verdict(&p, &"C".into(), &15), Verdict::Deliver);
    assert_eq!(wired.router("a").child_cell_verdict(&p, &"B".into(), &30), Verdict::Filtered);
}

#[test]
fn a_mates_local_subscribers_are_f_only_once_it_vouched_for_them() {
    let mut wired = Wired::new(&[("a1", "A"), ("a2", "A")]);
    wired.link("a1", "a2");
    wired.input("a2", Input::Subscribe { filter: Range(1, 5) });
    let held = pump_holding_synced(&mut wired);
    assert_eq!(wired.router("a1").mate_verdict(&"a2".into(), &30), Verdict::Unsure);
    for (from, to, message) in held {
        wired.input(to.as_str(), Input::Received { from, message });
    }
    wired.pump();
    let router = wired.router("a1");
    assert_eq!(router.mate_verdict(&"a2".into(), &3), Verdict::Deliver);
    assert_eq!(router.mate_verdict(&"a2".into(), &30), Verdict::Filtered);
    assert_eq!(router.mate_verdict(&"zz".into(), &30), Verdict::Unsure, "not a mate");
}

#[test]
fn a_child_cell_we_have_no_link_into_is_judged_by_the_mate_a_sideways_copy_takes() {
    let wired = settled(&[("a1", "A"), ("a2", "A"), ("b", "B")], &[("a1", "a2"), ("a2", "b")], ("b", Range(10, 20)));
    let router = wired.router("a1");
    let p = pubend("a1");
    assert_eq!(router.child_cell_verdict(&p, &"B".into(), &15), Verdict::Deliver);
    assert_eq!(router.child_cell_verdict(&p, &"B".into(), &30), Verdict::Filtered);
}

#[test]
fn a_downstream_leaves_the_tree_only_once_it_vouched_for_an_empty_summary() {
    let mut wired = Wired::new(&[("a1", "A"), ("a2", "A"), ("b", "B")]);
    wired.link("a1", "a2");
    wired.link("a1", "b");
    let held = pump_holding_synced(&mut wired);
    let p = pubend("a1");
    let router = wired.router("a1");
    assert!(router.child_cell_in_tree(&p, &"B".into()), "not vouched yet: it may want anything");
    assert!(router.mate_in_tree(&"a2".into()), "not vouched yet: it may want anything");
    for (from, to, message) in held {
        wired.input(to.as_str(), Input::Received { from, message });
    }
    wired.pump();
    let router = wired.router("a1");
    assert!(!router.child_cell_in_tree(&p, &"B".into()), "vouched and empty");
    assert!(!router.mate_in_tree(&"a2".into()), "vouched and empty");
    wired.input("b", Input::Subscribe { filter: Range(1, 5) });
    wired.input("a2", Input::Subscribe { filter: Range(1, 5) });
    wired.pump();
    let router = wired.router("a1");
    assert!(router.child_cell_in_tree(&p, &"B".into()));
    assert!(router.mate_in_tree(&"a2".into()));
    assert!(router.child_cell_in_tree(&p, &"Z".into()), "a child we cannot judge is in");
}

#[test]
fn a_child_cell_reached_sideways_is_in_the_tree_by_the_helpers_summary() {
    let mut wired = Wired::new(&[("a1", "A"), ("a2", "A"), ("b", "B")]);
    wired.link("a1", "a2");
    wired.link("a2", "b");
    wired.pump();
    let p = pubend("a1");
    assert!(!wired.router("a1").child_cell_in_tree(&p, &"B".into()));
    wired.input("b", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    assert!(wired.router("a1").child_cell_in_tree(&p, &"B".into()));
}

#[test]
fn a_barrier_confirms_only_once_every_relay_on_the_way_judges_the_new_subscription_d() {
    let mut wired = line();
    let p = pubend("a");
    wired.input("a", Input::TrackPubend { pubend: p.clone() });
    wired.pump();
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    let mut out = Vec::new();
    wired.routers.get_mut("c").unwrap().request_barrier(&mut out);
    for action in out {
        if let Action::Send { to, message } = action {
            wired.queue.push_back(("c".into(), to, message));
        }
    }
    // The summary lag: until the deltas arrive, the relays filter the new subscription's matches.
    assert_eq!(wired.router("a").child_cell_verdict(&p, &"B".into(), &15), Verdict::Filtered);
    let mut confirmed = false;
    while let Some((from, to, message)) = wired.queue.pop_front() {
        wired.input(to.as_str(), Input::Received { from, message });
        for (at, action) in wired.taken() {
            match action {
                Action::Guaranteed(GdAction::NextTicksWanted { round, pubends }) => {
                    let ticks = pubends.iter().map(|p| (*p, Tick(7))).collect();
                    wired.input(at.as_str(), Input::NextTicks { round, ticks });
                }
                Action::Guaranteed(GdAction::BarrierConfirmed { .. }) if at.as_str() == "c" => {
                    assert_eq!(wired.router("a").child_cell_verdict(&p, &"B".into(), &15), Verdict::Deliver);
                    assert_eq!(wired.router("b").child_cell_verdict(&p, &"C".into(), &15), Verdict::Deliver);
                    confirmed = true;
                }
                _ => {}
            }
        }
    }
    assert!(confirmed, "the barrier never confirmed");
}

#[test]
fn a_split_cell_is_unsure_until_its_members_link_again() {
    // p (cell P) links to a1 and a2 of cell A, which are not linked to each other: a1 cannot
    // hear a2's subscribers, so it must not vouch for A's whole subtree.
    let mut wired = Wired::new(&[("p", "P"), ("a1", "A"), ("a2", "A")]);
    wired.link("p", "a1");
    wired.link("p", "a2");
    wired.input("a2", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let p = pubend("p");
    assert!(wired.router("a1").table.cell_split);
    assert_eq!(wired.router("p").child_cell_verdict(&p, &"A".into(), &30), Verdict::Unsure, "a1 vouched for a2");
    wired.link("a1", "a2");
    wired.pump();
    assert!(!wired.router("a1").table.cell_split);
    assert_eq!(wired.router("p").child_cell_verdict(&p, &"A".into(), &30), Verdict::Filtered);
    assert_eq!(wired.router("p").child_cell_verdict(&p, &"A".into(), &15), Verdict::Deliver);
}

#[test]
fn a_child_that_comes_back_empty_is_not_judged_f_for_the_interest_held_for_it() {
    // a - b - c; c subscribes; b dies and comes back with empty state (a new data directory:
    // same name, same incarnation), links to a first and vouches for the empty subtree it
    // knows, before c links to it again.
    let mut wired = line();
    wired.routers.get_mut("a").unwrap().settings.departed_interest_ms = 1_000;
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let p = pubend("a");
    assert_eq!(wired.router("a").child_cell_verdict(&p, &"B".into(), &15), Verdict::Deliver);
    for (at, peer) in [("a", "b"), ("c", "b")] {
        wired.input(at, Input::LinkDown { peer: peer.into(), incarnation: Incarnation(1) });
    }
    wired.pump();
    let settings = RouterSettings {
        name: "b".into(),
        cell: "B".into(),
        incarnation: Incarnation(1),
        liveness: LIVENESS,
        departed_interest_ms: 0,
    };
    wired.routers.insert("b".into(), Router::new(settings));
    wired.input("a", Input::LinkUp { peer: "b".into(), cell: "B".into(), incarnation: Incarnation(1) });
    wired.input("b", Input::LinkUp { peer: "a".into(), cell: "A".into(), incarnation: Incarnation(1) });
    wired.pump();
    let a = wired.router("a");
    assert!(a.child_cell_in_tree(&p, &"B".into()), "b's held interest keeps it in the tree");
    assert_eq!(a.child_cell_verdict(&p, &"B".into(), &15), Verdict::Deliver, "c's interest is held for b");
    assert_eq!(a.child_cell_verdict(&p, &"B".into(), &30), Verdict::Filtered, "b vouched, and nobody wants 30");
    // Once the hold ends, b's own (empty, vouched) summary judges alone.
    while wired.now < Millis(1_100) {
        wired.now = wired.now.after(20);
        for name in ["a", "b"] {
            wired.input(name, Input::Tick);
        }
        wired.pump();
    }
    assert_eq!(wired.router("a").child_cell_verdict(&p, &"B".into(), &15), Verdict::Filtered);
}

#[test]
fn a_child_is_not_f_while_a_mate_with_a_link_into_it_holds_matching_interest() {
    // x1, x2 (cell X, x2 publishes) both linked to a (cell A). a's new subscription reaches x2
    // only through x1 (its own delta to x2 is lost, as on a link one side has not yet declared
    // down), which is how a start barrier's answer can reach a before x2's summary of A holds it.
    let mut wired = Wired::new(&[("x1", "X"), ("x2", "X"), ("a", "A")]);
    for (one, other) in [("x1", "x2"), ("x1", "a"), ("x2", "a")] {
        wired.link(one, other);
    }
    wired.input("a", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let p = pubend("x2");
    assert_eq!(wired.router("x2").child_cell_verdict(&p, &"A".into(), &35), Verdict::Filtered);
    wired.input("a", Input::Subscribe { filter: Range(30, 40) });
    while let Some((from, to, message)) = wired.queue.pop_front() {
        if !(from.as_str() == "a" && to.as_str() == "x2") {
            wired.input(to.as_str(), Input::Received { from, message });
        }
    }
    let router = wired.router("x2");
    assert_eq!(router.child_cell_verdict(&p, &"A".into(), &35), Verdict::Unsure, "x1 holds it below it");
    assert_eq!(router.child_cell_verdict(&p, &"A".into(), &50), Verdict::Filtered, "nobody wants it");
    let mut out = Forwarding::default();
    router.route_with_verdicts(Arrival::Published { pubend: p.id }, &35, &mut out);
    assert_eq!(out.sends.iter().map(|s| (s.to.as_str(), s.verdict)).collect::<Vec<_>>(), [("a", Verdict::Unsure)]);
    router.route(Arrival::Published { pubend: p.id }, &35, &mut out);
    assert!(out.sends.is_empty(), "best effort judges by x2's own summary alone");
}

#[test]
fn a_mates_interest_behind_another_child_leaves_a_child_f() {
    // x1 and x2 (cell X) both reach a (cell A) and b (cell B); b's subscriber is in x1's summary
    // of what lies below it, and x2's own summary of B explains it: A stays F for it.
    let brokers = [("x1", "X"), ("x2", "X"), ("a", "A"), ("b", "B")];
    let links = [("x1", "x2"), ("x1", "a"), ("x2", "a"), ("x1", "b"), ("x2", "b")];
    let wired = settled(&brokers, &links, ("b", Range(30, 40)));
    let router = wired.router("x2");
    let p = pubend("x2");
    assert_eq!(router.child_cell_verdict(&p, &"A".into(), &35), Verdict::Filtered);
    assert_eq!(router.child_cell_verdict(&p, &"B".into(), &35), Verdict::Deliver);
}
