//! Link state: every broker floods an advert listing its up links, versioned by its incarnation
//! and a sequence number, and every broker keeps the newest advert of every origin. From that
//! database each broker derives the same graph, which is what lets all of them compute the same
//! trees without talking about trees.
//!
//! Held adverts of other origins age out: each remembers when it was last accepted, origins
//! re-issue theirs every quarter of the maximum age, and one not renewed within the maximum age
//! is dropped (see the router's `links` module for who may vouch for an advert). A forged
//! advert therefore dies within the maximum age of the last time a path accepted it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::names::{BrokerName, CellName, Incarnation, Millis, PubendId, ViewId};
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
    /// The guaranteed-delivery pubends the origin hosts, sorted: how every broker learns a
    /// pubend's home (its tree's root), riding on the flood that already reaches everyone.
    #[serde(default)]
    pub pubends: Vec<PubendId>,
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
    /// We hold a newer version: the sender is behind (it will hear the newer one by flooding).
    Stale,
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
    /// When each other origin's advert was last accepted.
    accepted_at: BTreeMap<BrokerName, Millis>,
}

impl LinkStateDb {
    pub(crate) fn new(me: BrokerName, cell: CellName, incarnation: Incarnation) -> Self {
        let own = LinkStateAdvert {
            origin: me.clone(),
            cell,
            incarnation,
            sequence: 0,
            links: Vec::new(),
            pubends: Vec::new(),
        };
        let adverts = BTreeMap::from([(me, own.clone())]);
        Self { own, adverts, accepted_at: BTreeMap::new() }
    }

    /// Re-issues our own advert unchanged but for a higher sequence, so that it is renewed
    /// everywhere before it ages out.
    pub(crate) fn refresh_own(&mut self) -> LinkStateAdvert {
        self.bump_own(|_| {})
    }

    /// Drops adverts of other origins not renewed for `max_age_ms`; returns whether any went.
    pub(crate) fn expire(&mut self, now: Millis, max_age_ms: u64) -> bool {
        let old: Vec<BrokerName> = self
            .accepted_at
            .iter()
            .filter(|(_, at)| at.after(max_age_ms) <= now)
            .map(|(origin, _)| origin.clone())
            .collect();
        for origin in &old {
            self.accepted_at.remove(origin);
            self.adverts.remove(origin);
        }
        !old.is_empty()
    }

    /// When the oldest held advert of another origin ages out.
    pub(crate) fn next_expiry(&self, max_age_ms: u64) -> Option<Millis> {
        self.accepted_at.values().min().map(|at| at.after(max_age_ms))
    }

    /// Origins held, our own included.
    pub(crate) fn len(&self) -> usize {
        self.adverts.len()
    }

    /// The advert held for an origin.
    pub(crate) fn get(&self, origin: &BrokerName) -> Option<&LinkStateAdvert> {
        self.adverts.get(origin)
    }

    pub(crate) fn own(&self) -> &LinkStateAdvert {
        &self.own
    }

    /// Replaces our own link list, bumping the sequence; returns the new advert to flood.
    pub(crate) fn set_own_links(&mut self, links: Vec<AdvertisedLink>) -> LinkStateAdvert {
        self.bump_own(|own| own.links = links)
    }

