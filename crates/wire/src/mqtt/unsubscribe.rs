//! UNSUBSCRIBE (3.10). Flags `0010`. Layout: `packet_id:u16 | [properties] | filter:str+`.

use bytes::BytesMut;

use super::error::MqttError;
use super::primitive::{put_string, Reader};
use super::properties::UNSUBSCRIBE;
use super::topic::validate_filter;
use super::{put_properties, read_properties, PacketId, Properties, ProtocolVersion};

const PACKET: &str = "UNSUBSCRIBE";

/// Ends the subscriptions of one or more topic filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Echoed by UNSUBACK.
    pub packet_id: PacketId,
    /// User properties (5.0).
    pub properties: Properties,
    /// At least one filter, as it was subscribed.
    pub filters: Vec<String>,
}

impl Unsubscribe {
    pub(crate) fn decode(r: &mut Reader, version: ProtocolVersion) -> Result<Unsubscribe, MqttError> {
        let packet_id = PacketId::read(r)?;
        let properties = read_properties(r, version, UNSUBSCRIBE)?;
        let mut filters = Vec::new();
        while r.remaining() > 0 {
            let filter = r.string("topic filter")?;
            validate_filter(&filter)?;
            filters.push(filter);
        }
        if filters.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        Ok(Unsubscribe { packet_id, properties, filters })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        if self.filters.is_empty() {
            return Err(MqttError::EmptyPayload { packet: PACKET });
        }
        self.packet_id.put(out);
        put_properties(out, &self.properties, version, UNSUBSCRIBE)?;
        for filter in &self.filters {
            validate_filter(filter)?;
            put_string(out, PACKET, "topic filter", filter)?;
        }
        Ok(())
    }
}
