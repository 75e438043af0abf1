//! Topology changes settle incrementally (`router/reshape.rs`); the same network driven with
//! every input settled by the full rebuild must hold the same state at every step, through
//! random topologies, link flaps (both ends, one end, a link replaced), subscriptions and
//! departed holds.

use proptest::prelude::*;

use super::incremental::agrees_with_a_rebuild;
use super::*;
use crate::filter::{any_matches, FilterIndex};

const NAMES: [&str; 6] = ["b0", "b1", "b2", "b3", "b4", "b5"];

#[derive(Clone, Debug)]
enum Op {
    Subscribe {
        at: usize,
        lo: u32,
        width: u32,
    },
    Unsubscribe {
        pick: usize,
    },
    SubscribeMany {
        at: usize,
        lo: u32,
    },
    /// Both ends down if up, both up if down.
    Flap {
        pair: usize,
    },
    /// One end closes; the other still thinks the link is up.
    Half {
        pair: usize,
    },
    /// Both ends take a new handshake over an up link.
    Relink {
        pair: usize,
    },
    /// Time passes and every router ticks (heartbeats, departed holds ending).
    Wait {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6usize, 0..20u32, 0..4u32).prop_map(|(at, lo, width)| Op::Subscribe { at, lo, width }),
        2 => (0..64usize).prop_map(|pick| Op::Unsubscribe { pick }),
        1 => (0..6usize, 0..20u32).prop_map(|(at, lo)| Op::SubscribeMany { at, lo }),
        3 => (0..15usize).prop_map(|pair| Op::Flap { pair }),
        1 => (0..15usize).prop_map(|pair| Op::Half { pair }),
        1 => (0..15usize).prop_map(|pair| Op::Relink { pair }),
        1 => (20..150u64).prop_map(|ms| Op::Wait { ms }),
    ]
}

/// A network: brokers with cells (shared cells make mates), the links up at the start, and
/// which brokers hold a departed link's interest for a while.
#[derive(Clone, Debug)]
struct Network {
    brokers: Vec<(&'static str, &'static str)>,
    links: Vec<(usize, usize)>,
    up: Vec<bool>,
    holds: Vec<bool>,
}

fn network() -> impl Strategy<Value = Network> {
    (3..=6usize).prop_flat_map(|n| {
        let pairs: Vec<(usize, usize)> = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).collect();
        let count = pairs.len();
        (
            proptest::collection::vec(0..4usize, n),
            proptest::collection::vec(any::<bool>(), count),
            proptest::collection::vec(any::<bool>(), n),
        )
            .prop_map(move |(cells, up, holds)| Network {
                brokers: (0..n).map(|i| (NAMES[i], ["P", "Q", "R", "S"][cells[i]])).collect(),
                links: pairs.clone(),
                up,
                holds,
            })
    })
}

/// Two copies of one network: `incremental` settles as the router does, `full` rebuilds.
struct Twins {
    incremental: Wired,
    full: Wired,
    net: Network,
    up: Vec<bool>,
    held: Vec<(usize, Range)>,
}

impl Twins {
    fn new(net: Network) -> Self {
        Self::streaming(net, crate::limits::SUMMARY_SLICE)
    }

    /// Twins whose links' first summaries stream in slices of `slice` filters.
    fn streaming(net: Network, slice: usize) -> Self {
        let build = |full: bool| {
            let mut wired = Wired::new(&net.brokers);
            wired.full = full;
            for (index, (name, _)) in net.brokers.iter().enumerate() {
                let hold = if net.holds[index] { 200 } else { 0 };
                let router = wired.routers.get_mut(*name).unwrap();
                router.settings.departed_interest_ms = hold;
                router.stream_slice = slice;
            }
            wired
        };
        let (incremental, full) = (build(false), build(true));
        let up = vec![false; net.links.len()];
        let mut twins = Self { incremental, full, net, up, held: Vec::new() };
        for pair in 0..twins.net.links.len() {
            if twins.net.up[pair] {
                twins.apply(&Op::Flap { pair });
            }
        }
        twins
    }

    fn both(&mut self, at: usize, input: Input<Range>) {
        let name = self.net.brokers[at].0;
        self.incremental.input(name, input.clone());
        self.full.input(name, input);
    }

    fn ends(&self, pair: usize) -> Option<(usize, usize)> {
        self.net.links.get(pair % self.net.links.len().max(1)).copied()
    }

