//! UNSUBACK (3.11). Layout: `packet_id:u16 | [properties] | [code:u8+]`: in 5.0 one reason
//! code per filter of the UNSUBSCRIBE; in 3.1.1 nothing after the packet identifier.

use bytes::BytesMut;

use super::error::MqttError;
use super::primitive::Reader;
use super::properties::ACK;
use super::reason::ReasonSet;
use super::suback::{put_reasons, read_reasons};
use super::{put_properties, read_properties, MqttReason, PacketId, Properties, ProtocolVersion};

const PACKET: &str = "UNSUBACK";

/// The server's answer to UNSUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsuback {
    /// The UNSUBSCRIBE answered.
    pub packet_id: PacketId,
    /// Reason string and user properties (5.0).
    pub properties: Properties,
    /// One per filter in 5.0; empty in 3.1.1.
    pub reasons: Vec<MqttReason>,
}

impl Unsuback {
    pub(crate) fn decode(r: &mut Reader, version: ProtocolVersion) -> Result<Unsuback, MqttError> {
        let packet_id = PacketId::read(r)?;
        let properties = read_properties(r, version, ACK.for_packet(PACKET))?;
        let reasons = match version {
            ProtocolVersion::V311 => Vec::new(),
            ProtocolVersion::V5 => read_reasons(r, ReasonSet::Unsuback, version)?,
        };
        if version == ProtocolVersion::V5 && reasons.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        Ok(Unsuback { packet_id, properties, reasons })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        match (version, self.reasons.is_empty()) {
            (ProtocolVersion::V5, true) => return Err(MqttError::EmptyPayload { packet: PACKET }),
            (ProtocolVersion::V311, false) => return Err(MqttError::NotInVersion { what: "UNSUBACK reason codes" }),
            _ => {}
        }
        self.packet_id.put(out);
        put_properties(out, &self.properties, version, ACK.for_packet(PACKET))?;
        put_reasons(out, &self.reasons, ReasonSet::Unsuback, PACKET, version)
    }
}