    /// Replaces our own hosted pubend list, bumping the sequence; returns the new advert to flood.
    pub(crate) fn set_own_pubends(&mut self, pubends: Vec<PubendId>) -> LinkStateAdvert {
        self.bump_own(|own| own.pubends = pubends)
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

    pub(crate) fn offer(&mut self, advert: LinkStateAdvert, now: Millis) -> Offer {
        if advert.origin == self.own.origin {
            return if advert.version() > self.own.version() && advert != self.own {
                Offer::OwnNewer(advert)
            } else {
                Offer::Known
            };
        }
        match self.adverts.get(&advert.origin) {
            Some(held) if held.version() == advert.version() => Offer::Known,
            Some(held) if held.version() > advert.version() => Offer::Stale,
            _ => {
                self.accepted_at.insert(advert.origin.clone(), now);
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
            for pubend in &advert.pubends {
                hash = mix(hash ^ pubend.0);
            }
        }
        ViewId(hash)
    }

    /// The graph of links that both ends advertise, restricted to the brokers we can reach. A
    /// link only one end lists is either still coming up or already going down, and using it
    /// would make brokers disagree; the last adverts of brokers that died together still list
    /// each other, and only reachability from us tells that island is gone.
    pub(crate) fn graph(&self) -> Graph {
        let adverts: Vec<&LinkStateAdvert> = self.adverts.values().collect();
        let position = |name: &BrokerName| adverts.binary_search_by(|a| a.origin.cmp(name)).ok();
        let listed: Vec<Vec<usize>> = adverts
            .iter()
            .map(|advert| {
                let mut peers: Vec<usize> = advert.links.iter().filter_map(|link| position(&link.peer)).collect();
                peers.sort_unstable();
                peers.dedup();
                peers
            })
            .collect();
        let two_way: Vec<Vec<usize>> = listed
            .iter()
            .enumerate()
            .map(|(me, peers)| {
                peers.iter().copied().filter(|peer| *peer != me && listed[*peer].binary_search(&me).is_ok()).collect()
            })
            .collect();
        let mut reached = vec![false; adverts.len()];
        let mut frontier: Vec<usize> = position(&self.own.origin).into_iter().collect();
        frontier.iter().for_each(|me| reached[*me] = true);
        while let Some(broker) = frontier.pop() {
            for peer in &two_way[broker] {
                if !reached[*peer] {
                    reached[*peer] = true;
                    frontier.push(*peer);
                }
            }
        }
        // Renumber the reached brokers densely, keeping name order.
        let mut renumbered = vec![usize::MAX; adverts.len()];
        let mut brokers = Vec::new();
        for (old, advert) in adverts.iter().enumerate().filter(|(old, _)| reached[*old]) {
            renumbered[old] = brokers.len();
            brokers.push(advert.origin.clone());
        }
        let cells: Vec<CellName> = adverts
            .iter()
            .enumerate()
            .filter(|(old, _)| reached[*old])
            .map(|(_, advert)| advert.cell.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut graph = Graph {
            brokers,
            broker_cell: Vec::new(),
            links: Vec::new(),
            members: vec![Vec::new(); cells.len()],
            cells,
        };
        for (old, advert) in adverts.iter().enumerate().filter(|(old, _)| reached[*old]) {
            let cell = graph.cell_index(&advert.cell).unwrap_or(0);
            graph.members[cell].push(graph.broker_cell.len());
            graph.broker_cell.push(cell);
            graph.links.push(two_way[old].iter().map(|peer| renumbered[*peer]).collect());
        }
        graph
    }
}

/// The brokers we can reach, their cells and the two-way links between them, as one broker's
/// database says. Brokers and cells are numbered in name order, so every broker with the same
/// database numbers them alike and "lowest index" means "lowest name".
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub(crate) struct Graph {
    /// Reachable brokers, sorted by name.
    pub(crate) brokers: Vec<BrokerName>,
    /// Each broker's cell index.
    pub(crate) broker_cell: Vec<usize>,
    /// Each broker's two-way links, as sorted broker indices.
    pub(crate) links: Vec<Vec<usize>>,
    /// Cells of reachable brokers, sorted by name.
    pub(crate) cells: Vec<CellName>,
    /// Each cell's brokers, as sorted broker indices.
    pub(crate) members: Vec<Vec<usize>>,
}

impl Graph {
    pub(crate) fn broker_index(&self, name: &BrokerName) -> Option<usize> {
        self.brokers.binary_search(name).ok()
    }

    pub(crate) fn cell_index(&self, name: &CellName) -> Option<usize> {
        self.cells.binary_search(name).ok()
    }

    pub(crate) fn cell_of(&self, name: &BrokerName) -> Option<&CellName> {
        self.broker_index(name).map(|index| &self.cells[self.broker_cell[index]])
    }

    pub(crate) fn linked(&self, a: usize, b: usize) -> bool {
        self.links.get(a).is_some_and(|peers| peers.binary_search(&b).is_ok())
    }

    /// Whether two brokers, by name, share a two-way link.
    pub(crate) fn linked_by_name(&self, a: &BrokerName, b: &BrokerName) -> bool {
        match (self.broker_index(a), self.broker_index(b)) {
            (Some(a), Some(b)) => self.linked(a, b),
            _ => false,
        }
    }

    /// A broker's two-way peers, by name, sorted.
    pub(crate) fn neighbours(&self, name: &BrokerName) -> Vec<BrokerName> {
        self.broker_index(name)
            .map(|index| self.links[index].iter().map(|peer| self.brokers[*peer].clone()).collect())
            .unwrap_or_default()
    }

    /// Hops from the nearest of `starts` to every broker (`usize::MAX`: unreachable).
    pub(crate) fn distances_from_all(&self, starts: &[usize]) -> Vec<usize> {
        let mut distance = vec![usize::MAX; self.brokers.len()];
        let mut queue: std::collections::VecDeque<usize> = starts.iter().copied().collect();
        for start in starts {
            distance[*start] = 0;
        }
        while let Some(broker) = queue.pop_front() {
            for peer in &self.links[broker] {
                if distance[*peer] == usize::MAX {
                    distance[*peer] = distance[broker] + 1;
                    queue.push_back(*peer);
                }
            }
        }
        distance
    }

    /// Neighbouring cells: cells joined by at least one two-way link, sorted.
    pub(crate) fn cell_edges(&self) -> Vec<Vec<usize>> {
        let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); self.cells.len()];
        for (broker, peers) in self.links.iter().enumerate() {
            let cell = self.broker_cell[broker];
            for peer in peers {
                let peer_cell = self.broker_cell[*peer];
                if peer_cell != cell {
                    edges[cell].insert(peer_cell);
                }
            }
        }
        edges.into_iter().map(|set| set.into_iter().collect()).collect()
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
            pubends: Vec::new(),
        }
    }

