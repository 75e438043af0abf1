//! The simulator's [`Matcher`]: the filter verdicts a broker can know, from its own router
//! (what a production broker has), with the production matching code.
//!
//! Child edges: a message is F for a downstream cell only if the broker's router says so
//! ([`Router::child_cell_verdict`]: the child's summary as routing holds it, and only once
//! the child vouched for it in the current tree), and F for a cell mate's local subscribers
//! only if the mate vouched for its local summary ([`Router::mate_verdict`]). A router that
//! does not know (restarted, tree moved, summaries not synced yet) answers `Unsure`, so the
//! run judges the summaries, their vouching and the subscription barrier, not a ground truth
//! the brokers could not have. Subends: the broker's own subscriptions.
//!
//! The matcher holds its broker's router only while the engine runs (the layer lends it for
//! each input, see `GdLayer::handle`); without one every child edge is `Unsure`.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use tidings_delivery::{CellId, Matcher, PubendId, SubendId, TreeTag, Verdict};
use tidings_route::matching::RouteFilter;
use tidings_route::{Filter, PubendRef, Router, Verdict as RouteVerdict};

use crate::gd::layer::MATE_CELL;
use crate::gd::world::{message_of, World};

/// Verdicts for one broker.
pub struct SimMatcher {
    /// The broker.
    pub node: usize,
    /// The run's truth (message contents, local subscriptions, names).
    pub world: Rc<RefCell<World>>,
    /// The broker's router, lent for the duration of one input.
    pub router: Option<Router<RouteFilter>>,
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
        let local = world.subs.iter().filter(|(_, sub)| sub.node == self.node && !sub.gone);
        out.extend(local.filter(|(_, sub)| sub.filter.matches(probe)).map(|(&id, _)| id));
    }

    fn subend(&self, _: PubendId, subend: SubendId, payload: &Bytes) -> bool {
        let world = self.world.borrow();
        let Some(msg) = message_of(payload) else { return false };
        world.subs.get(&subend).is_some_and(|sub| sub.node == self.node && world.wants(sub, msg))
    }
    fn epoch(&self) -> u64 {
        self.router.as_ref().map_or(0, Router::verdict_epoch)
    }

    fn tree(&self, pubend: PubendId) -> TreeTag {
        let world = self.world.borrow();
        let tree = self.router.as_ref().zip(pubend_ref(&world, pubend)).and_then(|(router, p)| router.pubend_tree(&p));
        TreeTag(tree.map_or(0, |id| id.0))
    }
}

/// The router's verdict for the edge towards `cell` (a child cell, or a mate's pseudo cell).
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
    let verdict = match cell.0.checked_sub(MATE_CELL) {
        Some(mate) => match world.names.get(mate as usize) {
            Some(name) => router.mate_verdict(name, probe),
            None => RouteVerdict::Unsure,
        },
        None => {
            let (Some(reference), Some(cell)) = (pubend_ref(world, pubend), world.cell_names.get(cell.0 as usize))
            else {
                return Verdict::Unsure;
            };
            router.child_cell_verdict(&reference, cell, probe)
        }
    };
    match verdict {
        RouteVerdict::Deliver => Verdict::Data,
        RouteVerdict::Filtered => Verdict::Final,
        RouteVerdict::Unsure => Verdict::Unsure,
    }
}

/// The pubend as routing names it: its id and its hosting broker.
fn pubend_ref(world: &World, pubend: PubendId) -> Option<PubendRef> {
    let home = world.pubends.iter().find(|(_, p)| **p == pubend).map(|(home, _)| *home)?;
    Some(PubendRef { id: tidings_route::PubendId(pubend.0), home: world.names[home].clone() })
}
