//! The malformed-packet corpus of issue 42: each packet kind a broken or hostile client may
//! send, with the error (and so the reason code) the decoder must give. A change to the codec
//! that accepts one of these, or refuses it for another reason, fails here.

use bytes::BytesMut;
use tidings_wire::mqtt::{MqttError, MqttReason, Packet, ProtocolVersion, MAX_PACKET_SIZE};

use MqttError as E;
use ProtocolVersion::{V311, V5};

fn decode(bytes: &[u8], version: ProtocolVersion, max: usize) -> Result<Option<Packet>, MqttError> {
    Packet::decode(&mut BytesMut::from(bytes), version, max)
}

/// A packet with `first` as its first byte and the right remaining length for `body`.
fn p(first: u8, body: &[u8]) -> Vec<u8> {
    let mut packet = vec![first, body.len() as u8];
    packet.extend_from_slice(body);
    packet
}

/// A CONNECT variable header for `level` with `flags`, keep alive 60, then `rest`.
fn connect(level: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', level, flags, 0, 60];
    body.extend_from_slice(rest);
    p(0x10, &body)
}

fn cases() -> Vec<(&'static str, ProtocolVersion, Vec<u8>, MqttError)> {
    let flags = |packet, flags| E::InvalidFlags { packet, flags };
    vec![
        ("reserved packet type 0", V5, p(0x00, &[]), E::ReservedPacketType(0)),
        ("AUTH in 3.1.1", V311, p(0xF0, &[]), E::ReservedPacketType(15)),
        ("PUBREL without its 0010 flags", V5, p(0x60, &[0, 1]), flags("PUBREL", 0)),
        ("SUBSCRIBE with flags 0000", V311, p(0x80, &[0, 1, 0, 1, b'a', 0]), flags("SUBSCRIBE", 0)),
        ("PINGREQ with a flag set", V311, p(0xC1, &[]), flags("PINGREQ", 1)),
        (
            "remaining length of five bytes",
            V5,
            vec![0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F],
            E::MalformedVarInt { field: "remaining length" },
        ),
        (
            "remaining length not in its shortest form",
            V5,
            vec![0xC0, 0x80, 0x00],
            E::MalformedVarInt { field: "remaining length" },
        ),
        ("PUBLISH at QoS 3", V311, p(0x36, &[0, 1, b'a', 0, 1]), E::InvalidQos { packet: "PUBLISH" }),
        (
            "PUBLISH QoS 0 with DUP",
            V311,
            p(0x38, &[0, 1, b'a']),
            E::Forbidden { packet: "PUBLISH", field: "DUP on QoS 0", value: 1 },
        ),
        ("PUBLISH topic with +", V311, p(0x30, &[0, 3, b'a', b'/', b'+']), E::InvalidTopicName("a/+".into())),
        ("PUBLISH topic with #", V5, p(0x30, &[0, 1, b'#', 0]), E::InvalidTopicName("#".into())),
        ("PUBLISH empty topic in 3.1.1", V311, p(0x30, &[0, 0]), E::InvalidTopicName(String::new())),
        ("PUBLISH empty topic without alias", V5, p(0x30, &[0, 0, 0]), E::InvalidTopicName(String::new())),
        (
            "PUBLISH topic with NUL",
            V311,
            p(0x30, &[0, 3, b'a', 0, b'b']),
            E::NulInString { packet: "PUBLISH", field: "topic name" },
        ),
        (
            "PUBLISH topic with a UTF-16 surrogate",
            V311,
            p(0x30, &[0, 3, 0xED, 0xA0, 0x80]),
            E::InvalidUtf8 { packet: "PUBLISH", field: "topic name" },
        ),
        (
            "PUBLISH QoS 1 with packet id 0",
            V311,
            p(0x32, &[0, 1, b'a', 0, 0]),
            E::InvalidPacketId { packet: "PUBLISH" },
        ),
        (
            "PUBLISH property length past the end",
            V5,
            p(0x30, &[0, 1, b'a', 9]),
            E::Truncated { packet: "PUBLISH", field: "properties" },
        ),
        (
            "duplicate property",
            V5,
            p(0x30, &[0, 1, b'a', 10, 0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2]),
            E::DuplicateProperty(0x02),
        ),
        (
            "property PUBLISH may not carry",
            V5,
            p(0x30, &[0, 1, b'a', 5, 0x11, 0, 0, 0, 1]),
            E::PropertyNotAllowed { packet: "PUBLISH", id: 0x11 },
        ),
        ("unknown property", V5, p(0x30, &[0, 1, b'a', 2, 0x7F, 0]), E::UnknownProperty(0x7F)),
        ("topic alias 0", V5, p(0x30, &[0, 1, b'a', 3, 0x23, 0, 0]), E::InvalidPropertyValue { id: 0x23, value: 0 }),
        (
            "payload format indicator 2",
            V5,
            p(0x30, &[0, 1, b'a', 2, 0x01, 2]),
            E::InvalidPropertyValue { id: 0x01, value: 2 },
        ),
        ("CONNECT protocol level 6", V5, connect(6, 2, &[0, 0]), E::UnsupportedProtocolLevel(6)),
        ("CONNECT protocol level 3 (MQTT 3.1)", V311, connect(3, 2, &[0, 0]), E::UnsupportedProtocolLevel(3)),
        (
            "CONNECT reserved flag",
            V311,
            connect(4, 3, &[0, 0]),
            E::Forbidden { packet: "CONNECT", field: "reserved flag", value: 3 },
        ),
        ("CONNECT will QoS 3", V311, connect(4, 0b0001_1110, &[0, 0]), E::InvalidQos { packet: "CONNECT" }),
        (
            "CONNECT will retain without will",
            V311,
            connect(4, 0b0010_0010, &[0, 0]),
            E::Forbidden { packet: "CONNECT", field: "will QoS or retain without will", value: 0x22 },
        ),
        (
            "CONNECT password without user name in 3.1.1",
            V311,
            connect(4, 0b0100_0010, &[0, 0, 0, 0]),
            E::Forbidden { packet: "CONNECT", field: "password without user name", value: 0x42 },
        ),
        (
            "CONNECT with trailing bytes",
            V311,
            connect(4, 2, &[0, 0, 7]),
            E::TrailingBytes { packet: "CONNECT", extra: 1 },
        ),
        (
            "CONNACK reserved flag bits",
            V311,
            p(0x20, &[2, 0]),
            E::Forbidden { packet: "CONNACK", field: "acknowledge flags", value: 2 },
        ),
        ("CONNACK 3.1.1 return code 6", V311, p(0x20, &[0, 6]), E::InvalidReasonCode { packet: "CONNACK", code: 6 }),
        (
            "CONNACK refusal with session present",
            V5,
            p(0x20, &[1, 0x87, 0]),
            E::Forbidden { packet: "CONNACK", field: "session present on refusal", value: 1 },
        ),
        (
            "PUBACK reason code PUBACK may not carry",
            V5,
            p(0x40, &[0, 1, 0x8F]),
            E::InvalidReasonCode { packet: "PUBACK", code: 0x8F },
        ),
        ("SUBSCRIBE with no filter", V311, p(0x82, &[0, 1]), E::EmptyPayload { packet: "SUBSCRIBE" }),
        (
            "SUBSCRIBE options with reserved bits in 3.1.1",
            V311,
            p(0x82, &[0, 1, 0, 1, b'a', 4]),
            E::Forbidden { packet: "SUBSCRIBE", field: "subscription options", value: 4 },
        ),
        (
            "SUBSCRIBE retain handling 3",
            V5,
            p(0x82, &[0, 1, 0, 0, 1, b'a', 0x30]),
            E::Forbidden { packet: "SUBSCRIBE", field: "retain handling", value: 3 },
        ),
        (
            "SUBSCRIBE filter with # not last",
            V311,
            p(0x82, &[0, 1, 0, 3, b'#', b'/', b'a', 0]),
            E::InvalidTopicFilter("#/a".into()),
        ),
        (
            "SUBSCRIBE two subscription identifiers",
            V5,
            p(0x82, &[0, 1, 4, 0x0B, 1, 0x0B, 2, 0, 1, b'a', 0]),
            E::DuplicateProperty(0x0B),
        ),
        (
            "SUBSCRIBE no local on a shared subscription",
            V5,
            p(0x82, &[0, 1, 0, 0, 10, b'$', b's', b'h', b'a', b'r', b'e', b'/', b'g', b'/', b'a', 4]),
            E::Forbidden { packet: "SUBSCRIBE", field: "no local on a shared subscription", value: 1 },
        ),
        ("UNSUBSCRIBE with no filter", V5, p(0xA2, &[0, 1, 0]), E::EmptyPayload { packet: "UNSUBSCRIBE" }),
        ("SUBACK 3.1.1 code 0x87", V311, p(0x90, &[0, 1, 0x87]), E::InvalidReasonCode { packet: "SUBACK", code: 0x87 }),
        ("DISCONNECT with a body in 3.1.1", V311, p(0xE0, &[0]), E::TrailingBytes { packet: "DISCONNECT", extra: 1 }),
        (
            "DISCONNECT reason code 0x01",
            V5,
            p(0xE0, &[0x01]),
            E::InvalidReasonCode { packet: "DISCONNECT", code: 0x01 },
        ),
        ("PINGREQ with a body", V5, p(0xC0, &[0]), E::TrailingBytes { packet: "PINGREQ", extra: 1 }),
    ]
}

