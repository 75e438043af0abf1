//! LINK_STATS, one broker's measure of its own links, flooded to every broker while someone
//! watches the web view. Layout:
//! `origin:str16 | incarnation:u64 | sequence:u64 | flags:u8 | count:u32 | count × link`,
//! `link = peer:str16 | out_centi:u32 | in_centi:u32 | queued_messages:u32 | queued_bytes:u32`.
//!
//! Rates are in hundredths of a data message per second, so two decimals survive without a
//! float on the wire (a float would make NaN a valid, unequal frame). Queues saturate at
//! `u32::MAX`. Flag bit [`LinkStats::WANTED`] says the origin has a viewer; every other bit must
//! be zero, so a later meaning for one is refused by this version rather than ignored.
//! A frame lists at most [`MAX_LINK_STATS`] links, which bounds its size.
//!
//! The frame needs peer protocol version 4: a broker sends it only on links that negotiated 4
//! or more, so a version 3 broker, which closes a link on an unknown type byte, never sees it.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_count, put_str16, Reader};
use crate::error::WireError;
use crate::peer::Incarnation;

/// Most links one LINK_STATS frame lists: a broker with more reports the first ones by name.
/// With names of up to 255 bytes that bounds a frame at about 70 KB.
pub const MAX_LINK_STATS: usize = 256;

/// One broker's links as it measured them over its last second: the web view of any broker
/// shows every link's rates and queues from these, without reaching the other admin ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStats {
    /// The broker that measured its links (relays pass the frame on unchanged).
    pub origin: String,
    /// Its incarnation: a restarted origin's sequence starts again.
    pub incarnation: Incarnation,
    /// Grows by one per report of one incarnation; a receiver keeps and relays only a report
    /// newer than the last it holds from the origin, which ends the flood.
    pub sequence: u64,
    /// The origin has a viewer: a broker that hears this reports its own links for a few
    /// seconds, so nobody measures or sends anything while nobody watches.
    pub wanted: bool,
    /// Its up links, in name order.
    pub links: Vec<LinkStat>,
}

/// One link as its origin end measured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStat {
    /// The broker at the other end.
    pub peer: String,
    /// Data messages per second towards the peer, in hundredths.
    pub out_centi: u32,
    /// Data messages per second from the peer, in hundredths.
    pub in_centi: u32,
    /// Data messages queued towards the peer.
    pub queued_messages: u32,
    /// Data bytes queued towards the peer.
    pub queued_bytes: u32,
}

