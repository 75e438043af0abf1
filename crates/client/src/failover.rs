//! Which broker of an `a,b,c` server list the client tries first (`docs/replication.md`,
//! "Takeover"). The list is tried in order from its first entry, so a client reaches the first
//! live broker; but a live broker that does not lead a replicated pubend refuses its guaranteed
//! publishes (a retryable refusal: nothing was logged). A client with a list then moves on: it
//! drops that connection, starts the next round of tries just past the broker that refused,
//! and sends its unacknowledged window again there. A client with one broker reconnects to it
//! and sends its window again: a refusal there is most often a leadership blip (a replica back
//! from a wipe bumps the group's term, and the leader closes its log until it is elected again,
//! about a second), and the broker holds a publish while its group has no leader. The moves are
//! bounded: after `2 × max(len, 2)` refusals in a row with no acknowledgement between them, the
//! refusal goes to the publisher.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The rotation state of one client's server list.
#[derive(Debug)]
pub(crate) struct Failover {
    /// Brokers in the list.
    len: usize,
    /// Where the next round of tries starts.
    first: AtomicUsize,
    /// The entry the live connection reached.
    connected: AtomicUsize,
    /// Moves on refusal since the last acknowledgement.
    moves: AtomicUsize,
}

impl Failover {
    /// For a list of `len` brokers (one: never moves).
    pub(crate) fn new(len: usize) -> Failover {
        Failover { len, first: AtomicUsize::new(0), connected: AtomicUsize::new(0), moves: AtomicUsize::new(0) }
    }

    /// The entries in the order to try them now: from `first`, wrapping around.
    pub(crate) fn order(&self) -> impl Iterator<Item = usize> + use<> {
        let (len, first) = (self.len.max(1), self.first.load(Ordering::Relaxed));
        (0..len).map(move |i| (first + i) % len)
    }

    /// The connection reached entry `index`.
    pub(crate) fn connected(&self, index: usize) {
        self.connected.store(index, Ordering::Relaxed);
    }

    /// A guaranteed publish was acknowledged: the broker serves the pubend.
    pub(crate) fn acknowledged(&self) {
        self.moves.store(0, Ordering::Relaxed);
    }

    /// The connected broker refused a guaranteed publish as unavailable: `true` if the client
    /// should move on (the next tries start past it, the same broker when it is the only one),
    /// `false` if the refusal stands (`2 × max(len, 2)` moves already with no acknowledgement).
    pub(crate) fn refused(&self) -> bool {
        if self.moves.fetch_add(1, Ordering::Relaxed) >= 2 * self.len.max(2) {
            return false;
        }
        let past = (self.connected.load(Ordering::Relaxed) + 1) % self.len.max(1);
        self.first.store(past, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Failover;

    #[test]
    fn a_refusal_starts_the_next_tries_past_the_broker_that_refused() {
        let failover = Failover::new(3);
        assert_eq!(failover.order().collect::<Vec<_>>(), [0, 1, 2]);
        failover.connected(1);
        assert!(failover.refused());
        assert_eq!(failover.order().collect::<Vec<_>>(), [2, 0, 1]);
        failover.connected(2);
        assert!(failover.refused());
        assert_eq!(failover.order().collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn refusals_stand_after_two_rounds_without_an_acknowledgement() {
        let one = Failover::new(1);
        assert!((0..4).all(|_| one.refused()), "one broker is tried again");
        assert_eq!(one.order().collect::<Vec<_>>(), [0]);
        assert!(!one.refused(), "the fifth refusal in a row stands");
        let failover = Failover::new(2);
        assert!((0..4).all(|_| failover.refused()));
        assert!(!failover.refused(), "the fifth refusal in a row stands");
        failover.acknowledged();
        assert!(failover.refused(), "an acknowledgement starts the count again");
    }
}
