use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::ids::{PubendId, PublisherId, Tick};
use crate::reason::ReasonCode;
use crate::strategies::frame;

proptest! {
    #[test]
    fn every_frame_round_trips(f in frame()) {
        let bytes = f.to_bytes().unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let back = Frame::decode(&mut buf, DEFAULT_MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(back, f);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn every_truncated_prefix_asks_for_more(f in frame()) {
        let bytes = f.to_bytes().unwrap();
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            prop_assert_eq!(Frame::decode(&mut buf, DEFAULT_MAX_FRAME), Ok(None));
            prop_assert_eq!(buf.len(), cut, "nothing is consumed while incomplete");
            let need = needed(&bytes[..cut]).unwrap();
            prop_assert!(need > 0);
        }
    }

    #[test]
    fn frames_back_to_back_decode_in_order(fs in prop::collection::vec(frame(), 1..6)) {
        let mut buf = BytesMut::new();
        for f in &fs { f.encode(&mut buf).unwrap(); }
        for f in &fs {
            prop_assert_eq!(&Frame::decode(&mut buf, DEFAULT_MAX_FRAME).unwrap().unwrap(), f);
        }
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_decoder(&data);
    }
}

fn golden(f: Frame, expected: &[u8]) {
    assert_eq!(&f.to_bytes().unwrap()[..], expected, "{f:?}");
    let mut buf = BytesMut::from(expected);
    assert_eq!(Frame::decode(&mut buf, DEFAULT_MAX_FRAME).unwrap(), Some(f));
}

#[test]
fn hello_golden_bytes() {
    golden(
        Frame::Hello(Hello { version: 1, client_name: "ab".into(), auth: HelloAuth::None }),
        &[0, 0, 0, 7, 0x01, 0, 1, 0, 2, b'a', b'b'],
    );
}

#[test]
fn hello_with_credentials_golden_bytes() {
    let none = Hello { version: 2, client_name: "ab".into(), auth: HelloAuth::None };
    golden(Frame::Hello(none), &[0, 0, 0, 8, 0x01, 0, 2, 0, 2, b'a', b'b', 0]);
    let password = HelloAuth::Password { user: "u".into(), password: "pw".into() };
    golden(
        Frame::Hello(Hello { version: 2, client_name: "ab".into(), auth: password }),
        &[0, 0, 0, 15, 0x01, 0, 2, 0, 2, b'a', b'b', 1, 0, 1, b'u', 0, 2, b'p', b'w'],
    );
    let token = Hello { version: 2, client_name: "".into(), auth: HelloAuth::Token("t".into()) };
    golden(Frame::Hello(token), &[0, 0, 0, 9, 0x01, 0, 2, 0, 0, 2, 0, 1, b't']);
    // An unknown credential kind is refused, and a version 1 HELLO cannot carry credentials.
    let mut unknown = BytesMut::from(&[0u8, 0, 0, 6, 0x01, 0, 2, 0, 0, 9][..]);
    assert!(Frame::decode(&mut unknown, DEFAULT_MAX_FRAME).is_err());
    let old = Hello { version: 1, client_name: "".into(), auth: HelloAuth::Token("t".into()) };
    assert!(Frame::Hello(old).to_bytes().is_err());
}

#[test]
fn welcome_golden_bytes() {
    golden(
        Frame::Welcome(Welcome { version: 1, max_frame: 1024, server_name: "b".into() }),
        &[0, 0, 0, 10, 0x02, 0, 1, 0, 0, 4, 0, 0, 1, b'b'],
    );
}

#[test]
fn servers_golden_bytes() {
    let servers = Servers { addresses: vec!["h:1".into(), "b:22".into()] };
    golden(Frame::Servers(servers), &[0, 0, 0, 14, 0x16, 0, 2, 0, 3, b'h', b':', b'1', 0, 4, b'b', b':', b'2', b'2']);
    golden(Frame::Servers(Servers::default()), &[0, 0, 0, 3, 0x16, 0, 0]);
}

#[test]
fn servers_refuses_a_list_over_its_bound_and_trailing_bytes() {
    let too_many = Servers { addresses: vec!["a:1".into(); MAX_SERVERS + 1] };
    assert!(Frame::Servers(too_many).to_bytes().is_err());
    let mut over = BytesMut::from(&[0, 0, 0, 3, 0x16, 0, 65][..]);
    assert!(Frame::decode(&mut over, DEFAULT_MAX_FRAME).is_err(), "a count over 64 is refused before any address");
    let mut trailing = BytesMut::from(&[0, 0, 0, 4, 0x16, 0, 0, 9][..]);
    assert!(Frame::decode(&mut trailing, DEFAULT_MAX_FRAME).is_err());
}

#[test]
fn publish_golden_bytes() {
    let m = Message::new("t", &[], Bytes::from_static(b"p"), 2).unwrap();
    golden(Frame::Publish(m), &[0, 0, 0, 19, 0x03, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, b't', 0, 0, 0, 0, 0, 1, b'p']);
}

#[test]
fn subscribe_golden_bytes() {
    let s = Subscribe {
        queue_key: None,
        id: SubId(7),
        mode: DeliveryMode::BestEffort,
        pattern: "a.>".into(),
        selector: Some("x=1".into()),
        durable: None,
        group: None,
    };
    golden(Frame::Subscribe(s), &[0, 0, 0, 16, 0x04, 0, 0, 0, 7, 0, 0, 3, b'a', b'.', b'>', 0, 3, b'x', b'=', b'1']);
}

#[test]
fn durable_subscribe_golden_bytes() {
    let s = |mode| Subscribe {
        queue_key: None,
        id: SubId(7),
        mode,
        pattern: "a".into(),
        selector: None,
        durable: Some("d".into()),
        group: None,
    };
    let bytes = [0, 0, 0, 14, 0x04, 0, 0, 0, 7, 2, 0, 1, b'a', 0, 0, 0, 1, b'd'];
    golden(Frame::Subscribe(s(DeliveryMode::Guaranteed)), &bytes);
    let best_effort = Frame::Subscribe(s(DeliveryMode::BestEffort));
    assert!(best_effort.encode(&mut BytesMut::new()).is_err(), "durable implies guaranteed");
}

#[test]
fn queue_group_subscribe_golden_bytes() {
    let s = Subscribe {
        queue_key: None,
        id: SubId(7),
        mode: DeliveryMode::BestEffort,
        pattern: "a".into(),
        selector: None,
        durable: None,
        group: Some("w".into()),
    };
    let bytes = [0, 0, 0, 14, 0x04, 0, 0, 0, 7, 0x80, 0, 1, b'a', 0, 0, 0, 1, b'w'];
    golden(Frame::Subscribe(s.clone()), &bytes);
    // Mode byte 0xc0: a member (0x80) of a group keyed (0x40) by the property that ends the frame.
    let keyed = Subscribe { queue_key: Some("k".into()), ..s.clone() };
    let bytes = [0, 0, 0, 17, 0x04, 0, 0, 0, 7, 0xc0, 0, 1, b'a', 0, 0, 0, 1, b'w', 0, 1, b'k'];
    golden(Frame::Subscribe(keyed.clone()), &bytes);
    // A key without a group is no frame: refused both ways.
    let lone = Subscribe { group: None, ..keyed };
    assert!(Frame::Subscribe(lone).encode(&mut BytesMut::new()).is_err());
    let mut buf = BytesMut::from(&[0, 0, 0, 14, 0x04, 0, 0, 0, 7, 0x40, 0, 1, b'a', 0, 0, 0, 1, b'k'][..]);
    assert!(Frame::decode(&mut buf, DEFAULT_MAX_FRAME).is_err());
    // A durable member: the durable name first, then the group.
    let s = Subscribe {
        queue_key: None,
        id: SubId(7),
        mode: DeliveryMode::Guaranteed,
        pattern: "a".into(),
        selector: None,
        durable: Some("d".into()),
        group: Some("w".into()),
    };
    let bytes = [0, 0, 0, 17, 0x04, 0, 0, 0, 7, 0x82, 0, 1, b'a', 0, 0, 0, 1, b'd', 0, 1, b'w'];
    golden(Frame::Subscribe(s), &bytes);
}

#[test]
fn queue_group_names_are_plain_short_names() {
    use crate::frame::subscribe::{check_group_name, MAX_GROUP_LEN};
    assert!(check_group_name("workers").is_ok());
    assert!(check_group_name("billing.eu-1_a").is_ok());
    assert!(check_group_name(&"w".repeat(MAX_GROUP_LEN)).is_ok());
    for (bad, why) in
        [("", "empty"), ("a*", "wildcard '*'"), ("a.>", "wildcard '>'"), ("a b", "' '"), ("a\u{1}", "'\\u{1}'")]
    {
        let err = check_group_name(bad).expect_err(bad);
        assert!(err.contains(why), "{bad:?}: {err}");
    }
    let err = check_group_name(&"w".repeat(MAX_GROUP_LEN + 1)).expect_err("too long");
    assert!(err.contains("more than the 64 allowed"), "{err}");
}

#[test]
fn unsubscribe_golden_bytes() {
    golden(Frame::Unsubscribe(Unsubscribe { id: SubId(258) }), &[0, 0, 0, 5, 0x05, 0, 0, 1, 2]);
}

#[test]
fn deliver_golden_bytes_and_header_helper_agree() {
    let m = Message::new("t", &[], Bytes::from_static(b"p"), 2).unwrap();
    let expected =
        [0, 0, 0, 27, 0x06, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, b't', 0, 0, 0, 0, 0, 1, b'p'];
    golden(Frame::Deliver(Deliver { id: SubId(9), missed: 1, message: m.clone() }), &expected);
    let mut hdr = BytesMut::new();
    Deliver::encode_header(SubId(9), 1, &m, &mut hdr);
    assert_eq!(hdr.len(), DELIVER_HEADER_LEN);
    hdr.extend_from_slice(m.as_bytes());
    assert_eq!(&hdr[..], &expected[..]);
}

#[test]
fn ping_and_pong_golden_bytes() {
    golden(Frame::Ping(Ping { nonce: 5 }), &[0, 0, 0, 9, 0x07, 0, 0, 0, 0, 0, 0, 0, 5]);
    golden(Frame::Pong(Pong { nonce: 5 }), &[0, 0, 0, 9, 0x08, 0, 0, 0, 0, 0, 0, 0, 5]);
}

#[test]
fn error_and_disconnect_golden_bytes() {
    golden(Frame::Error(Notice::new(ReasonCode::InvalidTopic, "x")), &[0, 0, 0, 6, 0x09, 0, 6, 0, 1, b'x']);
    golden(Frame::Disconnect(Notice::new(ReasonCode::Normal, "")), &[0, 0, 0, 5, 0x0A, 0, 0, 0, 0]);
}

#[test]
fn guaranteed_publish_golden_bytes() {
    let m = Message::new("t", &[], Bytes::from_static(b"p"), 2).unwrap();
    let f = GuaranteedPublish { publisher: PublisherId(1), seq: 2, pubend: "q".into(), home: None, message: m };
    golden(
        Frame::GuaranteedPublish(f.clone()),
        &[
            0, 0, 0, 38, 0x0B, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, b'q', 0, 0, 0, 0, 0, 0, 0, 2, 0,
            1, b't', 0, 0, 0, 0, 0, 1, b'p',
        ],
    );
    golden(
        Frame::GuaranteedPublish(GuaranteedPublish { home: Some(PubendId(3)), ..f }),
        &[
            0, 0, 0, 46, 0x17, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1, b'q', 0,
            0, 0, 0, 0, 0, 0, 2, 0, 1, b't', 0, 0, 0, 0, 0, 1, b'p',
        ],
    );
}

#[test]
fn publish_ack_and_refused_golden_bytes() {
    let ack = PublishAck { publisher: PublisherId(1), seq: 2, pubend: PubendId(3), tick: Tick(4) };
    golden(
        Frame::PublishAck(ack),
        &[
            0, 0, 0, 33, 0x0C, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0,
            0, 0, 4,
        ],
    );
    let refused =
        PublishRefused { publisher: PublisherId(1), seq: 2, reason: Notice::new(ReasonCode::InvalidTopic, "x") };
    golden(
        Frame::PublishRefused(refused),
        &[0, 0, 0, 22, 0x0D, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 6, 0, 1, b'x'],
    );
}

#[test]
fn guaranteed_deliver_golden_bytes_and_header_helper_agree() {
    let m = Message::new("t", &[], Bytes::from_static(b"p"), 2).unwrap();
    let expected = [
        0, 0, 0, 39, 0x0E, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1,
        b't', 0, 0, 0, 0, 0, 1, b'p',
    ];
    let f =
        GuaranteedDeliver { id: SubId(9), pubend: PubendId(3), tick: Tick(4), message: m.clone(), redelivered: false };
    golden(Frame::GuaranteedDeliver(f), &expected);
    let mut hdr = BytesMut::new();
    GuaranteedDeliver::encode_header(SubId(9), PubendId(3), Tick(4), &m, &mut hdr);
    assert_eq!(hdr.len(), GUARANTEED_DELIVER_HEADER_LEN);
    hdr.extend_from_slice(m.as_bytes());
    assert_eq!(&hdr[..], &expected[..]);
}

#[test]
fn guaranteed_deliver_redelivered_flag_is_the_tick_top_bit() {
    let m = Message::new("t", &[], Bytes::from_static(b"p"), 2).unwrap();
    let expected = [
        0, 0, 0, 39, 0x0E, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 3, 0x80, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1,
        b't', 0, 0, 0, 0, 0, 1, b'p',
    ];
    let f =
        GuaranteedDeliver { id: SubId(9), pubend: PubendId(3), tick: Tick(4), message: m.clone(), redelivered: true };
    golden(Frame::GuaranteedDeliver(f), &expected);
    let mut hdr = BytesMut::new();
    let tick = GuaranteedDeliver::wire_tick(Tick(4), true);
    GuaranteedDeliver::encode_header(SubId(9), PubendId(3), tick, &m, &mut hdr);
    hdr.extend_from_slice(m.as_bytes());
    assert_eq!(&hdr[..], &expected[..], "the header helper writes the flagged tick as given");
}

#[test]
fn gap_delivery_ack_and_subscribed_golden_bytes() {
    golden(
        Frame::Gap(Gap { id: SubId(1), pubend: PubendId(2), from: Tick(3), to: Tick(4) }),
        &[0, 0, 0, 29, 0x0F, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4],
    );
    golden(
        Frame::DeliveryAck(DeliveryAck { id: SubId(1), pubend: PubendId(2), tick: Tick(3) }),
        &[0, 0, 0, 21, 0x10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3],
    );
    golden(
        Frame::Subscribed(Subscribed { id: SubId(1), starts: vec![(PubendId(2), Tick(3))] }),
        &[0, 0, 0, 23, 0x11, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3],
    );
}

#[test]
fn no_responders_golden_bytes() {
    golden(
        Frame::NoResponders(NoResponders { reply_to: "_I.1".into() }),
        &[0, 0, 0, 7, 0x14, 0, 4, b'_', b'I', b'.', b'1'],
    );
    assert!(Frame::NoResponders(NoResponders { reply_to: String::new() }).is_from_broker(), "only brokers send it");
}

#[test]
fn sequence_golden_bytes() {
    golden(Frame::Sequence(Sequence { first: 258 }), &[0, 0, 0, 9, 0x15, 0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(Frame::Sequence(Sequence { first: 0 }).to_bytes().unwrap().len(), SEQUENCE_LEN);
    assert!(Frame::Sequence(Sequence { first: 0 }).is_from_broker(), "only brokers number deliveries");
}

#[test]
fn token_golden_bytes() {
    let token: [u8; TOKEN_LEN] = std::array::from_fn(|i| i as u8);
    let mut expected = vec![0, 0, 0, 17, 0x12];
    expected.extend(token);
    golden(Frame::Token(Token(token)), &expected);
    let mut issued = vec![0, 0, 0, 17, 0x13];
    issued.extend(token);
    golden(Frame::TokenIssued(Token(token)), &issued);
    assert!(Frame::TokenIssued(Token(token)).is_from_broker(), "an answer is never a request");
    assert!(!Frame::Token(Token(token)).is_from_broker());
    let mut short = BytesMut::from(&[0u8, 0, 0, 2, 0x12, 7][..]);
    assert!(Frame::decode(&mut short, 1024).is_err(), "a token is 16 bytes, no fewer");
}

#[test]
fn a_gap_that_ends_before_it_starts_is_an_error() {
    let mut buf = BytesMut::from(
        &[0u8, 0, 0, 29, 0x0F, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 3][..],
    );
    assert!(matches!(Frame::decode(&mut buf, 1024), Err(WireError::InvalidField { frame: "GAP", .. })));
}

#[test]
fn oversized_frame_fails_before_its_body_arrives() {
    let mut buf = BytesMut::from(&[0u8, 1, 0, 0][..]);
    assert_eq!(Frame::decode(&mut buf, 1024), Err(WireError::FrameTooLarge { len: 65536, max: 1024 }));
}

#[test]
fn unknown_frame_type_fails_at_the_header() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 9, 0x7f][..]);
    assert_eq!(Frame::decode(&mut buf, 1024), Err(WireError::UnknownFrameType(0x7f)));
}