impl LinkStats {
    /// The flag bit saying the origin has a viewer.
    pub const WANTED: u8 = 0x01;

    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        if self.links.len() > MAX_LINK_STATS {
            return Err(WireError::TooLong { field: "links", len: self.links.len(), max: MAX_LINK_STATS });
        }
        put_str16(out, "origin", &self.origin)?;
        out.put_u64(self.incarnation.0);
        out.put_u64(self.sequence);
        out.put_u8(if self.wanted { LinkStats::WANTED } else { 0 });
        put_count(out, "links", self.links.len())?;
        for link in &self.links {
            put_str16(out, "peer", &link.peer)?;
            out.put_u32(link.out_centi);
            out.put_u32(link.in_centi);
            out.put_u32(link.queued_messages);
            out.put_u32(link.queued_bytes);
        }
        Ok(())
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<LinkStats, WireError> {
        let mut r = Reader::new("LINK_STATS", body);
        let origin = r.str16("origin")?.to_string();
        let incarnation = Incarnation(r.u64("incarnation")?);
        let sequence = r.u64("sequence")?;
        let flags = r.u8("flags")?;
        if flags & !LinkStats::WANTED != 0 {
            return Err(WireError::InvalidField { frame: "LINK_STATS", field: "flags", value: u64::from(flags) });
        }
        let count = r.count("links", 18)?;
        if count > MAX_LINK_STATS {
            return Err(WireError::InvalidField { frame: "LINK_STATS", field: "links", value: count as u64 });
        }
        let mut links = Vec::with_capacity(count);
        for _ in 0..count {
            links.push(LinkStat {
                peer: r.str16("peer")?.to_string(),
                out_centi: r.u32("out_centi")?,
                in_centi: r.u32("in_centi")?,
                queued_messages: r.u32("queued_messages")?,
                queued_bytes: r.u32("queued_bytes")?,
            });
        }
        r.finish()?;
        Ok(LinkStats { origin, incarnation, sequence, wanted: flags & LinkStats::WANTED != 0, links })
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::peer::{PeerFrame, PeerFrameType};

    fn example() -> LinkStats {
        LinkStats {
            origin: "a".into(),
            incarnation: Incarnation(3),
            sequence: 4,
            wanted: true,
            links: vec![LinkStat {
                peer: "b".into(),
                out_centi: 10_050,
                in_centi: 0,
                queued_messages: 2,
                queued_bytes: 300,
            }],
        }
    }

    #[rustfmt::skip]
    const GOLDEN: [u8; 48] = [
        0, 0, 0, 44, 0x09,            // length 44, LINK_STATS
        0, 1, b'a',                   // origin "a"
        0, 0, 0, 0, 0, 0, 0, 3,       // incarnation 3
        0, 0, 0, 0, 0, 0, 0, 4,       // sequence 4
        0x01,                         // flags: wanted
        0, 0, 0, 1,                   // one link
        0, 1, b'b',                   // peer "b"
        0, 0, 0x27, 0x42,             // 100.50 msg/s out
        0, 0, 0, 0,                   // 0 in
        0, 0, 0, 2,                   // 2 messages queued
        0, 0, 0x01, 0x2c,             // 300 bytes queued
    ];

    #[test]
    fn link_stats_golden_bytes() {
        let frame = PeerFrame::LinkStats(example());
        assert_eq!(&frame.to_bytes().unwrap()[..], &GOLDEN[..]);
        let mut buf = BytesMut::from(&GOLDEN[..]);
        assert_eq!(PeerFrame::decode(&mut buf, 1 << 20).unwrap(), Some(frame));
        assert!(buf.is_empty());
    }

    #[test]
    fn an_unknown_flag_or_too_many_links_is_refused_with_the_field_named() {
        let mut flagged = GOLDEN;
        flagged[24] = 0x03;
        let err = PeerFrame::decode_body(PeerFrameType::LinkStats, bytes::Bytes::copy_from_slice(&flagged[5..]));
        assert_eq!(err, Err(WireError::InvalidField { frame: "LINK_STATS", field: "flags", value: 3 }));

        let peer = LinkStat { peer: "p".into(), out_centi: 0, in_centi: 0, queued_messages: 0, queued_bytes: 0 };
        let mut crowded = example();
        crowded.links = vec![peer; MAX_LINK_STATS + 1];
        let refused = PeerFrame::LinkStats(crowded.clone()).to_bytes();
        assert!(matches!(refused, Err(WireError::TooLong { field: "links", .. })), "{refused:?}");
        // The same list, encoded past the sender's check, is refused by the receiver.
        let mut body = BytesMut::new();
        crowded.links.truncate(MAX_LINK_STATS);
        crowded.encode_body(&mut body).unwrap();
        let count_at = 3 + 8 + 8 + 1;
        body[count_at..count_at + 4].copy_from_slice(&((MAX_LINK_STATS + 1) as u32).to_be_bytes());
        body.extend_from_slice(&[0, 1, b'p', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let err = PeerFrame::decode_body(PeerFrameType::LinkStats, body.freeze());
        assert_eq!(err, Err(WireError::InvalidField { frame: "LINK_STATS", field: "links", value: 257 }));
    }

    #[test]
    fn a_link_stats_frame_is_refused_alone_not_with_its_link() {
        assert!(PeerFrameType::LinkStats.is_repeated_by_protocol());
        assert_eq!(PeerFrameType::from_u8(0x09), Some(PeerFrameType::LinkStats));
    }
}
