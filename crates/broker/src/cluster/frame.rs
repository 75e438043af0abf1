//! Broker-to-broker frames: the same length-prefixed style as the client protocol, with its own
//! frame set. Pure: bytes in, frames out, no I/O.
//!
//! Layout of every frame: `length:u32 (type and body) | type:u8 | body`.
//! - `HELLO` (1): JSON [`Handshake`]; each side sends one first.
//! - `CONTROL` (2): JSON of the route core's `PeerMessage` (heartbeats, adverts, summaries).
//!   Control traffic is rare and small, so a readable format costs nothing that matters.
//! - `DATA` (3): `header_len:u16 | header | message section`. The header is binary (below); the
//!   message section is the client PUBLISH's bytes verbatim, so forwarding never re-encodes.
//! - `CLOSE` (4): UTF-8 reason, sent before closing the connection on purpose.
//!
//! Data header: `pubend:u64 | tree:u64 | root:str16 | hop:u8` and, for hop 1 (within the cell),
//! `deliver:u8 | count:u16 | count × cell:str16`. `str16` is a `u16` length and UTF-8 bytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tidings_route::{CellName, DataHeader, Hop, LocalDelivery, PeerMessage, PubendId, TreeId};
use tidings_wire::Message;

use super::filter::RouteFilter;

/// The peer protocol version a HELLO announces.
pub const PEER_PROTOCOL: u16 = 1;

const HELLO: u8 = 1;
const CONTROL: u8 = 2;
const DATA: u8 = 3;
const CLOSE: u8 = 4;

/// What each side announces first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handshake {
    /// [`PEER_PROTOCOL`].
    pub protocol: u16,
    /// The sender's broker name.
    pub name: String,
    /// The sender's cell.
    pub cell: String,
    /// The sender's incarnation (grows on every restart).
    pub incarnation: u64,
}

/// One decoded broker-to-broker frame.
#[derive(Clone, Debug)]
pub enum PeerFrame {
    /// The handshake.
    Hello(Handshake),
    /// A routing control message.
    Control(PeerMessage<RouteFilter>),
    /// A data message with its routing header.
    Data {
        /// Where it is in its tree.
        header: DataHeader,
        /// The published message section.
        message: Message,
    },
    /// The sender is closing the link, and why.
    Close(String),
}

/// Why bytes from a peer are not a frame.
#[derive(Debug, Error, PartialEq)]
pub enum PeerFrameError {
    /// The length prefix is over the limit.
    #[error("frame of {length} bytes is over the limit of {max}")]
    TooLarge {
        /// Announced length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// A zero length or an unknown type byte.
    #[error("unknown peer frame type {0}")]
    UnknownType(u8),
    /// The body ended early.
    #[error("truncated {what}")]
    Truncated {
        /// Which field.
        what: &'static str,
    },
    /// A text field is not UTF-8.
    #[error("{what} is not UTF-8")]
    NotUtf8 {
        /// Which field.
        what: &'static str,
    },
    /// A JSON body did not decode.
    #[error("bad {what}: {message}")]
    Json {
        /// Which frame.
        what: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The message section of a DATA frame is malformed.
    #[error("bad message section: {0}")]
    Message(String),
}

impl PeerFrame {
    /// Takes one frame off the front of `buf`; `Ok(None)` means more bytes are needed.
    pub fn decode(buf: &mut BytesMut, max_frame: usize) -> Result<Option<PeerFrame>, PeerFrameError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let length = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if length > max_frame {
            return Err(PeerFrameError::TooLarge { length, max: max_frame });
        }
        if length == 0 {
            return Err(PeerFrameError::UnknownType(0));
        }
        if buf.len() < 4 + length {
            return Ok(None);
        }
        buf.advance(4);
        let mut body = buf.split_to(length).freeze();
        let ty = body.get_u8();
        PeerFrame::decode_body(ty, body).map(Some)
    }

    /// The frame's bytes, in the canonical form the encoders write.
    pub fn encode(&self) -> Bytes {
        match self {
            PeerFrame::Hello(handshake) => hello(handshake),
            PeerFrame::Control(message) => control(message),
            PeerFrame::Data { header, message } => {
                let section = message.as_bytes();
                let mut out = BytesMut::new();
                data_prefix(header, section.len(), &mut out);
                out.extend_from_slice(section);
                out.freeze()
            }
            PeerFrame::Close(reason) => close(reason),
        }
    }

    fn decode_body(ty: u8, body: Bytes) -> Result<PeerFrame, PeerFrameError> {
        match ty {
            HELLO => serde_json::from_slice(&body)
                .map(PeerFrame::Hello)
                .map_err(|e| PeerFrameError::Json { what: "HELLO", message: e.to_string() }),
            CONTROL => serde_json::from_slice(&body)
                .map(PeerFrame::Control)
                .map_err(|e| PeerFrameError::Json { what: "CONTROL", message: e.to_string() }),
            DATA => decode_data(body),
            CLOSE => String::from_utf8(body.to_vec())
                .map(PeerFrame::Close)
                .map_err(|_| PeerFrameError::NotUtf8 { what: "CLOSE reason" }),
            other => Err(PeerFrameError::UnknownType(other)),
        }
    }
}

/// The fuzzing and property-test oracle: decodes frames off arbitrary bytes until an error or
/// the end. Must never panic; every frame it accepts re-encodes to bytes that decode to a frame
/// with the same encoding, consuming exactly those bytes.
pub fn check_decoder(data: &[u8]) {
    const MAX: usize = 1 << 20;
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = PeerFrame::decode(&mut buf, MAX) {
        let bytes = frame.encode();
        let mut again = BytesMut::from(&bytes[..]);
        let decoded = PeerFrame::decode(&mut again, MAX);
        assert!(again.is_empty(), "re-encoded {frame:?} left bytes behind");
        let same = matches!(&decoded, Ok(Some(f)) if f.encode() == bytes);
        assert!(same, "re-encoding changed {frame:?} into {decoded:?}");
    }
}

fn json_frame(ty: u8, value: &impl Serialize) -> Bytes {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.put_u32(body.len() as u32 + 1);
    out.put_u8(ty);
    out.extend_from_slice(&body);
    out.freeze()
}

/// A HELLO frame.
pub fn hello(handshake: &Handshake) -> Bytes {
    json_frame(HELLO, handshake)
}

/// A CONTROL frame.
pub fn control(message: &PeerMessage<RouteFilter>) -> Bytes {
    json_frame(CONTROL, message)
}

/// A CLOSE frame.
pub fn close(reason: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + reason.len());
    out.put_u32(reason.len() as u32 + 1);
    out.put_u8(CLOSE);
    out.extend_from_slice(reason.as_bytes());
    out.freeze()
}

