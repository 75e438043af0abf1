//! The delivery core's filter edges toward downstream cells, judged by routing's summaries with
//! `tidings_node::edges` (which the simulator's matcher runs too): a
//! message is F for a child cell only when that cell's vouched summary rules it out, and F for
//! a cell mate's own subscribers only when the mate vouched for them. Everything routing cannot
//! judge (a restarted neighbour, a tree that just moved, a child kept while unreachable) is
//! `Unsure`, which sends the data rather than claim F for a match.
//!
//! The engine knows brokers and cells as small integers; [`Names`] maps them back. The driver's
//! [`super::net::Net`] assigns them and fills it in; the matcher reads it while the engine runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use tidings_delivery::{CellId, PubendId, TreeTag, Verdict};
use tidings_node::edges::{self, EdgeNames};
use tidings_route::{BrokerName, CellName, PubendRef};
use tidings_wire::Message;

use crate::cluster::{Cluster, Probe};

/// Names behind the engine's ids: brokers and cells by id, and the home of each remote pubend
/// (a pubend not listed is hosted here).
#[derive(Default)]
pub(super) struct Names {
    pub(super) brokers: Vec<BrokerName>,
    pub(super) cells: Vec<CellName>,
    pub(super) homes: BTreeMap<PubendId, BrokerName>,
}

/// [`Names`] shared by the driver's network side (writer) and the matcher (reader), both in
/// the driver's task; the lock is never contended.
pub(super) type SharedNames = Arc<RwLock<Names>>;

/// Filter edges from routing's summaries.
pub(crate) struct Edges {
    cluster: Arc<Cluster>,
    names: SharedNames,
}

impl Edges {
    /// Edges judged by `cluster`'s router, with ids named by `names`.
    pub(super) fn new(cluster: Arc<Cluster>, names: SharedNames) -> Edges {
        Edges { cluster, names }
    }

    /// The router's verdict epoch (`Router::verdict_epoch`).
    pub(crate) fn epoch(&self) -> u64 {
        self.cluster.verdict_epoch()
    }

    /// The tree routing judges `pubend` under now (`Router::pubend_tree`; `TreeTag(0)` when
    /// its home's cell is unknown).
    pub(crate) fn tree(&self, pubend: PubendId) -> TreeTag {
        let home = self.names.read().homes.get(&pubend).unwrap_or_else(|| self.cluster.name()).clone();
        let reference = PubendRef { id: tidings_route::PubendId(pubend.0), home };
        self.cluster.with_router(|router| edges::tree(router, Some(&reference)))
    }

    /// The verdict for downstream `cell` (a child cell, or a mate's pseudo cell) of `pubend`
    /// (`tidings_node::edges::verdict`).
    pub(crate) fn verdict(&self, pubend: PubendId, cell: CellId, payload: &Bytes) -> Verdict {
        let Ok(message) = Message::decode(payload.clone()) else { return Verdict::Unsure };
        let names = self.names.read();
        let home = names.homes.get(&pubend).unwrap_or_else(|| self.cluster.name()).clone();
        let reference = PubendRef { id: tidings_route::PubendId(pubend.0), home };
        let edge_names = EdgeNames { brokers: &names.brokers, cells: &names.cells };
        let probe = Probe::new(&message);
        self.cluster.with_router(|router| edges::verdict(router, edge_names, Some(&reference), cell, &probe))
    }
}
