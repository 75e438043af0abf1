//! The client's server list and which of its brokers the client tries first
//! (`docs/replication.md`, "Takeover" and "Clients").
//!
//! The list is the user's `a,b,c` entries first, then the addresses the broker told the client
//! (SERVERS: the broker's cell mates), deduplicated and bounded ([`MAX_TOLD`]); each SERVERS
//! replaces the told part, and a client built with `ignore_told_servers` keeps the user's list
//! alone. So a publisher given one broker of a replicated cell still reaches a mate when that
//! broker dies.
//!
//! The list is tried in order from its first entry, so a client reaches the first live broker;
//! but a live broker that does not lead a replicated pubend refuses its guaranteed publishes
//! (a retryable refusal: nothing was logged). A client with a list then moves on: it drops that
//! connection, starts the next round of tries just past the broker that refused, and sends its
//! unacknowledged window again there. A client with one broker reconnects to it and sends its
//! window again: a refusal there is most often a leadership blip (a replica back from a wipe
//! bumps the group's term, and the leader closes its log until it is elected again, about a
//! second), and the broker holds a publish while its group has no leader. The moves are
//! bounded: after `2 × max(len, 2)` refusals in a row with no acknowledgement between them, and
//! at least [`PATIENCE`] since the first of them, the refusal goes to the publisher. Both
//! bounds: a move takes a reconnect (tens of milliseconds), so a count alone would give up
//! before a group elects a leader, and time alone would strand nobody but retry without end at
//! a broker that refuses at once.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a client keeps moving on refusals with no acknowledgement, at least: longer than a
/// replica group takes to elect a leader (its election timeout is about a second) and a broker
/// deposed meanwhile to reopen its pubend.
pub(crate) const PATIENCE: Duration = Duration::from_secs(5);

/// The most told addresses a client keeps (beyond the user's own).
pub(crate) const MAX_TOLD: usize = 16;

/// The server list of one client and its rotation state.
#[derive(Debug)]
pub(crate) struct Failover {
    list: Mutex<List>,
    /// Whether SERVERS frames are ignored (the user's list alone).
    ignore_told: bool,
    /// Moves on refusal since the last acknowledgement, and when the first of them was.
    moves: Mutex<(usize, Option<Instant>)>,
}

#[derive(Debug)]
struct List {
    /// How many entries, at the head, are the user's.
    user: usize,
    /// The user's entries, then the told ones not among them.
    entries: Vec<String>,
    /// The entry the next round of tries starts at.
    first: usize,
    /// The entry the live connection reached.
    connected: usize,
}

