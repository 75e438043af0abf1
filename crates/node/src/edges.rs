//! The delivery core's filter edges toward downstream cells, judged by routing's summaries: a
//! message is F for a child cell only when that cell's vouched summary rules it out
//! ([`Router::child_cell_verdict`]), and F for a cell mate's own subscribers only when the mate
//! vouched for them ([`Router::mate_verdict`]). Everything routing cannot judge (a restarted
//! neighbour, a tree that just moved, a child kept while unreachable, an id nobody named) is
//! `Unsure`, which sends the data rather than claim F for a match.
//!
//! The broker (`guaranteed/edges.rs`, through its cluster's router) and the simulator (its
//! matcher, through the simulated broker's router) both ask here, so the simulator judges the
//! verdict logic the broker runs.

use tidings_delivery::{CellId, TreeTag, Verdict};
use tidings_route::{BrokerName, CellName, Filter, PubendRef, Router, Verdict as RouteVerdict};

/// Delivery's cell ids for a broker's own cell mates: cell mates are separate downstreams of the
/// entry broker, so each gets a pseudo cell of its own, `MATE_CELL + its broker id`.
pub const MATE_CELL: u32 = 1 << 20;

/// The engine's small integer ids, named: brokers (for mates' pseudo cells) and cells by id.
#[derive(Clone, Copy, Debug)]
pub struct EdgeNames<'a> {
    /// Broker names by the engine's broker id.
    pub brokers: &'a [BrokerName],
    /// Cell names by the engine's cell id.
    pub cells: &'a [CellName],
}

/// The verdict for downstream `cell` (a child cell, or a mate's pseudo cell) of the pubend
/// `pubend` names (`None` when its home is unknown: then a child cell is `Unsure`).
pub fn verdict<F: Filter>(
    router: &Router<F>,
    names: EdgeNames<'_>,
    pubend: Option<&PubendRef>,
    cell: CellId,
    message: &F::Message,
) -> Verdict {
    let verdict = match cell.0.checked_sub(MATE_CELL) {
        Some(mate) => match names.brokers.get(mate as usize) {
            Some(mate) => router.mate_verdict(mate, message),
            None => RouteVerdict::Unsure,
        },
        None => match (pubend, names.cells.get(cell.0 as usize)) {
            (Some(pubend), Some(cell)) => router.child_cell_verdict(pubend, cell, message),
            _ => RouteVerdict::Unsure,
        },
    };
    match verdict {
        RouteVerdict::Deliver => Verdict::Data,
        RouteVerdict::Filtered => Verdict::Final,
        RouteVerdict::Unsure => Verdict::Unsure,
    }
}

/// The tree routing judges the pubend under now (`Router::pubend_tree`); `TreeTag(0)` when its
/// home or its home's cell is unknown.
pub fn tree<F: Filter>(router: &Router<F>, pubend: Option<&PubendRef>) -> TreeTag {
    TreeTag(pubend.and_then(|p| router.pubend_tree(p)).map_or(0, |id| id.0))
}
