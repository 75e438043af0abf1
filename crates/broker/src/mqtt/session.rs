//! One MQTT client's session, as a translation onto a native [`Session`]: CONNECT says HELLO,
//! SUBSCRIBE subscribes the mapped tidings patterns, PUBLISH publishes the mapped topic. So an
//! MQTT client reaches the same broker core, routing and retained values as a native one, and
//! what the native session refuses is refused here with the MQTT reason code that fits.
//!
//! QoS 0 only (issue 42, first step): CONNACK says Maximum QoS 0, subscriptions are granted at
//! QoS 0, and a QoS 1 or 2 PUBLISH closes the connection (5.0: DISCONNECT 0x9B).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tidings_matching::Pattern;
use tidings_wire::mqtt::topic::{filter_to_tidings, is_shared, name_to_tidings, TidingsFilter};
use tidings_wire::mqtt::{
    Connack, Connect, Disconnect, MqttReason, Packet, Properties, ProtocolVersion, Publish, QoS, Suback, Subscribe,
    Unsuback, Unsubscribe,
};
use tidings_wire::{Frame, Hello, Message, Notice, Property, ReasonCode, SubId, Value, RETAIN};

use crate::session::{Next, Session};

/// Each native subscription of a session and the MQTT filter's mapped form it serves (which says
/// whether `$` topics are left out). Shared with the delivery task, which consults it per message.
pub(super) type Admits = Arc<Mutex<HashMap<SubId, TidingsFilter>>>;

/// What the connection does after a packet.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// Send these packets (possibly none) and carry on.
    Reply(Vec<Packet>),
    /// Send these packets (at most one: a CONNACK or a DISCONNECT saying why) and close.
    Close(Vec<Packet>),
}

/// The MQTT side of a session.
pub(super) struct MqttSession {
    native: Session,
    /// `None` until CONNECT.
    version: Option<ProtocolVersion>,
    /// Each subscribed MQTT filter and the native subscriptions it became.
    filters: BTreeMap<String, Vec<SubId>>,
    admits: Admits,
    next_id: u32,
    /// The largest packet the client accepts (5.0), for the delivery task.
    pub(super) client_max_packet: usize,
}

/// Maps a native refusal onto the MQTT 5.0 reason code of the same meaning.
pub(super) fn reason_for(notice: &Notice) -> MqttReason {
    match notice.reason() {
        Some(ReasonCode::InvalidTopic) => MqttReason::TopicNameInvalid,
        Some(ReasonCode::InvalidPattern) => MqttReason::TopicFilterInvalid,
        Some(ReasonCode::ShuttingDown) => MqttReason::ServerShuttingDown,
        Some(ReasonCode::LimitExceeded | ReasonCode::SlowConsumer) => MqttReason::QuotaExceeded,
        Some(ReasonCode::FrameTooLarge) => MqttReason::PacketTooLarge,
        Some(ReasonCode::MalformedFrame) => MqttReason::MalformedPacket,
        Some(ReasonCode::NotAuthorized | ReasonCode::NotAuthenticated) => MqttReason::NotAuthorized,
        _ => MqttReason::UnspecifiedError,
    }
}

impl MqttSession {
    /// A session before CONNECT, over a native session that has not said HELLO.
    pub(super) fn new(native: Session, admits: Admits) -> MqttSession {
        MqttSession {
            native,
            version: None,
            filters: BTreeMap::new(),
            admits,
            next_id: 1,
            client_max_packet: tidings_wire::mqtt::MAX_PACKET_SIZE,
        }
    }

    /// The connection's version, once CONNECT said it.
    pub(super) fn version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    /// The native session, for the end of each batch of packets.
    pub(super) fn native(&mut self) -> &mut Session {
        &mut self.native
    }

    /// Closes with a reason: a DISCONNECT in 5.0 (the spec's way to say why), nothing in 3.1.1.
    pub(super) fn refuse(&self, reason: MqttReason) -> Step {
        match self.version {
            Some(ProtocolVersion::V5) => {
                Step::Close(vec![Packet::Disconnect(Disconnect { reason, properties: Properties::default() })])
            }
            _ => Step::Close(Vec::new()),
        }
    }