impl Failover {
    /// For the user's list `user` (one entry: never moves unless told more); with
    /// `ignore_told`, what brokers tell is ignored.
    pub(crate) fn new<'a>(user: impl Iterator<Item = &'a str>, ignore_told: bool) -> Failover {
        let mut entries: Vec<String> = Vec::new();
        for address in user {
            if !entries.iter().any(|e| e == address) {
                entries.push(address.to_string());
            }
        }
        let list = List { user: entries.len(), entries, first: 0, connected: 0 };
        Failover { list: Mutex::new(list), ignore_told, moves: Mutex::new((0, None)) }
    }

    /// The entries in the order to try them now: from the first of this round, wrapping
    /// around, each with its index.
    pub(crate) fn order(&self) -> Vec<(usize, String)> {
        let list = self.list.lock();
        let len = list.entries.len();
        (0..len).map(|i| (list.first + i) % len).map(|i| (i, list.entries[i].clone())).collect()
    }

    /// The whole list now, the user's entries first.
    pub(crate) fn entries(&self) -> Vec<String> {
        self.list.lock().entries.clone()
    }

    /// The connection reached entry `index`.
    pub(crate) fn connected(&self, index: usize) {
        self.list.lock().connected = index;
    }

    /// The broker told the client its cell's addresses: they replace the told part of the
    /// list (after the user's entries, without repeats, at most [`MAX_TOLD`]). Told entries the
    /// client knew already keep their places and new ones go after them: each broker tells its
    /// own address first, and a list reordered by each broker it reached would send a client
    /// refused by two mates back and forth between them, never to the third, which may be the
    /// one that leads. The live connection's entry and the next round's start keep pointing at
    /// the same addresses.
    pub(crate) fn told(&self, addresses: &[String]) {
        if self.ignore_told {
            return;
        }
        let mut list = self.list.lock();
        let connected = list.entries.get(list.connected).cloned();
        let first = list.entries.get(list.first).cloned();
        let user = list.user;
        let told: Vec<&str> = addresses.iter().map(|a| a.trim()).filter(|a| !a.is_empty()).collect();
        let known: Vec<String> = list.entries.split_off(user);
        let kept = known.iter().map(String::as_str).filter(|k| told.contains(k));
        for address in kept.chain(told.iter().copied()) {
            if list.entries.len() == user + MAX_TOLD {
                break;
            }
            if !list.entries.iter().any(|e| e == address) {
                list.entries.push(address.to_string());
            }
        }
        let at = |list: &List, address: Option<String>| {
            address.and_then(|a| list.entries.iter().position(|e| *e == a)).unwrap_or(0)
        };
        list.connected = at(&list, connected);
        list.first = at(&list, first);
    }

    /// A guaranteed publish was acknowledged: the broker serves the pubend.
    pub(crate) fn acknowledged(&self) {
        *self.moves.lock() = (0, None);
    }

    /// The connected broker refused a guaranteed publish as unavailable: `true` if the client
    /// should move on (the next tries start past it, the same broker when it is the only one),
    /// `false` if the refusal stands (`2 × max(len, 2)` moves already with no acknowledgement,
    /// the first of them [`PATIENCE`] ago or more).
    pub(crate) fn refused(&self) -> bool {
        self.refused_at(Instant::now())
    }

    /// [`Failover::refused`] at `now`.
    fn refused_at(&self, now: Instant) -> bool {
        let mut list = self.list.lock();
        let len = list.entries.len();
        let mut moves = self.moves.lock();
        let (count, since) = &mut *moves;
        let since = *since.get_or_insert(now);
        if *count >= 2 * len.max(2) && now.duration_since(since) >= PATIENCE {
            return false;
        }
        *count += 1;
        list.first = (list.connected + 1) % len.max(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::{Failover, MAX_TOLD, PATIENCE};

    fn indices(failover: &Failover) -> Vec<usize> {
        failover.order().into_iter().map(|(i, _)| i).collect()
    }

    #[test]
    fn a_refusal_starts_the_next_tries_past_the_broker_that_refused() {
        let failover = Failover::new(["a", "b", "c"].into_iter(), false);
        assert_eq!(indices(&failover), [0, 1, 2]);
        failover.connected(1);
        assert!(failover.refused());
        assert_eq!(indices(&failover), [2, 0, 1]);
        failover.connected(2);
        assert!(failover.refused());
        assert_eq!(indices(&failover), [0, 1, 2]);
    }

    #[test]
    fn refusals_stand_after_two_rounds_and_the_patience_without_an_acknowledgement() {
        let start = Instant::now();
        let later = start + PATIENCE;
        let one = Failover::new(["a"].into_iter(), false);
        assert!((0..4).all(|_| one.refused_at(start)), "one broker is tried again");
        assert_eq!(one.order(), [(0, "a".to_string())]);
        assert!((0..10).all(|_| one.refused_at(start + PATIENCE / 2)), "within the patience: tried again");
        assert!(!one.refused_at(later), "a refusal after the patience and four moves stands");
        let failover = Failover::new(["a", "b"].into_iter(), false);
        assert!(failover.refused_at(start));
        assert!((0..2).all(|_| failover.refused_at(later)), "after the patience, still four moves");
        assert!(failover.refused_at(later));
        assert!(!failover.refused_at(later), "the fifth refusal in a row stands");
        failover.acknowledged();
        assert!(failover.refused_at(later), "an acknowledgement starts the count again");
    }

    #[test]
    fn told_addresses_follow_the_users_without_repeats_and_replace_the_last_told() {
        let failover = Failover::new(["p1:1"].into_iter(), false);
        failover.told(&["p1:1".into(), "p2:2".into(), "p3:3".into()]);
        assert_eq!(failover.entries(), ["p1:1", "p2:2", "p3:3"]);
        failover.connected(2);
        failover.told(&["p3:3".into(), "p4:4".into()]);
        assert_eq!(failover.entries(), ["p1:1", "p3:3", "p4:4"], "the user's entry stays; p2 was not told again");
        assert!(failover.refused());
        assert_eq!(failover.order()[0].1, "p4:4", "the next round starts past p3, where the connection is");
        let many: Vec<String> = (0..100).map(|i| format!("h:{i}")).collect();
        failover.told(&many);
        assert_eq!(failover.entries().len(), 1 + MAX_TOLD);
    }

    #[test]
    fn a_client_refused_by_each_mate_goes_round_the_whole_cell() {
        // Each broker tells its own address first; p1 (the user's entry) refused, then p2 and
        // p3 refuse too: the next try is p1 again, not p2.
        let failover = Failover::new(["p1:1"].into_iter(), false);
        failover.told(&["p1:1".into(), "p2:2".into(), "p3:3".into()]);
        assert!(failover.refused());
        let mut tried = Vec::new();
        for told in [["p2:2", "p1:1", "p3:3"], ["p3:3", "p1:1", "p2:2"], ["p1:1", "p2:2", "p3:3"]] {
            let (index, address) = failover.order()[0].clone();
            failover.connected(index);
            tried.push(address.clone());
            assert_eq!(told[0], address);
            failover.told(&told.map(String::from));
            assert!(failover.refused());
        }
        assert_eq!(tried, ["p2:2", "p3:3", "p1:1"]);
        assert_eq!(failover.entries(), ["p1:1", "p2:2", "p3:3"]);
    }

    #[test]
    fn a_client_that_ignores_told_addresses_keeps_its_own_list() {
        let failover = Failover::new(["p1:1"].into_iter(), true);
        failover.told(&["p2:2".into()]);
        assert_eq!(failover.entries(), ["p1:1"]);
        assert!(failover.refused(), "one broker: tried again");
        assert_eq!(failover.order(), [(0, "p1:1".to_string())]);
    }
}
