//! Interest of departed links, held for a while as if it were our own.
//!
//! When a link goes down, everything its peer told us (its own subscribers, if a mate, and the
//! interest of the subtree behind it) would vanish from what we advertise at once, and every
//! broker upstream would judge the messages published meanwhile F for our subtree. Guaranteed
//! delivery cannot take those back: a subscriber behind a cut link, a partitioned cell mate or
//! a restarting broker (durable subscriptions come back with it) would return to find its
//! ticks told F by relays that judged them for a tree without it (gd-protocol §10, I2).
//!
//! So a departed peer's interest stays in our local set for
//! [`RouterSettings::departed_interest_ms`](super::RouterSettings) (the broker sets it to the
//! guaranteed-delivery log retention for departed cells, so the two horizons agree); it is
//! dropped when that passes, or replaced if the peer departs again. The price is over-delivery
//! toward us for that time: copies we forward nowhere. Gryphon paid it too: its subscription
//! state is not withdrawn when a link fails.

use std::collections::BTreeSet;

use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::names::{BrokerName, CellName, Millis};

/// One departed peer's interest and when it stops counting.
#[derive(Clone, Debug)]
pub(super) struct Departed<F: Filter> {
    until: Millis,
    filters: BTreeSet<F>,
    /// The same filters, indexed: filter edges ask them for every message while the hold
    /// lasts, and a relay's summary may hold 100,000 filters.
    index: F::Index,
}

impl<F: Filter> Router<F> {
    /// Holds what `peer` told us (every scope) as local interest, replacing an earlier hold of
    /// it; called before its summaries are forgotten.
    pub(super) fn hold_departed(&mut self, peer: &BrokerName) {
        let keep = self.settings.departed_interest_ms;
        let filters: BTreeSet<F> =
            self.received.get(peer).into_iter().flat_map(|scoped| scoped.values().flatten()).cloned().collect();
        if keep == 0 || filters.is_empty() {
            return;
        }
        self.release_departed(peer);
        for filter in &filters {
            self.local.insert(filter, &mut self.dirty.local);
        }
        let mut index = F::Index::default();
        for filter in &filters {
            index.insert(filter);
        }
        self.departed.insert(peer.clone(), Departed { until: self.now.after(keep), filters, index });
    }

    /// Drops the holds whose time passed.
    pub(super) fn expire_departed(&mut self, now: Millis) {
        let due: Vec<BrokerName> =
            self.departed.iter().filter(|(_, held)| held.until <= now).map(|(peer, _)| peer.clone()).collect();
        for peer in due {
            self.release_departed(&peer);
        }
    }

    /// When the next hold ends.
    pub(super) fn next_departed_expiry(&self) -> Option<Millis> {
        self.departed.values().map(|held| held.until).min()
    }

    /// Whether a held departed peer of child cell `cell` (by the graph's cell membership) or
    /// the departed mate `mate` wanted `message`. A filter edge asks this before it judges F:
    /// a peer that comes back empty (restarted on a new data directory) vouches at once for
    /// the subtree it knows so far, which lacks the subscribers that will link to it again a
    /// moment later; judged by that summary alone, the ticks published meanwhile were F for
    /// them and lost (`a_relay_killed_and_restarted_empty...` in `cli/tests/gd_links.rs`).
    pub(super) fn departed_wants(
        &self,
        cell: Option<&CellName>,
        mate: Option<&BrokerName>,
        message: &F::Message,
    ) -> bool {
        self.departed.iter().any(|(peer, held)| {
            let ours = mate == Some(peer) || cell.is_some_and(|cell| self.table.graph.cell_of(peer) == Some(cell));
            ours && held.index.any_match(message)
        })
    }

    /// Whether a departed peer of child cell `cell`, or the departed mate `mate`, is held.
    pub(super) fn departed_held(&self, cell: Option<&CellName>, mate: Option<&BrokerName>) -> bool {
        self.departed
            .keys()
            .any(|peer| mate == Some(peer) || cell.is_some_and(|cell| self.table.graph.cell_of(peer) == Some(cell)))
    }

    fn release_departed(&mut self, peer: &BrokerName) {
        if let Some(held) = self.departed.remove(peer) {
            for filter in &held.filters {
                self.local.remove(filter, &mut self.dirty.local);
            }
        }
    }
}
