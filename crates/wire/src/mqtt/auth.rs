//! AUTH (3.15), 5.0 only. Layout: `[reason:u8 | [properties]]`; nothing means Success.

use bytes::BytesMut;

use super::disconnect::{put_optional_tail, read_optional_tail};
use super::error::MqttError;
use super::primitive::Reader;
use super::properties::AUTH;
use super::reason::ReasonSet;
use super::{MqttReason, Properties, ProtocolVersion};

/// One step of an extended authentication exchange (a challenge or a response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    /// Success, Continue authentication or Re-authenticate.
    pub reason: MqttReason,
    /// Authentication method and data, reason string, user properties.
    pub properties: Properties,
}

impl Auth {
    pub(crate) fn decode(r: &mut Reader) -> Result<Auth, MqttError> {
        let (reason, properties) = read_optional_tail(r, ReasonSet::Auth, AUTH)?;
        Ok(Auth { reason, properties })
    }

    pub(crate) fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), MqttError> {
        match version {
            ProtocolVersion::V5 => put_optional_tail(out, self.reason, &self.properties, ReasonSet::Auth, AUTH),
            ProtocolVersion::V311 => Err(MqttError::NotInVersion { what: "AUTH" }),
        }
    }
}
