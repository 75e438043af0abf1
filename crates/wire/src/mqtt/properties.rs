//! MQTT 5.0 properties (section 2.2.2): every property typed, the rule that each appears at most
//! once except user properties and subscription identifiers, and the set each packet may carry.
//! Encoding writes properties in identifier order with user properties last, in their order, so
//! that a decoded packet re-encodes to one canonical form.

use std::num::{NonZeroU16, NonZeroU32};

use bytes::{BufMut, Bytes, BytesMut};

use super::error::MqttError;
use super::primitive::{put_binary, put_string, put_var_int, Reader, MAX_VAR_INT};
use super::QoS;

/// The properties of one packet or will. `None`/empty means absent, which the spec gives a
/// default for; the broker, not the codec, applies defaults.
#[allow(missing_docs)] // Each field is the spec's property of the same name; its id is in the comment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// 0x01: true when the payload is UTF-8 text.
    pub payload_format_utf8: Option<bool>,
    /// 0x02, seconds.
    pub message_expiry_interval: Option<u32>,
    /// 0x03.
    pub content_type: Option<String>,
    /// 0x08.
    pub response_topic: Option<String>,
    /// 0x09.
    pub correlation_data: Option<Bytes>,
    /// 0x0B: one in SUBSCRIBE, any number in PUBLISH to a client; each in 1..=268,435,455.
    pub subscription_identifiers: Vec<u32>,
    /// 0x11, seconds.
    pub session_expiry_interval: Option<u32>,
    /// 0x12.
    pub assigned_client_identifier: Option<String>,
    /// 0x13, seconds.
    pub server_keep_alive: Option<u16>,
    /// 0x15.
    pub authentication_method: Option<String>,
    /// 0x16.
    pub authentication_data: Option<Bytes>,
    /// 0x17.
    pub request_problem_information: Option<bool>,
    /// 0x18, seconds.
    pub will_delay_interval: Option<u32>,
    /// 0x19.
    pub request_response_information: Option<bool>,
    /// 0x1A.
    pub response_information: Option<String>,
    /// 0x1C.
    pub server_reference: Option<String>,
    /// 0x1F.
    pub reason_string: Option<String>,
    /// 0x21.
    pub receive_maximum: Option<NonZeroU16>,
    /// 0x22.
    pub topic_alias_maximum: Option<u16>,
    /// 0x23.
    pub topic_alias: Option<NonZeroU16>,
    /// 0x24: `AtMostOnce` or `AtLeastOnce` only.
    pub maximum_qos: Option<QoS>,
    /// 0x25.
    pub retain_available: Option<bool>,
    /// 0x26: name/value pairs, repeatable, order kept.
    pub user_properties: Vec<(String, String)>,
    /// 0x27, bytes.
    pub maximum_packet_size: Option<NonZeroU32>,
    /// 0x28.
    pub wildcard_subscription_available: Option<bool>,
    /// 0x29.
    pub subscription_identifier_available: Option<bool>,
    /// 0x2A.
    pub shared_subscription_available: Option<bool>,
}

/// The properties one packet (or a will) may carry: a bit per property identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertySet {
    /// The packet name, for errors.
    pub packet: &'static str,
    mask: u64,
}

const fn set(packet: &'static str, ids: &[u8]) -> PropertySet {
    let mut mask = 1 << USER;
    let mut index = 0;
    while index < ids.len() {
        mask |= 1 << ids[index];
        index += 1;
    }
    PropertySet { packet, mask }
}

const USER: u8 = 0x26;
const SUBSCRIPTION_ID: u8 = 0x0B;
const REASON: u8 = 0x1F;

/// MQTT 5.0 table 2-4, per packet.
pub const CONNECT: PropertySet = set("CONNECT", &[0x11, 0x15, 0x16, 0x17, 0x19, 0x21, 0x22, 0x27]);
/// CONNACK's properties.
pub const CONNACK: PropertySet =
    set("CONNACK", &[0x11, 0x12, 0x13, 0x15, 0x16, 0x1A, 0x1C, REASON, 0x21, 0x22, 0x24, 0x25, 0x27, 0x28, 0x29, 0x2A]);
/// PUBLISH's properties.
pub const PUBLISH: PropertySet = set("PUBLISH", &[0x01, 0x02, 0x03, 0x08, 0x09, SUBSCRIPTION_ID, 0x23]);
/// A will's properties (in CONNECT's payload).
pub const WILL: PropertySet = set("will", &[0x01, 0x02, 0x03, 0x08, 0x09, 0x18]);
/// PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK and UNSUBACK: a reason string and user properties.
pub const ACK: PropertySet = set("acknowledgement", &[REASON]);
/// SUBSCRIBE's properties.
pub const SUBSCRIBE: PropertySet = set("SUBSCRIBE", &[SUBSCRIPTION_ID]);
/// UNSUBSCRIBE's properties.
pub const UNSUBSCRIBE: PropertySet = set("UNSUBSCRIBE", &[]);
/// DISCONNECT's properties.
pub const DISCONNECT: PropertySet = set("DISCONNECT", &[0x11, 0x1C, REASON]);
/// AUTH's properties.
pub const AUTH: PropertySet = set("AUTH", &[0x15, 0x16, REASON]);

