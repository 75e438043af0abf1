//! Who is who between a guaranteed queue group's home and its members' brokers: the pure
//! bookkeeping of [`super::group_links`] (no I/O: maps in, numbers out).
//!
//! At the home a remote member is known by its broker and the number that broker gave it; the
//! group's work queue knows it by a number of the home's own ([`Homed`]). At a member's broker
//! a member whose group is kept elsewhere is waiting to be joined or joined ([`Away`]). A
//! break on the path between the two (`super::group_paths`) voids both sides' view: the home
//! gives that broker's members' leases back ([`Homed::peer_gone`]), the member's broker joins
//! them again once a path is there ([`Away::rejoin`], [`Away::unasked`]).

use std::collections::BTreeMap;

use tidings_delivery::SubendId;
use tidings_route::BrokerName;

/// At the home: remote members by (their broker, their number there), and back.
#[derive(Default)]
pub(super) struct Homed {
    by_remote: BTreeMap<(BrokerName, u64), SubendId>,
    by_local: BTreeMap<SubendId, (BrokerName, u64)>,
}

impl Homed {
    /// A JOIN from `peer` for its member `remote`: numbered `fresh` here, or `Err` with the
    /// number it already has (a JOIN repeated: nothing to do).
    pub(super) fn join(&mut self, peer: &BrokerName, remote: u64, fresh: SubendId) -> Result<SubendId, SubendId> {
        if let Some(known) = self.by_remote.get(&(peer.clone(), remote)) {
            return Err(*known);
        }
        self.by_remote.insert((peer.clone(), remote), fresh);
        self.by_local.insert(fresh, (peer.clone(), remote));
        Ok(fresh)
    }

    /// The number here of `peer`'s member `remote`, if it is joined.
    pub(super) fn local(&self, peer: &BrokerName, remote: u64) -> Option<SubendId> {
        self.by_remote.get(&(peer.clone(), remote)).copied()
    }

    /// `peer`'s member `remote` left (or was refused): its number here, to leave the group with.
    pub(super) fn leave(&mut self, peer: &BrokerName, remote: u64) -> Option<SubendId> {
        let local = self.by_remote.remove(&(peer.clone(), remote))?;
        self.by_local.remove(&local);
        Some(local)
    }

    /// The link to `peer` went down or was replaced: every member of it leaves (their numbers).
    pub(super) fn peer_gone(&mut self, peer: &BrokerName) -> Vec<SubendId> {
        let gone: Vec<u64> =
            self.by_remote.range((peer.clone(), 0)..=(peer.clone(), u64::MAX)).map(|(k, _)| k.1).collect();
        gone.into_iter().filter_map(|remote| self.leave(peer, remote)).collect()
    }
}

/// At a member's broker: one member of a group kept at another broker.
pub(super) struct AwayMember<T> {
    /// The group's home.
    pub(super) home: BrokerName,
    /// Whether the home confirmed the join since the last break.
    pub(super) joined: bool,
    /// Whether its JOIN went out since the last break (if not, it goes once a path is there).
    asked: bool,
    /// Whether its client was told SUBSCRIBED (once, at the first JOINED).
    told: bool,
    /// What the shell needs to deliver to it and to join it again.
    pub(super) session: T,
}

/// At a member's broker: its members whose group is kept elsewhere, by their subend here.
pub(super) struct Away<T> {
    members: BTreeMap<SubendId, AwayMember<T>>,
    /// Homes this broker lost frames to and could not tell yet: a RESET goes before the next
    /// JOIN, so the home lets go of leases it may have sent into the break.
    owed: std::collections::BTreeSet<BrokerName>,
}

impl<T> Default for Away<T> {
    fn default() -> Self {
        Away { members: BTreeMap::new(), owed: Default::default() }
    }
}

impl<T> Away<T> {
    /// A member joins a group kept at `home` (the shell sends JOIN if a link is up).
    pub(super) fn add(&mut self, member: SubendId, home: BrokerName, session: T) {
        self.members.insert(member, AwayMember { home, joined: false, asked: false, told: false, session });
    }

    /// The member's JOIN went out.
    pub(super) fn asked(&mut self, member: SubendId) {
        if let Some(entry) = self.members.get_mut(&member) {
            entry.asked = true;
        }
    }

