//! A sans-IO codec for MQTT 3.1.1 (protocol level 4) and 5.0 (level 5), so that every MQTT
//! client can reach a tidings network through the same broker core as native clients.
//!
//! Every packet is `fixed header (type:4 | flags:4) | remaining length: variable byte integer |
//! variable header | payload`. [`Packet::decode`] takes bytes as they arrive and returns
//! `Ok(None)` until a whole packet is buffered, refuses a packet over the receiver's maximum as
//! soon as its length is known, and never panics. Only CONNECT says which version a connection
//! speaks, so every other packet is decoded and encoded for the version the caller passes.
//! One packet per file, each with its layout in its doc; [`topic`] maps MQTT topics onto tidings
//! topics and patterns. Written here rather than taken from a crate: none maintained covers both
//! versions without bringing a runtime (issue 42).

mod auth;
pub mod carry;
mod connack;
mod connect;
#[cfg(test)]
mod differential;
mod disconnect;
mod error;
mod primitive;
mod properties;
mod publish;
mod publish_response;
mod reason;
#[cfg(any(test, feature = "proptest"))]
pub mod strategies;
mod suback;
mod subscribe;
#[cfg(test)]
mod tests;
pub mod topic;
mod unsuback;
mod unsubscribe;

use std::num::NonZeroU16;

use bytes::{BufMut, Bytes, BytesMut};

pub use auth::Auth;
pub use connack::Connack;
pub use connect::{Connect, Will};
pub use disconnect::Disconnect;
pub use error::MqttError;
pub use primitive::MAX_VAR_INT;
pub use properties::{Properties, PropertySet};
pub use publish::Publish;
pub use publish_response::PublishResponse;
pub use reason::{MqttReason, ReasonSet, ALL_REASONS};
pub use suback::Suback;
pub use subscribe::{RetainHandling, Subscribe, SubscriptionOptions};
pub use unsuback::Unsuback;
pub use unsubscribe::Unsubscribe;

use primitive::{put_var_int, read_var_int, var_int_len, Reader, VarInt};

/// Property sets per packet, for strategies and tests that build valid packets.
pub mod property_sets {
    pub use super::properties::{ACK, AUTH, CONNACK, CONNECT, DISCONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, WILL};
}

/// The largest packet MQTT can frame: a one-byte fixed header, four length bytes and 268,435,455
/// bytes. A receiver that sets no Maximum Packet Size accepts this.
pub const MAX_PACKET_SIZE: usize = 1 + 4 + MAX_VAR_INT as usize;

/// The MQTT version of a connection, by its CONNECT protocol level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ProtocolVersion {
    /// MQTT 3.1.1.
    V311 = 4,
    /// MQTT 5.0: properties, reason codes, AUTH.
    V5 = 5,
}

/// Quality of service of a message or subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum QoS {
    /// At most once.
    AtMostOnce = 0,
    /// At least once: PUBLISH, PUBACK.
    AtLeastOnce = 1,
    /// Exactly once: PUBLISH, PUBREC, PUBREL, PUBCOMP.
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS for two bits; 3 is malformed in every packet that carries a QoS.
    pub(crate) fn from_bits(bits: u8, packet: &'static str) -> Result<QoS, MqttError> {
        match bits {
            0 => Ok(QoS::AtMostOnce),
            1 => Ok(QoS::AtLeastOnce),
            2 => Ok(QoS::ExactlyOnce),
            _ => Err(MqttError::InvalidQos { packet }),
        }
    }
}

/// A packet identifier: never 0 (MQTT-2.2.1-3), so the type cannot hold one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PacketId(pub NonZeroU16);

impl PacketId {
    /// The identifier for `value`, or `None` for 0.
    pub fn new(value: u16) -> Option<PacketId> {
        NonZeroU16::new(value).map(PacketId)
    }

    pub(crate) fn read(r: &mut Reader) -> Result<PacketId, MqttError> {
        let packet = r.packet();
        PacketId::new(r.u16("packet identifier")?).ok_or(MqttError::InvalidPacketId { packet })
    }

    pub(crate) fn put(self, out: &mut BytesMut) {
        out.put_u16(self.0.get());
    }
}

