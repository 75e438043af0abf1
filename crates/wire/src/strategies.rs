//! proptest strategies for the client protocol's frames, shared by this crate's round-trip
//! tests and by black-box tests that throw arbitrary frame sequences at a running broker (the
//! `proptest` feature).

use bytes::Bytes;
use proptest::prelude::*;

use crate::frame::*;
use crate::ids::{PubendId, PublisherId, Tick};
use crate::value::{Property, Value};

/// Any property value.
pub fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        ".{0,8}".prop_map(Value::Str),
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_filter("NaN is not equal to itself", |x| !x.is_nan()).prop_map(Value::Float),
        any::<bool>().prop_map(Value::Bool),
    ]
}

/// Any message: a valid topic, a few properties, a short payload.
pub fn message() -> impl Strategy<Value = Message> {
    (
        "[a-z]{1,6}(\\.[a-z]{1,6}){0,3}",
        prop::collection::vec(("[a-z]{1,5}", value()), 0..5),
        prop::collection::vec(any::<u8>(), 0..64),
        any::<u64>(),
    )
        .prop_filter_map("a message the codec accepts", |(topic, props, payload, sent)| {
            let props: Vec<Property> = props.into_iter().map(|(k, v)| Property::new(k, v)).collect();
            Message::new(&topic, &props, Bytes::from(payload), sent).ok()
        })
}

/// Any client or broker frame, with arbitrary field values (ids, codes, versions, patterns that
/// may not parse).
pub fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (
            any::<u16>(),
            ".{0,12}",
            prop_oneof![
                Just(HelloAuth::None),
                (".{0,8}", ".{0,8}").prop_map(|(user, password)| HelloAuth::Password { user, password }),
                ".{0,8}".prop_map(HelloAuth::Token),
            ]
        )
            .prop_map(|(version, client_name, auth)| {
                // Only version 2 and later carry credentials.
                let auth = if version < HELLO_AUTH_VERSION { HelloAuth::None } else { auth };
                Frame::Hello(Hello { version, client_name, auth })
            }),
        (any::<u16>(), any::<u32>(), ".{0,12}").prop_map(|(version, max_frame, server_name)| Frame::Welcome(Welcome {
            version,
            max_frame,
            server_name
        })),
        message().prop_map(Frame::Publish),
        (
            any::<u32>(),
            any::<bool>(),
            "[a-z.*>]{1,12}",
            proptest::option::of(".{1,20}"),
            proptest::option::of("[a-z]{1,8}"),
            proptest::option::of("[a-z.]{1,8}")
        )
            .prop_map(|(id, g, pattern, selector, durable, group)| {
                let mode = if g || durable.is_some() { DeliveryMode::Guaranteed } else { DeliveryMode::BestEffort };
                Frame::Subscribe(Subscribe { queue_key: None, id: SubId(id), mode, pattern, selector, durable, group })
            }),
        any::<u32>().prop_map(|id| Frame::Unsubscribe(Unsubscribe { id: SubId(id) })),
        (any::<u32>(), any::<u32>(), message()).prop_map(|(id, missed, message)| Frame::Deliver(Deliver {
            id: SubId(id),
            missed,
            message
        })),
        any::<u64>().prop_map(|nonce| Frame::Ping(Ping { nonce })),
        any::<u64>().prop_map(|nonce| Frame::Pong(Pong { nonce })),
        (any::<u16>(), ".{0,20}").prop_map(|(code, text)| Frame::Error(Notice { code, text })),
        (any::<u16>(), ".{0,20}").prop_map(|(code, text)| Frame::Disconnect(Notice { code, text })),
        prop::collection::vec("[a-z0-9.:]{0,12}", 0..4).prop_map(|addresses| Frame::Servers(Servers { addresses })),
        guaranteed_frame(),
    ]
}

/// The guaranteed-delivery frames.
pub fn guaranteed_frame() -> impl Strategy<Value = Frame> {
    let (id, pubend, tick) =
        (any::<u32>().prop_map(SubId), any::<u64>().prop_map(PubendId), any::<u64>().prop_map(Tick));
    prop_oneof![
        (any::<u64>(), any::<u64>(), "[a-z]{0,8}", proptest::option::of(any::<u64>()), message()).prop_map(
            |(p, seq, pubend, home, message)| {
                let home = home.map(PubendId);
                Frame::GuaranteedPublish(GuaranteedPublish { publisher: PublisherId(p), seq, pubend, home, message })
            }
        ),
        (any::<u64>(), any::<u64>(), pubend.clone(), tick.clone()).prop_map(|(p, seq, pubend, tick)| {
            Frame::PublishAck(PublishAck { publisher: PublisherId(p), seq, pubend, tick })
        }),
        (any::<u64>(), any::<u64>(), any::<u16>(), ".{0,20}").prop_map(|(p, seq, code, text)| {
            Frame::PublishRefused(PublishRefused { publisher: PublisherId(p), seq, reason: Notice { code, text } })
        }),
        (id.clone(), pubend.clone(), tick.clone(), message(), any::<bool>()).prop_map(
            |(id, pubend, tick, message, redelivered)| {
                // The top bit of the tick field is the flag: a tick is the other 63 bits.
                let tick = Tick(tick.0 & !crate::REDELIVERED_FLAG);
                Frame::GuaranteedDeliver(GuaranteedDeliver { id, pubend, tick, message, redelivered })
            }
        ),
        (id.clone(), pubend.clone(), any::<u64>(), any::<u64>()).prop_map(|(id, pubend, a, b)| Frame::Gap(Gap {
            id,
            pubend,
            from: Tick(a.min(b)),
            to: Tick(a.max(b))
        })),
        (id.clone(), pubend.clone(), tick.clone()).prop_map(|(id, pubend, tick)| Frame::DeliveryAck(DeliveryAck {
            id,
            pubend,
            tick
        })),
        (id, prop::collection::vec((pubend, tick), 0..4))
            .prop_map(|(id, starts)| Frame::Subscribed(Subscribed { id, starts })),
        any::<[u8; crate::frame::TOKEN_LEN]>().prop_map(|token| Frame::Token(crate::frame::Token(token))),
        any::<[u8; crate::frame::TOKEN_LEN]>().prop_map(|token| Frame::TokenIssued(crate::frame::Token(token))),
        ".{0,12}".prop_map(|reply_to| Frame::NoResponders(NoResponders { reply_to })),
        any::<u64>().prop_map(|first| Frame::Sequence(crate::frame::Sequence { first })),
    ]
}
