//! proptest strategies for valid MQTT packets of each version, so round trips cover every field
//! and property a conforming peer may send, and for topic names and filters over the characters
//! the tidings mapping must escape (used by `matching`'s agreement tests too).

use std::num::{NonZeroU16, NonZeroU32};

use bytes::Bytes;
use proptest::prelude::*;

use super::property_sets::{ACK, AUTH, CONNACK, CONNECT, DISCONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, WILL};
use super::*;

/// Text without U+0000 (MQTT-1.5.4-2), including non-ASCII.
pub fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 é𪛔\u{feff}]{0,6}"
}

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..8).prop_map(Bytes::from)
}

/// One level of a name or filter, drawn from the characters that need care: the tidings
/// separator and wildcards, the escape, whitespace of both kinds, a control character, `$`,
/// non-ASCII, and the empty level.
pub fn level() -> impl Strategy<Value = String> {
    "[ab.*>%$ \u{3000}\t\u{1}é]{0,2}"
}

/// A valid topic name.
pub fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(level(), 1..5).prop_map(|levels| levels.join("/")).prop_filter("empty", |n| !n.is_empty())
}

/// A valid, non-shared topic filter.
pub fn filter() -> impl Strategy<Value = String> {
    let level = prop_oneof![3 => level(), 1 => Just("+".to_string())];
    (prop::collection::vec(level, 0..4), any::<bool>())
        .prop_map(|(mut levels, hash)| {
            if hash || levels.is_empty() {
                levels.push("#".to_string());
            }
            levels.join("/")
        })
        .prop_filter("empty", |f| !f.is_empty())
}

fn qos() -> impl Strategy<Value = QoS> {
    prop_oneof![Just(QoS::AtMostOnce), Just(QoS::AtLeastOnce), Just(QoS::ExactlyOnce)]
}

fn packet_id() -> impl Strategy<Value = PacketId> {
    (1..=u16::MAX).prop_map(|id| PacketId::new(id).unwrap_or(PacketId(NonZeroU16::MIN)))
}

fn non_zero_u16() -> impl Strategy<Value = NonZeroU16> {
    (1..=u16::MAX).prop_map(|v| NonZeroU16::new(v).unwrap_or(NonZeroU16::MIN))
}

/// Every property filled at random, then those `set` does not allow removed.
fn all_properties() -> impl Strategy<Value = Properties> {
    use prop::option::of as o;
    let a = (
        o(any::<bool>()),
        o(any::<u32>()),
        o(text()),
        o(text()),
        o(bytes()),
        prop::collection::vec(1..=MAX_VAR_INT, 0..3),
    );
    let b = (o(any::<u32>()), o(text()), o(any::<u16>()), o(text()), o(bytes()), o(any::<bool>()), o(any::<u32>()));
    let c = (o(any::<bool>()), o(text()), o(text()), o(text()), o(non_zero_u16()), o(any::<u16>()), o(non_zero_u16()));
    let max_qos = o(prop_oneof![Just(QoS::AtMostOnce), Just(QoS::AtLeastOnce)]);
    let d = (max_qos, o(any::<bool>()), prop::collection::vec((text(), text()), 0..3), o(1..=u32::MAX));
    let e = (o(any::<bool>()), o(any::<bool>()), o(any::<bool>()));
    (a, b, c, d, e).prop_map(|(a, b, c, d, e)| Properties {
        payload_format_utf8: a.0,
        message_expiry_interval: a.1,
        content_type: a.2,
        response_topic: a.3,
        correlation_data: a.4,
        subscription_identifiers: a.5,
        session_expiry_interval: b.0,
        assigned_client_identifier: b.1,
        server_keep_alive: b.2,
        authentication_method: b.3,
        authentication_data: b.4,
        request_problem_information: b.5,
        will_delay_interval: b.6,
        request_response_information: c.0,
        response_information: c.1,
        server_reference: c.2,
        reason_string: c.3,
        receive_maximum: c.4,
        topic_alias_maximum: c.5,
        topic_alias: c.6,
        maximum_qos: d.0,
        retain_available: d.1,
        user_properties: d.2,
        maximum_packet_size: d.3.and_then(NonZeroU32::new),
        wildcard_subscription_available: e.0,
        subscription_identifier_available: e.1,
        shared_subscription_available: e.2,
    })
}