/// Appends everything of a DATA frame before the message section to `out`: write it, then the
/// section's bytes. Encodes in place (lengths patched afterwards), so it allocates nothing when
/// `out` has room.
pub fn data_prefix(header: &DataHeader, section_len: usize, out: &mut BytesMut) {
    let start = out.len();
    out.put_u32(0);
    out.put_u8(DATA);
    out.put_u16(0);
    let header_start = out.len();
    out.put_u64(header.pubend.0);
    out.put_u64(header.tree.0);
    put_str16(out, header.root.as_str());
    match &header.hop {
        Hop::Down => out.put_u8(0),
        Hop::Within { deliver, across } => {
            out.put_u8(1);
            out.put_u8(u8::from(*deliver == LocalDelivery::Deliver));
            out.put_u16(across.len().min(u16::MAX as usize) as u16);
            for cell in across.iter().take(u16::MAX as usize) {
                put_str16(out, cell.as_str());
            }
        }
    }
    let header_len = out.len() - header_start;
    let length = (1 + 2 + header_len + section_len) as u32;
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
    out[start + 5..start + 7].copy_from_slice(&(header_len as u16).to_be_bytes());
}

fn put_str16(out: &mut BytesMut, text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(u16::MAX as usize)];
    out.put_u16(bytes.len() as u16);
    out.extend_from_slice(bytes);
}

fn need(body: &Bytes, n: usize, what: &'static str) -> Result<(), PeerFrameError> {
    if body.remaining() < n {
        Err(PeerFrameError::Truncated { what })
    } else {
        Ok(())
    }
}

fn get_str16(body: &mut Bytes, what: &'static str) -> Result<String, PeerFrameError> {
    need(body, 2, what)?;
    let len = body.get_u16() as usize;
    need(body, len, what)?;
    String::from_utf8(body.split_to(len).to_vec()).map_err(|_| PeerFrameError::NotUtf8 { what })
}