    /// Handles one packet from the client.
    pub(super) fn handle(&mut self, packet: Packet) -> Step {
        match (packet, self.version) {
            (Packet::Connect(connect), None) => self.connect(*connect),
            (_, None) => Step::Close(Vec::new()),
            (Packet::Publish(publish), Some(_)) => self.publish(publish),
            (Packet::Subscribe(subscribe), Some(_)) => self.subscribe(subscribe),
            (Packet::Unsubscribe(unsubscribe), Some(_)) => self.unsubscribe(unsubscribe),
            (Packet::Pingreq, Some(_)) => Step::Reply(vec![Packet::Pingresp]),
            (Packet::Disconnect(_), Some(_)) => Step::Close(Vec::new()),
            // A second CONNECT, acknowledgements of QoS 1/2 never sent, AUTH without a method,
            // and the server's own packets.
            (_, Some(_)) => self.refuse(MqttReason::ProtocolError),
        }
    }

    fn connect(&mut self, connect: Connect) -> Step {
        let version = connect.version;
        self.version = Some(version);
        let refused = |reason| {
            Step::Close(vec![Packet::Connack(Connack {
                session_present: false,
                reason,
                properties: Properties::default(),
            })])
        };
        if version == ProtocolVersion::V311 && connect.client_id.is_empty() && !connect.clean_start {
            return refused(MqttReason::ClientIdentifierNotValid);
        }
        if connect.properties.authentication_method.is_some() {
            return refused(MqttReason::BadAuthenticationMethod);
        }
        if let Some(max) = connect.properties.maximum_packet_size {
            self.client_max_packet = max.get() as usize;
        }
        let name = format!("mqtt {}", connect.client_id);
        if let Next::Refuse(notice) = self.native.handle(Frame::Hello(Hello::new(name))) {
            return refused(match reason_for(&notice) {
                MqttReason::ServerShuttingDown => MqttReason::ServerUnavailable,
                _ => MqttReason::UnspecifiedError,
            });
        }
        let mut properties = Properties::default();
        if version == ProtocolVersion::V5 {
            properties.maximum_qos = Some(QoS::AtMostOnce);
            properties.retain_available = Some(true);
            properties.shared_subscription_available = Some(false);
            properties.subscription_identifier_available = Some(false);
            if connect.client_id.is_empty() {
                properties.assigned_client_identifier = Some(format!("tidings-{:016x}", rand_id()));
            }
        }
        Step::Reply(vec![Packet::Connack(Connack { session_present: false, reason: MqttReason::Success, properties })])
    }

    fn publish(&mut self, publish: Publish) -> Step {
        if publish.qos != QoS::AtMostOnce {
            return self.refuse(MqttReason::QosNotSupported);
        }
        if publish.properties.topic_alias.is_some() {
            // CONNACK announced no topic aliases (Topic Alias Maximum absent = 0).
            return self.refuse(MqttReason::TopicAliasInvalid);
        }
        let properties = match publish.retain {
            true => vec![Property { key: RETAIN.to_string(), value: Value::Bool(true) }],
            false => Vec::new(),
        };
        let topic = name_to_tidings(&publish.topic);
        let Ok(message) = Message::new(&topic, &properties, publish.payload, now_us()) else {
            return self.refuse(MqttReason::PacketTooLarge);
        };
        match self.native.handle(Frame::Publish(message)) {
            Next::Refuse(notice) => self.refuse(reason_for(&notice)),
            _ => Step::Reply(Vec::new()),
        }
    }

    fn subscribe(&mut self, subscribe: Subscribe) -> Step {
        let mut reasons = Vec::with_capacity(subscribe.filters.len());
        for (filter, _options) in &subscribe.filters {
            let reason = match () {
                () if !subscribe.properties.subscription_identifiers.is_empty() => {
                    MqttReason::SubscriptionIdentifiersNotSupported
                }
                () if is_shared(filter) => MqttReason::SharedSubscriptionsNotSupported,
                () => match self.subscribe_filter(filter) {
                    Ok(reason) => reason,
                    // A denied filter fails alone (SUBACK 0x87, 0x80 in 3.1.1); the session stays.
                    Err(notice) if notice.reason() == Some(ReasonCode::NotAuthorized) => MqttReason::NotAuthorized,
                    Err(notice) => return self.refuse(reason_for(&notice)),
                },
            };
            reasons.push(match (self.version, reason.is_error()) {
                (Some(ProtocolVersion::V311), true) => MqttReason::UnspecifiedError,
                _ => reason,
            });
        }
        Step::Reply(vec![Packet::Suback(Suback {
            packet_id: subscribe.packet_id,
            properties: Properties::default(),
            reasons,
        })])
    }