/// Clears `slot` unless `set` allows property `id`.
fn keep<T: Default>(set: PropertySet, id: u8, slot: &mut T) {
    if !set.allows(id) {
        *slot = T::default();
    }
}

/// Properties valid for `set` in `version` (none in 3.1.1).
pub fn properties(set: PropertySet, version: ProtocolVersion) -> BoxedStrategy<Properties> {
    if version == ProtocolVersion::V311 {
        return Just(Properties::default()).boxed();
    }
    all_properties()
        .prop_map(move |mut p| {
            keep(set, 0x01, &mut p.payload_format_utf8);
            keep(set, 0x02, &mut p.message_expiry_interval);
            keep(set, 0x03, &mut p.content_type);
            keep(set, 0x08, &mut p.response_topic);
            keep(set, 0x09, &mut p.correlation_data);
            keep(set, 0x0B, &mut p.subscription_identifiers);
            if set == SUBSCRIBE {
                p.subscription_identifiers.truncate(1);
            }
            keep(set, 0x11, &mut p.session_expiry_interval);
            keep(set, 0x12, &mut p.assigned_client_identifier);
            keep(set, 0x13, &mut p.server_keep_alive);
            keep(set, 0x15, &mut p.authentication_method);
            keep(set, 0x16, &mut p.authentication_data);
            keep(set, 0x17, &mut p.request_problem_information);
            keep(set, 0x18, &mut p.will_delay_interval);
            keep(set, 0x19, &mut p.request_response_information);
            keep(set, 0x1A, &mut p.response_information);
            keep(set, 0x1C, &mut p.server_reference);
            keep(set, 0x1F, &mut p.reason_string);
            keep(set, 0x21, &mut p.receive_maximum);
            keep(set, 0x22, &mut p.topic_alias_maximum);
            keep(set, 0x23, &mut p.topic_alias);
            keep(set, 0x24, &mut p.maximum_qos);
            keep(set, 0x25, &mut p.retain_available);
            keep(set, 0x27, &mut p.maximum_packet_size);
            keep(set, 0x28, &mut p.wildcard_subscription_available);
            keep(set, 0x29, &mut p.subscription_identifier_available);
            keep(set, 0x2A, &mut p.shared_subscription_available);
            p
        })
        .boxed()
}

fn reason(set: ReasonSet, version: ProtocolVersion) -> impl Strategy<Value = MqttReason> {
    let codes = match version {
        ProtocolVersion::V5 => set.codes(),
        ProtocolVersion::V311 => set.codes_v311(),
    };
    prop::sample::select(codes)
}

/// Any valid CONNECT of `version`: a will or not, a user name and password or not, and (5.0)
/// any CONNECT properties, AUTH's method and data among them (the handshake fuzz mutates these).
pub fn connect(version: ProtocolVersion) -> impl Strategy<Value = Connect> {
    let will = (qos(), any::<bool>(), properties(WILL, version), name(), bytes())
        .prop_map(|(qos, retain, properties, topic, payload)| Will { qos, retain, properties, topic, payload });
    let credentials = (prop::option::of(text()), prop::option::of(bytes())).prop_map(move |(user, pass)| {
        if version == ProtocolVersion::V311 && user.is_none() {
            (None, None)
        } else {
            (user, pass)
        }
    });
    (any::<bool>(), any::<u16>(), properties(CONNECT, version), text(), prop::option::of(will), credentials).prop_map(
        move |(clean_start, keep_alive, properties, client_id, will, (username, password))| Connect {
            version,
            clean_start,
            keep_alive,
            properties,
            client_id,
            will,
            username,
            password,
        },
    )
}

fn publish(version: ProtocolVersion) -> impl Strategy<Value = Publish> {
    (qos(), any::<bool>(), any::<bool>(), name(), packet_id(), properties(PUBLISH, version), bytes()).prop_map(
        |(qos, dup, retain, topic, id, properties, payload)| {
            let packet_id = (qos != QoS::AtMostOnce).then_some(id);
            Publish { dup: dup && packet_id.is_some(), qos, retain, topic, packet_id, properties, payload }
        },
    )
}

