//! One MQTT client's session, as a translation onto a native [`Session`]: CONNECT says HELLO,
//! SUBSCRIBE subscribes the mapped tidings patterns ([`super::subscribe`]), PUBLISH publishes the
//! mapped topic. So an MQTT client reaches the same broker core, routing and retained values as a
//! native one, and what the native session refuses is refused here with the MQTT reason code
//! that fits.
//!
//! QoS 1 and 2 publishes are guaranteed publishes (GPUBLISH): the delivery task answers PUBACK
//! or PUBREC when the pubend's PUBLISH_ACK says the log synced it. The client's packet
//! identifier maps to the publisher sequence number given the first time it was seen, so a DUP
//! retry is the same publish (the log answers it with the first one's tick), and a QoS 2 packet
//! identifier stays taken until PUBREL.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use tidings_wire::mqtt::{
    carry, Connack, Connect, Disconnect, MqttReason, Packet, PacketId, Properties, ProtocolVersion, Publish,
    PublishResponse, QoS, Will,
};
use tidings_wire::{
    Frame, GuaranteedPublish, Hello, Message, Notice, Property, PublisherId, ReasonCode, SubId, Value, RETAIN,
    RETAIN_ONLY,
};
use tracing::debug;

use super::link::{Incoming, Link, Sub, QOS_PROPERTY, SERVER_WINDOW};
use super::registry::{client_hash, Registry, MQTT311_SESSION_EXPIRY};
use crate::session::{Next, Session};

/// What the connection does after a packet.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// Send these packets (possibly none) and carry on.
    Reply(Vec<Packet>),
    /// Send these packets (at most one: a CONNACK or a DISCONNECT saying why) and close.
    Close(Vec<Packet>),
}

/// One subscribed MQTT filter: its granted QoS and the native subscriptions it became.
pub(super) struct Filter {
    /// The QoS granted.
    pub(super) qos: QoS,
    /// Its native subscriptions.
    pub(super) ids: Vec<SubId>,
    /// Its 5.0 options, kept with the session.
    pub(super) kept: super::registry::Kept,
}

/// The MQTT side of a session.
pub(super) struct MqttSession {
    pub(super) native: Session,
    /// `None` until CONNECT.
    version: Option<ProtocolVersion>,
    /// Each subscribed MQTT filter.
    pub(super) filters: BTreeMap<String, Filter>,
    pub(super) link: Arc<Link>,
    pub(super) registry: Arc<Registry>,
    pub(super) next_id: u32,
    /// The largest packet the client accepts (5.0), for the delivery task.
    pub(super) client_max_packet: usize,
    /// The client's Topic Alias Maximum (5.0): how many aliases the delivery task may set.
    pub(super) client_aliases: Option<u16>,
    /// The client identifier (assigned by the broker when the client gave none).
    pub(super) client_id: String,
    /// Whether the broker chose `client_id`.
    assigned: bool,
    /// Seconds the session outlives its connection: 0 ends it with the connection.
    pub(super) expiry: u32,
    /// The will and its delay in seconds, published unless the client disconnects normally.
    /// Boxed: its properties alone are hundreds of bytes, held by every connection's task,
    /// and most clients set no will (issue 42).
    pub(super) will: Option<Box<(Will, u32)>>,
    /// The client's topic aliases (5.0): each names the topic it was last set to. Boxed, and
    /// none until the client sets one: most clients never do (issue 42).
    #[allow(clippy::box_collection, reason = "a pointer inline, not an empty map's 48 bytes")]
    aliases: Option<Box<HashMap<u16, String>>>,
}

/// How many topic aliases a 5.0 client may set (CONNACK's Topic Alias Maximum): enough for a
/// device's topics, bounded because each holds a topic name for the connection's life.
pub(super) const TOPIC_ALIASES: u16 = 64;

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

/// The keep alive a 5.0 client is told to use instead of its own (MQTT-3.2.2-21): the broker's
/// longest when the client asked for more, or for none (0), while the broker has a longest.
pub(super) fn server_keep_alive(asked: u16, longest: u16) -> Option<u16> {
    (longest > 0 && (asked == 0 || asked > longest)).then_some(longest)
}

/// The client identifier a CONNECT stands for: its own, or a new one for a client that left
/// it to the server.
pub(super) fn client_id_of(connect: &Connect) -> (String, bool) {
    match connect.client_id.is_empty() {
        true => (format!("tidings-{:016x}", rand_id()), true),
        false => (connect.client_id.clone(), false),
    }
}

