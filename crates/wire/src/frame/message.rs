//! The message section shared by PUBLISH and DELIVER.
//!
//! Layout: `sent_us:u64 | topic:str16 | count:u16 | count × (key:str16 type:u8 value) | payload:bytes32`.
//! A DELIVER frame carries these bytes verbatim after its own header, so a broker forwards a
//! published message to any number of subscribers without re-encoding or copying it.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::{put_bytes32, put_str16, Reader};
use crate::error::WireError;
use crate::value::{Property, Value};
use crate::view::{read_entry, PropertiesRef, ValueRef};

/// The property that makes a PUBLISH a request: its text value is the reply subject, a valid
/// topic (no wildcards) the responder publishes its answer to. A property, not a field, so
/// that every broker forwards it inside the message section untouched (links, logs) and a
/// client that knows nothing of requests still reads the message. Keys starting with `$` are
/// the protocol's.
pub const REPLY_TO: &str = "$reply_to";

/// The property (boolean `true`) asking the publisher's broker to keep this message as its
/// topic's retained value; an empty payload clears the topic's value instead.
pub const RETAIN: &str = "$retain";

/// The property (boolean `true`) that, beside [`RETAIN`], asks the network to keep the message as
/// its topic's retained value without delivering it live: how an MQTT QoS 1/2 retained publish,
/// delivered live by guaranteed delivery, also becomes the value new subscriptions get.
pub const RETAIN_ONLY: &str = "$retain_only";

/// The property (boolean `true`) a broker adds to a retained value it delivers to a new
/// subscription, so the subscriber can tell a kept value from a live one. Only brokers set it:
/// a PUBLISH carrying it is refused.
pub const RETAINED: &str = "$retained";

/// A published message, held as its encoded bytes plus the offsets of its fields.
///
/// Invariant: `body` is a well-formed message section (validated by [`Message::decode`] or
/// built by [`Message::new`]), so the accessors cannot fail.
#[derive(Clone, PartialEq)]
pub struct Message {
    body: Bytes,
    sent_us: u64,
    topic: Range<usize>,
    properties: Range<usize>,
    property_count: u16,
    payload: Range<usize>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("topic", &self.topic())
            .field("sent_us", &self.sent_us)
            .field("properties", &self.properties())
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

impl Message {
    /// Encodes a message. `sent_us` is the publisher's wall clock in microseconds since the
    /// Unix epoch, so a subscriber on the same host can measure end-to-end latency.
    pub fn new(topic: &str, properties: &[Property], payload: Bytes, sent_us: u64) -> Result<Message, WireError> {
        let count = u16::try_from(properties.len()).map_err(|_| WireError::TooLong {
            field: "properties",
            len: properties.len(),
            max: usize::from(u16::MAX),
        })?;
        let mut out = BytesMut::with_capacity(16 + topic.len() + payload.len() + properties.len() * 16);
        out.put_u64(sent_us);
        put_str16(&mut out, "topic", topic)?;
        out.put_u16(count);
        for p in properties {
            put_str16(&mut out, "property key", &p.key)?;
            out.put_u8(p.value.type_code());
            match &p.value {
                Value::Str(s) => put_str16(&mut out, "property value", s)?,
                Value::Int(i) => out.put_i64(*i),
                Value::Float(x) => out.put_f64(*x),
                Value::Bool(b) => out.put_u8(u8::from(*b)),
            }
        }
        put_bytes32(&mut out, "payload", &payload)?;
        Message::decode(out.freeze())
    }

    /// Validates a message section and records its field offsets; the bytes are kept, not
    /// copied.
    pub fn decode(body: Bytes) -> Result<Message, WireError> {
        let mut r = Reader::new("message", &body);
        let sent_us = r.u64("sent_us")?;
        let topic_start = r.position() + 2;
        r.str16("topic")?;
        let topic = topic_start..r.position();
        let property_count = r.u16("property count")?;
        let props_start = r.position();
        for index in 0..usize::from(property_count) {
            read_entry(&mut r, index)?;
        }
        let properties = props_start..r.position();
        let payload = r.bytes32("payload")?;
        r.finish()?;
        Ok(Message { body, sent_us, topic, properties, property_count, payload })
    }

    /// The topic this message was published on.
    pub fn topic(&self) -> &str {
        // Validated as UTF-8 in `decode`; re-checking a short topic is cheaper than a second
        // owned copy and keeps the crate free of unsafe code.
        std::str::from_utf8(&self.body[self.topic.clone()]).unwrap_or_default()
    }

    /// The publisher's send time, microseconds since the Unix epoch.
    pub fn sent_us(&self) -> u64 {
        self.sent_us
    }

    /// The payload, sharing the message's buffer.
    pub fn payload(&self) -> Bytes {
        self.body.slice(self.payload.clone())
    }

    /// Number of properties, without decoding them.
    pub fn property_count(&self) -> usize {
        usize::from(self.property_count)
    }

    /// Decodes the properties into owned values, in the order the publisher gave them.
    /// Allocates a string per key and per text value; matching reads
    /// [`Message::property_view`] instead.
    pub fn properties(&self) -> Vec<Property> {
        let mut out = Vec::with_capacity(self.property_count());
        let mut r = Reader::new("message", &self.body[self.properties.clone()]);
        for index in 0..self.property_count() {
            match read_property(&mut r, index) {
                Ok(p) => out.push(p),
                Err(_) => break, // unreachable: validated in `decode`
            }
        }
        out
    }

    /// The properties read in place from the message buffer: no allocation, for matching.
    pub fn property_view(&self) -> PropertiesRef<'_> {
        PropertiesRef::new(&self.body[self.properties.clone()], self.property_count)
    }

