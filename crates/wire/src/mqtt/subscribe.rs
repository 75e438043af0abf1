//! SUBSCRIBE (3.8). Flags `0010`. Layout: `packet_id:u16 | [properties] | (filter:str |
//! options:u8)+`; options are `reserved:2 retain_handling:2 retain_as_published:1 no_local:1
//! qos:2` in 5.0 and `reserved:6 qos:2` in 3.1.1.

use bytes::{BufMut, BytesMut};

use super::error::MqttError;
use super::primitive::{put_string, Reader};
use super::properties::SUBSCRIBE;
use super::topic::{is_shared, validate_filter};
use super::{put_properties, read_properties, PacketId, Properties, ProtocolVersion, QoS};

const PACKET: &str = "SUBSCRIBE";

/// Whether retained messages are sent when a subscription is made (5.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RetainHandling {
    /// Send retained messages at subscribe time.
    OnSubscribe = 0,
    /// Only if the subscription did not already exist.
    OnNewSubscribe = 1,
    /// Never.
    Never = 2,
}

/// How one topic filter is subscribed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionOptions {
    /// The highest QoS the client wants its messages at.
    pub qos: QoS,
    /// Do not send back the client's own publications (5.0).
    pub no_local: bool,
    /// Keep the RETAIN flag of forwarded messages as published (5.0).
    pub retain_as_published: bool,
    /// When to send retained messages (5.0).
    pub retain_handling: RetainHandling,
}

impl SubscriptionOptions {
    /// QoS only, with every 5.0 option at its default: the only options 3.1.1 has.
    pub fn qos(qos: QoS) -> SubscriptionOptions {
        SubscriptionOptions {
            qos,
            no_local: false,
            retain_as_published: false,
            retain_handling: RetainHandling::OnSubscribe,
        }
    }

    fn decode(byte: u8, version: ProtocolVersion) -> Result<SubscriptionOptions, MqttError> {
        let reserved = match version {
            ProtocolVersion::V311 => 0b1111_1100,
            ProtocolVersion::V5 => 0b1100_0000,
        };
        if byte & reserved != 0 {
            return Err(MqttError::Forbidden { packet: PACKET, field: "subscription options", value: u32::from(byte) });
        }
        let retain_handling = match (byte >> 4) & 0b11 {
            0 => RetainHandling::OnSubscribe,
            1 => RetainHandling::OnNewSubscribe,
            2 => RetainHandling::Never,
            _ => return Err(MqttError::Forbidden { packet: PACKET, field: "retain handling", value: 3 }),
        };
        Ok(SubscriptionOptions {
            qos: QoS::from_bits(byte & 0b11, PACKET)?,
            no_local: byte & 0b100 != 0,
            retain_as_published: byte & 0b1000 != 0,
            retain_handling,
        })
    }

    fn encode(self, version: ProtocolVersion) -> Result<u8, MqttError> {
        let byte = self.qos as u8
            | u8::from(self.no_local) << 2
            | u8::from(self.retain_as_published) << 3
            | (self.retain_handling as u8) << 4;
        match version == ProtocolVersion::V311 && byte > 0b11 {
            true => Err(MqttError::NotInVersion { what: "subscription options other than QoS" }),
            false => Ok(byte),
        }
    }
}

/// Asks for the messages of one or more topic filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Echoed by SUBACK.
    pub packet_id: PacketId,
    /// Subscription identifier and user properties (5.0).
    pub properties: Properties,
    /// At least one filter, each with its options.
    pub filters: Vec<(String, SubscriptionOptions)>,
}

/// A no-local subscription to a shared filter is a protocol error (MQTT-3.8.3-4).
fn check(filter: &str, options: SubscriptionOptions) -> Result<(), MqttError> {
    validate_filter(filter)?;
    match options.no_local && is_shared(filter) {
        true => Err(MqttError::Forbidden { packet: PACKET, field: "no local on a shared subscription", value: 1 }),
        false => Ok(()),
    }
}

impl Subscribe {
    pub(crate) fn decode(r: &mut Reader, version: ProtocolVersion) -> Result<Subscribe, MqttError> {
        let packet_id = PacketId::read(r)?;
        let properties = read_properties(r, version, SUBSCRIBE)?;
        let mut filters = Vec::new();
        while r.remaining() > 0 {
            let filter = r.string("topic filter")?;
            let options = SubscriptionOptions::decode(r.u8("subscription options")?, version)?;
            check(&filter, options)?;
            filters.push((filter, options));
        }
        if filters.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        Ok(Subscribe { packet_id, properties, filters })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        if self.filters.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        self.packet_id.put(out);
        put_properties(out, &self.properties, version, SUBSCRIBE)?;
        for (filter, options) in &self.filters {
            check(filter, *options)?;
            put_string(out, PACKET, "topic filter", filter)?;
            out.put_u8(options.encode(version)?);
        }
        Ok(())
    }
}