#[test]
fn empty_frame_is_an_error() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 0][..]);
    assert_eq!(Frame::decode(&mut buf, 1024), Err(WireError::EmptyFrame));
}

#[test]
fn trailing_bytes_in_a_frame_are_an_error() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 10, 0x07, 0, 0, 0, 0, 0, 0, 0, 5, 9][..]);
    assert_eq!(Frame::decode(&mut buf, 1024), Err(WireError::TrailingBytes { frame: "PING", extra: 1 }));
}

#[test]
fn bad_delivery_mode_is_an_error() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 10, 0x04, 0, 0, 0, 1, 7, 0, 0, 0, 0][..]);
    assert!(matches!(Frame::decode(&mut buf, 1024), Err(WireError::InvalidField { field: "mode", value: 7, .. })));
}

#[test]
fn invalid_utf8_is_an_error() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 6, 0x01, 0, 1, 0, 1, 0xff][..]);
    assert!(matches!(Frame::decode(&mut buf, 1024), Err(WireError::InvalidUtf8 { field: "client_name", .. })));
}

#[test]
fn a_partial_frame_in_a_datagram_is_an_error() {
    let full = Frame::Ping(Ping { nonce: 1 }).to_bytes().unwrap();
    let mut cut = full.slice(..full.len() - 1);
    assert!(Frame::decode_datagram(&mut cut, 1024).is_err());
    let mut whole = full.clone();
    assert_eq!(Frame::decode_datagram(&mut whole, 1024).unwrap(), Frame::Ping(Ping { nonce: 1 }));
}
