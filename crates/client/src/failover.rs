//! Which broker of an `a,b,c` server list the client tries first (`docs/replication.md`,
//! "Takeover"). The list is tried in order from its first entry, so a client reaches the first
//! live broker; but a live broker that does not lead a replicated pubend refuses its guaranteed
//! publishes (a retryable refusal: nothing was logged). A client with a list then moves on: it
//! drops that connection, starts the next round of tries just past the broker that refused,
//! and sends its unacknowledged window again there. The moves are bounded: after `2 × len`
//! refusals in a row with no acknowledgement between them, the refusal goes to the publisher as
//! it would with one server.

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
    /// should move on (the next tries start past it), `false` if the refusal stands (one
    /// broker in the list, or `2 × len` moves already with no acknowledgement).
    pub(crate) fn refused(&self) -> bool {
        if self.len < 2 || self.moves.fetch_add(1, Ordering::Relaxed) >= 2 * self.len {
            return false;
        }
        let past = (self.connected.load(Ordering::Relaxed) + 1) % self.len;
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
    fn refusals_stand_with_one_broker_or_after_two_rounds_without_an_acknowledgement() {
        assert!(!Failover::new(1).refused());
        let failover = Failover::new(2);
        assert!((0..4).all(|_| failover.refused()));
        assert!(!failover.refused(), "the fifth refusal in a row stands");
        failover.acknowledged();
        assert!(failover.refused(), "an acknowledgement starts the count again");
    }
}
