//! Why bytes are not a valid MQTT packet. Each variant names the packet and field so that a
//! listener can pick the reason code of its refusal (malformed packet, protocol error, packet
//! too large, unsupported protocol version) and a test can check it gave the right one.

use thiserror::Error;

use super::MqttReason;

/// A malformed or forbidden MQTT packet, or a packet value that cannot be encoded. A partial
/// packet is *not* an error: the decoder returns `Ok(None)` for it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MqttError {
    /// The packet (fixed header included) is larger than the maximum the receiver accepts.
    #[error("packet of {size} bytes exceeds the maximum packet size of {max}")]
    PacketTooLarge {
        /// Size of the whole packet in bytes.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A variable byte integer of more than four bytes or not in its shortest form.
    #[error("malformed variable byte integer in {field}")]
    MalformedVarInt {
        /// Where the integer was read (remaining length, property length, ...).
        field: &'static str,
    },
    /// Packet type 0, or 15 (AUTH) in 3.1.1: reserved.
    #[error("reserved packet type {0}")]
    ReservedPacketType(u8),
    /// The low nibble of the fixed header is not the one the packet type requires.
    #[error("{packet}: reserved fixed header flags 0x{flags:x}")]
    InvalidFlags {
        /// The packet.
        packet: &'static str,
        /// The nibble found.
        flags: u8,
    },
    /// A QoS field of 3 (PUBLISH, will, subscription options).
    #[error("{packet}: QoS 3 is not a QoS")]
    InvalidQos {
        /// The packet holding the QoS.
        packet: &'static str,
    },
    /// CONNECT with a protocol level other than 4 (3.1.1) or 5 (5.0); the server answers with
    /// CONNACK 0x01 (3.1.1) or 0x84 (5.0) and closes.
    #[error("unsupported protocol level {0}")]
    UnsupportedProtocolLevel(u8),
    /// CONNECT whose protocol name is not `MQTT`.
    #[error("protocol name {0:?} is not \"MQTT\"")]
    InvalidProtocolName(String),
    /// A field runs past the end of the packet's remaining length.
    #[error("{packet}: {field} runs past the end of the packet")]
    Truncated {
        /// The packet.
        packet: &'static str,
        /// The field being read.
        field: &'static str,
    },
    /// Bytes left after the packet's last field.
    #[error("{packet}: {extra} bytes after the last field")]
    TrailingBytes {
        /// The packet.
        packet: &'static str,
        /// How many bytes are left over.
        extra: usize,
    },
    /// A string that is not well-formed UTF-8 (MQTT-1.5.4-1: surrogates are ill-formed too).
    #[error("{packet}: {field} is not well-formed UTF-8")]
    InvalidUtf8 {
        /// The packet.
        packet: &'static str,
        /// The string field.
        field: &'static str,
    },
    /// A string holding U+0000 (MQTT-1.5.4-2).
    #[error("{packet}: {field} contains U+0000")]
    NulInString {
        /// The packet.
        packet: &'static str,
        /// The string field.
        field: &'static str,
    },
    /// A topic name that is empty (without a topic alias) or holds `+` or `#` (MQTT-3.3.2-2).
    #[error("invalid topic name {0:?}")]
    InvalidTopicName(String),
    /// A topic filter that is empty or has a wildcard that is not a whole level, a `#` that is
    /// not last, or a malformed `$share/` prefix (MQTT-4.7.1, MQTT-4.8.2).
    #[error("invalid topic filter {0:?}")]
    InvalidTopicFilter(String),
    /// A property identifier unknown to MQTT 5.0.
    #[error("unknown property identifier 0x{0:02x}")]
    UnknownProperty(u32),
    /// A property that appears twice though the spec allows it once.
    #[error("property 0x{0:02x} appears more than once")]
    DuplicateProperty(u8),
    /// A known property in a packet that may not carry it.
    #[error("{packet} may not carry property 0x{id:02x}")]
    PropertyNotAllowed {
        /// The packet (or "will").
        packet: &'static str,
        /// The property identifier.
        id: u8,
    },
    /// A property value outside its domain (a receive maximum of 0, a boolean byte of 2).
    #[error("property 0x{id:02x} has invalid value {value}")]
    InvalidPropertyValue {
        /// The property identifier.
        id: u8,
        /// The value found.
        value: u64,
    },
    /// A reason code that the packet may not carry (or, in 3.1.1, a return code it does not have).
    #[error("{packet}: invalid reason code 0x{code:02x}")]
    InvalidReasonCode {
        /// The packet.
        packet: &'static str,
        /// The code.
        code: u8,
    },
    /// A packet identifier of 0 (MQTT-2.2.1-3), or one missing/present against the QoS.
    #[error("{packet}: packet identifier invalid for its QoS or zero")]
    InvalidPacketId {
        /// The packet.
        packet: &'static str,
    },
    /// SUBSCRIBE, UNSUBSCRIBE or SUBACK with an empty list (MQTT-3.8.3-3, MQTT-3.10.3-2).
    #[error("{packet} has an empty payload")]
    EmptyPayload {
        /// The packet.
        packet: &'static str,
    },
    /// Bits the spec reserves are set, or a combination it forbids (will QoS without will,
    /// password without user name in 3.1.1, DUP on QoS 0, no-local on a shared subscription).
    #[error("{packet}: {field} has forbidden value 0x{value:x}")]
    Forbidden {
        /// The packet.
        packet: &'static str,
        /// The field or flag.
        field: &'static str,
        /// The value found.
        value: u32,
    },
    /// A string or binary field over 65,535 bytes, or a packet over 268,435,455 bytes, to encode.
    #[error("cannot encode {field}: {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value that the protocol version cannot express (AUTH or properties in 3.1.1).
    #[error("{what} cannot be expressed in MQTT 3.1.1")]
    NotInVersion {
        /// The packet or field.
        what: &'static str,
    },
}

impl MqttError {
    /// The MQTT 5.0 reason code a server sends (in CONNACK or DISCONNECT) before closing over
    /// this error, per the spec's classification: malformed packet, protocol error, or the
    /// specific code (packet too large, unsupported protocol version, invalid topic).
    pub fn reason(&self) -> MqttReason {
        match self {
            MqttError::PacketTooLarge { .. } => MqttReason::PacketTooLarge,
            MqttError::UnsupportedProtocolLevel(_) | MqttError::InvalidProtocolName(_) => {
                MqttReason::UnsupportedProtocolVersion
            }
            MqttError::InvalidTopicName(_) => MqttReason::TopicNameInvalid,
            MqttError::InvalidTopicFilter(_) => MqttReason::TopicFilterInvalid,
            MqttError::DuplicateProperty(_) | MqttError::InvalidPropertyValue { .. } => MqttReason::ProtocolError,
            MqttError::TooLong { .. } | MqttError::NotInVersion { .. } => MqttReason::ImplementationSpecificError,
            _ => MqttReason::MalformedPacket,
        }
    }
}
