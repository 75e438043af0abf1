//! Interest of departed links, held for a while as if it were our own.
//!
//! When a link goes down, everything its peer told us (its own subscribers, if a mate, and the
//! interest of the subtree behind it) would vanish from what we advertise at once, and every
//! broker upstream would judge the messages published meanwhile F for our subtree. Guaranteed
//! delivery cannot take those back: a subscriber behind a cut link, a partitioned cell mate or
//! a restarting broker (durable subscriptions come back with it) would return to find its
//! ticks told F by relays that judged them for a tree without it (gd-protocol §10, I2).
//!
//! So a departed peer's interest stays ours for
//! [`RouterSettings::departed_interest_ms`](super::RouterSettings) (the broker sets it to the
//! guaranteed-delivery log retention for departed cells, so the two horizons agree); it is
//! dropped when that passes, or replaced if the peer departs again. The price is over-delivery
//! toward us for that time: copies we forward nowhere. Gryphon paid it too: its subscription
//! state is not withdrawn when a link fails.
//!
//! Each part is held where the peer had told it, no wider. What a peer told us for one tree
//! (the interest behind it in the tree rooted at that cell) joins what our links bring in for
//! that tree only (`Router::held`). A mate's own subscribers (its `Local` scope) want every
//! tree's messages, so they join our cell's subtree interest in every tree, as a linked
//! mate's do (`Router::held_local`), but not our own subscribers' set told to our mates: the
//! mate that comes back would find its subscribers' interest ours and send us its messages.
//! Held as our local interest, every part was advertised in every tree and told to every
//! mate, which drew toward us messages we forward nowhere until the hold ended (the broker's
//! default: five minutes). Issue 40: a relay pubend's stream, read only at its own broker,
//! reached every broker that had seen a link flap, since the reader's filter was in what that
//! link had told it for other trees, and a mate of the reader's broker once the two had lost
//! their link.

use super::Router;
use crate::filter::{Filter, FilterIndex};
use crate::names::{BrokerName, CellName, Millis};
use crate::summary::{Scope, Scoped};

/// One departed peer's interest and when it stops counting.
#[derive(Clone, Debug)]
pub(super) struct Departed<F: Filter> {
    until: Millis,
    /// What it told us, per scope: released from where it was held.
    scoped: Scoped<F>,
    /// The same filters, indexed: filter edges ask them for every message while the hold
    /// lasts, and a relay's summary may hold 100,000 filters.
    index: F::Index,
}

impl<F: Filter> Router<F> {
    /// Holds what `peer` told us, each scope where it counted (see the module doc),
    /// replacing an earlier hold of it; called before its summaries are forgotten.
    pub(super) fn hold_departed(&mut self, peer: &BrokerName) {
        let keep = self.settings.departed_interest_ms;
        let scoped: Scoped<F> = self
            .received
            .get(peer)
            .into_iter()
            .flatten()
            .filter(|(_, filters)| !filters.is_empty())
            .map(|(scope, filters)| (scope.clone(), filters.clone()))
            .collect();
        if keep == 0 || scoped.is_empty() {
            return;
        }
        self.release_departed(peer);
        let mut index = F::Index::default();
        for (scope, filters) in &scoped {
            for filter in filters {
                index.insert(filter);
                match scope {
                    Scope::Local => self.held_local.insert(filter, &mut self.dirty.held_local),
                    Scope::Tree(root) => {
                        let delta = self.dirty.held.entry(root.clone()).or_default();
                        self.held.entry(root.clone()).or_default().insert(filter, delta);
                    }
                }
            }
        }
        self.departed.insert(peer.clone(), Departed { until: self.now.after(keep), scoped, index });
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
        let Some(held) = self.departed.remove(peer) else { return };
        for (scope, filters) in &held.scoped {
            for filter in filters {
                match scope {
                    Scope::Local => {
                        self.held_local.remove(filter, &mut self.dirty.held_local);
                    }
                    Scope::Tree(root) => {
                        let Some(set) = self.held.get_mut(root) else { continue };
                        set.remove(filter, self.dirty.held.entry(root.clone()).or_default());
                        if set.distinct_inputs() == 0 {
                            self.held.remove(root);
                        }
                    }
                }
            }
        }
    }
}