fn response(set: ReasonSet, version: ProtocolVersion) -> impl Strategy<Value = PublishResponse> {
    (packet_id(), reason(set, version), properties(ACK, version))
        .prop_map(|(packet_id, reason, properties)| PublishResponse { packet_id, reason, properties })
}

fn options(version: ProtocolVersion) -> impl Strategy<Value = SubscriptionOptions> {
    let handling = prop_oneof![
        Just(RetainHandling::OnSubscribe),
        Just(RetainHandling::OnNewSubscribe),
        Just(RetainHandling::Never)
    ];
    (qos(), any::<bool>(), any::<bool>(), handling).prop_map(
        move |(qos, no_local, retain_as_published, retain_handling)| match version {
            ProtocolVersion::V311 => SubscriptionOptions::qos(qos),
            ProtocolVersion::V5 => SubscriptionOptions { qos, no_local, retain_as_published, retain_handling },
        },
    )
}

/// Any valid packet of `version`.
pub fn packet(version: ProtocolVersion) -> BoxedStrategy<Packet> {
    let v = version;
    let reasons = |set| prop::collection::vec(reason(set, v), 1..4);
    let mut choices = vec![
        connect(v).prop_map(|c| Packet::Connect(Box::new(c))).boxed(),
        (any::<bool>(), reason(ReasonSet::Connack, v), properties(CONNACK, v))
            .prop_map(|(present, reason, properties)| {
                let session_present = present && reason == MqttReason::Success;
                Packet::Connack(Connack { session_present, reason, properties })
            })
            .boxed(),
        publish(v).prop_map(Packet::Publish).boxed(),
        response(ReasonSet::PublishAck, v).prop_map(Packet::Puback).boxed(),
        response(ReasonSet::PublishAck, v).prop_map(Packet::Pubrec).boxed(),
        response(ReasonSet::PublishRelease, v).prop_map(Packet::Pubrel).boxed(),
        response(ReasonSet::PublishRelease, v).prop_map(Packet::Pubcomp).boxed(),
        (packet_id(), properties(SUBSCRIBE, v), prop::collection::vec((filter(), options(v)), 1..4))
            .prop_map(|(packet_id, properties, filters)| {
                Packet::Subscribe(Subscribe { packet_id, properties, filters })
            })
            .boxed(),
        (packet_id(), properties(ACK, v), reasons(ReasonSet::Suback))
            .prop_map(|(packet_id, properties, reasons)| Packet::Suback(Suback { packet_id, properties, reasons }))
            .boxed(),
        (packet_id(), properties(UNSUBSCRIBE, v), prop::collection::vec(filter(), 1..4))
            .prop_map(|(packet_id, properties, filters)| {
                Packet::Unsubscribe(Unsubscribe { packet_id, properties, filters })
            })
            .boxed(),
        Just(Packet::Pingreq).boxed(),
        Just(Packet::Pingresp).boxed(),
    ];
    match v {
        ProtocolVersion::V311 => {
            choices.push(
                packet_id()
                    .prop_map(|packet_id| {
                        Packet::Unsuback(Unsuback { packet_id, properties: Properties::default(), reasons: vec![] })
                    })
                    .boxed(),
            );
            choices.push(Just(Packet::Disconnect(Disconnect::normal())).boxed());
        }
        ProtocolVersion::V5 => {
            choices.push(
                (packet_id(), properties(ACK, v), reasons(ReasonSet::Unsuback))
                    .prop_map(|(packet_id, properties, reasons)| {
                        Packet::Unsuback(Unsuback { packet_id, properties, reasons })
                    })
                    .boxed(),
            );
            choices.push(
                (reason(ReasonSet::Disconnect, v), properties(DISCONNECT, v))
                    .prop_map(|(reason, properties)| Packet::Disconnect(Disconnect { reason, properties }))
                    .boxed(),
            );
            choices.push(
                (reason(ReasonSet::Auth, v), properties(AUTH, v))
                    .prop_map(|(reason, properties)| Packet::Auth(Auth { reason, properties }))
                    .boxed(),
            );
        }
    }
    prop::strategy::Union::new(choices).boxed()
}
