//! Broker-to-broker frames: the link handshake, routing control, best-effort data, and the
//! guaranteed-delivery stream frames (gd-protocol §7).
//!
//! Framing is the client protocol's (`length:u32 | type:u8 | body`, big-endian), with its own
//! type numbers, so one decoder loop serves both and a client frame sent to a link listener is
//! refused at its type byte. `docs/protocol.md` ("Broker-to-broker frames") gives every layout
//! byte by byte; the golden-byte tests in `peer/tests.rs` hold the two together.
//!
//! A link opens with HELLO from each side (versions, auth mode, nonce, claimed identity), then,
//! with a shared key, AUTH from each side; every other frame follows. Which frames may come when
//! is the broker's business: this module only turns bytes into frames and back.

mod ack;
mod ack_expected;
mod adverts;
mod auth;
mod barrier;
mod barrier_ack;
mod close;
mod data;
mod group;
mod hello;
mod ids;
mod link_stats;
mod nack;
mod replica;
mod routed;
mod sideways;
mod silence;
mod summary;
mod synced;

use bytes::{Bytes, BytesMut};

pub use ack::Ack;
pub use ack_expected::AckExpected;
pub use adverts::{Advert, AdvertLink};
pub use auth::{Auth, PROOF_LEN};
pub use barrier::Barrier;
pub use barrier_ack::{BarrierAck, PubendStart};
pub use close::Close;
pub use data::Data;
pub use group::{Group, GroupBody, GROUP_VERSION};
pub use hello::{AuthMode, Hello, NONCE_LEN};
pub use ids::{BarrierId, Incarnation, PubendId, Tick, TickRange, TreeId};
pub use link_stats::{LinkStat, LinkStats, MAX_LINK_STATS};
pub use nack::Nack;
pub use replica::{Replica, ReplicaBody, MAX_REPLICA_MESSAGE, MAX_REPLICA_VOTERS};
pub use routed::{Hop, HopRef, RouteHeader, Routed};
pub use sideways::Sideways;
pub use silence::{Silence, SilenceKind};
pub use summary::{FilterText, Scope, SummaryDelta};
pub use synced::SyncedTree;

pub use crate::frame::Servers;

use crate::error::WireError;
use crate::framing::{encode_frame, peek, split_body};

/// The newest peer protocol version this crate speaks. Version 1 was the JSON handshake and
/// JSON control frames; 2 the binary frame set with authenticated links; 3 adds the tree id
/// to DATA and SILENCE (an F is sound only under the tree it was judged for); 4 adds LINK_STATS,
/// which a broker sends only on links that negotiated 4 ([`LINK_STATS_VERSION`]); 5 adds
/// GROUP between linked brokers; 6 gives GROUP its two ends, so brokers between relay it, and
/// sends it only on links that negotiated 6 ([`GROUP_VERSION`]); 7 adds SERVERS, a broker's
/// client addresses for its cell mates to tell their clients ([`SERVERS_PEER_VERSION`]).
pub const PEER_PROTOCOL_VERSION: u16 = 7;

/// The first peer protocol version with SERVERS: an older broker closes a link on the unknown
/// type byte, so the frame goes only on links whose negotiated version is at least this.
pub const SERVERS_PEER_VERSION: u16 = 7;

/// The first peer protocol version with LINK_STATS: a version 3 broker closes a link on the
/// unknown type byte, so the frame goes only on links whose negotiated version is at least this.
pub const LINK_STATS_VERSION: u16 = 4;

/// The oldest peer protocol version this crate speaks.
pub const PEER_PROTOCOL_MIN_VERSION: u16 = 3;

