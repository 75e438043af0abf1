//! Guaranteed-delivery messages between brokers: the delivery core's [`Message`] to and from
//! the `wire::peer` frames DATA, SILENCE, ACK, NACK and ACK_EXPECTED.
//!
//! One difference in meaning is bridged here: the core's ack and release prefixes are
//! inclusive ("every tick up to and including"), the wire's are exclusive ("every tick below",
//! so 0 says nothing). Tick 0 is never assigned, so inclusive 0 and exclusive 0 both mean
//! "nothing yet" and map to each other.
//! A frame with no link to its destination travels inside a SIDEWAYS (see `net`).

use tidings_delivery::{Message, PubendId, SilenceKind, Tick, TickRange, TreeTag};
use tidings_wire::peer::{self, PeerFrame};
use tidings_wire::WireError;

fn wire_tick(tick: Tick) -> tidings_wire::Tick {
    tidings_wire::Tick(tick.0)
}

fn core_tick(tick: tidings_wire::Tick) -> Tick {
    Tick(tick.0)
}

/// Inclusive prefix -> exclusive prefix.
fn exclusive(prefix: Tick) -> tidings_wire::Tick {
    tidings_wire::Tick(if prefix.0 == 0 { 0 } else { prefix.0.saturating_add(1) })
}

/// Exclusive prefix -> inclusive prefix.
fn inclusive(prefix: tidings_wire::Tick) -> Tick {
    Tick(prefix.0.saturating_sub(1))
}

fn wire_ranges(ranges: &[TickRange]) -> Vec<peer::TickRange> {
    ranges.iter().map(|r| peer::TickRange { first: wire_tick(r.from), last: wire_tick(r.to) }).collect()
}

fn core_ranges(ranges: &[peer::TickRange]) -> Vec<TickRange> {
    ranges.iter().filter_map(|r| TickRange::new(core_tick(r.first), core_tick(r.last))).collect()
}

/// The frame that carries `message`. Fails only if a Data payload is not a valid message
/// section (the core carries what a GPUBLISH brought, so that means a bug upstream).
pub fn to_frame(message: &Message) -> Result<PeerFrame, WireError> {
    let wire_pubend = |p: PubendId| tidings_wire::PubendId(p.0);
    Ok(match message {
        Message::Data { pubend, tick, final_from, final_to, requested_only, tree, payload } => {
            PeerFrame::Data(peer::Data {
                pubend: wire_pubend(*pubend),
                tick: wire_tick(*tick),
                final_from: wire_tick(*final_from),
                final_to: wire_tick(*final_to),
                requested_only: *requested_only,
                tree: peer::TreeId(tree.0),
                message: tidings_wire::Message::decode(payload.clone())?,
            })
        }
        Message::Silence { pubend, ranges, kind, requested_only, tree } => PeerFrame::Silence(peer::Silence {
            pubend: wire_pubend(*pubend),
            kind: match kind {
                SilenceKind::Final => peer::SilenceKind::Final,
                SilenceKind::Lost => peer::SilenceKind::Lost,
            },
            requested_only: *requested_only,
            tree: peer::TreeId(tree.0),
            ranges: wire_ranges(ranges),
        }),
        Message::Ack { pubend, ack_prefix, release_prefix } => PeerFrame::Ack(peer::Ack {
            pubend: wire_pubend(*pubend),
            ack_prefix: exclusive(*ack_prefix),
            release_prefix: exclusive(*release_prefix),
        }),
        Message::Nack { pubend, ranges } => {
            PeerFrame::Nack(peer::Nack { pubend: wire_pubend(*pubend), ranges: wire_ranges(ranges) })
        }
        Message::AckExpected { pubend, tick } => {
            PeerFrame::AckExpected(peer::AckExpected { pubend: wire_pubend(*pubend), tick: wire_tick(*tick) })
        }
    })
}

/// The core's message for a guaranteed frame; `None` for every other frame.
pub fn from_frame(frame: &PeerFrame) -> Option<Message> {
    let pubend = |p: tidings_wire::PubendId| PubendId(p.0);
    Some(match frame {
        PeerFrame::Data(d) => Message::Data {
            pubend: pubend(d.pubend),
            tick: core_tick(d.tick),
            final_from: core_tick(d.final_from),
            final_to: core_tick(d.final_to),
            requested_only: d.requested_only,
            tree: TreeTag(d.tree.0),
            payload: d.message.as_bytes().clone(),
        },
        PeerFrame::Silence(s) => Message::Silence {
            pubend: pubend(s.pubend),
            ranges: core_ranges(&s.ranges),
            kind: match s.kind {
                peer::SilenceKind::Final => SilenceKind::Final,
                peer::SilenceKind::Lost => SilenceKind::Lost,
            },
            requested_only: s.requested_only,
            tree: TreeTag(s.tree.0),
        },
        PeerFrame::Ack(a) => Message::Ack {
            pubend: pubend(a.pubend),
            ack_prefix: inclusive(a.ack_prefix),
            release_prefix: inclusive(a.release_prefix),
        },
        PeerFrame::Nack(n) => Message::Nack { pubend: pubend(n.pubend), ranges: core_ranges(&n.ranges) },
        PeerFrame::AckExpected(a) => Message::AckExpected { pubend: pubend(a.pubend), tick: core_tick(a.tick) },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::*;

    fn through_the_wire(message: &Message) -> Message {
        let frame = to_frame(message).unwrap();
        let mut buf = BytesMut::new();
        frame.encode(&mut buf).unwrap();
        let decoded = PeerFrame::decode(&mut buf, 1 << 20).unwrap().unwrap();
        from_frame(&decoded).unwrap()
    }

    #[test]
    fn every_guaranteed_message_survives_the_wire_unchanged() {
        let p = PubendId(9);
        let payload = tidings_wire::Message::new("a.b", &[], Bytes::from_static(b"hi"), 5).unwrap().as_bytes().clone();
        let range = |a, b| TickRange::new(Tick(a), Tick(b)).unwrap();
        let messages = [
            Message::Data {
                pubend: p,
                tick: Tick(10),
                final_from: Tick(8),
                final_to: Tick(12),
                requested_only: true,
                tree: TreeTag(0x5EED),
                payload,
            },
            Message::Silence {
                pubend: p,
                ranges: vec![range(1, 3), range(5, 5)],
                kind: SilenceKind::Lost,
                requested_only: false,
                tree: TreeTag(3),
            },
            Message::Ack { pubend: p, ack_prefix: Tick(7), release_prefix: Tick(4) },
            Message::Ack { pubend: p, ack_prefix: Tick(0), release_prefix: Tick(0) },
            Message::Nack { pubend: p, ranges: vec![range(2, 9)] },
            Message::AckExpected { pubend: p, tick: Tick(11) },
        ];
        for message in &messages {
            assert_eq!(&through_the_wire(message), message);
        }
    }

    #[test]
    fn ack_prefixes_become_exclusive_on_the_wire() {
        let frame =
            to_frame(&Message::Ack { pubend: PubendId(1), ack_prefix: Tick(5), release_prefix: Tick(0) }).unwrap();
        let PeerFrame::Ack(ack) = frame else { panic!("not an ACK") };
        assert_eq!((ack.ack_prefix.0, ack.release_prefix.0), (6, 0), "every tick below 6 is tick 5 and earlier");
    }
}
