//! PUBACK, PUBREC, PUBREL and PUBCOMP (3.4 to 3.7): one layout for the four, so one file.
//! Layout: `packet_id:u16 | [reason:u8 | [properties]]`. In 5.0 a missing reason means Success
//! and missing properties mean none; the encoder writes either nothing or both. In 3.1.1 only the
//! packet identifier exists.

use bytes::BytesMut;

use super::disconnect::{put_optional_tail, read_optional_tail};
use super::error::MqttError;
use super::primitive::Reader;
use super::properties::{Properties, ACK};
use super::reason::ReasonSet;
use super::{MqttReason, PacketId, ProtocolVersion};

/// The answer to a PUBLISH at QoS 1 (PUBACK) or a step of the QoS 2 exchange. Which one is
/// the [`Packet`](super::Packet) variant that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishResponse {
    /// The PUBLISH being answered.
    pub packet_id: PacketId,
    /// Success, or why not (5.0; always Success in 3.1.1).
    pub reason: MqttReason,
    /// Reason string and user properties (5.0).
    pub properties: Properties,
}

impl PublishResponse {
    /// A successful response with nothing else to say.
    pub fn success(packet_id: PacketId) -> PublishResponse {
        PublishResponse { packet_id, reason: MqttReason::Success, properties: Properties::default() }
    }

    pub(crate) fn decode(
        r: &mut Reader,
        set: ReasonSet,
        version: ProtocolVersion,
    ) -> Result<PublishResponse, MqttError> {
        let packet_id = PacketId::read(r)?;
        let (reason, properties) = match version {
            ProtocolVersion::V5 => read_optional_tail(r, set, ACK.for_packet(r.packet()))?,
            ProtocolVersion::V311 => (MqttReason::Success, Properties::default()),
        };
        Ok(PublishResponse { packet_id, reason, properties })
    }

    pub(crate) fn encode(&self, set: ReasonSet, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        let packet = match set {
            ReasonSet::PublishAck => "PUBACK or PUBREC",
            _ => "PUBREL or PUBCOMP",
        };
        self.packet_id.put(out);
        match version {
            ProtocolVersion::V5 => put_optional_tail(out, self.reason, &self.properties, set, ACK.for_packet(packet)),
            ProtocolVersion::V311 if self.reason == MqttReason::Success && self.properties.is_empty() => Ok(()),
            ProtocolVersion::V311 => {
                Err(MqttError::NotInVersion { what: "reason codes and properties of acknowledgements" })
            }
        }
    }
}
