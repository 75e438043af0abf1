//! CONNACK (3.2). Layout: `flags:u8 (session_present:1, others reserved) | code:u8 |
//! [properties]`. In 3.1.1 the code is a return code 0..=5, carried here as the 5.0 reason of
//! the same meaning.

use bytes::{BufMut, BytesMut};

use super::error::MqttError;
use super::primitive::Reader;
use super::properties::CONNACK;
use super::reason::ReasonSet;
use super::{put_properties, read_properties, MqttReason, Properties, ProtocolVersion};

const PACKET: &str = "CONNACK";

/// The server's answer to CONNECT: accepted (with what it granted) or refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connack {
    /// Whether the server resumed a stored session.
    pub session_present: bool,
    /// Success, or why the connection is refused.
    pub reason: MqttReason,
    /// CONNACK properties (5.0): the server's limits and assigned identifiers.
    pub properties: Properties,
}

impl Connack {
    pub(crate) fn decode(r: &mut Reader, version: ProtocolVersion) -> Result<Connack, MqttError> {
        let flags = r.u8("acknowledge flags")?;
        if flags & 0xfe != 0 {
            return Err(MqttError::Forbidden { packet: PACKET, field: "acknowledge flags", value: u32::from(flags) });
        }
        let code = r.u8("reason code")?;
        let reason = match version {
            ProtocolVersion::V5 => ReasonSet::Connack.decode(PACKET, code)?,
            ProtocolVersion::V311 => ReasonSet::Connack.decode_v311(PACKET, code)?,
        };
        check_session_present(flags & 1 != 0, reason)?;
        let properties = read_properties(r, version, CONNACK)?;
        Ok(Connack { session_present: flags & 1 != 0, reason, properties })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        let code = match version {
            ProtocolVersion::V5 => ReasonSet::Connack.check(PACKET, self.reason)?,
            ProtocolVersion::V311 => ReasonSet::Connack.encode_v311(PACKET, self.reason)?,
        };
        check_session_present(self.session_present, self.reason)?;
        out.put_u8(u8::from(self.session_present));
        out.put_u8(code);
        put_properties(out, &self.properties, version, CONNACK)
    }
}

/// A refusal never claims a session (MQTT-3.2.2-6 in 5.0, MQTT-3.2.2-4 in 3.1.1).
fn check_session_present(session_present: bool, reason: MqttReason) -> Result<(), MqttError> {
    match session_present && reason != MqttReason::Success {
        true => Err(MqttError::Forbidden { packet: PACKET, field: "session present on refusal", value: 1 }),
        false => Ok(()),
    }
}
