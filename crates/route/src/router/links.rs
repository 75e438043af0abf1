//! Links and link state: handshakes, closes, heartbeats, and flooding adverts.

use super::{Action, PeerLink, Router};
use crate::error::{CloseReason, Limit, RouteError};
use crate::filter::Filter;
use crate::limits::{MAX_ADVERTS_PER_MESSAGE, MAX_LINKS_PER_ADVERT, MAX_ORIGINS, MAX_PUBENDS_PER_ADVERT};
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
        self.hold_departed(&peer);
        if self.links.contains_key(&peer) {
            let held = self.received.remove(&peer);
            self.dirty.dropped(&peer, held);
        }
        self.dirty.fresh.insert(peer.clone());
        if let Some(sent) = self.sent.remove(&peer) {
            self.garbage.scoped(sent);
        }
        self.streams.forget(&peer);
        self.forget_sync(&peer);
        self.forget_barriers_of(&peer);
        let link = PeerLink { cell, incarnation, clock: LinkClock::new(now), up_since: now };
        if self.next_refresh.is_none() {
            self.next_refresh = Some(now.after(self.advert_max_age_ms() / 4));
        }
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
        self.hold_departed(peer);
        let held = self.received.remove(peer);
        self.dirty.dropped(peer, held);
        if let Some(sent) = self.sent.remove(peer) {
            self.garbage.scoped(sent);
        }
        self.streams.forget(peer);
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
            PeerMessage::Synced(trees) if trees.len() > crate::limits::MAX_SCOPES_PER_MESSAGE => {
                self.exceeded(&from, Limit::Summary, out);
            }
            PeerMessage::Synced(trees) => self.handle_synced(from, trees),
            PeerMessage::Barrier { id, root, relay_to_mates } => self.handle_barrier(from, id, root, relay_to_mates),
            PeerMessage::BarrierAck { id, ticks } => self.handle_barrier_ack(&from, id, ticks),
        }
    }

    /// Adverts from a peer. Who may tell us what (the vouching rule):
    /// - about a linked peer, only that peer itself (its direct word; copies flooded by others
    ///   wait until the link is gone, so nobody can cut us off from our own neighbours);
    /// - about any other origin, a peer that is no farther from the origin than we are in our
    ///   current graph (it lies on a shortest path the origin's own flood takes), or anyone
    ///   while the origin is unknown or unreachable to us;
    /// - an advert that arrives by another path waits (one per origin) and is offered again
    ///   whenever our view changes.
    ///
    /// Copies of an older version are not echoed back: a forged advert could otherwise bounce
    /// between brokers and outlive its age-out.
    fn handle_adverts(&mut self, from: &BrokerName, adverts: Vec<LinkStateAdvert>, out: &mut Vec<Action<F>>) {
        let too_many = adverts.len() > MAX_ADVERTS_PER_MESSAGE
            || adverts.iter().any(|advert| {
                advert.links.len() > MAX_LINKS_PER_ADVERT || advert.pubends.len() > MAX_PUBENDS_PER_ADVERT
            });
        if too_many {
            self.exceeded(from, Limit::Adverts, out);
            return;
        }
        let mut accepted = Vec::new();
        for advert in adverts {
            let direct = advert.origin == *from || advert.origin == self.settings.name;
            if !direct && (self.links.contains_key(&advert.origin) || !self.vouches(from, &advert.origin)) {
                self.hold_pending(advert, from);
                continue;
            }
            if self.db.len() >= MAX_ORIGINS && self.db.get(&advert.origin).is_none() {
                self.exceeded(from, Limit::Adverts, out);
                return;
            }
            self.offer_advert(advert, &mut accepted, out);
        }
        self.flood(accepted, Some(from), out);
    }

    fn offer_advert(&mut self, advert: LinkStateAdvert, accepted: &mut Vec<LinkStateAdvert>, out: &mut Vec<Action<F>>) {
        match self.db.offer(advert.clone(), self.now) {
            Offer::Accepted => {
                self.pending_adverts.remove(&advert.origin);
                self.counters.adverts_accepted += 1;
                self.dirty.view = true;
                accepted.push(advert);
            }
            Offer::Known | Offer::Stale => {}
            Offer::OwnNewer(theirs) => self.handle_own_newer(theirs, out),
        }
    }

    /// Whether `from` may vouch for an advert about `origin` (see `handle_adverts`). Distances
    /// to the origin start from the brokers whose own adverts list a link to it (their word,
    /// not the origin's possibly outdated or forged one), then follow two-way links.
    fn vouches(&self, from: &BrokerName, origin: &BrokerName) -> bool {
        let graph = &self.table.graph;
        if graph.broker_index(origin).is_none() {
            return true;
        }
        let next_to_origin: Vec<usize> = self
            .db
            .adverts()
            .filter(|advert| advert.links.iter().any(|link| link.peer == *origin))
            .filter_map(|advert| graph.broker_index(&advert.origin))
            .collect();
        let distance = graph.distances_from_all(&next_to_origin);
        match (graph.broker_index(from), graph.broker_index(&self.settings.name)) {
            (Some(from), Some(me)) => distance[from] <= distance[me],
            _ => false,
        }
    }

    /// Keeps the newest copy that could not be accepted yet, per origin, with every peer that
    /// sent that version (any of them may come to vouch for it).
    fn hold_pending(&mut self, advert: LinkStateAdvert, from: &BrokerName) {
        if self.db.get(&advert.origin).is_some_and(|held| held.version() >= advert.version()) {
            return;
        }
        let full = self.pending_adverts.len() >= MAX_ORIGINS;
        match self.pending_adverts.get_mut(&advert.origin) {
            Some((held, senders)) if held.version() == advert.version() => {
                senders.insert(from.clone());
            }
            Some((held, _)) if held.version() > advert.version() => {}
            None if full => {}
            _ => {
                let senders = std::iter::once(from.clone()).collect();
                self.pending_adverts.insert(advert.origin.clone(), (advert, senders));
            }
        }
    }

    /// Offers waiting adverts again after a view change; returns whether any was accepted.
    pub(super) fn retry_pending_adverts(&mut self, out: &mut Vec<Action<F>>) -> bool {
        let origins: Vec<BrokerName> = self.pending_adverts.keys().cloned().collect();
        let mut any = false;
        for origin in origins {
            let Some((advert, senders)) = self.pending_adverts.get_mut(&origin) else { continue };
            senders.retain(|sender| self.links.contains_key(sender));
            let outdated = self.db.get(&origin).is_some_and(|held| held.version() >= advert.version());
            if senders.is_empty() || outdated {
                self.pending_adverts.remove(&origin);
                continue;
            }
            // A linked origin's own word comes directly; the copy waits for the link to go.
            if self.links.contains_key(&origin) {
                continue;
            }
            let senders = senders.clone();
            let Some(voucher) = senders.iter().find(|sender| self.vouches(sender, &origin)).cloned() else { continue };
            let Some((advert, _)) = self.pending_adverts.remove(&origin) else { continue };
            let mut accepted = Vec::new();
            self.offer_advert(advert, &mut accepted, out);
            any |= !accepted.is_empty();
            self.flood(accepted, Some(&voucher), out);
        }
        any
    }

    /// A peer exceeded a size limit: refuse it and close its link.
    pub(super) fn exceeded(&mut self, peer: &BrokerName, limit: Limit, out: &mut Vec<Action<F>>) {
        out.push(Action::Rejected { error: RouteError::LimitExceeded { peer: peer.clone(), limit } });
        out.push(Action::CloseLink { peer: peer.clone(), reason: CloseReason::LimitExceeded(limit) });
        self.drop_link(peer, out);
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
        self.expire_departed(now);
        let max_age = self.advert_max_age_ms();
        if self.db.expire(now, max_age) {
            self.dirty.view = true;
        }
        if self.next_refresh.is_some_and(|at| at <= now) {
            let own = self.db.refresh_own();
            self.flood(vec![own], None, out);
            self.dirty.view = true;
            self.next_refresh = Some(now.after(max_age / 4));
        }
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
