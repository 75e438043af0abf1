//! Which links a guaranteed queue group's GROUP frames went over, per pair of ends: the pure
//! bookkeeping that lets brokers relay GROUP between a member's broker and the group's home
//! without losing a frame unnoticed (docs/protocol.md, "Guaranteed queue groups").
//!
//! Frames between two ends must arrive in order and none may be lost unnoticed: a lost LEASE
//! would hold its message at a member that never saw it, a lost ACK or LEAVE would hold it at
//! the home for ever. Every broker that sends or hands on GROUP frames keeps, per link, which
//! pairs of ends its frames went over it. When that link goes down (or is replaced), the ends
//! on this side of it are told ([`Broken`]): the broker's own end directly, the others by a
//! RESET frame. Each side of a lost link tells its own side, so both ends hear of a break at
//! any hop. A pair's next hop sticks while it stays on a shortest path (frames keep their
//! order); when it moves while the old link is up, or no hop is left, the ends are told too.
//!
//! No group state: names of ends and links only, forgotten with the link.

use std::collections::{BTreeMap, BTreeSet};

use tidings_route::BrokerName;

/// Tell `near` that what passed between it and `far` may have been lost.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Broken {
    /// The end to tell (this broker, or one reachable without the lost link).
    pub(super) near: BrokerName,
    /// The other end.
    pub(super) far: BrokerName,
}

/// The links GROUP frames went over here.
#[derive(Default)]
pub(super) struct Paths {
    /// Per (origin, dest): the peer this broker hands their frames to.
    next: BTreeMap<(BrokerName, BrokerName), BrokerName>,
    /// Per linked peer: the pairs (far end behind that link, near end on this side) whose
    /// frames crossed it.
    behind: BTreeMap<BrokerName, BTreeSet<(BrokerName, BrokerName)>>,
}

impl Paths {
    /// A frame from `origin` for `dest` (arrived over the link to `from`; `None`: made here),
    /// with routing's next `hops` toward `dest`: the peer to hand it to, or `None` (no way on).
    /// What this makes the ends forget goes to `broken`: a moved path tells both ends, no way
    /// on tells `origin`, unless `quiet` (a RESET lost is no news: its ends hear of the break
    /// from the other side).
    pub(super) fn forward(
        &mut self,
        (origin, dest): (&BrokerName, &BrokerName),
        from: Option<&BrokerName>,
        hops: &[BrokerName],
        quiet: bool,
        broken: &mut Vec<Broken>,
    ) -> Option<BrokerName> {
        if let Some(from) = from {
            self.behind.entry(from.clone()).or_default().insert((origin.clone(), dest.clone()));
        }
        let key = (origin.clone(), dest.clone());
        let old = self.next.get(&key).cloned();
        let hop = match &old {
            Some(old) if hops.contains(old) => return Some(old.clone()),
            _ => hops.first().cloned(),
        };
        if let Some(old) = old {
            // The path moved (or ended): frames sent before may arrive after, or not at all.
            if let Some(pairs) = self.behind.get_mut(&old) {
                pairs.remove(&(dest.clone(), origin.clone()));
            }
            self.next.remove(&key);
            broken.push(Broken { near: origin.clone(), far: dest.clone() });
            if hop.is_some() {
                broken.push(Broken { near: dest.clone(), far: origin.clone() });
            }
        } else if hop.is_none() && !quiet {
            broken.push(Broken { near: origin.clone(), far: dest.clone() });
        }
        let hop = hop?;
        self.next.insert(key, hop.clone());
        self.behind.entry(hop.clone()).or_default().insert((dest.clone(), origin.clone()));
        Some(hop)
    }

    /// A frame from `origin` for this broker (`me`) arrived over the link to `from`.
    pub(super) fn arrived(&mut self, origin: &BrokerName, me: &BrokerName, from: &BrokerName) {
        self.behind.entry(from.clone()).or_default().insert((origin.clone(), me.clone()));
    }

