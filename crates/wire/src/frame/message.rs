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
use crate::view::{read_entry, PropertiesRef};

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
