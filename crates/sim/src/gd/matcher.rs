//! The simulator's [`Matcher`]: the filter verdicts a broker can know, from its own router
//! (what a production broker has), judged by the broker's own edge code
//! (`tidings_node::edges`) with the production matching code.
//!
//! Child edges: a message is F for a downstream cell only if the broker's router says so
//! ([`Router::child_cell_verdict`]: the child's summary as routing holds it, and only once
//! the child vouched for it in the current tree), and F for a cell mate's local subscribers
//! only if the mate vouched for its local summary ([`Router::mate_verdict`]). A router that
//! does not know (restarted, tree moved, summaries not synced yet) answers `Unsure`, so the
//! run judges the summaries, their vouching and the subscription barrier, not a ground truth
//! the brokers could not have. Subends: the broker's own index of its local subscriptions
//! (`tidings_node::local`, which the broker's matcher answers from too), kept by the layer as
//! subscriptions are made, restored and dropped.
//!
//! The matcher holds its broker's router only while the engine runs (the layer lends it for
//! each input, see `GdLayer::handle`); without one every child edge is `Unsure`.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use tidings_delivery::{CellId, Matcher, PubendId, SubendId, TreeTag, Verdict};
use tidings_node::edges::{self, EdgeNames};
use tidings_node::local::LocalSubscriptions;
use tidings_route::matching::RouteFilter;
use tidings_route::{PubendRef, Router};

use crate::gd::world::{message_of, World};

/// Verdicts for one broker.
pub struct SimMatcher {
    /// The broker.
    pub node: usize,
    /// The run's truth (message contents, local subscriptions, names).
    pub world: Rc<RefCell<World>>,
    /// The broker's router, lent for the duration of one input.
    pub router: Option<Router<RouteFilter>>,
    /// The broker's local subscriptions (lost at its crash; durable ones restored at boot).
    pub local: LocalSubscriptions,
}

impl SimMatcher {
    /// A matcher for broker `node`, with no local subscription yet.
    pub fn new(node: usize, world: Rc<RefCell<World>>) -> SimMatcher {
        SimMatcher { node, world, router: None, local: LocalSubscriptions::default() }
    }

    /// `subend` (a subscriber of the world) subscribed here: its filter joins the index.
    pub fn insert(&mut self, subend: SubendId) {
        let filter = self.world.borrow().subs.get(&subend).map(|sub| sub.filter.filter().clone());
        if let Some(filter) = filter {
            self.local.insert(subend, filter.pattern, filter.selector);
        }
    }
}

impl Matcher for SimMatcher {
    fn child(&self, pubend: PubendId, cell: CellId, payload: &Bytes) -> Verdict {
        let mut world = self.world.borrow_mut();
        let verdict = match self.router.as_ref() {
            Some(router) => router_verdict(router, &world, pubend, cell, payload),
            None => Verdict::Unsure,
        };
        let count = match verdict {
            Verdict::Data => &mut world.stats.edges_data,
            Verdict::Final => &mut world.stats.edges_final,
            Verdict::Unsure => &mut world.stats.edges_unsure,
        };
        *count += 1;
        verdict
    }

    fn subends(&self, _: PubendId, payload: &Bytes, out: &mut Vec<SubendId>) {
        let world = self.world.borrow();
        let Some(probe) = message_of(payload).and_then(|msg| world.probes.get(msg as usize)) else { return };
        self.local.matching(probe.message(), out);
    }

    fn subend(&self, _: PubendId, subend: SubendId, payload: &Bytes) -> bool {
        let world = self.world.borrow();
        let Some(probe) = message_of(payload).and_then(|msg| world.probes.get(msg as usize)) else { return false };
        self.local.matches(subend, probe.message())
    }
    fn epoch(&self) -> u64 {
        self.router.as_ref().map_or(0, Router::verdict_epoch)
    }

    fn tree(&self, pubend: PubendId) -> TreeTag {
        let world = self.world.borrow();
        self.router.as_ref().map_or(TreeTag(0), |router| edges::tree(router, pubend_ref(&world, pubend).as_ref()))
    }
}

/// The router's verdict for the edge towards `cell` (a child cell, or a mate's pseudo cell),
/// by the broker's own code (`tidings_node::edges`).
fn router_verdict(
    router: &Router<RouteFilter>,
    world: &World,
    pubend: PubendId,
    cell: CellId,
    payload: &Bytes,
) -> Verdict {
    let Some(probe) = message_of(payload).and_then(|msg| world.probes.get(msg as usize)) else {
        return Verdict::Unsure;
    };
    let names = EdgeNames { brokers: &world.names, cells: &world.cell_names };
    edges::verdict(router, names, pubend_ref(world, pubend).as_ref(), cell, probe)
}

/// The pubend as routing names it: its id and its hosting broker.
fn pubend_ref(world: &World, pubend: PubendId) -> Option<PubendRef> {
    let home = world.pubends.iter().find(|(_, p)| **p == pubend).map(|(home, _)| *home)?;
    Some(PubendRef { id: tidings_route::PubendId(pubend.0), home: world.names[home].clone() })
}
