//! DISCONNECT (3.14). Layout in 5.0: `[reason:u8 | [properties]]` (nothing means Normal
//! disconnection); in 3.1.1 the packet is empty.

use bytes::{BufMut, BytesMut};

use super::error::MqttError;
use super::primitive::Reader;
use super::properties::{PropertySet, DISCONNECT};
use super::reason::ReasonSet;
use super::{MqttReason, Properties, ProtocolVersion};

/// An orderly close, from the client or (5.0) the server, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    /// Success (normal disconnection), 0x04 (publish the will anyway) or an error (5.0).
    pub reason: MqttReason,
    /// Session expiry, reason string, server reference, user properties (5.0).
    pub properties: Properties,
}

impl Disconnect {
    /// A normal disconnection, the only kind 3.1.1 has.
    pub fn normal() -> Disconnect {
        Disconnect { reason: MqttReason::Success, properties: Properties::default() }
    }

    pub(crate) fn decode(r: &mut Reader, version: ProtocolVersion) -> Result<Disconnect, MqttError> {
        let (reason, properties) = match version {
            ProtocolVersion::V311 => (MqttReason::Success, Properties::default()),
            ProtocolVersion::V5 => read_optional_tail(r, ReasonSet::Disconnect, DISCONNECT)?,
        };
        Ok(Disconnect { reason, properties })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        match version {
            ProtocolVersion::V5 => {
                put_optional_tail(out, self.reason, &self.properties, ReasonSet::Disconnect, DISCONNECT)
            }
            ProtocolVersion::V311 if *self == Disconnect::normal() => Ok(()),
            ProtocolVersion::V311 => Err(MqttError::NotInVersion { what: "DISCONNECT reason codes and properties" }),
        }
    }
}

/// Reads the `[reason | [properties]]` tail that DISCONNECT, AUTH and the publish responses
/// share: the packet may end before the reason (Success) or before the properties (none).
pub(crate) fn read_optional_tail(
    r: &mut Reader,
    set: ReasonSet,
    allowed: PropertySet,
) -> Result<(MqttReason, Properties), MqttError> {
    if r.remaining() == 0 {
        return Ok((MqttReason::Success, Properties::default()));
    }
    let reason = set.decode(allowed.packet, r.u8("reason code")?)?;
    let properties = match r.remaining() {
        0 => Properties::default(),
        _ => Properties::decode(r, allowed)?,
    };
    Ok((reason, properties))
}

/// Writes the tail: nothing for Success without properties, else the reason and a property
/// length (0 when there are none). The reason-only form is valid too (the spec reads a missing
/// property length as 0) and is decoded, but some receivers wrongly insist on the length, so it
/// is never written.
pub(crate) fn put_optional_tail(
    out: &mut BytesMut,
    reason: MqttReason,
    properties: &Properties,
    set: ReasonSet,
    allowed: PropertySet,
) -> Result<(), MqttError> {
    let code = set.check(allowed.packet, reason)?;
    if reason == MqttReason::Success && properties.is_empty() {
        return Ok(());
    }
    out.put_u8(code);
    properties.encode(out, allowed)
}