/// The type byte of each broker-to-broker frame. Numbers are protocol and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PeerFrameType {
    /// The first frame each side sends: see [`Hello`].
    Hello = 0x01,
    /// Proof of the shared key: see [`Auth`].
    Auth = 0x02,
    /// A deliberate close: see [`Close`].
    Close = 0x03,
    /// Proof of life when nothing else is due; empty body.
    Heartbeat = 0x04,
    /// Link-state adverts: see [`Advert`].
    Adverts = 0x05,
    /// Summary deltas: see [`SummaryDelta`].
    Summary = 0x06,
    /// Summaries complete for these trees: see [`SyncedTree`].
    Synced = 0x07,
    /// A best-effort message: see [`Routed`].
    Routed = 0x08,
    /// A broker's link rates and queues: see [`LinkStats`] (version 4).
    LinkStats = 0x09,
    /// The sender's client addresses: see [`Servers`] (version 7).
    Servers = 0x0A,
    /// A guaranteed message: see [`Data`].
    Data = 0x10,
    /// Silent ticks: see [`Silence`].
    Silence = 0x11,
    /// Acknowledgement and release: see [`Ack`].
    Ack = 0x12,
    /// Curiosity about missing ticks: see [`Nack`].
    Nack = 0x13,
    /// A request for acknowledgement: see [`AckExpected`].
    AckExpected = 0x14,
    /// A subscription barrier: see [`Barrier`].
    Barrier = 0x15,
    /// Its answer: see [`BarrierAck`].
    BarrierAck = 0x16,
    /// A stream frame handed through a cell mate: see [`Sideways`].
    Sideways = 0x17,
    /// A message of a pubend's Raft group: see [`Replica`].
    Replica = 0x18,
    /// A guaranteed queue group's member traffic: see [`Group`] (version 6; 5's had no ends).
    Group = 0x19,
}

impl PeerFrameType {
    /// Whether the guaranteed-delivery protocol repeats what this frame says until it is
    /// answered (DATA, SILENCE, ACK, NACK, ACK_EXPECTED, SIDEWAYS carrying them, and REPLICA,
    /// whose raft messages raft-rs sends again until they are answered): one such
    /// frame with a bad body can be refused alone while the link stays up, since losing it is
    /// a loss the protocol already recovers from. Closing the link for it instead made the
    /// sender redial and send the same frame again, forever (issue 38, failure B).
    /// LINK_STATS too: its origin sends a new one every second while anyone watches, and a
    /// view that misses one shows the last as stale; a link is worth more than a report.
    pub fn is_repeated_by_protocol(self) -> bool {
        use PeerFrameType as T;
        matches!(
            self,
            T::Data | T::Silence | T::Ack | T::Nack | T::AckExpected | T::Sideways | T::Replica | T::LinkStats
        )
    }
}

impl PeerFrameType {
    /// The frame type of a type byte, if it names one.
    pub fn from_u8(byte: u8) -> Option<PeerFrameType> {
        use PeerFrameType as T;
        Some(match byte {
            0x01 => T::Hello,
            0x02 => T::Auth,
            0x03 => T::Close,
            0x04 => T::Heartbeat,
            0x05 => T::Adverts,
            0x06 => T::Summary,
            0x07 => T::Synced,
            0x08 => T::Routed,
            0x09 => T::LinkStats,
            0x0A => T::Servers,
            0x10 => T::Data,
            0x11 => T::Silence,
            0x12 => T::Ack,
            0x13 => T::Nack,
            0x14 => T::AckExpected,
            0x15 => T::Barrier,
            0x16 => T::BarrierAck,
            0x17 => T::Sideways,
            0x18 => T::Replica,
            0x19 => T::Group,
            _ => return None,
        })
    }
}

