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
    /// Per pubend name, the pubend that acknowledged the last publish: every publish of that
    /// name names it as its home, so a broker this client moves to (a cell mate, after a
    /// takeover) logs a retry where the first try may be, or refuses it, and never logs it again
    /// in a pubend of its own (`docs/replication.md`, "Clients").
    homes: BTreeMap<String, PubendId>,
}

impl<S> Window<S> {
    pub(crate) fn new(publisher: PublisherId) -> Window<S> {
        Window { publisher, next_seq: 1, in_flight: BTreeMap::new(), homes: BTreeMap::new() }
    }

    /// Numbers a new publish and keeps it until its outcome arrives; returns the frame to send.
    /// `server`: the name of the broker it goes to (WELCOME), if connected. A publish of a name
    /// nothing acknowledged yet names that broker's pubend of the name as its home: the first
    /// try may be logged there although its acknowledgement is lost, and a mate the client moves
    /// to must then log the retry in that pubend, or refuse it, never in one of its own (the
    /// nemesis's replicated cell delivered 191 publishes twice, seed 104, with no home named
    /// before the first acknowledgement).
    pub(crate) fn open(
        &mut self,
        pubend: &str,
        message: tidings_wire::Message,
        sink: S,
        server: Option<&str>,
    ) -> &GuaranteedPublish {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let (None, Some(server)) = (self.homes.get(pubend), server) {
            self.homes.insert(pubend.to_string(), PubendId::derive(server, pubend));
        }
        let home = self.homes.get(pubend).copied();
        let frame = GuaranteedPublish { publisher: self.publisher, seq, pubend: pubend.to_string(), home, message };
        &self.in_flight.entry(seq).or_insert((frame, sink)).0
    }

    /// The outcome for `seq` arrived (`acked_by`: the pubend that logged it, if it was logged):
    /// the publish leaves the window. `None` for a sequence number not in flight (an answer to a
    /// retry already answered, or another publisher's).
    pub(crate) fn close(&mut self, publisher: PublisherId, seq: u64, acked_by: Option<PubendId>) -> Option<S> {
        if publisher != self.publisher {
            return None;
        }
        let (frame, sink) = self.in_flight.remove(&seq)?;
        // Every publish in flight already names its name's home (`open`, `name_homes` and this
        // keep them equal), so only a changed home is written through. Done for every ack, the
        // scan cost the window's size per ack: at a window of 256 the client spent most of its
        // time comparing names (25 k acks/s where a window of 64 gave 70 k).
        if let Some(home) = acked_by.filter(|&home| self.homes.get(&frame.pubend) != Some(&home)) {
            self.homes.insert(frame.pubend.clone(), home);
            for (other, _) in self.in_flight.values_mut().filter(|(f, _)| f.pubend == frame.pubend) {
                other.home = Some(home);
            }
        }
        Some(sink)
    }

    /// Whether publishes of `pubend` name a home already (then [`Window::open`] needs no broker).
    pub(crate) fn has_home(&self, pubend: &str) -> bool {
        self.homes.contains_key(pubend)
    }

    /// Names a home for every publish in flight that has none, as [`Window::open`] does: the
    /// pubend of its name at `server`, the broker they are about to be sent to.
    pub(crate) fn name_homes(&mut self, server: &str) {
        for (frame, _) in self.in_flight.values_mut().filter(|(f, _)| f.home.is_none()) {
            let home =
                *self.homes.entry(frame.pubend.clone()).or_insert_with(|| PubendId::derive(server, &frame.pubend));
            frame.home = Some(home);
        }
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
            let frame = w.open("", message(n), n, None);
            assert_eq!((frame.publisher, frame.seq), (PublisherId(7), u64::from(n) + 1));
        }
        assert_eq!(w.close(PublisherId(7), 2, None), Some(1));
        let seqs: Vec<u64> = w.in_flight().map(|f| f.seq).collect();
        assert_eq!(seqs, [1, 3, 4]);
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn an_answer_for_a_closed_or_foreign_sequence_is_ignored() {
        let mut w = Window::new(PublisherId(7));
        w.open("p", message(0), (), None);
        assert_eq!(w.close(PublisherId(8), 1, None), None);
        assert_eq!(w.close(PublisherId(7), 1, None), Some(()));
        assert_eq!(w.close(PublisherId(7), 1, None), None, "a duplicate acknowledgement finds nothing");
        assert_eq!(w.in_flight().count(), 0);
    }

    #[test]
    fn every_publish_of_a_name_names_the_pubend_that_acknowledged_the_last() {
        let mut w = Window::new(PublisherId(7));
        assert_eq!(w.open("a", message(0), (), None).home, None, "nothing acknowledged yet, and no broker known");
        w.open("a", message(1), (), None);
        w.open("b", message(2), (), None);
        w.close(PublisherId(7), 1, Some(PubendId(40)));
        let homes: Vec<_> = w.in_flight().map(|f| (f.seq, f.home)).collect();
        assert_eq!(homes, [(2, Some(PubendId(40))), (3, None)], "resent with the home of its name only");
        assert_eq!(w.open("a", message(3), (), None).home, Some(PubendId(40)));
        w.close(PublisherId(7), 2, None);
        assert_eq!(w.open("a", message(4), (), None).home, Some(PubendId(40)), "a refusal moves no home");
        w.close(PublisherId(7), 4, Some(PubendId(41)));
        assert_eq!(w.open("a", message(5), (), None).home, Some(PubendId(41)));
    }

    #[test]
    fn draining_hands_back_every_sink_and_keeps_numbering() {
        let mut w = Window::new(PublisherId(1));
        w.open("", message(0), 'a', None);
        w.open("", message(1), 'b', None);
        assert_eq!(w.drain().collect::<String>(), "ab");
        assert_eq!(w.open("", message(2), 'c', None).seq, 3, "sequence numbers are never reused");
    }

    #[test]
    fn a_first_publish_names_its_brokers_pubend_until_an_acknowledgement_names_another() {
        let mut w: Window<()> = Window::new(PublisherId(1));
        let at_p1 = PubendId::derive("p1", "");
        assert_eq!(w.open("", message(0), (), Some("p1")).home, Some(at_p1), "the broker it goes to");
        assert_eq!(PubendId::derive("p1", ""), PubendId::derive("p1", tidings_wire::ids::DEFAULT_PUBEND));
        w.open("", message(1), (), Some("p2"));
        assert_eq!(w.in_flight().map(|f| f.home).collect::<Vec<_>>(), [Some(at_p1); 2], "moving does not rename it");
        // Opened while down (no broker), then sent to p3: named there, as the others keep p1.
        let mut down: Window<()> = Window::new(PublisherId(2));
        down.open("a", message(0), (), None);
        down.name_homes("p3");
        assert_eq!(down.in_flight().next().and_then(|f| f.home), Some(PubendId::derive("p3", "a")));
        w.name_homes("p3");
        assert_eq!(w.in_flight().map(|f| f.home).collect::<Vec<_>>(), [Some(at_p1); 2]);
        w.close(PublisherId(1), 1, Some(PubendId(9)));
        assert_eq!(w.in_flight().next().and_then(|f| f.home), Some(PubendId(9)), "the acknowledging pubend wins");
    }
}