    /// Subscribes one MQTT filter (replacing an earlier subscription of the same filter, as
    /// MQTT-3.8.4-3 asks): granted at QoS 0, or refused if tidings cannot hold its patterns.
    fn subscribe_filter(&mut self, filter: &str) -> Result<MqttReason, Notice> {
        let mapped = filter_to_tidings(filter);
        if mapped.patterns.iter().any(|pattern| Pattern::parse(pattern).is_err()) {
            return Ok(MqttReason::TopicFilterInvalid);
        }
        self.unsubscribe_filter(filter)?;
        let mut ids = Vec::with_capacity(mapped.patterns.len());
        for pattern in mapped.patterns.iter().cloned() {
            let id = SubId(self.next_id);
            self.next_id = self.next_id.wrapping_add(1).max(1);
            self.admits.lock().insert(id, mapped.clone());
            let frame = Frame::Subscribe(tidings_wire::Subscribe {
                id,
                mode: tidings_wire::DeliveryMode::BestEffort,
                pattern,
                selector: None,
                durable: None,
                group: None,
            });
            ids.push(id);
            if let Next::Refuse(notice) = self.native.handle(frame) {
                // Nothing of a refused filter stays subscribed.
                self.admits.lock().remove(&id);
                for taken in ids.into_iter().filter(|taken| *taken != id) {
                    self.admits.lock().remove(&taken);
                    let _ = self.native.handle(Frame::Unsubscribe(tidings_wire::Unsubscribe { id: taken }));
                }
                return Err(notice);
            }
        }
        self.filters.insert(filter.to_string(), ids);
        Ok(MqttReason::Success)
    }

    fn unsubscribe(&mut self, unsubscribe: Unsubscribe) -> Step {
        let mut reasons = Vec::with_capacity(unsubscribe.filters.len());
        for filter in &unsubscribe.filters {
            match self.unsubscribe_filter(filter) {
                Ok(true) => reasons.push(MqttReason::Success),
                Ok(false) => reasons.push(MqttReason::NoSubscriptionExisted),
                Err(notice) => return self.refuse(reason_for(&notice)),
            }
        }
        if self.version == Some(ProtocolVersion::V311) {
            reasons.clear();
        }
        Step::Reply(vec![Packet::Unsuback(Unsuback {
            packet_id: unsubscribe.packet_id,
            properties: Properties::default(),
            reasons,
        })])
    }

    /// Ends the native subscriptions of `filter`; false if there were none.
    fn unsubscribe_filter(&mut self, filter: &str) -> Result<bool, Notice> {
        let Some(ids) = self.filters.remove(filter) else { return Ok(false) };
        for id in ids {
            self.admits.lock().remove(&id);
            if let Next::Refuse(notice) = self.native.handle(Frame::Unsubscribe(tidings_wire::Unsubscribe { id })) {
                return Err(notice);
            }
        }
        Ok(true)
    }
}

/// Microseconds since the Unix epoch: the native message's send time.
fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// A client identifier for a 5.0 client that left it to the server: random enough not to
/// collide among the clients of one network.
fn rand_id() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// The payload of a delivered message as an MQTT PUBLISH at QoS 0, or `None` when the message's
/// topic is not the mapping of an MQTT name or the subscription leaves out `$` topics.
pub(super) fn delivery(message: &Message, filter: &TidingsFilter) -> Option<Publish> {
    let topic = message.topic();
    if !filter.admits(topic) {
        return None;
    }
    let name = tidings_wire::mqtt::topic::tidings_to_name(topic)?;
    let payload: Bytes = message.payload();
    let mut publish = Publish::at_most_once(name, payload);
    publish.retain = message.is_retained();
    Some(publish)
}
