//! MQTT 5.0 message properties carried through tidings as message properties, so that they
//! cross links, logs and native clients untouched and come back out to MQTT subscribers as
//! they went in.
//!
//! - User properties become tidings properties of the same name with a text value, so a
//!   selector (`tidings-where`) or a native subscriber reads them like any other property. A
//!   name starting with `$` (tidings' reserved prefix) or `%` is carried with its first
//!   character escaped as `%24` or `%25`, and unescaped on the way out.
//! - The response topic is [`crate::REPLY_TO`] (mapped to a tidings topic), so a native
//!   requester's inbox is an MQTT responder's response topic and the other way round.
//! - Correlation data, content type, the payload format indicator and the message expiry
//!   interval are reserved properties ([`CORRELATION`], [`CONTENT_TYPE`], [`UTF8`],
//!   [`EXPIRY`]). Correlation data is binary and tidings values are text, so it is carried in
//!   lower-case hex.
//!
//! The expiry is counted from the message's send time (its `sent_us`, which the MQTT session
//! sets when the message arrives): a subscriber gets the interval that is left, and nothing
//! once it has passed (MQTT-3.3.2-5, MQTT-3.3.2-6).

use bytes::Bytes;

use super::topic::{name_to_tidings, tidings_to_name};
use super::Properties;
use crate::{Message, Property, Value, ValueRef, REPLY_TO};

/// MQTT correlation data, as lower-case hex text.
pub const CORRELATION: &str = "$correlation";
/// MQTT content type.
pub const CONTENT_TYPE: &str = "$content_type";
/// MQTT payload format indicator: `true` when the payload is UTF-8 text.
pub const UTF8: &str = "$utf8";
/// MQTT message expiry interval, in seconds from the message's send time.
pub const EXPIRY: &str = "$expiry";
/// Set on a QoS 2 publish (value 2), so QoS 2 subscribers receive it at QoS 2; reserved, so MQTT
/// subscribers never see it as a user property.
pub const QOS: &str = "$mqtt_qos";
/// Set (`true`) on the guaranteed copy of a QoS 1/2 publish whose RETAIN flag was set, so a
/// retain-as-published subscription sees the flag on the live copy too (the retained value
/// travels apart, see `tidings_wire::RETAIN_ONLY`).
pub const RETAIN_FLAG: &str = "$mqtt_retain";

/// Whether the publisher set RETAIN: [`crate::RETAIN`] on a best-effort message, [`RETAIN_FLAG`]
/// on a guaranteed one.
pub fn retain_flag(message: &Message) -> bool {
    message.is_retain() || message.property(RETAIN_FLAG) == Some(ValueRef::Bool(true))
}

/// Set on the messages of an MQTT session that has a no-local subscription: a hash of its client
/// identifier, so that session's delivery task can leave its own messages out.
pub const ORIGIN: &str = "$origin";

/// Appends the tidings form of a PUBLISH's 5.0 properties to `out`.
pub fn to_tidings(properties: &Properties, out: &mut Vec<Property>) {
    for (name, value) in &properties.user_properties {
        out.push(Property::new(escape(name), value.as_str()));
    }
    if let Some(topic) = &properties.response_topic {
        out.push(Property::new(REPLY_TO, name_to_tidings(topic)));
    }
    if let Some(data) = &properties.correlation_data {
        out.push(Property::new(CORRELATION, hex(data)));
    }
    if let Some(content_type) = &properties.content_type {
        out.push(Property::new(CONTENT_TYPE, content_type.as_str()));
    }
    if let Some(utf8) = properties.payload_format_utf8 {
        out.push(Property::new(UTF8, utf8));
    }
    if let Some(seconds) = properties.message_expiry_interval {
        out.push(Property::new(EXPIRY, i64::from(seconds)));
    }
}

/// Why a message is not sent to an MQTT subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// Its message expiry interval has passed.
    Expired,
}

/// The 5.0 PUBLISH properties of a delivered message at `now_us`: its user properties (every
/// property not reserved), response topic, correlation data, content type, payload format and
/// the expiry interval left; or why it must not be sent at all.
pub fn to_mqtt(message: &Message, now_us: u64) -> Result<Properties, Withheld> {
    let mut properties = Properties::default();
    for (key, value) in message.property_view().iter() {
        match (key, value) {
            (REPLY_TO, ValueRef::Str(subject)) => properties.response_topic = tidings_to_name(subject),
            (CORRELATION, ValueRef::Str(text)) => properties.correlation_data = unhex(text),
            (CONTENT_TYPE, ValueRef::Str(text)) => properties.content_type = Some(text.to_string()),
            (UTF8, ValueRef::Bool(flag)) => properties.payload_format_utf8 = Some(flag),
            (EXPIRY, ValueRef::Int(seconds)) => {
                let elapsed = now_us.saturating_sub(message.sent_us()) / 1_000_000;
                let left = u64::try_from(seconds).unwrap_or(0).saturating_sub(elapsed);
                if left == 0 {
                    return Err(Withheld::Expired);
                }
                properties.message_expiry_interval = Some(u32::try_from(left).unwrap_or(u32::MAX));
            }
            (key, _) if key.starts_with('$') => {}
            (key, value) => properties.user_properties.push((unescape(key), text_of(value))),
        }
    }
    Ok(properties)
}

