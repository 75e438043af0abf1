//! SUBACK (3.9). Layout: `packet_id:u16 | [properties] | code:u8+`, one code per filter of the
//! SUBSCRIBE, in order. 3.1.1 codes are 0, 1, 2 (granted QoS) and 0x80 (failure).

use bytes::{BufMut, BytesMut};

use super::error::MqttError;
use super::primitive::Reader;
use super::properties::ACK;
use super::reason::ReasonSet;
use super::{put_properties, read_properties, MqttReason, PacketId, Properties, ProtocolVersion};

const PACKET: &str = "SUBACK";

/// The server's answer to SUBSCRIBE: the QoS granted, or why not, per filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suback {
    /// The SUBSCRIBE answered.
    pub packet_id: PacketId,
    /// Reason string and user properties (5.0).
    pub properties: Properties,
    /// One per filter of the SUBSCRIBE.
    pub reasons: Vec<MqttReason>,
}

impl Suback {
    pub(crate) fn decode(r: &mut Reader, version: ProtocolVersion) -> Result<Suback, MqttError> {
        let packet_id = PacketId::read(r)?;
        let properties = read_properties(r, version, ACK.for_packet(PACKET))?;
        let reasons = read_reasons(r, ReasonSet::Suback, version)?;
        if reasons.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        Ok(Suback { packet_id, properties, reasons })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        if self.reasons.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        self.packet_id.put(out);
        put_properties(out, &self.properties, version, ACK.for_packet(PACKET))?;
        put_reasons(out, &self.reasons, ReasonSet::Suback, PACKET, version)
    }
}

/// Reads reason codes to the end of the packet (SUBACK, UNSUBACK).
pub(crate) fn read_reasons(
    r: &mut Reader,
    set: ReasonSet,
    version: ProtocolVersion,
) -> Result<Vec<MqttReason>, MqttError> {
    let mut reasons = Vec::with_capacity(r.remaining());
    while r.remaining() > 0 {
        let code = r.u8("reason code")?;
        reasons.push(match version {
            ProtocolVersion::V5 => set.decode(r.packet(), code)?,
            ProtocolVersion::V311 => set.decode_v311(r.packet(), code)?,
        });
    }
    Ok(reasons)
}

/// Writes reason codes (SUBACK, UNSUBACK), refusing any the packet and version cannot carry.
pub(crate) fn put_reasons(
    out: &mut BytesMut,
    reasons: &[MqttReason],
    set: ReasonSet,
    packet: &'static str,
    version: ProtocolVersion,
) -> Result<(), MqttError> {
    for reason in reasons {
        out.put_u8(match version {
            ProtocolVersion::V5 => set.check(packet, *reason)?,
            ProtocolVersion::V311 => set.encode_v311(packet, *reason)?,
        });
    }
    Ok(())
}
