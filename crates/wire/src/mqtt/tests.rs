//! Round trips per version, truncation, arbitrary bytes, and golden bytes from the OASIS
//! specifications' examples. The malformed-packet corpus is in `tests/malformed.rs`.

use bytes::BytesMut;
use proptest::prelude::*;

use super::strategies::packet;
use super::*;

fn decode_all(bytes: &[u8], version: ProtocolVersion) -> Result<Option<Packet>, MqttError> {
    Packet::decode(&mut BytesMut::from(bytes), version, MAX_PACKET_SIZE)
}

fn round_trip(p: &Packet, version: ProtocolVersion) -> Result<(), TestCaseError> {
    let bytes = p.to_bytes(version).map_err(|e| TestCaseError::fail(format!("{e}: {p:?}")))?;
    let mut buf = BytesMut::from(&bytes[..]);
    prop_assert_eq!(Packet::decode(&mut buf, version, MAX_PACKET_SIZE), Ok(Some(p.clone())));
    prop_assert!(buf.is_empty());
    for cut in 0..bytes.len() {
        let mut buf = BytesMut::from(&bytes[..cut]);
        prop_assert_eq!(Packet::decode(&mut buf, version, MAX_PACKET_SIZE), Ok(None), "prefix of {}", cut);
        prop_assert_eq!(buf.len(), cut, "nothing is consumed while incomplete");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_v311_packet_round_trips_and_its_prefixes_ask_for_more(p in packet(ProtocolVersion::V311)) {
        round_trip(&p, ProtocolVersion::V311)?;
    }

    #[test]
    fn every_v5_packet_round_trips_and_its_prefixes_ask_for_more(p in packet(ProtocolVersion::V5)) {
        round_trip(&p, ProtocolVersion::V5)?;
    }

    #[test]
    fn packets_back_to_back_decode_in_order(ps in prop::collection::vec(packet(ProtocolVersion::V5), 1..5)) {
        let mut buf = BytesMut::new();
        for p in &ps { p.encode(ProtocolVersion::V5, &mut buf).map_err(|e| TestCaseError::fail(e.to_string()))?; }
        for p in &ps {
            prop_assert_eq!(Packet::decode(&mut buf, ProtocolVersion::V5, MAX_PACKET_SIZE), Ok(Some(p.clone())));
        }
        prop_assert!(buf.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// The fuzz target: whatever arrives, decoding returns (packet, need more, or error) and a
    /// decoded packet re-encodes to bytes that decode to it again.
    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(data in prop::collection::vec(any::<u8>(), 0..64), v5 in any::<bool>()) {
        let version = if v5 { ProtocolVersion::V5 } else { ProtocolVersion::V311 };
        let mut buf = BytesMut::from(&data[..]);
        while let Ok(Some(p)) = Packet::decode(&mut buf, version, 48) {
            let version = match &p { Packet::Connect(c) => c.version, _ => version };
            let again = p.to_bytes(version).map_err(|e| TestCaseError::fail(format!("{e}: {p:?}")))?;
            prop_assert_eq!(decode_all(&again, version), Ok(Some(p)));
        }
    }

    /// Mutating one byte of a valid packet (the likeliest corruption) never panics either.
    #[test]
    fn corrupted_packets_never_panic_the_decoder(p in packet(ProtocolVersion::V5), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        if let Ok(bytes) = p.to_bytes(ProtocolVersion::V5) {
            let mut bytes = bytes.to_vec();
            let index = at.index(bytes.len());
            bytes[index] = byte;
            let _ = decode_all(&bytes, ProtocolVersion::V5);
        }
    }
}

fn golden(p: Packet, version: ProtocolVersion, expected: &[u8]) {
    assert_eq!(&p.to_bytes(version).unwrap()[..], expected, "{p:?}");
    assert_eq!(decode_all(expected, version), Ok(Some(p)));
}

fn id(value: u16) -> PacketId {
    PacketId::new(value).unwrap()
}

/// 3.1.1 section 3.1.2.10 / 5.0 figure 3-6: flags 0xCE (user name, password, will QoS 1, will,
/// clean start) and keep alive 10; 5.0 adds a session expiry interval of 10.
fn spec_connect(version: ProtocolVersion) -> Connect {
    let mut properties = Properties::default();
    if version == ProtocolVersion::V5 {
        properties.session_expiry_interval = Some(10);
    }
    let will = Will {
        qos: QoS::AtLeastOnce,
        retain: false,
        properties: Properties::default(),
        topic: "w".into(),
        payload: "x".into(),
    };
    Connect {
        version,
        clean_start: true,
        keep_alive: 10,
        properties,
        client_id: "c".into(),
        will: Some(will),
        username: Some("u".into()),
        password: Some("p".into()),
    }
}

#[test]
fn connect_golden_bytes_follow_the_spec_example() {
    let payload: &[u8] = &[0, 1, b'c', 0, 1, b'w', 0, 1, b'x', 0, 1, b'u', 0, 1, b'p'];
    let mut v311 = vec![0x10, 25, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xCE, 0, 10];
    v311.extend_from_slice(payload);
    golden(Packet::Connect(Box::new(spec_connect(ProtocolVersion::V311))), ProtocolVersion::V311, &v311);
    let mut v5 = vec![0x10, 32, 0, 4, b'M', b'Q', b'T', b'T', 5, 0xCE, 0, 10, 5, 0x11, 0, 0, 0, 10];
    v5.extend_from_slice(&[0, 1, b'c', 0, 0, 1, b'w', 0, 1, b'x', 0, 1, b'u', 0, 1, b'p']);
    golden(Packet::Connect(Box::new(spec_connect(ProtocolVersion::V5))), ProtocolVersion::V5, &v5);
}

#[test]
fn publish_golden_bytes_follow_the_spec_example() {
    // 3.1.1 figure 3.11 / 5.0 figure 3-9: topic "a/b", packet identifier 10 (and in 5.0 no properties).
    let mut p = Publish::at_most_once("a/b", &b"hi"[..]);
    p.qos = QoS::AtLeastOnce;
    p.packet_id = Some(id(10));
    golden(Packet::Publish(p.clone()), ProtocolVersion::V311, &[0x32, 9, 0, 3, b'a', b'/', b'b', 0, 10, b'h', b'i']);
    golden(Packet::Publish(p), ProtocolVersion::V5, &[0x32, 10, 0, 3, b'a', b'/', b'b', 0, 10, 0, b'h', b'i']);
}

#[test]
fn subscribe_and_suback_golden_bytes_follow_the_spec_example() {
    // 3.1.1 figures 3.23 and 3.26 / 5.0 3.8.3 and 3.9.3: "a/b" at QoS 1, "c/d" at QoS 2.
    let filters = vec![
        ("a/b".to_string(), SubscriptionOptions::qos(QoS::AtLeastOnce)),
        ("c/d".to_string(), SubscriptionOptions::qos(QoS::ExactlyOnce)),
    ];
    let sub = Subscribe { packet_id: id(10), properties: Properties::default(), filters };
    let body = [0, 3, b'a', b'/', b'b', 1, 0, 3, b'c', b'/', b'd', 2];
    let mut v311 = vec![0x82, 14, 0, 10];
    v311.extend_from_slice(&body);
    golden(Packet::Subscribe(sub.clone()), ProtocolVersion::V311, &v311);
    let mut v5 = vec![0x82, 15, 0, 10, 0];
    v5.extend_from_slice(&body);
    golden(Packet::Subscribe(sub), ProtocolVersion::V5, &v5);
    let reasons =
        vec![MqttReason::Success, MqttReason::GrantedQos1, MqttReason::GrantedQos2, MqttReason::UnspecifiedError];
    let suback = Suback { packet_id: id(10), properties: Properties::default(), reasons };
    golden(Packet::Suback(suback), ProtocolVersion::V311, &[0x90, 6, 0, 10, 0x00, 0x01, 0x02, 0x80]);
}

#[test]
fn fixed_header_only_packets_golden_bytes() {
    golden(Packet::Pingreq, ProtocolVersion::V311, &[0xC0, 0]);
    golden(Packet::Pingresp, ProtocolVersion::V5, &[0xD0, 0]);
    golden(Packet::Disconnect(Disconnect::normal()), ProtocolVersion::V311, &[0xE0, 0]);
    golden(Packet::Disconnect(Disconnect::normal()), ProtocolVersion::V5, &[0xE0, 0]);
    let auth = Auth { reason: MqttReason::ContinueAuthentication, properties: Properties::default() };
    golden(Packet::Auth(auth.clone()), ProtocolVersion::V5, &[0xF0, 2, 0x18, 0]);
    assert_eq!(
        decode_all(&[0xF0, 1, 0x18], ProtocolVersion::V5),
        Ok(Some(Packet::Auth(auth))),
        "a missing property length is 0"
    );
}

#[test]
fn connack_and_acknowledgements_golden_bytes() {
    let refused =
        Connack { session_present: false, reason: MqttReason::NotAuthorized, properties: Properties::default() };
    golden(Packet::Connack(refused.clone()), ProtocolVersion::V311, &[0x20, 2, 0, 5]);
    golden(Packet::Connack(refused), ProtocolVersion::V5, &[0x20, 3, 0, 0x87, 0]);
    golden(Packet::Puback(PublishResponse::success(id(7))), ProtocolVersion::V5, &[0x40, 2, 0, 7]);
    golden(Packet::Pubrel(PublishResponse::success(id(7))), ProtocolVersion::V311, &[0x62, 2, 0, 7]);
    let mut not_found = PublishResponse::success(id(7));
    not_found.reason = MqttReason::PacketIdentifierNotFound;
    golden(Packet::Pubcomp(not_found.clone()), ProtocolVersion::V5, &[0x70, 4, 0, 7, 0x92, 0]);
    let short = Packet::Pubcomp(not_found.clone());
    assert_eq!(
        decode_all(&[0x70, 3, 0, 7, 0x92], ProtocolVersion::V5),
        Ok(Some(short)),
        "a missing property length is 0"
    );
    not_found.properties.reason_string = Some("r".into());
    golden(Packet::Pubcomp(not_found), ProtocolVersion::V5, &[0x70, 8, 0, 7, 0x92, 4, 0x1F, 0, 1, b'r']);
    let unsuback = Unsuback {
        packet_id: id(1),
        properties: Properties::default(),
        reasons: vec![MqttReason::NoSubscriptionExisted],
    };
    golden(Packet::Unsuback(unsuback), ProtocolVersion::V5, &[0xB0, 4, 0, 1, 0, 0x11]);
    let unsubscribe = Unsubscribe { packet_id: id(1), properties: Properties::default(), filters: vec!["a/+".into()] };
    golden(Packet::Unsubscribe(unsubscribe), ProtocolVersion::V311, &[0xA2, 7, 0, 1, 0, 3, b'a', b'/', b'+']);
}

#[test]
fn variable_byte_integers_match_the_spec_table() {
    // 3.1.1 table 2.4 / 5.0 1.5.5: the smallest and largest value of each length.
    let table: [(u32, &[u8]); 8] = [
        (0, &[0x00]),
        (127, &[0x7F]),
        (128, &[0x80, 0x01]),
        (16_383, &[0xFF, 0x7F]),
        (16_384, &[0x80, 0x80, 0x01]),
        (2_097_151, &[0xFF, 0xFF, 0x7F]),
        (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
        (268_435_455, &[0xFF, 0xFF, 0xFF, 0x7F]),
    ];
    for (value, bytes) in table {
        let mut out = BytesMut::new();
        primitive::put_var_int(&mut out, "test", value).unwrap();
        assert_eq!(&out[..], bytes);
        assert_eq!(primitive::read_var_int(bytes, "test"), Ok(primitive::VarInt::Value(value, bytes.len())));
        assert_eq!(primitive::var_int_len(value as usize), bytes.len());
    }
}

#[test]
fn strings_follow_the_spec_example() {
    // 5.0 figure 1-1 / 3.1.1 figure 1.3: "A\u{2A6D4}" is 00 05 41 F0 AA 9B 94.
    let p = Publish::at_most_once("A\u{2A6D4}", &b""[..]);
    golden(Packet::Publish(p), ProtocolVersion::V311, &[0x30, 7, 0, 5, 0x41, 0xF0, 0xAA, 0x9B, 0x94]);
}

#[test]
fn needed_counts_the_bytes_a_packet_still_lacks_from_its_fixed_header() {
    assert_eq!(super::needed(&[]), Some(2));
    assert_eq!(super::needed(&[0x30]), Some(1));
    // PUBLISH, remaining length 200 (0xC8 0x01): 203 bytes in all.
    assert_eq!(super::needed(&[0x30, 0xC8, 0x01, 0, 5]), Some(198));
    assert_eq!(super::needed(&[0xC0, 0x00]), Some(0), "PINGREQ is whole");
    assert_eq!(super::needed(&[0x30, 0x80]), None, "the length is not whole yet");
}