    /// The value of property `key` (the first of that key), read in place; `None` without it.
    pub fn property(&self, key: &str) -> Option<ValueRef<'_>> {
        if self.property_count == 0 {
            return None;
        }
        self.property_view().iter().find(|(k, _)| *k == key).map(|(_, value)| value)
    }

    /// A request's reply subject ([`REPLY_TO`]) when it is text; whether it is a valid topic is
    /// the broker's to check.
    pub fn reply_to(&self) -> Option<&str> {
        match self.property(REPLY_TO) {
            Some(ValueRef::Str(subject)) => Some(subject),
            _ => None,
        }
    }

    /// Whether the publisher asked for this message to be retained ([`RETAIN`] is `true`).
    pub fn is_retain(&self) -> bool {
        self.property(RETAIN) == Some(ValueRef::Bool(true))
    }

    /// Whether this only sets its topic's retained value, delivered to no live subscription
    /// ([`RETAIN`] and [`RETAIN_ONLY`] both `true`).
    pub fn is_retain_only(&self) -> bool {
        self.is_retain() && self.property(RETAIN_ONLY) == Some(ValueRef::Bool(true))
    }

    /// Whether a broker delivered this as a kept retained value ([`RETAINED`] is `true`).
    pub fn is_retained(&self) -> bool {
        self.property(RETAINED) == Some(ValueRef::Bool(true))
    }

    /// The encoded message section, as carried by PUBLISH and DELIVER.
    pub fn as_bytes(&self) -> &Bytes {
        &self.body
    }

    /// Length of the encoded message section.
    pub fn encoded_len(&self) -> usize {
        self.body.len()
    }
}

fn read_property(r: &mut Reader<'_>, index: usize) -> Result<Property, WireError> {
    let (key, value) = read_entry(r, index)?;
    Ok(Property { key: key.to_string(), value: value.to_value() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Message {
        let props = vec![
            Property::new("sym", "IBM"),
            Property::new("price", 120i64),
            Property::new("ratio", 0.5),
            Property::new("live", true),
        ];
        Message::new("plant.line3.temp", &props, Bytes::from_static(b"hello"), 42).unwrap()
    }

    #[test]
    fn message_round_trips_every_field() {
        let m = sample();
        let again = Message::decode(m.as_bytes().clone()).unwrap();
        assert_eq!(again.topic(), "plant.line3.temp");
        assert_eq!(again.sent_us(), 42);
        assert_eq!(again.payload(), Bytes::from_static(b"hello"));
        assert_eq!(again.properties(), m.properties());
        assert_eq!(again.properties()[1].value, Value::Int(120));
    }

    #[test]
    fn golden_bytes_match_the_protocol_document() {
        let m = Message::new("a.b", &[Property::new("k", 7i64)], Bytes::from_static(b"xy"), 1).unwrap();
        let expected: &[u8] = &[
            0, 0, 0, 0, 0, 0, 0, 1, // sent_us
            0, 3, b'a', b'.', b'b', // topic
            0, 1, // property count
            0, 1, b'k', 1, 0, 0, 0, 0, 0, 0, 0, 7, // k = Int(7)
            0, 0, 0, 2, b'x', b'y', // payload
        ];
        assert_eq!(&m.as_bytes()[..], expected);
    }

    #[test]
    fn a_request_carries_its_reply_subject_as_a_property() {
        let props = [Property::new(REPLY_TO, "_INBOX.k.1")];
        let m = Message::new("svc.time", &props, Bytes::from_static(b"?"), 1).unwrap();
        let expected: &[u8] = &[
            0, 0, 0, 0, 0, 0, 0, 1, // sent_us
            0, 8, b's', b'v', b'c', b'.', b't', b'i', b'm', b'e', // topic
            0, 1, // property count
            0, 9, b'$', b'r', b'e', b'p', b'l', b'y', b'_', b't', b'o', 0, // key, type string
            0, 10, b'_', b'I', b'N', b'B', b'O', b'X', b'.', b'k', b'.', b'1', // reply subject
            0, 0, 0, 1, b'?', // payload
        ];
        assert_eq!(&m.as_bytes()[..], expected);
        assert_eq!(m.reply_to(), Some("_INBOX.k.1"));
        assert!(!m.is_retain() && !m.is_retained());
        assert_eq!(sample().reply_to(), None);
        let not_text = Message::new("a", &[Property::new(REPLY_TO, 1i64)], Bytes::new(), 0).unwrap();
        assert_eq!(not_text.reply_to(), None, "only text is a reply subject");
        assert_eq!(not_text.property(REPLY_TO), Some(ValueRef::Int(1)));
    }

    #[test]
    fn retain_flags_are_boolean_properties() {
        let m = Message::new("a", &[Property::new("x", 1i64), Property::new(RETAIN, true)], Bytes::new(), 0).unwrap();
        assert!(m.is_retain());
        let off = Message::new("a", &[Property::new(RETAIN, false)], Bytes::new(), 0).unwrap();
        assert!(!off.is_retain());
        let kept = Message::new("a", &[Property::new(RETAINED, true)], Bytes::new(), 0).unwrap();
        assert!(kept.is_retained() && !kept.is_retain());
    }

    #[test]
    fn unknown_property_type_is_an_error() {
        let mut b = BytesMut::new();
        b.put_u64(0);
        put_str16(&mut b, "topic", "t").unwrap();
        b.put_u16(1);
        put_str16(&mut b, "k", "k").unwrap();
        b.put_u8(9);
        assert_eq!(Message::decode(b.freeze()), Err(WireError::UnknownValueType { index: 0, code: 9 }));
    }
}