    /// Members whose JOIN has not gone out since the last break, with their homes.
    pub(super) fn unasked(&self) -> Vec<(SubendId, BrokerName)> {
        self.members.iter().filter(|(_, e)| !e.asked).map(|(m, e)| (*m, e.home.clone())).collect()
    }

    /// A RESET is owed to `home` (`true`), or was sent (`false`); returns whether one was owed.
    pub(super) fn owe(&mut self, home: &BrokerName, owed: bool) -> bool {
        match owed {
            true => !self.owed.insert(home.clone()),
            false => self.owed.remove(home),
        }
    }

    /// The member, if it is one of these.
    pub(super) fn get(&self, member: SubendId) -> Option<&AwayMember<T>> {
        self.members.get(&member)
    }

    /// The home said JOINED: true the first time (its SUBSCRIBED goes now, once; a join again
    /// after a cut is not news to its client).
    pub(super) fn joined(&mut self, member: SubendId) -> bool {
        let Some(entry) = self.members.get_mut(&member) else { return false };
        entry.joined = true;
        !std::mem::replace(&mut entry.told, true)
    }

    /// The member left, or its join was refused.
    pub(super) fn remove(&mut self, member: SubendId) -> Option<AwayMember<T>> {
        self.members.remove(&member)
    }

    /// The path to `home` broke (or the home let them go): its members are no longer joined
    /// there; returns them, to send JOIN again once a path is there.
    pub(super) fn rejoin(&mut self, home: &BrokerName) -> Vec<SubendId> {
        let mut again = Vec::new();
        for (member, entry) in self.members.iter_mut().filter(|(_, e)| e.home == *home) {
            entry.joined = false;
            entry.asked = false;
            again.push(*member);
        }
        again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str) -> BrokerName {
        BrokerName::new(name)
    }

    #[test]
    fn the_home_numbers_each_remote_member_once_and_forgets_a_gone_peer() {
        let mut homed = Homed::default();
        assert_eq!(homed.join(&b("s1"), 7, SubendId(100)), Ok(SubendId(100)));
        assert_eq!(homed.join(&b("s1"), 7, SubendId(101)), Err(SubendId(100)), "a repeated JOIN");
        assert_eq!(homed.join(&b("s2"), 7, SubendId(102)), Ok(SubendId(102)), "the same number at another broker");
        assert_eq!(homed.join(&b("s1"), 8, SubendId(103)), Ok(SubendId(103)));
        assert_eq!(homed.local(&b("s2"), 7), Some(SubendId(102)));
        let mut gone = homed.peer_gone(&b("s1"));
        gone.sort();
        assert_eq!(gone, vec![SubendId(100), SubendId(103)]);
        assert_eq!(homed.local(&b("s1"), 7), None);
        assert_eq!(homed.leave(&b("s2"), 7), Some(SubendId(102)));
        assert_eq!(homed.leave(&b("s2"), 7), None, "left once");
    }

    #[test]
    fn a_member_is_subscribed_once_per_link_and_joins_again_after_a_cut() {
        let mut away = Away::default();
        away.add(SubendId(5), b("home"), ());
        away.add(SubendId(6), b("other"), ());
        assert_eq!(away.unasked(), vec![(SubendId(5), b("home")), (SubendId(6), b("other"))]);
        away.asked(SubendId(5));
        assert_eq!(away.unasked(), vec![(SubendId(6), b("other"))]);
        assert!(away.joined(SubendId(5)));
        assert!(!away.joined(SubendId(5)), "a second JOINED says nothing new");
        assert_eq!(away.rejoin(&b("home")), vec![SubendId(5)]);
        assert_eq!(away.unasked().len(), 2, "asked again after a break");
        assert!(!away.owe(&b("home"), true) && away.owe(&b("home"), true), "owed once");
        assert!(away.owe(&b("home"), false) && !away.owe(&b("home"), false), "paid once");
        assert!(away.get(SubendId(5)).is_some_and(|m| !m.joined));
        assert!(!away.joined(SubendId(5)), "joined again after a cut: its client knows already");
        assert!(away.get(SubendId(5)).is_some_and(|m| m.joined));
        assert!(away.remove(SubendId(5)).is_some());
        assert!(away.rejoin(&b("home")).is_empty());
        assert!(!away.joined(SubendId(9)), "an unknown member");
    }
}