/// One decoded broker-to-broker frame.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerFrame {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Auth`].
    Auth(Auth),
    /// See [`Close`].
    Close(Close),
    /// Proof of life.
    Heartbeat,
    /// See [`Advert`].
    Adverts(Vec<Advert>),
    /// See [`SummaryDelta`].
    Summary(Vec<SummaryDelta>),
    /// See [`SyncedTree`].
    Synced(Vec<SyncedTree>),
    /// See [`Routed`].
    Routed(Routed),
    /// See [`LinkStats`].
    LinkStats(LinkStats),
    /// See [`Servers`]: here, the sending broker's own client addresses.
    Servers(Servers),
    /// See [`Data`].
    Data(Data),
    /// See [`Silence`].
    Silence(Silence),
    /// See [`Ack`].
    Ack(Ack),
    /// See [`Nack`].
    Nack(Nack),
    /// See [`AckExpected`].
    AckExpected(AckExpected),
    /// See [`Barrier`].
    Barrier(Barrier),
    /// See [`BarrierAck`].
    BarrierAck(BarrierAck),
    /// See [`Sideways`].
    Sideways(Sideways),
    /// See [`Replica`].
    Replica(Replica),
    /// See [`Group`].
    Group(Group),
}

impl PeerFrame {
    /// The type byte of this frame.
    pub fn frame_type(&self) -> PeerFrameType {
        use PeerFrameType as T;
        match self {
            PeerFrame::Hello(_) => T::Hello,
            PeerFrame::Auth(_) => T::Auth,
            PeerFrame::Close(_) => T::Close,
            PeerFrame::Heartbeat => T::Heartbeat,
            PeerFrame::Adverts(_) => T::Adverts,
            PeerFrame::Summary(_) => T::Summary,
            PeerFrame::Synced(_) => T::Synced,
            PeerFrame::Routed(_) => T::Routed,
            PeerFrame::LinkStats(_) => T::LinkStats,
            PeerFrame::Servers(_) => T::Servers,
            PeerFrame::Data(_) => T::Data,
            PeerFrame::Silence(_) => T::Silence,
            PeerFrame::Ack(_) => T::Ack,
            PeerFrame::Nack(_) => T::Nack,
            PeerFrame::AckExpected(_) => T::AckExpected,
            PeerFrame::Barrier(_) => T::Barrier,
            PeerFrame::BarrierAck(_) => T::BarrierAck,
            PeerFrame::Sideways(_) => T::Sideways,
            PeerFrame::Replica(_) => T::Replica,
            PeerFrame::Group(_) => T::Group,
        }
    }

