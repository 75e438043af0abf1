//! Link state: every broker floods an advert listing its up links, versioned by its incarnation
//! and a sequence number, and every broker keeps the newest advert of every origin. From that
//! database each broker derives the same graph, which is what lets all of them compute the same
//! trees without talking about trees.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::names::{BrokerName, CellName, Incarnation, ViewId};
use crate::rendezvous::{fnv1a, mix};

/// One broker's statement of its currently up links. Flooded to every broker; a newer version
/// (higher incarnation, then higher sequence) replaces an older one.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct LinkStateAdvert {
    /// The broker this advert describes.
    pub origin: BrokerName,
    /// The origin's cell; cell membership is learnt from here.
    pub cell: CellName,
    /// The origin's incarnation: a restarted broker's adverts supersede its old ones.
    pub incarnation: Incarnation,
    /// Grows with every change the origin makes within one incarnation.
    pub sequence: u64,
    /// The origin's up links, sorted by peer name.
    pub links: Vec<AdvertisedLink>,
}

/// One link in an advert: the peer and the cell the peer announced in its handshake.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct AdvertisedLink {
    /// The broker at the other end.
    pub peer: BrokerName,
    /// That broker's cell.
    pub peer_cell: CellName,
}

impl LinkStateAdvert {
    /// The version adverts are ordered by: incarnation first, so a restart always wins.
    pub fn version(&self) -> (Incarnation, u64) {
        (self.incarnation, self.sequence)
    }
}

/// What happened when an advert from a peer was offered to the database.
#[derive(Debug)]
pub(crate) enum Offer {
    /// It was newer and replaced what we had (or was new): flood it on.
    Accepted,
    /// We already had this version: nothing to do.
    Known,
    /// We hold a newer version: the sender is behind, send it ours.
    Stale(LinkStateAdvert),
    /// It claims to be ours and is newer than ours (we restarted without a new incarnation
    /// number, or another broker uses our name).
    OwnNewer(LinkStateAdvert),
}

/// The newest advert of every origin, including our own.
#[derive(Clone, Debug)]
pub(crate) struct LinkStateDb {
    /// Our own advert; also present in `adverts`, which is what iteration and digests use.
    own: LinkStateAdvert,
    adverts: BTreeMap<BrokerName, LinkStateAdvert>,
}

impl LinkStateDb {
    pub(crate) fn new(me: BrokerName, cell: CellName, incarnation: Incarnation) -> Self {
        let own = LinkStateAdvert { origin: me.clone(), cell, incarnation, sequence: 0, links: Vec::new() };
        let adverts = BTreeMap::from([(me, own.clone())]);
        Self { own, adverts }
    }

    pub(crate) fn own(&self) -> &LinkStateAdvert {
        &self.own
    }

    /// Replaces our own link list, bumping the sequence; returns the new advert to flood.
    pub(crate) fn set_own_links(&mut self, links: Vec<AdvertisedLink>) -> LinkStateAdvert {
        self.bump_own(|own| own.links = links)
    }

    /// Raises our sequence above `seen` (a copy of our advert from an earlier life).
    pub(crate) fn outrun(&mut self, seen: u64) -> LinkStateAdvert {
        self.bump_own(|own| own.sequence = own.sequence.max(seen))
    }

    fn bump_own(&mut self, change: impl FnOnce(&mut LinkStateAdvert)) -> LinkStateAdvert {
        change(&mut self.own);
        self.own.sequence += 1;
        self.adverts.insert(self.own.origin.clone(), self.own.clone());
        self.own.clone()
    }

    pub(crate) fn offer(&mut self, advert: LinkStateAdvert) -> Offer {
        if advert.origin == self.own.origin {
            return if advert.version() > self.own.version() && advert != self.own {
                Offer::OwnNewer(advert)
            } else {
                Offer::Known
            };
        }
        match self.adverts.get(&advert.origin) {
            Some(held) if held.version() == advert.version() => Offer::Known,
            Some(held) if held.version() > advert.version() => Offer::Stale(held.clone()),
            _ => {
                self.adverts.insert(advert.origin.clone(), advert);
                Offer::Accepted
            }
        }
    }

    pub(crate) fn adverts(&self) -> impl Iterator<Item = &LinkStateAdvert> {
        self.adverts.values()
    }

    /// A digest of the whole database with pinned hash functions, equal on two brokers exactly
    /// when (barring collisions) they hold the same adverts.
    pub(crate) fn digest(&self) -> ViewId {
        let mut hash = 0u64;
        for advert in self.adverts.values() {
            hash = mix(hash ^ fnv1a(advert.origin.as_str().as_bytes()));
            hash = mix(hash ^ fnv1a(advert.cell.as_str().as_bytes()));
            hash = mix(hash ^ advert.incarnation.0);
            hash = mix(hash ^ advert.sequence);
            for link in &advert.links {
                hash = mix(hash ^ fnv1a(link.peer.as_str().as_bytes()));
            }
            hash = mix(hash ^ advert.links.len() as u64);
        }
        ViewId(hash)
    }