    /// The link to `peer` went down or was replaced: every pair whose frames crossed it, each
    /// end on this side told once.
    pub(super) fn link_down(&mut self, peer: &BrokerName) -> Vec<Broken> {
        self.next.retain(|_, hop| hop != peer);
        let pairs = self.behind.remove(peer).unwrap_or_default();
        let told: BTreeSet<Broken> = pairs.into_iter().map(|(far, near)| Broken { near, far }).collect();
        told.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str) -> BrokerName {
        BrokerName::new(name)
    }

    fn broken(near: &str, far: &str) -> Broken {
        Broken { near: b(near), far: b(far) }
    }

    /// The relay b3 on s3 - b3 - p1 (s3 a member's broker, p1 the home).
    #[test]
    fn a_relay_that_loses_a_link_tells_the_end_on_its_own_side() {
        let mut paths = Paths::default();
        let mut out = Vec::new();
        assert_eq!(paths.forward((&b("s3"), &b("p1")), Some(&b("s3")), &[b("p1")], false, &mut out), Some(b("p1")));
        assert_eq!(paths.forward((&b("p1"), &b("s3")), Some(&b("p1")), &[b("s3")], false, &mut out), Some(b("s3")));
        assert!(out.is_empty());
        assert_eq!(paths.link_down(&b("p1")), vec![broken("s3", "p1")], "s3 is told, by RESET from p1");
        assert_eq!(paths.link_down(&b("s3")), vec![broken("p1", "s3")], "p1 is told, by RESET from s3");
        assert!(paths.link_down(&b("s3")).is_empty(), "told once");
    }

    #[test]
    fn the_ends_hear_of_their_own_links() {
        let (mut home, mut member, mut out) = (Paths::default(), Paths::default(), Vec::new());
        // s3 sends JOIN through b3; p1 answers through b4.
        member.forward((&b("s3"), &b("p1")), None, &[b("b3"), b("b4")], false, &mut out);
        home.arrived(&b("s3"), &b("p1"), &b("b3"));
        home.forward((&b("p1"), &b("s3")), None, &[b("b4")], false, &mut out);
        member.arrived(&b("p1"), &b("s3"), &b("b4"));
        assert!(out.is_empty());
        assert_eq!(member.link_down(&b("b3")), vec![broken("s3", "p1")]);
        assert_eq!(home.link_down(&b("b3")), vec![broken("p1", "s3")], "it came in over b3");
        assert_eq!(member.link_down(&b("b4")), vec![broken("s3", "p1")]);
        assert_eq!(home.link_down(&b("b4")), vec![broken("p1", "s3")]);
    }

    #[test]
    fn a_next_hop_sticks_while_it_is_shortest_and_a_move_tells_both_ends() {
        let mut paths = Paths::default();
        let mut out = Vec::new();
        let pair = (&b("s3"), &b("p1"));
        assert_eq!(paths.forward(pair, Some(&b("s3")), &[b("p1"), b("x")], false, &mut out), Some(b("p1")));
        assert_eq!(paths.forward(pair, Some(&b("s3")), &[b("a"), b("p1")], false, &mut out), Some(b("p1")), "kept");
        assert!(out.is_empty());
        assert_eq!(paths.forward(pair, Some(&b("s3")), &[b("x")], false, &mut out), Some(b("x")), "moved");
        assert_eq!(out, vec![broken("s3", "p1"), broken("p1", "s3")]);
        out.clear();
        assert_eq!(paths.link_down(&b("p1")), vec![], "the old link carries nothing of theirs now");
        assert_eq!(paths.forward(pair, Some(&b("s3")), &[], false, &mut out), None, "no way on");
        assert_eq!(out, vec![broken("s3", "p1")], "the origin is told");
    }

    #[test]
    fn a_frame_with_no_way_on_tells_its_origin_unless_quiet() {
        let mut paths = Paths::default();
        let mut out = Vec::new();
        assert_eq!(paths.forward((&b("s3"), &b("p1")), None, &[], false, &mut out), None);
        assert_eq!(out, vec![broken("s3", "p1")]);
        out.clear();
        assert_eq!(paths.forward((&b("p1"), &b("s3")), Some(&b("b3")), &[], true, &mut out), None);
        assert!(out.is_empty(), "a RESET lost is no news");
    }
}