#[test]
fn each_malformed_packet_gives_its_error() {
    for (what, version, bytes, expected) in cases() {
        assert_eq!(decode(&bytes, version, MAX_PACKET_SIZE), Err(expected), "{what}");
    }
}

#[test]
fn each_error_maps_to_the_reason_code_the_spec_gives() {
    let reason = |bytes: &[u8], version| decode(bytes, version, MAX_PACKET_SIZE).unwrap_err().reason();
    assert_eq!(reason(&connect(6, 2, &[0, 0]), V5), MqttReason::UnsupportedProtocolVersion);
    assert_eq!(reason(&[0x30, 5, 0, 3, b'a', b'/', b'+'], V311), MqttReason::TopicNameInvalid);
    assert_eq!(reason(&[0x36, 5, 0, 1, b'a', 0, 1], V311), MqttReason::MalformedPacket);
    assert_eq!(reason(&[0x30, 14, 0, 1, b'a', 10, 0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2], V5), MqttReason::ProtocolError);
}

#[test]
fn a_packet_over_the_maximum_is_refused_as_soon_as_its_length_is_known() {
    // Only the fixed header has arrived: the size is already known to be 1 + 2 + 200.
    assert_eq!(decode(&[0x30, 0xC8, 0x01], V5, 100), Err(E::PacketTooLarge { size: 203, max: 100 }));
    assert_eq!(E::PacketTooLarge { size: 203, max: 100 }.reason(), MqttReason::PacketTooLarge);
    assert_eq!(decode(&[0xC0, 0], V5, 2), Ok(Some(Packet::Pingreq)), "exactly the maximum is accepted");
}
