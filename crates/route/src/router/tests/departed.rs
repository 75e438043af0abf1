//! Departed links' interest held for a while (`router/departed.rs`): for as long as the hold
//! lasts, and only in the tree each part of it was advertised for.

use super::*;

#[test]
fn a_departed_link_s_interest_is_held_until_its_time_passes() {
    let mut wired = line();
    wired.routers.get_mut("b").unwrap().settings.departed_interest_ms = 1_000;
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    let sends = |wired: &Wired| wired.route("a", Arrival::Published { pubend: PubendId(1) }, 15).sends.len();
    assert_eq!(sends(&wired), 1);
    wired.input("b", Input::LinkDown { peer: "c".into(), incarnation: Incarnation(1) });
    wired.input("c", Input::LinkDown { peer: "b".into(), incarnation: Incarnation(1) });
    wired.pump();
    assert_eq!(sends(&wired), 1, "c's interest vanished with its link");
    assert_eq!(wired.router("b").next_deadline().map(|at| at <= Millis(1_000)), Some(true));
    // a and b keep their link alive meanwhile.
    let mut held_until = None;
    while wired.now < Millis(1_200) {
        wired.now = wired.now.after(20);
        for name in ["a", "b"] {
            wired.input(name, Input::Tick);
        }
        wired.pump();
        if sends(&wired) == 1 {
            held_until = Some(wired.now);
        }
    }
    assert_eq!(held_until, Some(Millis(980)), "not held for exactly its time");
    assert!(wired.router("b").departed.is_empty());
}

#[test]
fn without_a_hold_a_departed_link_s_interest_goes_at_once() {
    let mut wired = line();
    wired.input("c", Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
    wired.input("b", Input::LinkDown { peer: "c".into(), incarnation: Incarnation(1) });
    wired.pump();
    assert!(wired.route("a", Arrival::Published { pubend: PubendId(1) }, 15).sends.is_empty());
}

/// `holder` holds departed interest (for longer than any test runs); `subscriber` subscribes
/// to 10..20.
fn holding(wired: &mut Wired, holder: &str, subscriber: &str) {
    wired.routers.get_mut(holder).unwrap().settings.departed_interest_ms = 1_000_000;
    wired.input(subscriber, Input::Subscribe { filter: Range(10, 20) });
    wired.pump();
}

/// The a-b link goes down at both ends.
fn cut(wired: &mut Wired, a: &str, b: &str) {
    for (me, peer) in [(a, b), (b, a)] {
        wired.input(me, Input::LinkDown { peer: peer.into(), incarnation: Incarnation(1) });
    }
    wired.pump();
}

/// Copies `at` sends of a message it publishes that matches 10..20.
fn sends(wired: &Wired, at: &str) -> usize {
    wired.route(at, Arrival::Published { pubend: PubendId(1) }, 15).sends.len()
}

#[test]
fn a_held_interest_is_advertised_only_in_the_tree_it_came_from() {
    // a - b - c; c subscribes. In c's tree nobody else wants its messages; b told a, in a's
    // tree, that c's interest lies behind it. When the a-b link flaps, a holds that: held for
    // a's tree it keeps a's messages flowing toward c, but advertised in c's tree it would
    // draw c's messages to a, which forwards them nowhere (issue 40: a relay pubend's stream,
    // read at its own broker only, reached every broker that had seen a link flap).
    let mut wired = line();
    holding(&mut wired, "a", "c");
    assert_eq!((sends(&wired, "a"), sends(&wired, "c")), (1, 0));
    cut(&mut wired, "a", "b");
    wired.link("a", "b");
    wired.pump();
    assert!(!wired.router("a").departed.is_empty(), "a holds what b had told it");
    assert_eq!(sends(&wired, "a"), 1, "a's messages still go toward c");
    assert_eq!(sends(&wired, "c"), 0, "c's messages are not drawn toward a by its hold of c's own interest");
    for name in ["a", "b", "c"] {
        incremental::agrees_with_a_rebuild(wired.router(name), "after the flap");
    }
}

#[test]
fn a_departed_mate_s_subscribers_are_held_for_the_cell_but_not_told_back_to_it() {
    // a - b2 - b1, b1 and b2 mates in B; b1 subscribes. While b1 is away b2 still advertises
    // its interest to a; once it is back, b2 does not tell b1 that interest as its own, which
    // would draw b1's own messages to b2 (issue 40: a relay pubend's stream reached the
    // reader's broker's mates after a flap inside the cell).
    let mut wired = Wired::new(&[("a", "A"), ("b1", "B"), ("b2", "B")]);
    wired.link("a", "b2");
    wired.link("b2", "b1");
    wired.pump();
    holding(&mut wired, "b2", "b1");
    assert_eq!((sends(&wired, "a"), sends(&wired, "b1")), (1, 0));
    cut(&mut wired, "b1", "b2");
    assert_eq!(sends(&wired, "a"), 1, "b2 holds b1's interest for the cell while b1 is away");
    wired.link("b1", "b2");
    wired.pump();
    assert!(!wired.router("b2").departed.is_empty());
    assert_eq!(sends(&wired, "a"), 1);
    assert_eq!(sends(&wired, "b1"), 0, "b1's messages are not drawn to b2 by its hold of b1's own interest");
    for name in ["a", "b1", "b2"] {
        incremental::agrees_with_a_rebuild(wired.router(name), "after the flap");
    }
}