fn decode_data(mut body: Bytes) -> Result<PeerFrame, PeerFrameError> {
    need(&body, 2, "data header length")?;
    let header_len = body.get_u16() as usize;
    need(&body, header_len, "data header")?;
    let mut header = body.split_to(header_len);
    need(&header, 16, "data header")?;
    let pubend = PubendId(header.get_u64());
    let tree = TreeId(header.get_u64());
    let root = CellName::from(get_str16(&mut header, "root cell")?);
    need(&header, 1, "hop")?;
    let hop = match header.get_u8() {
        0 => Hop::Down,
        1 => {
            need(&header, 3, "within hop")?;
            let deliver = if header.get_u8() == 1 { LocalDelivery::Deliver } else { LocalDelivery::Skip };
            let count = header.get_u16() as usize;
            let mut across = Vec::with_capacity(count.min(64));
            for _ in 0..count {
                across.push(CellName::from(get_str16(&mut header, "child cell")?));
            }
            Hop::Within { deliver, across }
        }
        _ => return Err(PeerFrameError::Truncated { what: "hop kind" }),
    };
    let message = Message::decode(body).map_err(|e| PeerFrameError::Message(e.to_string()))?;
    Ok(PeerFrame::Data { header: DataHeader { pubend, root, tree, hop }, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_message() -> Message {
        let properties = [tidings_wire::Property::new("k", 7i64)];
        Message::new("a.b", &properties, Bytes::from_static(b"payload"), 42).unwrap()
    }

    fn data_frame(header: &DataHeader, message: &Message) -> BytesMut {
        let mut out = BytesMut::new();
        data_prefix(header, message.as_bytes().len(), &mut out);
        out.extend_from_slice(message.as_bytes());
        out
    }

    fn within() -> DataHeader {
        DataHeader {
            pubend: PubendId(9),
            root: CellName::new("PHB"),
            tree: TreeId(77),
            hop: Hop::Within {
                deliver: LocalDelivery::Deliver,
                across: vec![CellName::new("s1"), CellName::new("s2")],
            },
        }
    }

    #[test]
    fn data_frames_round_trip_with_the_message_bytes_verbatim() {
        let message = sample_message();
        let mut buf = data_frame(&within(), &message);
        match PeerFrame::decode(&mut buf, 1 << 20).unwrap().unwrap() {
            PeerFrame::Data { header, message: got } => {
                assert_eq!(header, within());
                assert_eq!(got.as_bytes(), message.as_bytes());
            }
            other => panic!("{other:?}"),
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn every_truncated_prefix_asks_for_more() {
        let mut whole = data_frame(&within(), &sample_message());
        whole.extend_from_slice(&hello(&Handshake {
            protocol: PEER_PROTOCOL,
            name: "b1".into(),
            cell: "IB1".into(),
            incarnation: 5,
        }));
        let first_len = data_frame(&within(), &sample_message()).len();
        for cut in 0..first_len {
            let mut prefix = BytesMut::from(&whole[..cut]);
            assert!(PeerFrame::decode(&mut prefix, 1 << 20).unwrap().is_none(), "cut at {cut}");
        }
        let mut both = whole.clone();
        assert!(matches!(PeerFrame::decode(&mut both, 1 << 20), Ok(Some(PeerFrame::Data { .. }))));
        assert!(matches!(PeerFrame::decode(&mut both, 1 << 20), Ok(Some(PeerFrame::Hello(h))) if h.name == "b1"));
    }

    #[test]
    fn control_frames_carry_filters_as_text() {
        let filter: RouteFilter = serde_json::from_str(r#"{"pattern":"a.>","selector":"k < 10"}"#).unwrap();
        let delta = tidings_route::SummaryDelta {
            scopes: vec![tidings_route::Scope::Local],
            added: vec![filter.clone()],
            removed: vec![],
        };
        let mut buf = BytesMut::from(&control(&PeerMessage::Summary(vec![delta]))[..]);
        match PeerFrame::decode(&mut buf, 1 << 20).unwrap().unwrap() {
            PeerFrame::Control(PeerMessage::Summary(deltas)) => assert_eq!(deltas[0].added, vec![filter]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut oversized = BytesMut::from(&[0u8, 0x10, 0, 0, 3][..]);
        assert!(matches!(PeerFrame::decode(&mut oversized, 1024), Err(PeerFrameError::TooLarge { .. })));
        let mut unknown = BytesMut::from(&[0u8, 0, 0, 1, 99][..]);
        assert_eq!(PeerFrame::decode(&mut unknown, 1024).unwrap_err(), PeerFrameError::UnknownType(99));
        let mut bad_filter = BytesMut::from(
            &json_frame(
                CONTROL,
                &serde_json::json!({"Summary":[{"scopes":["Local"],"added":[{"pattern":"a..b"}],"removed":[]}]}),
            )[..],
        );
        assert!(matches!(PeerFrame::decode(&mut bad_filter, 1024), Err(PeerFrameError::Json { .. })));
        let mut short_data = BytesMut::from(&[0u8, 0, 0, 4, DATA, 0, 9, 1][..]);
        assert!(matches!(PeerFrame::decode(&mut short_data, 1024), Err(PeerFrameError::Truncated { .. })));
    }
}
