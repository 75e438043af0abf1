//! Vouching for summaries. A summary is sent as deltas and an empty one is sent as nothing, so
//! when a tree changes (a link heals, a route moves) the new parent cannot tell "no interest
//! here" from "not told yet". Dropping on the first guess loses messages on every route change;
//! so each broker says, after its summary deltas, which trees its summary is complete for
//! ([`PeerMessage::Synced`]), and until a child cell's brokers have said so for the current
//! tree, the parent sends it what its summary cannot rule out.
//!
//! Completeness is bottom-up: a broker vouches to its parent cell for a tree only once its own
//! child cells and its cell mates vouched to it; to a cell mate it vouches once its own child
//! cells did (never waiting on mates, so two mates never wait on each other).

use std::collections::BTreeMap;

use super::{Action, Router};
use crate::filter::Filter;
use crate::message::PeerMessage;
use crate::names::{BrokerName, CellName, TreeId};

impl<F: Filter> Router<F> {
    pub(super) fn handle_synced(&mut self, from: BrokerName, trees: Vec<(CellName, TreeId)>) {
        self.synced.insert(from, trees.into_iter().collect());
        self.sync_dirty = true;
    }

    /// A link came up again or went down: whatever either side vouched for is void.
    pub(super) fn forget_sync(&mut self, peer: &BrokerName) {
        self.synced.remove(peer);
        self.vouched.remove(peer);
        self.sync_dirty = true;
    }

    /// Refreshes the data path's sync flags and sends each link what we now vouch for, when
    /// that changed. Runs after `settle_interest`, so a `Synced` follows the deltas it covers.
    pub(super) fn settle_sync(&mut self, out: &mut Vec<Action<F>>) {
        if !std::mem::take(&mut self.sync_dirty) {
            return;
        }
        self.refresh_sync_flags();
        let peers: Vec<(BrokerName, bool)> =
            self.links.iter().map(|(peer, link)| (peer.clone(), link.cell == self.settings.cell)).collect();
        for (peer, mate) in peers {
            let vouch = self.vouch_for(&peer, mate);
            if self.vouched.get(&peer) != Some(&vouch) {
                let message = PeerMessage::Synced(vouch.iter().map(|(root, id)| (root.clone(), *id)).collect());
                out.push(Action::Send { to: peer.clone(), message });
                self.vouched.insert(peer, vouch);
            }
        }
    }

    fn refresh_sync_flags(&mut self) {
        let synced = &self.synced;
        let says = |broker: &BrokerName, root: &CellName, id: TreeId| {
            synced.get(broker).and_then(|trees| trees.get(root)) == Some(&id)
        };
        for (root, generations) in &mut self.routes.trees {
            let id = generations.current.id;
            for child in &mut generations.current.children {
                child.synced = child.linked.iter().all(|broker| says(broker, root, id));
            }
        }
        let ids: BTreeMap<&CellName, TreeId> =
            self.routes.trees.iter().map(|(root, generations)| (root, generations.current.id)).collect();
        for mate in &mut self.routes.mates {
            mate.local_synced = synced.contains_key(&mate.name);
            mate.down_synced =
                ids.iter().filter(|(root, id)| says(&mate.name, root, **id)).map(|(root, _)| (*root).clone()).collect();
        }
    }

    /// The trees whose summary toward `peer` is complete now. Toward a parent, never while our
    /// cell is split (a reachable mate we have no link to): its subscribers are not in it.
    fn vouch_for(&self, peer: &BrokerName, mate: bool) -> BTreeMap<CellName, TreeId> {
        let peer_cell = self.links.get(peer).map(|link| &link.cell);
        let mut vouch = BTreeMap::new();
        for (root, generations) in &self.routes.trees {
            let tree = &generations.current;
            let children_done = tree.children.iter().all(|child| child.synced);
            let complete = if mate {
                children_done
            } else {
                tree.parent.as_ref() == peer_cell
                    && !self.table.cell_split
                    && children_done
                    && self.routes.mates.iter().all(|m| m.down_synced.contains(root))
            };
            if complete {
                vouch.insert(root.clone(), tree.id);
            }
        }
        vouch
    }
}