impl MqttSession {
    /// A session before CONNECT, over a native session that has not said HELLO.
    pub(super) fn new(native: Session, link: Arc<Link>, registry: Arc<Registry>) -> MqttSession {
        MqttSession {
            native,
            version: None,
            filters: BTreeMap::new(),
            link,
            registry,
            next_id: 1,
            client_max_packet: tidings_wire::mqtt::MAX_PACKET_SIZE,
            client_aliases: None,
            client_id: String::new(),
            assigned: false,
            expiry: 0,
            will: None,
            aliases: None,
        }
    }

    /// The connection's version, once CONNECT said it.
    pub(super) fn version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    /// Names the session's client before CONNECT is handled (the connection took the session
    /// over under that name first).
    pub(super) fn set_client(&mut self, (client_id, assigned): (String, bool)) {
        self.client_id = client_id;
        self.assigned = assigned;
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
            (Packet::Puback(ack), Some(_)) => {
                let done = self.link.state.lock().puback(ack.packet_id.0.get());
                self.acknowledged(done)
            }
            (Packet::Pubcomp(ack), Some(_)) => {
                let done = self.link.state.lock().pubcomp(ack.packet_id.0.get());
                self.acknowledged(done)
            }
            (Packet::Pubrec(ack), Some(_)) => {
                let known = self.link.state.lock().pubrec(ack.packet_id.0.get());
                Step::Reply(vec![Packet::Pubrel(self.response(ack.packet_id, known))])
            }
            (Packet::Pubrel(release), Some(_)) => {
                let known = self.link.state.lock().inbound.by_packet.remove(&release.packet_id.0.get()).is_some();
                if known {
                    self.save_inbound();
                }
                Step::Reply(vec![Packet::Pubcomp(self.response(release.packet_id, known))])
            }
            (Packet::Subscribe(subscribe), Some(_)) => self.subscribe(subscribe),
            (Packet::Unsubscribe(unsubscribe), Some(_)) => self.unsubscribe(unsubscribe),
            (Packet::Pingreq, Some(_)) => Step::Reply(vec![Packet::Pingresp]),
            (Packet::Disconnect(disconnect), Some(_)) => {
                if disconnect.reason != MqttReason::DisconnectWithWill {
                    self.will = None;
                }
                if let (Some(expiry), true) = (disconnect.properties.session_expiry_interval, self.expiry > 0) {
                    self.expiry = expiry;
                }
                Step::Close(Vec::new())
            }
            // A second CONNECT, AUTH without a method, and the server's own packets.
            (_, Some(_)) => self.refuse(MqttReason::ProtocolError),
        }
    }

    /// PUBREL or PUBCOMP for `id`: success, or (5.0) Packet Identifier not found.
    fn response(&self, id: PacketId, known: bool) -> PublishResponse {
        let mut response = PublishResponse::success(id);
        if !known && self.version == Some(ProtocolVersion::V5) {
            response.reason = MqttReason::PacketIdentifierNotFound;
        }
        response
    }

    /// The client has a message we sent: acknowledge upstream what is now done, and let the
    /// delivery task send more. An acknowledgement of nothing in flight is ignored.
    /// Writes the session's unreleased QoS 2 publishes, if the session outlives its connection
    /// ([`super::registry::Registry::save_inbound`]).
    fn save_inbound(&self) {
        if self.expiry == 0 {
            return;
        }
        let entries: Vec<(u16, u64)> = {
            let state = self.link.state.lock();
            let qos2 = state.inbound.by_packet.iter().filter(|(_, incoming)| incoming.qos == QoS::ExactlyOnce);
            qos2.map(|(id, incoming)| (*id, incoming.seq)).collect()
        };
        if let Err(error) = self.registry.save_inbound(&self.client_id, &entries) {
            tracing::warn!(%error, "the MQTT session's QoS 2 publishes could not be written");
        }
    }

    fn acknowledged(&mut self, done: Result<Vec<tidings_wire::DeliveryAck>, ()>) -> Step {
        for ack in done.unwrap_or_default() {
            self.native.handle(Frame::DeliveryAck(ack));
        }
        self.link.room.notify_one();
        Step::Reply(Vec::new())
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
        if let Some(max) = connect.properties.maximum_packet_size {
            self.client_max_packet = max.get() as usize;
        }
        self.client_aliases = connect.properties.topic_alias_maximum.filter(|_| version == ProtocolVersion::V5);
        let client_window = connect.properties.receive_maximum.map_or(SERVER_WINDOW, |max| usize::from(max.get()));
        self.link.state.lock().window = client_window.min(SERVER_WINDOW);
        let name = format!("mqtt {}", self.client_id);
        if let Next::Refuse(notice) = self.native.handle(Frame::Hello(Hello::new(name))) {
            return refused(match reason_for(&notice) {
                MqttReason::ServerShuttingDown => MqttReason::ServerUnavailable,
                _ => MqttReason::UnspecifiedError,
            });
        }
        self.expiry = match version {
            ProtocolVersion::V5 => connect.properties.session_expiry_interval.unwrap_or(0),
            ProtocolVersion::V311 if connect.clean_start => 0,
            ProtocolVersion::V311 => MQTT311_SESSION_EXPIRY,
        };
        self.will = connect.will.map(|will| {
            let delay = will.properties.will_delay_interval.unwrap_or(0);
            Box::new((will, delay))
        });
        let session_present = match self.resume(connect.clean_start) {
            Ok(present) => present,
            Err(notice) => return refused(reason_for(&notice)),
        };
        let mut properties = Properties::default();
        if version == ProtocolVersion::V5 {
            properties.retain_available = Some(true);
            properties.shared_subscription_available = Some(true);
            properties.subscription_identifier_available = Some(true);
            properties.topic_alias_maximum = Some(TOPIC_ALIASES);
            properties.receive_maximum = std::num::NonZeroU16::new(SERVER_WINDOW as u16);
            properties.server_keep_alive =
                server_keep_alive(connect.keep_alive, self.native.shared.config.mqtt.max_keep_alive);
            if self.assigned {
                properties.assigned_client_identifier = Some(self.client_id.clone());
            }
        }
        Step::Reply(vec![Packet::Connack(Connack { session_present, reason: MqttReason::Success, properties })])
    }

    /// The topic a PUBLISH names, through its topic alias if it has one (MQTT-3.3.2-7..12).
    fn topic_of(&mut self, publish: &Publish) -> Result<String, MqttReason> {
        let Some(alias) = publish.properties.topic_alias else { return Ok(publish.topic.clone()) };
        if alias.get() > TOPIC_ALIASES {
            return Err(MqttReason::TopicAliasInvalid);
        }
        if publish.topic.is_empty() {
            let set = self.aliases.as_ref().and_then(|aliases| aliases.get(&alias.get()));
            return set.cloned().ok_or(MqttReason::ProtocolError);
        }
        self.aliases.get_or_insert_default().insert(alias.get(), publish.topic.clone());
        Ok(publish.topic.clone())
    }

    fn publish(&mut self, publish: Publish) -> Step {
        let name = match self.topic_of(&publish) {
            Ok(name) => name,
            Err(reason) => return self.refuse(reason),
        };
        let topic = tidings_wire::mqtt::topic::name_to_tidings(&name);
        let mut properties = Vec::new();
        carry::to_tidings(&publish.properties, &mut properties);
        if self.link.state.lock().subs.values().any(|sub| sub.options.no_local) {
            properties.push(carry::origin(client_hash(&self.client_id)));
        }
        let Some(packet_id) = publish.packet_id.filter(|_| publish.qos != QoS::AtMostOnce) else {
            if publish.retain {
                properties.push(Property { key: RETAIN.to_string(), value: Value::Bool(true) });
            }
            let Ok(message) = Message::new(&topic, &properties, publish.payload, now_us()) else {
                return self.refuse(MqttReason::PacketTooLarge);
            };
            return match self.native.handle(Frame::Publish(message)) {
                Next::Refuse(notice) => self.refuse(reason_for(&notice)),
                _ => Step::Reply(Vec::new()),
            };
        };
        let seq = {
            let mut state = self.link.state.lock();
            match state.inbound.by_packet.get(&packet_id.0.get()) {
                // PUBREC was sent: a retry is answered again, not published again.
                Some(incoming) if incoming.recorded => {
                    return Step::Reply(vec![Packet::Pubrec(PublishResponse::success(packet_id))]);
                }
                // A retry of a publish still being logged: its answer comes with the first's.
                Some(incoming) if state.waiting.contains_key(&incoming.seq) => return Step::Reply(Vec::new()),
                // A retry on a new connection of a publish whose answer went to the old one: the
                // same sequence number, so the log answers with the first one's tick.
                Some(incoming) => {
                    let seq = incoming.seq;
                    state.waiting.insert(seq, packet_id.0.get());
                    seq
                }
                None if state.inbound.by_packet.len() >= SERVER_WINDOW => {
                    drop(state);
                    return self.refuse(MqttReason::ReceiveMaximumExceeded);
                }
                None => {
                    let seq = state.inbound.next_seq();
                    let incoming = Incoming { seq, qos: publish.qos, recorded: false };
                    state.inbound.by_packet.insert(packet_id.0.get(), incoming);
                    state.waiting.insert(seq, packet_id.0.get());
                    seq
                }
            }
        };
        // On disk before it is published: a retry after a broker restart takes the same number.
        if publish.qos == QoS::ExactlyOnce {
            self.save_inbound();
        }
        if publish.qos == QoS::ExactlyOnce {
            properties.push(Property { key: QOS_PROPERTY.to_string(), value: Value::Int(2) });
        }
        if publish.retain {
            properties.push(Property { key: carry::RETAIN_FLAG.to_string(), value: Value::Bool(true) });
        }
        let sent = now_us();
        let Ok(message) = Message::new(&topic, &properties, publish.payload.clone(), sent) else {
            return self.refuse(MqttReason::PacketTooLarge);
        };
        let publisher = PublisherId(client_hash(&self.client_id));
        let publish_frame = GuaranteedPublish { publisher, seq, pubend: String::new(), home: None, message };
        let copy = match publish.retain {
            true => retained_copy(&topic, properties, publish.qos, publish.payload, sent),
            false => None,
        };
        let copy = copy.filter(|copy| {
            let fits = self.native.can_retain(copy);
            if !fits {
                debug!(topic, "a QoS 1/2 retained value was not kept (past max_retained_bytes)");
            }
            fits
        });
        if let Err(notice) = self.native.guaranteed_publish_with(publish_frame, copy.map(Some)) {
            return self.refuse(reason_for(&notice));
        }
        Step::Reply(Vec::new())
    }
}