    /// Appends the whole frame (length, type, body) to `out`. Fails only for a field too long
    /// for its encoding (a name over 65535 bytes); `out` is then left as it was.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), WireError> {
        encode_frame(out, self.frame_type() as u8, 0, |out| self.encode_body(out))
    }

    /// Encodes into a fresh buffer.
    pub fn to_bytes(&self) -> Result<Bytes, WireError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out.freeze())
    }

    fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        match self {
            PeerFrame::Hello(f) => f.encode_body(out),
            PeerFrame::Auth(f) => {
                f.encode_body(out);
                Ok(())
            }
            PeerFrame::Close(f) => f.encode_body(out),
            PeerFrame::Heartbeat => Ok(()),
            PeerFrame::Adverts(f) => adverts::encode_body(f, out),
            PeerFrame::Summary(f) => summary::encode_body(f, out),
            PeerFrame::Synced(f) => synced::encode_body(f, out),
            PeerFrame::Routed(f) => f.encode_body(out),
            PeerFrame::LinkStats(f) => f.encode_body(out),
            PeerFrame::Servers(f) => f.encode_body(out),
            PeerFrame::Data(f) => {
                f.encode_body(out);
                Ok(())
            }
            PeerFrame::Silence(f) => f.encode_body(out),
            PeerFrame::Ack(f) => {
                f.encode_body(out);
                Ok(())
            }
            PeerFrame::Nack(f) => f.encode_body(out),
            PeerFrame::AckExpected(f) => {
                f.encode_body(out);
                Ok(())
            }
            PeerFrame::Barrier(f) => f.encode_body(out),
            PeerFrame::BarrierAck(f) => f.encode_body(out),
            PeerFrame::Sideways(f) => f.encode_body(out),
            PeerFrame::Replica(f) => f.encode_body(out),
            PeerFrame::Group(f) => f.encode_body(out),
        }
    }

    /// Takes one whole frame off the front of `buf`. `Ok(None)` means it is not all there yet
    /// (nothing is consumed); an error means the link is not speaking this protocol and should
    /// be closed. The frame's bytes are split off, not copied.
    pub fn decode(buf: &mut BytesMut, max_frame: usize) -> Result<Option<PeerFrame>, WireError> {
        let Some((ty, len)) = peek_header(buf, max_frame)? else {
            return Ok(None);
        };
        PeerFrame::decode_body(ty, split_body(buf, len)).map(Some)
    }

    /// Decodes a body whose type and exact length are known.
    pub fn decode_body(ty: PeerFrameType, body: Bytes) -> Result<PeerFrame, WireError> {
        use PeerFrameType as T;
        Ok(match ty {
            T::Hello => PeerFrame::Hello(Hello::decode_body(&body)?),
            T::Auth => PeerFrame::Auth(Auth::decode_body(&body)?),
            T::Close => PeerFrame::Close(Close::decode_body(&body)?),
            T::Heartbeat if body.is_empty() => PeerFrame::Heartbeat,
            T::Heartbeat => return Err(WireError::TrailingBytes { frame: "HEARTBEAT", extra: body.len() }),
            T::Adverts => PeerFrame::Adverts(adverts::decode_body(&body)?),
            T::Summary => PeerFrame::Summary(summary::decode_body(&body)?),
            T::Synced => PeerFrame::Synced(synced::decode_body(&body)?),
            T::Routed => PeerFrame::Routed(Routed::decode_body(body)?),
            T::LinkStats => PeerFrame::LinkStats(LinkStats::decode_body(&body)?),
            T::Servers => PeerFrame::Servers(Servers::decode_body("SERVERS", &body)?),
            T::Data => PeerFrame::Data(Data::decode_body(body)?),
            T::Silence => PeerFrame::Silence(Silence::decode_body(&body)?),
            T::Ack => PeerFrame::Ack(Ack::decode_body(&body)?),
            T::Nack => PeerFrame::Nack(Nack::decode_body(&body)?),
            T::AckExpected => PeerFrame::AckExpected(AckExpected::decode_body(&body)?),
            T::Barrier => PeerFrame::Barrier(Barrier::decode_body(&body)?),
            T::BarrierAck => PeerFrame::BarrierAck(BarrierAck::decode_body(&body)?),
            T::Sideways => PeerFrame::Sideways(Sideways::decode_body(body)?),
            T::Replica => PeerFrame::Replica(Replica::decode_body(body)?),
            T::Group => PeerFrame::Group(Group::decode_body(body)?),
        })
    }
}

/// Reads a peer frame header: `Ok(Some((type, length)))` once the whole frame is in `buf`,
/// `Ok(None)` while more bytes are needed. Size and type are checked as soon as the header is
/// there, so an oversized or unknown frame fails before its body is buffered.
pub fn peek_header(buf: &[u8], max_frame: usize) -> Result<Option<(PeerFrameType, usize)>, WireError> {
    peek(buf, max_frame, PeerFrameType::from_u8)
}

/// The fuzzing and property-test oracle: feeds arbitrary bytes to the decoder the way a link
/// would. Never panics; every frame it accepts re-encodes to exactly the bytes it was decoded
/// from (the encoding is canonical), and those bytes decode to the same frame.
pub fn check_decoder(data: &[u8]) {
    const MAX: usize = 1 << 20;
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    while let Ok(Some(frame)) = PeerFrame::decode(&mut buf, MAX) {
        let consumed = &data[at..data.len() - buf.len()];
        at = data.len() - buf.len();
        let bytes = frame.to_bytes();
        assert!(matches!(&bytes, Ok(b) if &b[..] == consumed), "re-encoding changed {frame:?}");
        let again = PeerFrame::decode(&mut BytesMut::from(consumed), MAX);
        assert!(matches!(&again, Ok(Some(f)) if *f == frame), "decoding again changed {frame:?}");
    }
}

#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod tests;