/// One MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// 1: client opens a session (boxed: with its will it is twice any other packet).
    Connect(Box<Connect>),
    /// 2: server answers CONNECT.
    Connack(Connack),
    /// 3: a message, either direction.
    Publish(Publish),
    /// 4: QoS 1 acknowledgement.
    Puback(PublishResponse),
    /// 5: QoS 2, first acknowledgement.
    Pubrec(PublishResponse),
    /// 6: QoS 2, release.
    Pubrel(PublishResponse),
    /// 7: QoS 2, completion.
    Pubcomp(PublishResponse),
    /// 8: client subscribes.
    Subscribe(Subscribe),
    /// 9: server answers SUBSCRIBE.
    Suback(Suback),
    /// 10: client unsubscribes.
    Unsubscribe(Unsubscribe),
    /// 11: server answers UNSUBSCRIBE.
    Unsuback(Unsuback),
    /// 12: keep-alive probe.
    Pingreq,
    /// 13: keep-alive answer.
    Pingresp,
    /// 14: orderly close (server to client too in 5.0).
    Disconnect(Disconnect),
    /// 15: extended authentication exchange (5.0 only).
    Auth(Auth),
}

/// The fixed header flags PUBREL, SUBSCRIBE and UNSUBSCRIBE must carry (MQTT-3.6.1-1 etc.).
const FLAGS_0010: u8 = 0b0010;

/// The name of a packet type, for errors.
fn packet_name(kind: u8) -> &'static str {
    const NAMES: [&str; 16] = [
        "reserved",
        "CONNECT",
        "CONNACK",
        "PUBLISH",
        "PUBACK",
        "PUBREC",
        "PUBREL",
        "PUBCOMP",
        "SUBSCRIBE",
        "SUBACK",
        "UNSUBSCRIBE",
        "UNSUBACK",
        "PINGREQ",
        "PINGRESP",
        "DISCONNECT",
        "AUTH",
    ];
    NAMES[usize::from(kind & 0x0f)]
}

/// Checks the first byte: a type this version has, with the flags the type requires.
fn check_first_byte(byte: u8, version: ProtocolVersion) -> Result<(), MqttError> {
    let (kind, flags) = (byte >> 4, byte & 0x0f);
    let required = match kind {
        0 => return Err(MqttError::ReservedPacketType(0)),
        15 if version == ProtocolVersion::V311 => return Err(MqttError::ReservedPacketType(15)),
        3 => return Ok(()),
        6 | 8 | 10 => FLAGS_0010,
        _ => 0,
    };
    match flags == required {
        true => Ok(()),
        false => Err(MqttError::InvalidFlags { packet: packet_name(kind), flags }),
    }
}

/// How many more bytes the packet at the front of `buf` needs, when its fixed header says (a
/// malformed header says nothing: decoding will refuse it). A connection's read buffer grows
/// to the packet it is reading, and no further.
pub fn needed(buf: &[u8]) -> Option<usize> {
    if buf.len() < 2 {
        return Some(2 - buf.len());
    }
    match read_var_int(&buf[1..], "remaining length") {
        Ok(VarInt::Value(remaining, used)) => (1 + used + remaining as usize).checked_sub(buf.len()),
        _ => None,
    }
}

impl Packet {
    /// Decodes one packet from the front of `buf`, consuming it. `Ok(None)` means the buffer
    /// holds only part of a packet (nothing consumed); an error means the connection must be
    /// closed (with the reason code the error names, in 5.0). `version` is the connection's;
    /// CONNECT is decoded by its own protocol level whatever `version` says. `max_size` bounds
    /// the whole packet, fixed header included (MQTT 5.0 Maximum Packet Size).
    pub fn decode(buf: &mut BytesMut, version: ProtocolVersion, max_size: usize) -> Result<Option<Packet>, MqttError> {
        let Some(&first) = buf.first() else { return Ok(None) };
        let version = if first >> 4 == 1 { ProtocolVersion::V5 } else { version };
        check_first_byte(first, version)?;
        let (remaining, len_bytes) = match read_var_int(&buf[1..], "remaining length")? {
            VarInt::Value(value, used) => (value as usize, used),
            VarInt::Incomplete => return Ok(None),
        };
        let size = 1 + len_bytes + remaining;
        if size > max_size {
            return Err(MqttError::PacketTooLarge { size, max: max_size });
        }
        if buf.len() < size {
            return Ok(None);
        }
        let packet = buf.split_to(size).freeze().slice(1 + len_bytes..);
        Packet::decode_body(first, packet, version).map(Some)
    }