/// Makes a QoS 1/2 retained publish its topic's retained value, network-wide, as a QoS 0 one
/// is: a best-effort copy that only sets the value ([`RETAIN_ONLY`]; its live copy is the
/// guaranteed one), marked with its QoS so a new subscription gets it at the lower of the two.
/// Kept on disk by this broker before the publish is acknowledged, as a native guaranteed
/// retained publish is (`crate::guaranteed::retained_values`), and set in memory once the
/// publish is accepted, before its sync. A copy the store has no room for (past
/// `max_retained_bytes`) is not made: the value stays as it was and the publish goes on.
fn retained_copy(topic: &str, mut properties: Vec<Property>, qos: QoS, payload: Bytes, sent: u64) -> Option<Message> {
    properties.retain(|p| p.key != QOS_PROPERTY);
    properties.push(Property { key: QOS_PROPERTY.to_string(), value: Value::Int(qos as i64) });
    properties.push(Property { key: RETAIN.to_string(), value: Value::Bool(true) });
    properties.push(Property { key: RETAIN_ONLY.to_string(), value: Value::Bool(true) });
    Message::new(topic, &properties, payload, sent).ok()
}

/// Microseconds since the Unix epoch: the native message's send time.
pub(super) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// A client identifier for a 5.0 client that left it to the server: random enough not to
/// collide among the clients of one network.
fn rand_id() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// A delivered message as an MQTT PUBLISH at QoS 0 for subscription `sub` of the session whose
/// client identifier hashes to `origin`, or `None` when it is not for this client: its topic is
/// not the mapping of an MQTT name, the filter leaves out `$` topics, the subscription leaves
/// out the session's own messages (no-local) or kept retained values, or (5.0) its expiry
/// interval has passed.
pub(super) fn delivery(message: &Message, sub: &Sub, version: ProtocolVersion, origin: u64) -> Option<Publish> {
    let topic = message.topic();
    if !sub.filter.admits(topic) {
        return None;
    }
    let retained = message.is_retained();
    if (retained && !sub.options.retained) || (sub.options.no_local && carry::is_from(message, origin)) {
        return None;
    }
    let name = tidings_wire::mqtt::topic::tidings_to_name(topic)?;
    let payload: Bytes = message.payload();
    let mut publish = Publish::at_most_once(name, payload);
    publish.retain = retained || (sub.options.retain_as_published && carry::retain_flag(message));
    if version == ProtocolVersion::V5 {
        publish.properties = carry::to_mqtt(message, now_us()).ok()?;
        publish.properties.subscription_identifiers.extend(sub.options.identifier);
    }
    Some(publish)
}