/// Whether a message came from the MQTT session whose client identifier hashes to `origin`.
pub fn is_from(message: &Message, origin: u64) -> bool {
    message.property(ORIGIN) == Some(ValueRef::Int(origin as i64))
}

/// The [`ORIGIN`] property of a session's messages.
pub fn origin(hash: u64) -> Property {
    Property::new(ORIGIN, Value::Int(hash as i64))
}

/// A native property value as MQTT user property text (native publishers may send numbers).
fn text_of(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Str(text) => text.to_string(),
        ValueRef::Int(i) => i.to_string(),
        ValueRef::Float(x) => x.to_string(),
        ValueRef::Bool(flag) => flag.to_string(),
    }
}

fn escape(name: &str) -> String {
    match name.as_bytes().first() {
        Some(b'$') => format!("%24{}", &name[1..]),
        Some(b'%') => format!("%25{}", &name[1..]),
        _ => name.to_string(),
    }
}

fn unescape(key: &str) -> String {
    if let Some(rest) = key.strip_prefix("%24") {
        format!("${rest}")
    } else if let Some(rest) = key.strip_prefix("%25") {
        format!("%{rest}")
    } else {
        key.to_string()
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<Bytes> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..text.len()).step_by(2).map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok()).collect();
    bytes.map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carried(properties: &Properties, sent_us: u64) -> Message {
        let mut props = Vec::new();
        to_tidings(properties, &mut props);
        Message::new("a", &props, Bytes::from_static(b"x"), sent_us).unwrap()
    }

    #[test]
    fn every_carried_property_comes_back_out_as_it_went_in() {
        let properties = Properties {
            user_properties: vec![
                ("k".into(), "v".into()),
                ("k".into(), "w".into()),
                ("$x".into(), "1".into()),
                ("%y".into(), "".into()),
            ],
            response_topic: Some("reply/to/me".into()),
            correlation_data: Some(Bytes::from_static(&[0, 1, 0xfe, 0xff])),
            content_type: Some("text/plain".into()),
            payload_format_utf8: Some(true),
            message_expiry_interval: Some(60),
            ..Properties::default()
        };
        let message = carried(&properties, 1_000_000);
        assert_eq!(message.property(REPLY_TO), Some(ValueRef::Str("reply.to.me")));
        assert_eq!(message.property(CORRELATION), Some(ValueRef::Str("0001feff")));
        assert_eq!(message.property("%24x"), Some(ValueRef::Str("1")));
        let mut back = to_mqtt(&message, 1_000_000).unwrap();
        assert_eq!(back.message_expiry_interval, Some(60));
        back.message_expiry_interval = properties.message_expiry_interval;
        assert_eq!(back, properties);
    }

    #[test]
    fn the_expiry_left_is_sent_and_a_passed_one_withholds_the_message() {
        let properties = Properties { message_expiry_interval: Some(10), ..Properties::default() };
        let message = carried(&properties, 5_000_000);
        assert_eq!(to_mqtt(&message, 8_500_000).unwrap().message_expiry_interval, Some(7));
        assert_eq!(to_mqtt(&message, 15_000_000), Err(Withheld::Expired));
        assert_eq!(to_mqtt(&message, 0).unwrap().message_expiry_interval, Some(10), "a clock behind counts nothing");
    }

    #[test]
    fn native_properties_reach_mqtt_as_user_properties_and_reserved_ones_do_not() {
        let props = [Property::new("n", 3i64), Property::new("$retain", true), Property::new("s", "t")];
        let message = Message::new("a", &props, Bytes::new(), 0).unwrap();
        let back = to_mqtt(&message, 0).unwrap();
        assert_eq!(back.user_properties, vec![("n".to_string(), "3".to_string()), ("s".into(), "t".into())]);
    }

    #[test]
    fn malformed_correlation_text_from_a_native_publisher_is_left_out() {
        let message = Message::new("a", &[Property::new(CORRELATION, "abc")], Bytes::new(), 0).unwrap();
        assert_eq!(to_mqtt(&message, 0).unwrap().correlation_data, None);
    }

    #[test]
    fn a_session_knows_its_own_messages() {
        let message = Message::new("a", &[origin(u64::MAX)], Bytes::new(), 0).unwrap();
        assert!(is_from(&message, u64::MAX));
        assert!(!is_from(&message, 7));
        assert_eq!(to_mqtt(&message, 0).unwrap(), Properties::default());
    }
}