    /// The graph of links that both ends advertise. A link only one end lists is either still
    /// coming up or already going down, and using it would make brokers disagree.
    pub(crate) fn graph(&self) -> Graph {
        let mut graph = Graph::default();
        for advert in self.adverts.values() {
            graph.cell_of.insert(advert.origin.clone(), advert.cell.clone());
            graph.members.entry(advert.cell.clone()).or_default().push(advert.origin.clone());
        }
        for advert in self.adverts.values() {
            for link in &advert.links {
                let answered = self
                    .adverts
                    .get(&link.peer)
                    .is_some_and(|peer| peer.links.iter().any(|back| back.peer == advert.origin));
                if answered && link.peer != advert.origin {
                    graph.links.entry(advert.origin.clone()).or_default().insert(link.peer.clone());
                }
            }
        }
        graph
    }
}

/// Brokers, their cells and the two-way links between them, as one broker's database says.
#[derive(Clone, Debug, Default)]
pub(crate) struct Graph {
    pub(crate) cell_of: BTreeMap<BrokerName, CellName>,
    /// Every broker with an advert, per cell, sorted by name.
    pub(crate) members: BTreeMap<CellName, Vec<BrokerName>>,
    /// Two-way links, both directions present.
    pub(crate) links: BTreeMap<BrokerName, BTreeSet<BrokerName>>,
}

impl Graph {
    pub(crate) fn linked(&self, a: &BrokerName, b: &BrokerName) -> bool {
        self.links.get(a).is_some_and(|peers| peers.contains(b))
    }

    /// A broker counts as live when it has at least one two-way link; a crashed broker's last
    /// advert lingers, but its peers stop listing it.
    pub(crate) fn is_live(&self, broker: &BrokerName) -> bool {
        self.links.get(broker).is_some_and(|peers| !peers.is_empty())
    }

    pub(crate) fn members(&self, cell: &CellName) -> &[BrokerName] {
        self.members.get(cell).map_or(&[], Vec::as_slice)
    }

    /// Neighbouring cells: cells joined by at least one two-way link.
    pub(crate) fn cell_edges(&self) -> BTreeMap<CellName, BTreeSet<CellName>> {
        let mut edges: BTreeMap<CellName, BTreeSet<CellName>> = BTreeMap::new();
        for cell in self.members.keys() {
            edges.entry(cell.clone()).or_default();
        }
        for (broker, peers) in &self.links {
            let Some(cell) = self.cell_of.get(broker) else { continue };
            for peer in peers {
                match self.cell_of.get(peer) {
                    Some(peer_cell) if peer_cell != cell => {
                        edges.entry(cell.clone()).or_default().insert(peer_cell.clone());
                    }
                    _ => {}
                }
            }
        }
        edges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(origin: &str, cell: &str, incarnation: u64, sequence: u64, peers: &[(&str, &str)]) -> LinkStateAdvert {
        LinkStateAdvert {
            origin: origin.into(),
            cell: cell.into(),
            incarnation: Incarnation(incarnation),
            sequence,
            links: peers.iter().map(|(p, c)| AdvertisedLink { peer: (*p).into(), peer_cell: (*c).into() }).collect(),
        }
    }

    #[test]
    fn a_restart_supersedes_a_higher_sequence_of_the_old_incarnation() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        assert!(matches!(db.offer(advert("b", "B", 1, 50, &[])), Offer::Accepted));
        assert!(matches!(db.offer(advert("b", "B", 2, 0, &[])), Offer::Accepted));
        assert!(matches!(db.offer(advert("b", "B", 1, 51, &[])), Offer::Stale(_)));
        assert!(matches!(db.offer(advert("b", "B", 2, 0, &[])), Offer::Known));
    }

    #[test]
    fn a_link_counts_only_when_both_ends_advertise_it() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        db.set_own_links(vec![AdvertisedLink { peer: "b".into(), peer_cell: "B".into() }]);
        db.offer(advert("b", "B", 1, 1, &[]));
        assert!(!db.graph().linked(&"a".into(), &"b".into()));
        db.offer(advert("b", "B", 1, 2, &[("a", "A")]));
        let graph = db.graph();
        assert!(graph.linked(&"a".into(), &"b".into()) && graph.linked(&"b".into(), &"a".into()));
        assert_eq!(graph.cell_edges()[&CellName::new("A")].len(), 1);
    }

    #[test]
    fn equal_databases_have_equal_digests_and_any_change_alters_it() {
        let mut one = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        let mut two = LinkStateDb::new("b".into(), "B".into(), Incarnation(1));
        let a = one.own().clone();
        let b = two.own().clone();
        one.offer(b);
        two.offer(a);
        assert_eq!(one.digest(), two.digest());
        two.set_own_links(Vec::new());
        assert_ne!(one.digest(), two.digest());
    }

    #[test]
    fn our_own_advert_from_an_earlier_life_is_reported_not_stored() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        let offer = db.offer(advert("a", "A", 1, 9, &[("x", "X")]));
        assert!(matches!(offer, Offer::OwnNewer(_)));
        assert_eq!(db.outrun(9).sequence, 10);
    }
}
