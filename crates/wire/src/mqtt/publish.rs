//! PUBLISH (3.3). Flags: `dup:1 qos:2 retain:1`. Layout: `topic:str | packet_id:u16 (QoS 1, 2
//! only) | [properties] | payload` (the payload runs to the end of the packet).

use bytes::{Bytes, BytesMut};

use super::error::MqttError;
use super::primitive::{put_string, Reader};
use super::properties::PUBLISH;
use super::topic::validate_name;
use super::{put_properties, read_properties, PacketId, Properties, ProtocolVersion, QoS};

const PACKET: &str = "PUBLISH";
const DUP: u8 = 0b1000;
const RETAIN: u8 = 0b0001;

/// An application message, client to server or server to client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// A re-delivery of an earlier attempt (QoS 1, 2 only, MQTT-3.3.1-2).
    pub dup: bool,
    /// QoS of this delivery.
    pub qos: QoS,
    /// Retain (to the server) or retained (to a client).
    pub retain: bool,
    /// Topic name: no wildcards; empty only in 5.0 with a topic alias.
    pub topic: String,
    /// Present exactly when `qos` is 1 or 2.
    pub packet_id: Option<PacketId>,
    /// PUBLISH properties (5.0).
    pub properties: Properties,
    /// The application message.
    pub payload: Bytes,
}

impl Publish {
    /// A QoS 0 message with no properties: what a best-effort publish looks like.
    pub fn at_most_once(topic: impl Into<String>, payload: impl Into<Bytes>) -> Publish {
        Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: topic.into(),
            packet_id: None,
            properties: Properties::default(),
            payload: payload.into(),
        }
    }

    pub(crate) fn decode(r: &mut Reader, flags: u8, version: ProtocolVersion) -> Result<Publish, MqttError> {
        let qos = QoS::from_bits((flags >> 1) & 0b11, PACKET)?;
        let dup = flags & DUP != 0;
        let topic = r.string("topic name")?;
        let packet_id = match qos {
            QoS::AtMostOnce => None,
            _ => Some(PacketId::read(r)?),
        };
        let properties = read_properties(r, version, PUBLISH)?;
        let publish =
            Publish { dup, qos, retain: flags & RETAIN != 0, topic, packet_id, properties, payload: r.rest() };
        publish.check(version)?;
        Ok(publish)
    }

    /// Rules that hold across fields, checked the same way in both directions.
    fn check(&self, version: ProtocolVersion) -> Result<(), MqttError> {
        if self.dup && self.qos == QoS::AtMostOnce {
            return Err(MqttError::Forbidden { packet: PACKET, field: "DUP on QoS 0", value: 1 });
        }
        if self.packet_id.is_some() != (self.qos != QoS::AtMostOnce) {
            return Err(MqttError::InvalidPacketId { packet: PACKET });
        }
        let aliased = version == ProtocolVersion::V5 && self.properties.topic_alias.is_some();
        match self.topic.is_empty() && aliased {
            true => Ok(()),
            false => validate_name(&self.topic),
        }
    }

    /// Writes the variable header and payload; returns the fixed header flags.
    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<u8, MqttError> {
        self.check(version)?;
        put_string(out, PACKET, "topic name", &self.topic)?;
        if let Some(id) = self.packet_id {
            id.put(out);
        }
        put_properties(out, &self.properties, version, PUBLISH)?;
        out.extend_from_slice(&self.payload);
        let dup = if self.dup { DUP } else { 0 };
        let retain = if self.retain { RETAIN } else { 0 };
        Ok(dup | (self.qos as u8) << 1 | retain)
    }
}