    fn decode_body(first: u8, body: Bytes, version: ProtocolVersion) -> Result<Packet, MqttError> {
        let kind = first >> 4;
        let mut r = Reader::new(packet_name(kind), body);
        let packet = match kind {
            1 => Packet::Connect(Box::new(Connect::decode(&mut r)?)),
            2 => Packet::Connack(Connack::decode(&mut r, version)?),
            3 => Packet::Publish(Publish::decode(&mut r, first & 0x0f, version)?),
            4 => Packet::Puback(PublishResponse::decode(&mut r, ReasonSet::PublishAck, version)?),
            5 => Packet::Pubrec(PublishResponse::decode(&mut r, ReasonSet::PublishAck, version)?),
            6 => Packet::Pubrel(PublishResponse::decode(&mut r, ReasonSet::PublishRelease, version)?),
            7 => Packet::Pubcomp(PublishResponse::decode(&mut r, ReasonSet::PublishRelease, version)?),
            8 => Packet::Subscribe(Subscribe::decode(&mut r, version)?),
            9 => Packet::Suback(Suback::decode(&mut r, version)?),
            10 => Packet::Unsubscribe(Unsubscribe::decode(&mut r, version)?),
            11 => Packet::Unsuback(Unsuback::decode(&mut r, version)?),
            12 => Packet::Pingreq,
            13 => Packet::Pingresp,
            14 => Packet::Disconnect(Disconnect::decode(&mut r, version)?),
            _ => Packet::Auth(Auth::decode(&mut r)?),
        };
        r.finish()?;
        Ok(packet)
    }

    /// Appends the packet's bytes to `out` for a connection speaking `version`; a CONNECT is
    /// encoded for its own protocol level. Refuses what a conforming receiver would reject, and
    /// what `version` cannot express (AUTH, or a 5.0-only reason code, in 3.1.1). On error `out`
    /// is unchanged.
    pub fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        let mut body = BytesMut::new();
        let first = self.encode_body(version, &mut body)?;
        put_header(out, first, body.len())?;
        out.put_slice(&body);
        Ok(())
    }

    /// The packet as one buffer, for tests and one-off writes.
    pub fn to_bytes(&self, version: ProtocolVersion) -> Result<Bytes, MqttError> {
        let mut out = BytesMut::new();
        self.encode(version, &mut out)?;
        Ok(out.freeze())
    }

    /// Writes the body and returns the fixed header's first byte.
    fn encode_body(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<u8, MqttError> {
        Ok(match self {
            Packet::Connect(p) => p.encode(out).map(|()| 0x10)?,
            Packet::Connack(p) => p.encode(version, out).map(|()| 0x20)?,
            Packet::Publish(p) => 0x30 | p.encode(version, out)?,
            Packet::Puback(p) => p.encode(ReasonSet::PublishAck, version, out).map(|()| 0x40)?,
            Packet::Pubrec(p) => p.encode(ReasonSet::PublishAck, version, out).map(|()| 0x50)?,
            Packet::Pubrel(p) => p.encode(ReasonSet::PublishRelease, version, out).map(|()| 0x62)?,
            Packet::Pubcomp(p) => p.encode(ReasonSet::PublishRelease, version, out).map(|()| 0x70)?,
            Packet::Subscribe(p) => p.encode(version, out).map(|()| 0x82)?,
            Packet::Suback(p) => p.encode(version, out).map(|()| 0x90)?,
            Packet::Unsubscribe(p) => p.encode(version, out).map(|()| 0xA2)?,
            Packet::Unsuback(p) => p.encode(version, out).map(|()| 0xB0)?,
            Packet::Pingreq => 0xC0,
            Packet::Pingresp => 0xD0,
            Packet::Disconnect(p) => p.encode(version, out).map(|()| 0xE0)?,
            Packet::Auth(p) => p.encode(version, out).map(|()| 0xF0)?,
        })
    }
}

/// Writes the fixed header for a body of `len` bytes.
fn put_header(out: &mut BytesMut, first: u8, len: usize) -> Result<(), MqttError> {
    let len = u32::try_from(len).ok().filter(|len| *len <= MAX_VAR_INT).ok_or(MqttError::TooLong {
        field: "packet",
        len,
        max: MAX_VAR_INT as usize,
    })?;
    out.reserve(1 + var_int_len(len as usize) + len as usize);
    out.put_u8(first);
    put_var_int(out, "remaining length", len)
}

/// Reads properties in 5.0, none in 3.1.1.
pub(crate) fn read_properties(
    r: &mut Reader,
    version: ProtocolVersion,
    set: PropertySet,
) -> Result<Properties, MqttError> {
    match version {
        ProtocolVersion::V5 => Properties::decode(r, set),
        ProtocolVersion::V311 => Ok(Properties::default()),
    }
}

/// Writes properties in 5.0; in 3.1.1 refuses any (they would be silently lost).
pub(crate) fn put_properties(
    out: &mut BytesMut,
    props: &Properties,
    version: ProtocolVersion,
    set: PropertySet,
) -> Result<(), MqttError> {
    match version {
        ProtocolVersion::V5 => props.encode(out, set),
        ProtocolVersion::V311 if props.is_empty() => Ok(()),
        ProtocolVersion::V311 => Err(MqttError::NotInVersion { what: "properties" }),
    }
}