impl PropertySet {
    /// Whether the packet may carry property `id`.
    pub fn allows(self, id: u8) -> bool {
        id < 64 && self.mask & (1 << id) != 0
    }

    /// The same set under another packet's name, for the packets that share one.
    pub(crate) fn for_packet(self, packet: &'static str) -> PropertySet {
        PropertySet { packet, mask: self.mask }
    }

    fn check(self, id: u8) -> Result<(), MqttError> {
        match self.allows(id) {
            true => Ok(()),
            false => Err(MqttError::PropertyNotAllowed { packet: self.packet, id }),
        }
    }
}

/// Stores a property that may appear once, refusing a second occurrence.
fn once<T>(slot: &mut Option<T>, id: u8, value: T) -> Result<(), MqttError> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(MqttError::DuplicateProperty(id)),
    }
}

/// A byte property whose only values are 0 and 1.
fn flag(r: &mut Reader, id: u8) -> Result<bool, MqttError> {
    match r.u8("property")? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(MqttError::InvalidPropertyValue { id, value: u64::from(value) }),
    }
}

fn non_zero_u16(r: &mut Reader, id: u8) -> Result<NonZeroU16, MqttError> {
    NonZeroU16::new(r.u16("property")?).ok_or(MqttError::InvalidPropertyValue { id, value: 0 })
}

impl Properties {
    /// Reads a property length and the properties of a packet that allows `allowed`.
    pub(crate) fn decode(r: &mut Reader, allowed: PropertySet) -> Result<Properties, MqttError> {
        let len = r.var_int("property length")?;
        let mut section = r.section("properties", len as usize)?;
        let mut props = Properties::default();
        while section.remaining() > 0 {
            let id = section.var_int("property identifier")?;
            let id = u8::try_from(id).map_err(|_| MqttError::UnknownProperty(id))?;
            props.decode_one(&mut section, id)?;
            allowed.check(id)?;
        }
        if allowed == SUBSCRIBE && props.subscription_identifiers.len() > 1 {
            return Err(MqttError::DuplicateProperty(SUBSCRIPTION_ID));
        }
        Ok(props)
    }

    fn decode_one(&mut self, r: &mut Reader, id: u8) -> Result<(), MqttError> {
        match id {
            0x01 => once(&mut self.payload_format_utf8, id, flag(r, id)?),
            0x02 => once(&mut self.message_expiry_interval, id, r.u32("property")?),
            0x03 => once(&mut self.content_type, id, r.string("content type")?),
            0x08 => once(&mut self.response_topic, id, r.string("response topic")?),
            0x09 => once(&mut self.correlation_data, id, r.binary("correlation data")?),
            SUBSCRIPTION_ID => match r.var_int("subscription identifier")? {
                0 => Err(MqttError::InvalidPropertyValue { id, value: 0 }),
                value => {
                    self.subscription_identifiers.push(value);
                    Ok(())
                }
            },
            0x11 => once(&mut self.session_expiry_interval, id, r.u32("property")?),
            0x12 => once(&mut self.assigned_client_identifier, id, r.string("assigned client identifier")?),
            0x13 => once(&mut self.server_keep_alive, id, r.u16("property")?),
            0x15 => once(&mut self.authentication_method, id, r.string("authentication method")?),
            0x16 => once(&mut self.authentication_data, id, r.binary("authentication data")?),
            0x17 => once(&mut self.request_problem_information, id, flag(r, id)?),
            0x18 => once(&mut self.will_delay_interval, id, r.u32("property")?),
            0x19 => once(&mut self.request_response_information, id, flag(r, id)?),
            0x1A => once(&mut self.response_information, id, r.string("response information")?),
            0x1C => once(&mut self.server_reference, id, r.string("server reference")?),
            REASON => once(&mut self.reason_string, id, r.string("reason string")?),
            0x21 => once(&mut self.receive_maximum, id, non_zero_u16(r, id)?),
            0x22 => once(&mut self.topic_alias_maximum, id, r.u16("property")?),
            0x23 => once(&mut self.topic_alias, id, non_zero_u16(r, id)?),
            0x24 => once(&mut self.maximum_qos, id, if flag(r, id)? { QoS::AtLeastOnce } else { QoS::AtMostOnce }),
            0x25 => once(&mut self.retain_available, id, flag(r, id)?),
            USER => {
                let name = r.string("user property name")?;
                let value = r.string("user property value")?;
                self.user_properties.push((name, value));
                Ok(())
            }
            0x27 => {
                let size = r.u32("property")?;
                once(
                    &mut self.maximum_packet_size,
                    id,
                    NonZeroU32::new(size).ok_or(MqttError::InvalidPropertyValue { id, value: 0 })?,
                )
            }
            0x28 => once(&mut self.wildcard_subscription_available, id, flag(r, id)?),
            0x29 => once(&mut self.subscription_identifier_available, id, flag(r, id)?),
            0x2A => once(&mut self.shared_subscription_available, id, flag(r, id)?),
            _ => Err(MqttError::UnknownProperty(u32::from(id))),
        }
    }

