//! Who may tell a broker what about link state, and what a peer may make it hold.

use super::*;
use crate::error::Limit;
use crate::link_state::{AdvertisedLink, LinkStateAdvert};

/// a - b - c in a line, and a liar d linked to a only.
fn with_liar() -> Wired {
    let mut wired = Wired::new(&[("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")]);
    for (x, y) in [("a", "b"), ("b", "c"), ("a", "d")] {
        wired.link(x, y);
    }
    wired.pump();
    wired.taken();
    wired
}

fn held(wired: &Wired, at: &str, origin: &str) -> LinkStateAdvert {
    wired.router(at).snapshot().adverts.into_iter().find(|a| a.origin.as_str() == origin).unwrap()
}

fn forged(wired: &Wired, origin: &str) -> LinkStateAdvert {
    let mut advert = held(wired, "a", origin);
    advert.sequence += 100;
    advert.links.clear();
    advert
}

#[test]
fn a_peer_farther_from_the_origin_than_us_cannot_rewrite_its_advert() {
    let mut wired = with_liar();
    let before = held(&wired, "a", "c");
    let message = PeerMessage::Adverts(vec![forged(&wired, "c")]);
    wired.input("a", Input::Received { from: "d".into(), message });
    wired.pump();
    assert_eq!(held(&wired, "a", "c"), before, "d is farther from c than a is");
    assert!(wired.router("a").metrics().adverts_waiting.contains_key(&BrokerName::new("c")));
}

#[test]
fn only_a_neighbour_itself_speaks_for_its_links() {
    let mut wired = with_liar();
    let before = held(&wired, "a", "b");
    let message = PeerMessage::Adverts(vec![forged(&wired, "b")]);
    wired.input("a", Input::Received { from: "d".into(), message });
    wired.pump();
    assert_eq!(held(&wired, "a", "b"), before);
}

#[test]
fn an_advert_with_too_many_links_closes_the_link() {
    let mut wired = with_liar();
    let mut advert = held(&wired, "a", "d");
    advert.sequence += 1;
    advert.links = (0..=crate::limits::MAX_LINKS_PER_ADVERT)
        .map(|i| AdvertisedLink { peer: format!("x{i}").into(), peer_cell: "X".into() })
        .collect();
    wired.input("a", Input::Received { from: "d".into(), message: PeerMessage::Adverts(vec![advert]) });
    let closed = wired.taken().into_iter().any(|(_, action)| {
        matches!(action, Action::CloseLink { reason: CloseReason::LimitExceeded(Limit::Adverts), .. })
    });
    assert!(closed);
    assert!(!wired.router("a").peers().any(|p| p.as_str() == "d"));
}

#[test]
fn a_summary_with_too_many_filters_closes_the_link() {
    let mut wired = with_liar();
    let added: Vec<Range> = (0..=crate::limits::MAX_FILTERS_PER_MESSAGE as u32).map(|i| Range(i, i)).collect();
    let delta = crate::summary::SummaryDelta { scopes: vec![Scope::Tree("A".into())], added, removed: Vec::new() };
    wired.input("a", Input::Received { from: "d".into(), message: PeerMessage::Summary(vec![delta]) });
    let closed = wired.taken().into_iter().any(|(_, action)| {
        matches!(action, Action::CloseLink { reason: CloseReason::LimitExceeded(Limit::Summary), .. })
    });
    assert!(closed);
}