    #[test]
    fn a_restart_supersedes_a_higher_sequence_of_the_old_incarnation() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        assert!(matches!(db.offer(advert("b", "B", 1, 50, &[]), Millis(0)), Offer::Accepted));
        assert!(matches!(db.offer(advert("b", "B", 2, 0, &[]), Millis(0)), Offer::Accepted));
        assert!(matches!(db.offer(advert("b", "B", 1, 51, &[]), Millis(0)), Offer::Stale));
        assert!(matches!(db.offer(advert("b", "B", 2, 0, &[]), Millis(0)), Offer::Known));
    }

    #[test]
    fn a_link_counts_only_when_both_ends_advertise_it() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        db.set_own_links(vec![AdvertisedLink { peer: "b".into(), peer_cell: "B".into() }]);
        db.offer(advert("b", "B", 1, 1, &[]), Millis(0));
        assert!(!db.graph().linked_by_name(&"a".into(), &"b".into()));
        db.offer(advert("b", "B", 1, 2, &[("a", "A")]), Millis(0));
        let graph = db.graph();
        assert!(graph.linked_by_name(&"a".into(), &"b".into()) && graph.linked_by_name(&"b".into(), &"a".into()));
        assert_eq!(graph.cell_edges(), vec![vec![1], vec![0]]);
    }

    #[test]
    fn brokers_that_died_together_do_not_linger_as_a_linked_island() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        db.set_own_links(vec![AdvertisedLink { peer: "b".into(), peer_cell: "B".into() }]);
        db.offer(advert("b", "B", 1, 1, &[("a", "A")]), Millis(0));
        db.offer(advert("x", "X", 1, 1, &[("y", "Y")]), Millis(0));
        db.offer(advert("y", "Y", 1, 1, &[("x", "X")]), Millis(0));
        let graph = db.graph();
        assert!(graph.linked_by_name(&"a".into(), &"b".into()));
        assert!(!graph.linked_by_name(&"x".into(), &"y".into()));
        assert_eq!(graph.cells, vec![CellName::new("A"), CellName::new("B")]);
    }

    #[test]
    fn equal_databases_have_equal_digests_and_any_change_alters_it() {
        let mut one = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        let mut two = LinkStateDb::new("b".into(), "B".into(), Incarnation(1));
        let a = one.own().clone();
        let b = two.own().clone();
        one.offer(b, Millis(0));
        two.offer(a, Millis(0));
        assert_eq!(one.digest(), two.digest());
        two.set_own_links(Vec::new());
        assert_ne!(one.digest(), two.digest());
    }

    #[test]
    fn an_advert_not_renewed_within_the_maximum_age_is_dropped() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        db.offer(advert("b", "B", 1, 1, &[]), Millis(100));
        db.offer(advert("c", "C", 1, 1, &[]), Millis(500));
        assert_eq!(db.next_expiry(1000), Some(Millis(1100)));
        assert!(!db.expire(Millis(1099), 1000));
        assert!(db.expire(Millis(1100), 1000));
        assert!(db.get(&"b".into()).is_none() && db.get(&"c".into()).is_some());
        db.offer(advert("c", "C", 1, 2, &[]), Millis(1400));
        assert!(!db.expire(Millis(1600), 1000), "renewed at 1400");
        assert!(db.get(&"a".into()).is_some(), "our own advert never ages out");
    }

    #[test]
    fn our_own_advert_from_an_earlier_life_is_reported_not_stored() {
        let mut db = LinkStateDb::new("a".into(), "A".into(), Incarnation(1));
        let offer = db.offer(advert("a", "A", 1, 9, &[("x", "X")]), Millis(0));
        assert!(matches!(offer, Offer::OwnNewer(_)));
        assert_eq!(db.outrun(9).sequence, 10);
    }
}
