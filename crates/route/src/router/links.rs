//! Links and link state: handshakes, closes, heartbeats, and flooding adverts.

use super::{Action, PeerLink, Router};
use crate::error::{CloseReason, RouteError};
use crate::filter::Filter;
use crate::link_state::{AdvertisedLink, LinkStateAdvert, Offer};
use crate::liveness::{Due, LinkClock};
use crate::message::PeerMessage;
use crate::names::{BrokerName, CellName, Incarnation, Millis};

impl<F: Filter> Router<F> {
    pub(super) fn handle_link_up(
        &mut self,
        now: Millis,
        peer: BrokerName,
        cell: CellName,
        incarnation: Incarnation,
        out: &mut Vec<Action<F>>,
    ) {
        if peer == self.settings.name {
            out.push(Action::Rejected { error: RouteError::LinkToSelf { peer: peer.clone() } });
            out.push(Action::CloseLink { peer, reason: CloseReason::Refused });
            return;
        }
        if let Some(current) = self.links.get(&peer) {
            if current.incarnation > incarnation {
                let error = RouteError::StaleIncarnation {
                    peer: peer.clone(),
                    current: current.incarnation,
                    offered: incarnation,
                };
                out.push(Action::Rejected { error });
                out.push(Action::CloseLink { peer, reason: CloseReason::Refused });
                return;
            }
        }
        // A replaced link starts from scratch: the peer does the same on its side.
        self.received.remove(&peer);
        self.sent.remove(&peer);
        self.forget_sync(&peer);
        self.forget_barriers_of(&peer);
        let link = PeerLink { cell, incarnation, clock: LinkClock::new(now), up_since: now };
        self.links.insert(peer.clone(), link);
        self.advertise_own_links(Some(&peer), out);
        let everything: Vec<LinkStateAdvert> = self.db.adverts().cloned().collect();
        out.push(Action::Send { to: peer, message: PeerMessage::Adverts(everything) });
        self.dirty.all = true;
    }

    pub(super) fn handle_link_down(&mut self, peer: &BrokerName, incarnation: Incarnation, out: &mut Vec<Action<F>>) {
        let current = self.links.get(peer).map(|link| link.incarnation);
        if current == Some(incarnation) {
            self.drop_link(peer, out);
        }
    }

    /// Forgets a link and everything learnt over it, and tells everyone.
    pub(super) fn drop_link(&mut self, peer: &BrokerName, out: &mut Vec<Action<F>>) {
        self.forget_link(peer);
        self.advertise_own_links(None, out);
    }

    fn forget_link(&mut self, peer: &BrokerName) {
        self.links.remove(peer);
        self.received.remove(peer);
        self.sent.remove(peer);
        self.forget_sync(peer);
        self.forget_barriers_of(peer);
        self.dirty.all = true;
    }

    /// Re-issues our own advert if our link list changed, flooding it to every up link except
    /// `skip` (a new link gets the whole database instead).
    fn advertise_own_links(&mut self, skip: Option<&BrokerName>, out: &mut Vec<Action<F>>) {
        let links: Vec<AdvertisedLink> = self
            .links
            .iter()
            .map(|(peer, link)| AdvertisedLink { peer: peer.clone(), peer_cell: link.cell.clone() })
            .collect();
        if links == self.db.own().links {
            return;
        }
        let own = self.db.set_own_links(links);
        self.flood(vec![own], skip, out);
    }

    fn flood(&self, adverts: Vec<LinkStateAdvert>, skip: Option<&BrokerName>, out: &mut Vec<Action<F>>) {
        if adverts.is_empty() {
            return;
        }
        for peer in self.links.keys().filter(|peer| Some(*peer) != skip) {
            out.push(Action::Send { to: peer.clone(), message: PeerMessage::Adverts(adverts.clone()) });
        }
    }

    pub(super) fn handle_received(
        &mut self,
        now: Millis,
        from: BrokerName,
        message: PeerMessage<F>,
        out: &mut Vec<Action<F>>,
    ) {
        let Some(link) = self.links.get_mut(&from) else {
            out.push(Action::Rejected { error: RouteError::UnknownPeer { peer: from } });
            return;
        };
        link.clock.heard(now);
        match message {
            PeerMessage::Heartbeat => {}
            PeerMessage::Adverts(adverts) => self.handle_adverts(&from, adverts, out),
            PeerMessage::Summary(deltas) => self.handle_summary(&from, deltas, out),
            PeerMessage::Synced(trees) => self.handle_synced(from, trees),
            PeerMessage::Barrier { id, root, relay_to_mates } => self.handle_barrier(from, id, root, relay_to_mates),
            PeerMessage::BarrierAck { id, ticks } => self.handle_barrier_ack(&from, id, ticks),
        }
    }

    fn handle_adverts(&mut self, from: &BrokerName, adverts: Vec<LinkStateAdvert>, out: &mut Vec<Action<F>>) {
        let mut accepted = Vec::new();
        let mut newer_here = Vec::new();
        for advert in adverts {
            match self.db.offer(advert.clone()) {
                Offer::Accepted => accepted.push(advert),
                Offer::Known => {}
                Offer::Stale(ours) => newer_here.push(ours),
                Offer::OwnNewer(theirs) => self.handle_own_newer(theirs, out),
            }
        }
        if !accepted.is_empty() {
            self.counters.adverts_accepted += accepted.len() as u64;
            self.dirty.view = true;
        }
        self.flood(accepted, Some(from), out);
        if !newer_here.is_empty() {
            out.push(Action::Send { to: from.clone(), message: PeerMessage::Adverts(newer_here) });
        }
    }

    /// Someone holds an advert under our name that is newer than ours: from an earlier life of
    /// this incarnation we outrun it; from a later incarnation it is not ours to fix.
    fn handle_own_newer(&mut self, theirs: LinkStateAdvert, out: &mut Vec<Action<F>>) {
        let ours = self.db.own().incarnation;
        if theirs.incarnation == ours {
            let own = self.db.outrun(theirs.sequence);
            self.flood(vec![own], None, out);
            self.dirty.view = true;
        } else {
            let error = RouteError::ForeignOwnAdvert { origin: theirs.origin, ours, claimed: theirs.incarnation };
            out.push(Action::Rejected { error });
        }
    }

    pub(super) fn handle_tick(&mut self, now: Millis, out: &mut Vec<Action<F>>) {
        let settings = self.settings.liveness;
        let mut dead = Vec::new();
        for (peer, link) in &mut self.links {
            match link.clock.poll(now, &settings) {
                Due::Nothing => {}
                Due::Heartbeat => out.push(Action::Send { to: peer.clone(), message: PeerMessage::Heartbeat }),
                Due::Dead => dead.push(peer.clone()),
            }
        }
        if dead.is_empty() {
            return;
        }
        for peer in dead {
            self.counters.links_declared_dead += 1;
            self.forget_link(&peer);
            out.push(Action::CloseLink { peer, reason: CloseReason::MissedHeartbeats });
        }
        self.advertise_own_links(None, out);
    }
}
