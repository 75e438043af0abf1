//! Guaranteed publishing: the window of publishes sent but not yet acknowledged.
//!
//! Each guaranteed publish takes the next sequence number of this client's publisher id and a
//! slot of the window, and stays here, frame and all, until the broker's PUBLISH_ACK (or
//! PUBLISH_REFUSED) for that sequence number comes back. After a reconnect every publish still
//! here is sent again in sequence order: the broker drops a `(publisher, seq)` it has already
//! logged and answers it with the tick it gave, so a lost acknowledgement never makes a
//! duplicate. Pure: no I/O, no clock; generic over the sink an outcome goes to.

use std::collections::BTreeMap;

use tidings_wire::{GuaranteedPublish, PubendId, PublisherId, Tick};

/// What the broker promised for one guaranteed publish: it is on disk in `pubend`'s log at
/// `tick`, and will reach every matching guaranteed subscription exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The publisher id the publish was sent under.
    pub publisher: PublisherId,
    /// Its sequence number (1 for the first publish of a client).
    pub seq: u64,
    /// The pubend that logged it.
    pub pubend: PubendId,
    /// Its place in the pubend's stream.
    pub tick: Tick,
}

/// Publishes in flight, by sequence number. Invariant: every key is below `next_seq`.
#[derive(Debug)]
pub(crate) struct Window<S> {
    publisher: PublisherId,
    next_seq: u64,
    in_flight: BTreeMap<u64, (GuaranteedPublish, S)>,
}

impl<S> Window<S> {
    pub(crate) fn new(publisher: PublisherId) -> Window<S> {
        Window { publisher, next_seq: 1, in_flight: BTreeMap::new() }
    }

    /// Numbers a new publish and keeps it until its outcome arrives; returns the frame to send.
    pub(crate) fn open(&mut self, pubend: &str, message: tidings_wire::Message, sink: S) -> &GuaranteedPublish {
        let seq = self.next_seq;
        self.next_seq += 1;
        let frame = GuaranteedPublish { publisher: self.publisher, seq, pubend: pubend.to_string(), message };
        &self.in_flight.entry(seq).or_insert((frame, sink)).0
    }

    /// The outcome for `seq` arrived: the publish leaves the window. `None` for a sequence
    /// number not in flight (an answer to a retry already answered, or another publisher's).
    pub(crate) fn close(&mut self, publisher: PublisherId, seq: u64) -> Option<S> {
        if publisher != self.publisher {
            return None;
        }
        self.in_flight.remove(&seq).map(|(_, sink)| sink)
    }

    /// Every publish in flight, in sequence order: what a new connection sends again.
    pub(crate) fn in_flight(&self) -> impl Iterator<Item = &GuaranteedPublish> {
        self.in_flight.values().map(|(frame, _)| frame)
    }

    /// Empties the window (the client closed): every sink, to be told why.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = S> + '_ {
        std::mem::take(&mut self.in_flight).into_values().map(|(_, sink)| sink)
    }

    pub(crate) fn len(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_wire::Message;

    use super::*;

    fn message(n: u8) -> Message {
        Message::new("t", &[], Bytes::from(vec![n]), 0).unwrap()
    }

    #[test]
    fn publishes_are_numbered_from_one_and_resent_in_sequence_order() {
        let mut w = Window::new(PublisherId(7));
        for n in 0..4 {
            let frame = w.open("", message(n), n);
            assert_eq!((frame.publisher, frame.seq), (PublisherId(7), u64::from(n) + 1));
        }
        assert_eq!(w.close(PublisherId(7), 2), Some(1));
        let seqs: Vec<u64> = w.in_flight().map(|f| f.seq).collect();
        assert_eq!(seqs, [1, 3, 4]);
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn an_answer_for_a_closed_or_foreign_sequence_is_ignored() {
        let mut w = Window::new(PublisherId(7));
        w.open("p", message(0), ());
        assert_eq!(w.close(PublisherId(8), 1), None);
        assert_eq!(w.close(PublisherId(7), 1), Some(()));
        assert_eq!(w.close(PublisherId(7), 1), None, "a duplicate acknowledgement finds nothing");
        assert_eq!(w.in_flight().count(), 0);
    }

    #[test]
    fn draining_hands_back_every_sink_and_keeps_numbering() {
        let mut w = Window::new(PublisherId(1));
        w.open("", message(0), 'a');
        w.open("", message(1), 'b');
        assert_eq!(w.drain().collect::<String>(), "ab");
        assert_eq!(w.open("", message(2), 'c').seq, 3, "sequence numbers are never reused");
    }
}
