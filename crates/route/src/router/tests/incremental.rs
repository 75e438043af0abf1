//! Interest changes are carried forward as deltas; a full rebuild from what each router holds
//! must find nothing to change, after any sequence of subscriptions, summaries and link flaps.

use std::collections::BTreeSet;

use super::*;
use crate::filter::test_filter::Rng;
use crate::filter::{any_matches, FilterIndex};

fn kept_sets(map: &BTreeMap<CellName, Minimized<Range>>) -> BTreeMap<CellName, BTreeSet<Range>> {
    map.iter().map(|(root, set)| (root.clone(), set.kept_sorted())).collect()
}

/// What the data path and the advertised scopes hold, per root, as plain sets.
fn derived(router: &Router<Range>) -> Vec<(CellName, CellName, BTreeSet<Range>)> {
    let mut out = Vec::new();
    for (root, generations) in &router.routes.trees {
        for child in &generations.current.children {
            let kept = child.summary.kept_sorted();
            let summary: Vec<Range> = kept.iter().copied().collect();
            for value in 0..24 {
                assert_eq!(
                    child.index.any_match(&value),
                    any_matches(&summary, &value),
                    "index of {root}/{}",
                    child.cell
                );
            }
            out.push((root.clone(), child.cell.clone(), kept));
        }
    }
    out
}

/// Rebuilds a copy of `router` from scratch and checks that it agrees with the incremental one.
pub(super) fn agrees_with_a_rebuild(router: &Router<Range>, context: &str) {
    let mut rebuilt = router.clone();
    rebuilt.dirty.rebuild = true;
    let mut out = Vec::new();
    rebuilt.settle(&mut out);
    let sends: Vec<&Action<Range>> =
        out.iter().filter(|action| matches!(action, Action::Send { message: PeerMessage::Summary(_), .. })).collect();
    assert!(sends.is_empty(), "{context}: {} would still send {sends:?}", router.name());
    assert_eq!(kept_sets(&rebuilt.advertised.down), kept_sets(&router.advertised.down), "{context}: down");
    assert_eq!(kept_sets(&rebuilt.advertised.subtree), kept_sets(&router.advertised.subtree), "{context}: subtree");
    assert_eq!(derived(&rebuilt), derived(router), "{context}: child summaries");
    assert_eq!(rebuilt.sent, router.sent, "{context}: sent");
}

#[test]
fn incremental_interest_matches_a_full_rebuild_through_random_changes() {
    let brokers = [("x1", "X"), ("x2", "X"), ("y", "Y"), ("z", "Z"), ("w", "W")];
    let links = [("x1", "x2"), ("x1", "y"), ("x2", "z"), ("y", "w"), ("z", "w"), ("y", "z")];
    for seed in 1..=12u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut wired = Wired::new(&brokers);
        for (a, b) in links {
            wired.link(a, b);
        }
        wired.pump();
        let mut held: Vec<(&str, Range)> = Vec::new();
        for step in 0..150 {
            let choice = rng.below(20);
            if choice == 0 {
                let (a, b) = links[rng.below(links.len() as u32) as usize];
                let incarnation = Incarnation(1);
                wired.input(a, Input::LinkDown { peer: b.into(), incarnation });
                wired.input(b, Input::LinkDown { peer: a.into(), incarnation });
                wired.pump();
                wired.link(a, b);
            } else if choice < 8 && !held.is_empty() {
                let (at, filter) = held.swap_remove(rng.below(held.len() as u32) as usize);
                wired.input(at, Input::Unsubscribe { filter });
            } else {
                let at = brokers[rng.below(brokers.len() as u32) as usize].0;
                let lo = rng.below(20);
                let filter = Range(lo, lo + rng.below(4));
                held.push((at, filter));
                wired.input(at, Input::Subscribe { filter });
            }
            wired.pump();
            for router in wired.routers.values() {
                agrees_with_a_rebuild(router, &format!("seed {seed} step {step}"));
            }
        }
        assert!(wired.taken().iter().all(|(_, action)| !matches!(action, Action::Rejected { .. })));
    }
}