    fn apply(&mut self, op: &Op) {
        let n = self.net.brokers.len();
        let name = |at: usize| BrokerName::new(NAMES[at]);
        match *op {
            Op::Subscribe { at, lo, width } => {
                self.held.push((at % n, Range(lo, lo + width)));
                self.both(at % n, Input::Subscribe { filter: Range(lo, lo + width) });
            }
            Op::Unsubscribe { pick } if !self.held.is_empty() => {
                let (at, filter) = self.held.swap_remove(pick % self.held.len());
                self.both(at, Input::Unsubscribe { filter });
            }
            Op::Unsubscribe { .. } => {}
            Op::SubscribeMany { at, lo } => {
                let filters: Vec<Range> = (0..3).map(|i| Range(lo + i, lo + i + 2)).collect();
                self.held.extend(filters.iter().map(|filter| (at % n, *filter)));
                self.both(at % n, Input::SubscribeMany { filters });
            }
            Op::Flap { pair } | Op::Half { pair } | Op::Relink { pair } => {
                let Some((a, b)) = self.ends(pair) else { return };
                let index = pair % self.net.links.len();
                let up = self.up[index];
                let (ends, down): (&[(usize, usize)], bool) = match op {
                    Op::Half { .. } if up => (&[(a, b)], true),
                    Op::Half { .. } => return,
                    Op::Flap { .. } => (&[(a, b), (b, a)], up),
                    _ => (&[(a, b), (b, a)], false),
                };
                for &(me, peer) in ends {
                    let input = if down {
                        Input::LinkDown { peer: name(peer), incarnation: Incarnation(1) }
                    } else {
                        let cell = CellName::new(self.net.brokers[peer].1);
                        Input::LinkUp { peer: name(peer), cell, incarnation: Incarnation(1) }
                    };
                    self.both(me, input);
                }
                self.up[index] = !down;
            }
            Op::Wait { ms } => {
                for wired in [&mut self.incremental, &mut self.full] {
                    wired.now = wired.now.after(ms);
                }
                for at in 0..n {
                    self.both(at, Input::Tick);
                }
            }
        }
        self.incremental.pump();
        self.full.pump();
    }
}

/// Everything a topology change derives, as comparable lines.
fn state(router: &Router<Range>) -> Vec<String> {
    let kept = |set: &Minimized<Range>| set.kept_sorted();
    let mut lines = vec![format!("local {:?}", kept(&router.local))];
    for (root, generations) in &router.routes.trees {
        for (label, tree) in [("current", Some(&generations.current)), ("previous", generations.previous.as_ref())] {
            let Some(tree) = tree else { continue };
            lines.push(format!("{root} {label} {:?} parent {:?}", tree.id, tree.parent));
            for child in &tree.children {
                let summary: Vec<Range> = kept(&child.summary).into_iter().collect();
                for value in 0..26 {
                    assert_eq!(child.index.any_match(&value), any_matches(&summary, &value), "index of {root}");
                }
                lines.push(format!(
                    "  {} {:?} direct {:?} known {} synced {} linked {:?} summary {summary:?}",
                    child.cell, child.targets, child.direct, child.known, child.synced, child.linked
                ));
            }
        }
    }
    for mate in &router.routes.mates {
        lines.push(format!("mate {} {:?} {} {:?}", mate.name, mate.links, mate.local_synced, mate.down_synced));
        let local: Vec<Range> = router
            .received
            .get(&mate.name)
            .and_then(|held| held.get(&Scope::Local))
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for value in 0..26 {
            assert_eq!(mate.local.any_match(&value), any_matches(&local, &value), "mate {} local index", mate.name);
        }
    }
    for (label, sets) in [("down", &router.advertised.down), ("subtree", &router.advertised.subtree)] {
        for (root, set) in sets {
            lines.push(format!("{label} {root} {:?}", kept(set)));
        }
    }
    lines.push(format!("sent {:?}", router.sent));
    lines.push(format!("received {:?}", router.received));
    lines
}

/// Applies `ops` to both twins, comparing their state and each router with a rebuild after
/// every step.
fn twins_agree(mut twins: Twins, ops: &[Op]) -> Result<(), TestCaseError> {
    for (step, op) in ops.iter().enumerate() {
        twins.apply(op);
        for (name, router) in &twins.incremental.routers {
            let context = format!("step {step} {op:?} at {name}");
            prop_assert_eq!(state(router), state(&twins.full.routers[name]), "{}", context);
            agrees_with_a_rebuild(router, &context);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn incremental_topology_changes_hold_what_a_full_rebuild_holds(
        net in network(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        twins_agree(Twins::new(net), &ops)?;
    }

    /// The same, with every first summary of more than two filters streamed: a stream under
    /// way through flaps, relinks and subscriptions settles as the rebuild does.
    #[test]
    fn streamed_first_summaries_hold_what_a_full_rebuild_holds(
        net in network(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        twins_agree(Twins::streaming(net, 2), &ops)?;
    }
}
