//! CONNECT (3.1). Layout: `"MQTT":str | level:u8 | flags:u8 | keep_alive:u16 | [properties] |
//! client_id:str | [will properties] [will_topic:str | will_payload:bin] | [username:str] |
//! [password:bin]`; flags are `username:1 password:1 will_retain:1 will_qos:2 will:1
//! clean_start:1 reserved:1`. Properties exist in 5.0 only.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::MqttError;
use super::primitive::{put_binary, put_string, Reader};
use super::properties::{CONNECT, WILL};
use super::topic::validate_name;
use super::{put_properties, read_properties, Properties, ProtocolVersion, QoS};

const PACKET: &str = "CONNECT";

/// The message the server publishes for a client that goes away without DISCONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// QoS of the will message.
    pub qos: QoS,
    /// Whether the will message is retained.
    pub retain: bool,
    /// Will properties (5.0): delay, expiry, content type, ...
    pub properties: Properties,
    /// Topic name (no wildcards).
    pub topic: String,
    /// Payload.
    pub payload: Bytes,
}

/// Opens a session: the first packet of every connection, the one that fixes its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol level 4 or 5.
    pub version: ProtocolVersion,
    /// Clean start (5.0) / clean session (3.1.1).
    pub clean_start: bool,
    /// Seconds between control packets before the server may close; 0 turns it off.
    pub keep_alive: u16,
    /// CONNECT properties (5.0).
    pub properties: Properties,
    /// Client identifier; may be empty (the server assigns one).
    pub client_id: String,
    /// The will, if any.
    pub will: Option<Will>,
    /// User name.
    pub username: Option<String>,
    /// Password (binary data).
    pub password: Option<Bytes>,
}

const USERNAME: u8 = 0x80;
const PASSWORD: u8 = 0x40;
const WILL_RETAIN: u8 = 0x20;
const WILL_FLAG: u8 = 0x04;
const CLEAN_START: u8 = 0x02;
const RESERVED: u8 = 0x01;

fn forbidden(field: &'static str, value: u8) -> MqttError {
    MqttError::Forbidden { packet: PACKET, field, value: u32::from(value) }
}

impl Connect {
    pub(crate) fn decode(r: &mut Reader) -> Result<Connect, MqttError> {
        let name = r.string("protocol name")?;
        let level = r.u8("protocol level")?;
        let version = match level {
            4 => ProtocolVersion::V311,
            5 => ProtocolVersion::V5,
            other => return Err(MqttError::UnsupportedProtocolLevel(other)),
        };
        if name != "MQTT" {
            return Err(MqttError::InvalidProtocolName(name));
        }
        let flags = r.u8("connect flags")?;
        if flags & RESERVED != 0 {
            return Err(forbidden("reserved flag", flags));
        }
        let will_qos = QoS::from_bits((flags >> 3) & 0b11, PACKET)?;
        if flags & WILL_FLAG == 0 && flags & (WILL_RETAIN | 0b1_1000) != 0 {
            return Err(forbidden("will QoS or retain without will", flags));
        }
        if version == ProtocolVersion::V311 && flags & (USERNAME | PASSWORD) == PASSWORD {
            return Err(forbidden("password without user name", flags));
        }
        let keep_alive = r.u16("keep alive")?;
        let properties = read_properties(r, version, CONNECT)?;
        let client_id = r.string("client identifier")?;
        let will = match flags & WILL_FLAG {
            0 => None,
            _ => {
                let properties = read_properties(r, version, WILL)?;
                let topic = r.string("will topic")?;
                validate_name(&topic)?;
                let payload = r.binary("will payload")?;
                Some(Will { qos: will_qos, retain: flags & WILL_RETAIN != 0, properties, topic, payload })
            }
        };
        let username = if flags & USERNAME != 0 { Some(r.string("user name")?) } else { None };
        let password = if flags & PASSWORD != 0 { Some(r.binary("password")?) } else { None };
        Ok(Connect {
            version,
            clean_start: flags & CLEAN_START != 0,
            keep_alive,
            properties,
            client_id,
            will,
            username,
            password,
        })
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) -> Result<(), MqttError> {
        let mut flags = 0;
        if self.clean_start {
            flags |= CLEAN_START;
        }
        if let Some(will) = &self.will {
            flags |= WILL_FLAG | (will.qos as u8) << 3;
            if will.retain {
                flags |= WILL_RETAIN;
            }
        }
        if self.username.is_some() {
            flags |= USERNAME;
        }
        if self.password.is_some() {
            flags |= PASSWORD;
        }
        if self.version == ProtocolVersion::V311 && flags & (USERNAME | PASSWORD) == PASSWORD {
            return Err(forbidden("password without user name", flags));
        }
        put_string(out, PACKET, "protocol name", "MQTT")?;
        out.put_u8(self.version as u8);
        out.put_u8(flags);
        out.put_u16(self.keep_alive);
        put_properties(out, &self.properties, self.version, CONNECT)?;
        put_string(out, PACKET, "client identifier", &self.client_id)?;
        if let Some(will) = &self.will {
            put_properties(out, &will.properties, self.version, WILL)?;
            validate_name(&will.topic)?;
            put_string(out, PACKET, "will topic", &will.topic)?;
            put_binary(out, "will payload", &will.payload)?;
        }
        if let Some(username) = &self.username {
            put_string(out, PACKET, "user name", username)?;
        }
        if let Some(password) = &self.password {
            put_binary(out, "password", password)?;
        }
        Ok(())
    }
}
