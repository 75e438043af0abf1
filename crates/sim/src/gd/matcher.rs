//! The simulator's [`Matcher`]: filter verdicts from the production matching code
//! (`RouteFilter::matches` on the message's routing probe) over the run's live guaranteed
//! subscriptions.
//!
//! Child edges: a message is F for a downstream cell only if no live subscription at the
//! child's entry broker or below it (following the routes the engines were fed) passes it:
//! what routing's summaries say once settled, computed from the truth rather than from the
//! summaries (so a summary lag never shows up as a delivery failure). Subends: the broker's
//! own subscriptions.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use tidings_delivery::{CellId, Matcher, PubendId, SubendId, Verdict};
use tidings_route::Filter;

use crate::gd::world::{message_of, World};

/// Verdicts for one broker.
pub struct SimMatcher {
    /// The broker.
    pub node: usize,
    /// The run's truth.
    pub world: Rc<RefCell<World>>,
}

impl Matcher for SimMatcher {
    fn child(&self, pubend: PubendId, cell: CellId, payload: &Bytes) -> Verdict {
        let world = self.world.borrow();
        let route = world.routes.get(&(self.node, pubend));
        let Some(child) = route.and_then(|r| r.children.iter().find(|c| c.cell == cell)) else {
            return Verdict::Unsure;
        };
        match message_of(payload) {
            Some(msg) if !world.wanted_below(pubend, child.broker.0 as usize, msg) => Verdict::Final,
            Some(_) => Verdict::Data,
            None => Verdict::Unsure,
        }
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
}