    /// Writes the property length and the properties, refusing any `allowed` does not hold.
    pub(crate) fn encode(&self, out: &mut BytesMut, allowed: PropertySet) -> Result<(), MqttError> {
        let mut body = BytesMut::new();
        self.encode_fields(&mut body, allowed)?;
        put_var_int(out, "property length", body.len() as u32)?;
        out.put_slice(&body);
        Ok(())
    }

    /// True when no property is present (lets acknowledgements use their short forms).
    pub fn is_empty(&self) -> bool {
        *self == Properties::default()
    }

    fn encode_fields(&self, out: &mut BytesMut, allowed: PropertySet) -> Result<(), MqttError> {
        let packet = allowed.packet;
        let mut w = Writer { out, allowed };
        w.flag(0x01, self.payload_format_utf8)?;
        w.u32(0x02, self.message_expiry_interval)?;
        w.string(0x03, packet, &self.content_type)?;
        w.string(0x08, packet, &self.response_topic)?;
        w.binary(0x09, &self.correlation_data)?;
        if self.subscription_identifiers.len() > 1 && allowed == SUBSCRIBE {
            return Err(MqttError::DuplicateProperty(SUBSCRIPTION_ID));
        }
        for id in &self.subscription_identifiers {
            if *id == 0 || *id > MAX_VAR_INT {
                return Err(MqttError::InvalidPropertyValue { id: SUBSCRIPTION_ID, value: u64::from(*id) });
            }
            w.id(SUBSCRIPTION_ID)?;
            put_var_int(w.out, "subscription identifier", *id)?;
        }
        w.u32(0x11, self.session_expiry_interval)?;
        w.string(0x12, packet, &self.assigned_client_identifier)?;
        w.u16(0x13, self.server_keep_alive)?;
        w.string(0x15, packet, &self.authentication_method)?;
        w.binary(0x16, &self.authentication_data)?;
        w.flag(0x17, self.request_problem_information)?;
        w.u32(0x18, self.will_delay_interval)?;
        w.flag(0x19, self.request_response_information)?;
        w.string(0x1A, packet, &self.response_information)?;
        w.string(0x1C, packet, &self.server_reference)?;
        w.string(REASON, packet, &self.reason_string)?;
        w.u16(0x21, self.receive_maximum.map(NonZeroU16::get))?;
        w.u16(0x22, self.topic_alias_maximum)?;
        w.u16(0x23, self.topic_alias.map(NonZeroU16::get))?;
        let maximum_qos = match self.maximum_qos {
            Some(QoS::ExactlyOnce) => return Err(MqttError::InvalidPropertyValue { id: 0x24, value: 2 }),
            qos => qos.map(|qos| qos == QoS::AtLeastOnce),
        };
        w.flag(0x24, maximum_qos)?;
        w.flag(0x25, self.retain_available)?;
        w.u32(0x27, self.maximum_packet_size.map(NonZeroU32::get))?;
        w.flag(0x28, self.wildcard_subscription_available)?;
        w.flag(0x29, self.subscription_identifier_available)?;
        w.flag(0x2A, self.shared_subscription_available)?;
        for (name, value) in &self.user_properties {
            w.id(USER)?;
            put_string(w.out, packet, "user property name", name)?;
            put_string(w.out, packet, "user property value", value)?;
        }
        Ok(())
    }
}

/// Writes one property at a time after checking the packet may carry it.
struct Writer<'a> {
    out: &'a mut BytesMut,
    allowed: PropertySet,
}

impl Writer<'_> {
    fn id(&mut self, id: u8) -> Result<(), MqttError> {
        self.allowed.check(id)?;
        self.out.put_u8(id);
        Ok(())
    }

    fn flag(&mut self, id: u8, value: Option<bool>) -> Result<(), MqttError> {
        if let Some(value) = value {
            self.id(id)?;
            self.out.put_u8(u8::from(value));
        }
        Ok(())
    }

    fn u16(&mut self, id: u8, value: Option<u16>) -> Result<(), MqttError> {
        if let Some(value) = value {
            self.id(id)?;
            self.out.put_u16(value);
        }
        Ok(())
    }

    fn u32(&mut self, id: u8, value: Option<u32>) -> Result<(), MqttError> {
        if let Some(value) = value {
            self.id(id)?;
            self.out.put_u32(value);
        }
        Ok(())
    }

    fn string(&mut self, id: u8, packet: &'static str, value: &Option<String>) -> Result<(), MqttError> {
        if let Some(value) = value {
            self.id(id)?;
            put_string(self.out, packet, "property", value)?;
        }
        Ok(())
    }

    fn binary(&mut self, id: u8, value: &Option<Bytes>) -> Result<(), MqttError> {
        if let Some(value) = value {
            self.id(id)?;
            put_binary(self.out, "property", value)?;
        }
        Ok(())
    }
}
