//! A relay's bookkeeping (`[durable] store = "cell"`, see [`super::relay`]), pure: which of
//! its republishes its cell's pubend has not acknowledged yet, per origin pubend, and how far
//! the origin may be acknowledged.
//!
//! A republish's sequence number is the origin tick it carries (a message's tick, or the last
//! tick of a gap), so a relay that restarts and is handed the same ticks again republishes
//! them under the same numbers, and its pubend's retry table answers them as retries. The
//! origin is acknowledged up to a tick only once every republish at or below it was
//! acknowledged: acknowledgements are cumulative, republishes may be answered out of order.

use std::collections::{BTreeMap, BTreeSet};

use tidings_delivery::{PubendId, Tick};

/// One origin pubend's republishes in flight and acknowledged.
#[derive(Default, Debug)]
struct Origin {
    /// Sent and not yet acknowledged, with what was sent (kept to send again after a refusal).
    in_flight: BTreeMap<u64, bytes::Bytes>,
    /// Acknowledged, above the last tick the origin was acknowledged up to.
    done: BTreeSet<u64>,
}

/// Every origin pubend of one relay.
#[derive(Default, Debug)]
pub(crate) struct RelayBook {
    origins: BTreeMap<PubendId, Origin>,
    /// Answers (acknowledgements and refusals) to any of the relay's republishes so far.
    answers: u64,
}

impl RelayBook {
    /// Tick `seq` of `origin` is to be republished as `message`: true if it is new (to send),
    /// false if it is already in flight (the origin replayed it: the republish in flight
    /// answers it). A tick acknowledged before is sent again: the origin replays only what it
    /// was not acknowledged for, and the cell's retry table answers the copy.
    pub(crate) fn send(&mut self, origin: PubendId, seq: u64, message: bytes::Bytes) -> bool {
        let o = self.origins.entry(origin).or_default();
        if o.in_flight.contains_key(&seq) {
            return false;
        }
        o.in_flight.insert(seq, message);
        true
    }

    /// The republish `seq` of `origin` was acknowledged: the tick the origin may now be
    /// acknowledged up to, if it moved.
    pub(crate) fn acked(&mut self, origin: PubendId, seq: u64) -> Option<Tick> {
        let o = self.origins.get_mut(&origin)?;
        o.in_flight.remove(&seq)?;
        o.done.insert(seq);
        let ready = match o.in_flight.keys().next() {
            Some(&lowest) => o.done.range(..lowest).next_back().copied(),
            None => o.done.last().copied(),
        }?;
        o.done = o.done.split_off(&(ready + 1));
        Some(Tick(ready))
    }

    /// What of `origin` is still unacknowledged, lowest first: sent again, in order, after a
    /// refusal (the pubend takes a publisher's numbers only in order).
    pub(crate) fn unacked(&self, origin: PubendId) -> Vec<(u64, bytes::Bytes)> {
        self.origins.get(&origin).map_or_else(Vec::new, |o| o.in_flight.iter().map(|(s, m)| (*s, m.clone())).collect())
    }

    /// An answer (an acknowledgement or a refusal) to one of the relay's republishes came.
    pub(crate) fn answered(&mut self) {
        self.answers += 1;
    }

    /// Answers so far, for a watch to compare with ([`RelayBook::stalled`]).
    pub(crate) fn answers(&self) -> u64 {
        self.answers
    }

    /// The origins with republishes in flight, if no answer came since the watch that saw
    /// `answers`: a republish the pubend neither acknowledges nor refuses would otherwise
    /// stay in the window for good, and a window full of them pauses the origin's stream for
    /// good (see `super::relay`, "watch").
    pub(crate) fn stalled(&self, answers: u64) -> Vec<PubendId> {
        if self.answers != answers {
            return Vec::new();
        }
        self.origins.iter().filter(|(_, o)| !o.in_flight.is_empty()).map(|(&origin, _)| origin).collect()
    }

    /// Republishes in flight, over every origin.
    pub(crate) fn in_flight(&self) -> usize {
        self.origins.values().map(|o| o.in_flight.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: PubendId = PubendId(7);

    fn m() -> bytes::Bytes {
        bytes::Bytes::from_static(b"x")
    }

    #[test]
    fn the_origin_is_acknowledged_only_below_every_republish_in_flight() {
        let mut book = RelayBook::default();
        for seq in [10, 20, 30] {
            assert!(book.send(O, seq, m()));
        }
        assert_eq!(book.acked(O, 20), None, "10 is still in flight");
        assert_eq!(book.acked(O, 10), Some(Tick(20)));
        assert_eq!(book.acked(O, 30), Some(Tick(30)));
        assert_eq!(book.in_flight(), 0);
    }

    #[test]
    fn a_replay_in_flight_is_not_sent_twice_and_an_unknown_ack_moves_nothing() {
        let mut book = RelayBook::default();
        assert!(book.send(O, 5, m()));
        assert!(!book.send(O, 5, m()));
        assert_eq!(book.acked(O, 6), None);
        assert_eq!(book.acked(PubendId(8), 5), None);
        assert_eq!(book.acked(O, 5), Some(Tick(5)));
        assert_eq!(book.acked(O, 5), None, "a second answer to one republish moves nothing");
        assert!(book.send(O, 5, m()), "replayed after its acknowledgement: sent again, the cell answers it");
    }

    #[test]
    fn only_origins_with_republishes_in_flight_and_no_answer_since_the_watch_are_stalled() {
        let mut book = RelayBook::default();
        book.send(O, 1, m());
        book.send(PubendId(8), 2, m());
        book.send(PubendId(9), 3, m());
        let watch = book.answers();
        book.answered();
        book.acked(PubendId(9), 3);
        assert!(book.stalled(watch).is_empty(), "an answer came since the watch");
        let watch = book.answers();
        assert_eq!(book.stalled(watch), vec![O, PubendId(8)]);
        book.acked(O, 1);
        book.acked(PubendId(8), 2);
        assert!(book.stalled(watch).is_empty(), "nothing in flight");
    }

    #[test]
    fn what_is_unacknowledged_comes_back_in_order_for_a_resend() {
        let mut book = RelayBook::default();
        for seq in [3, 1, 2] {
            book.send(O, seq, m());
        }
        book.acked(O, 1);
        let seqs: Vec<u64> = book.unacked(O).into_iter().map(|(s, _)| s).collect();
        assert_eq!(seqs, vec![2, 3]);
        assert!(book.unacked(PubendId(9)).is_empty());
    }
}
