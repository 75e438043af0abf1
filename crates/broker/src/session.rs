//! A client session: the handshake, and what each frame does. Shared by TCP connections and
//! UDP clients; the transports differ only in how bytes arrive and leave.
//!
//! What a frame asks of the broker (subscribe, publish, acknowledge, durable) goes to the
//! [`BrokerCore`](crate::broker_core::BrokerCore) in the [`Context`] the server handed down; a
//! second protocol's sessions call the same core, not this one.

use std::collections::BTreeMap;
use std::sync::Arc;

use tidings_matching::{Pattern, Selector, Topic};
use tidings_wire::{
    DeliveryAck, DeliveryMode, Frame, GuaranteedPublish, Message, NoResponders, Notice, Pong, PublishRefused,
    ReasonCode, SubId, Subscribe, Welcome, WireError, PROTOCOL_MIN_VERSION, PROTOCOL_VERSION,
};

use crate::broker_core::{BestEffort, GuaranteedSub, PendingRoutes, Publisher, Reach};
use crate::context::Context;
use crate::guaranteed::durable::DurableSpec;
use crate::outbox::{Outbox, Target};

pub use crate::connz::Transport;

struct ActiveSubscription {
    core: BestEffort,
    pattern: String,
    selector: Option<String>,
}

/// What a session should do after a frame.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Carry on.
    Continue,
    /// The client said DISCONNECT: close quietly.
    Close,
    /// Refuse: send this ERROR and close.
    Refuse(Notice),
}

/// One client's state: its handshake, its subscriptions, its queue.
pub struct Session {
    transport: Transport,
    greeted: bool,
    /// B-trees, not hash maps: an empty one is 24 bytes, not 48, and every connection holds
    /// both in its task, idle MQTT ones included (issue 42); a session has few subscriptions.
    subscriptions: BTreeMap<SubId, ActiveSubscription>,
    /// Guaranteed subscriptions, served by the guaranteed driver.
    guaranteed: BTreeMap<SubId, GuaranteedSub>,
    /// The client's outbound queue.
    pub outbox: Arc<Outbox>,
    pub(crate) shared: Arc<Context>,
    /// Who the session logged in as (with a users file; see [`crate::security`]).
    pub(crate) login: Option<crate::security::Login>,
    /// The names of the client's verified TLS certificate: its login when it offers no other.
    pub(crate) certificate: Option<Vec<String>>,
    /// Reused across publishes; holds this session's publishing endpoint. Boxed, and none
    /// until the first publish: a session that only subscribes, or is idle, keeps no scratch
    /// (issue 42: an idle MQTT connection holds its session in its task).
    publisher: Option<Box<Publisher>>,
    /// The topic of the previous publish that was valid and that the session's user may publish
    /// to, to skip both checks for it again (the rules cannot change under a session: a reload
    /// that changes its user closes it); `None` until the first, so that no topic (the empty
    /// one included) passes unchecked.
    last_valid_topic: Option<String>,
    /// Its entry in `/connz`.
    conn: Arc<crate::connz::Conn>,
    /// Routing filters of this session's new subscriptions not yet given to the router (see
    /// [`PendingRoutes`]): given before any other frame's work, at the end of each batch of
    /// frames, and on leaving.
    routes: PendingRoutes,
    /// Whether the client hears SERVERS (a native TCP session of protocol 3 or later).
    hears_servers: bool,
}

impl Session {
    /// A session that has not yet said HELLO.
    pub fn new(transport: Transport, outbox: Arc<Outbox>, shared: Arc<Context>) -> Session {
        shared
            .metrics
            .connections
            .get_or_create(&crate::metrics::TransportLabel { transport: transport.label() })
            .inc();
        shared
            .metrics
            .connections_opened
            .get_or_create(&crate::metrics::TransportLabel { transport: transport.label() })
            .inc();
        shared.metrics.protocol(crate::connz::Protocol::NATIVE.label()).inc();
        let conn = shared.connections.open(transport, Arc::clone(&outbox));
        Session {
            conn,
            routes: PendingRoutes::default(),
            transport,
            greeted: transport == Transport::Udp,
            subscriptions: BTreeMap::new(),
            guaranteed: BTreeMap::new(),
            outbox,
            shared,
            login: None,
            certificate: None,
            publisher: None,
            last_valid_topic: None,
            hears_servers: false,
        }
    }

    /// Names the protocol the client speaks, for `/connz`, `/subsz` and the metrics (an MQTT
    /// connection, once its CONNECT says which version).
    pub fn set_protocol(&mut self, protocol: crate::connz::Protocol) {
        let old = self.conn.set_protocol(protocol);
        if old != protocol {
            self.shared.metrics.protocol(old.label()).dec();
            self.shared.metrics.protocol(protocol.label()).inc();
        }
    }

    /// Whether the client has said HELLO (always, over UDP).
    pub fn is_greeted(&self) -> bool {
        self.greeted
    }

    /// Whether the client is told where else it may connect (SERVERS): a native TCP client of
    /// protocol 3 or later, once it said HELLO.
    pub fn hears_servers(&self) -> bool {
        self.hears_servers
    }

    /// Tells the client the addresses of this broker's cell (`cluster/servers.rs`).
    pub fn tell_servers(&self, addresses: &[String]) {
        if self.hears_servers {
            self.outbox.push_frame(&Frame::Servers(tidings_wire::Servers { addresses: addresses.to_vec() }));
        }
    }

    /// Handles one frame.
    pub fn handle(&mut self, frame: Frame) -> Next {
        self.conn.frames_in.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !matches!(&frame, Frame::Subscribe(s) if s.mode != DeliveryMode::Guaranteed && s.durable.is_none())
            && !matches!(&frame, Frame::Publish(_) | Frame::Ping(_))
        {
            self.shared.core.route_pending(&mut self.routes);
        }
        let result = match frame {
            Frame::Hello(hello) => self.hello(hello.version, &hello.client_name),
            _ if !self.greeted => Err(Notice::new(ReasonCode::HandshakeRequired, "the first frame must be HELLO")),
            Frame::Publish(message) => self.publish(&message),
            Frame::Subscribe(subscribe) => self.subscribe(subscribe),
            Frame::GuaranteedPublish(publish) => self.guaranteed_publish(publish),
            Frame::DeliveryAck(ack) => self.delivery_ack(&ack),
            Frame::Unsubscribe(u) if self.guaranteed.contains_key(&u.id) => {
                self.conn.unsubscribed(u.id.0);
                if let Some(subscription) = self.guaranteed.remove(&u.id) {
                    self.shared.core.unsubscribe_guaranteed(subscription);
                }
                Ok(Next::Continue)
            }
            Frame::Unsubscribe(u) => match self.subscriptions.remove(&u.id) {
                Some(active) => {
                    self.conn.unsubscribed(u.id.0);
                    self.shared.core.unsubscribe(active.core);
                    Ok(Next::Continue)
                }
                None => {
                    Err(Notice::new(ReasonCode::UnknownSubscriptionId, format!("no subscription with id {}", u.id.0)))
                }
            },
            Frame::Ping(ping) => {
                self.outbox.push_frame(&Frame::Pong(Pong { nonce: ping.nonce }));
                Ok(Next::Continue)
            }
            Frame::Pong(_) => Ok(Next::Continue),
            Frame::Disconnect(_) => Ok(Next::Close),
            // The frames only a broker sends, as `Frame::is_from_broker` lists them.
            from_broker @ tidings_wire::broker_frame!() => Err(Notice::new(
                ReasonCode::UnexpectedFrame,
                match from_broker {
                    Frame::TokenIssued(_) => "TOKEN_ISSUED is sent by the broker, not to it",
                    Frame::NoResponders(_) => "NO_RESPONDERS is sent by the broker, not to it",
                    Frame::Sequence(_) => "SEQUENCE is sent by the broker, not to it",
                    _ => "WELCOME, DELIVER, ERROR and the guaranteed answers are sent by the broker, not to it",
                },
            )),
            Frame::Token(_) => {
                Err(Notice::new(ReasonCode::UnexpectedFrame, "TOKEN is for UDP, and only first in a datagram"))
            }
        };
        result.unwrap_or_else(|notice| {
            if let Some(reason) = notice.reason() {
                self.shared.metrics.protocol_error(reason);
            }
            Next::Refuse(notice)
        })
    }

    fn publish(&mut self, message: &Message) -> Result<Next, Notice> {
        self.check_topic(message)?;
        if self.shared.core.publish(message, scratch(&mut self.publisher))? == Reach::NoResponders {
            let reply_to = message.reply_to().unwrap_or_default().to_string();
            self.outbox.push_frame(&Frame::NoResponders(NoResponders { reply_to }));
        }
        Ok(Next::Continue)
    }

    /// Whether a retained value `copy` would be kept (its reserved properties are valid and the
    /// store has room for it).
    pub(crate) fn can_retain(&self, copy: &Message) -> bool {
        self.shared.core.check_retained(copy).is_ok()
    }

    /// Publishers tend to repeat a topic; validate each new one, and check it against the
    /// user's publish rules, once. A reply subject is checked on every publish that has one.
    fn check_topic(&mut self, message: &Message) -> Result<(), Notice> {
        if self.last_valid_topic.as_deref() != Some(message.topic()) {
            Topic::parse(message.topic()).map_err(|e| Notice::new(ReasonCode::InvalidTopic, e.to_string()))?;
            self.check_publish(message.topic())?;
            let last = self.last_valid_topic.get_or_insert_with(String::new);
            last.clear();
            last.push_str(message.topic());
        }
        self.check_reply_to(message)
    }

    /// A GPUBLISH: logged by the guaranteed driver, which answers PUBLISH_ACK once it is durable
    /// (or PUBLISH_REFUSED). An invalid topic is refused with the publish, not the session.
    fn guaranteed_publish(&mut self, publish: GuaranteedPublish) -> Result<Next, Notice> {
        let copy = publish.message.is_retain().then(|| retain_only(&publish.message));
        self.guaranteed_publish_with(publish, copy)
    }

    /// [`Session::guaranteed_publish`] of a publish that sets the retained value `copy` (if
    /// `Some`; see [`Session::guaranteed_publish_retained`]).
    pub(crate) fn guaranteed_publish_with(
        &mut self,
        publish: GuaranteedPublish,
        copy: Option<Option<Message>>,
    ) -> Result<Next, Notice> {
        if self.transport == Transport::Udp {
            return Err(Notice::new(ReasonCode::UnsupportedDeliveryMode, "guaranteed publishing needs TCP"));
        }
        if let Err(reason) = self.check_topic(&publish.message) {
            let refused = PublishRefused { publisher: publish.publisher, seq: publish.seq, reason };
            self.outbox.push_frame(&Frame::PublishRefused(refused));
            return Ok(Next::Continue);
        }
        if let Some(copy) = copy {
            return Ok(self.guaranteed_publish_retained(publish, copy));
        }
        self.shared.core.publish_guaranteed(publish, Arc::clone(&self.outbox));
        Ok(Next::Continue)
    }

    /// A GPUBLISH (already checked) that sets a retained value: `copy` (see
    /// [`BrokerCore::publish_guaranteed_retained`](crate::broker_core::BrokerCore::publish_guaranteed_retained));
    /// a value the store has no room for refuses the publish (PUBLISH_REFUSED).
    fn guaranteed_publish_retained(&mut self, publish: GuaranteedPublish, copy: Option<Message>) -> Next {
        let Some(copy) = copy else {
            let reason = Notice::new(ReasonCode::MalformedFrame, "the retained value cannot be encoded");
            let refused = PublishRefused { publisher: publish.publisher, seq: publish.seq, reason };
            self.outbox.push_frame(&Frame::PublishRefused(refused));
            return Next::Continue;
        };
        let (publisher, seq) = (publish.publisher, publish.seq);
        let outbox = Arc::clone(&self.outbox);
        if let Err(reason) =
            self.shared.core.publish_guaranteed_retained(publish, outbox, copy, scratch(&mut self.publisher))
        {
            if let Some(code) = reason.reason() {
                self.shared.metrics.protocol_error(code);
            }
            self.outbox.push_frame(&Frame::PublishRefused(PublishRefused { publisher, seq, reason }));
        }
        Next::Continue
    }

    /// A DELIVERY_ACK. One for a subscription that is gone is ignored: a client acknowledges a
    /// batch after the fact, so its last ack may cross its own UNSUBSCRIBE.
    fn delivery_ack(&mut self, ack: &DeliveryAck) -> Result<Next, Notice> {
        if let Some(subscription) = self.guaranteed.get(&ack.id) {
            self.shared.core.acknowledge(subscription, ack.pubend, ack.tick);
        }
        Ok(Next::Continue)
    }

    /// Ends a batch of frames read together (see [`crate::dispatch::Dispatcher::finish_batch`]).
    pub fn finish_batch(&mut self, read_at: std::time::Instant) {
        self.shared.core.route_pending(&mut self.routes);
        if let Some(publisher) = &mut self.publisher {
            self.shared.core.finish_batch(read_at, publisher);
        }
    }

    fn hello(&mut self, version: u16, name: &str) -> Result<Next, Notice> {
        if self.greeted && self.transport == Transport::Tcp {
            return Err(Notice::new(ReasonCode::DuplicateHello, "HELLO was already received on this session"));
        }
        if !(PROTOCOL_MIN_VERSION..=PROTOCOL_VERSION).contains(&version) {
            return Err(Notice::new(
                ReasonCode::UnsupportedVersion,
                format!("protocol version {version} is not supported; this broker speaks {PROTOCOL_MIN_VERSION} to {PROTOCOL_VERSION}"),
            ));
        }
        self.check_logged_in()?;
        self.greeted = true;
        {
            let mut client = self.outbox.client.lock();
            if !name.is_empty() && !client.contains(" (") {
                client.push_str(&format!(" ({name})"));
            }
        }
        // An MQTT connection (its protocol is set before its CONNECT is handled) answers with
        // CONNACK, not WELCOME: queued, the WELCOME would only start its delivery task, which an
        // idle MQTT connection does without (issue 42).
        if self.conn.protocol() == crate::connz::Protocol::NATIVE {
            self.outbox.push_frame(&Frame::Welcome(Welcome {
                version,
                max_frame: self.shared.config.limits.max_frame as u32,
                server_name: self.shared.config.name.clone(),
            }));
            if version >= tidings_wire::SERVERS_VERSION && self.transport == Transport::Tcp {
                self.hears_servers = true;
                // A broker without linked mates has nothing to tell (the list is empty).
                let told = self.shared.core.cluster.servers().borrow().clone();
                if !told.is_empty() {
                    self.tell_servers(&told);
                }
            }
        }
        Ok(Next::Continue)
    }

    fn subscribe(&mut self, s: Subscribe) -> Result<Next, Notice> {
        if self.guaranteed.contains_key(&s.id) {
            return Err(Notice::new(
                ReasonCode::DuplicateSubscriptionId,
                format!("subscription id {} is already active on this session", s.id.0),
            ));
        }
        if let Some(active) = self.subscriptions.get(&s.id) {
            if self.transport == Transport::Udp && active.pattern == s.pattern && active.selector == s.selector {
                return Ok(Next::Continue); // a UDP renewal
            }
            return Err(Notice::new(
                ReasonCode::DuplicateSubscriptionId,
                format!("subscription id {} is already active on this session", s.id.0),
            ));
        }
        if s.mode == DeliveryMode::Guaranteed && self.transport == Transport::Udp {
            return Err(Notice::new(ReasonCode::UnsupportedDeliveryMode, "guaranteed subscriptions need TCP"));
        }
        let max = self.shared.live.max_subscriptions_per_session();
        if self.subscriptions.len() + self.guaranteed.len() >= max {
            return Err(Notice::new(ReasonCode::LimitExceeded, format!("at most {max} subscriptions per session")));
        }
        if let Some(group) = &s.group {
            tidings_wire::check_group_name(group).map_err(|why| Notice::new(ReasonCode::InvalidQueueGroup, why))?;
            if s.durable.is_some() {
                let why = "a queue group member cannot be durable: a guaranteed group is durable itself";
                return Err(Notice::new(ReasonCode::UnsupportedDeliveryMode, why));
            }
        }
        let pattern = Pattern::parse(&s.pattern).map_err(|e| Notice::new(ReasonCode::InvalidPattern, e.to_string()))?;
        self.check_subscribe(&pattern)?;
        let selector = match &s.selector {
            Some(text) => {
                Some(Selector::parse(text).map_err(|e| Notice::new(ReasonCode::InvalidSelector, e.to_string()))?)
            }
            None => None,
        };
        let info = crate::connz::SubInfo {
            id: s.id.0,
            pattern: s.pattern.clone(),
            selector: s.selector.clone(),
            mode: match (&s.durable, s.mode) {
                (Some(_), _) => "durable",
                (None, DeliveryMode::Guaranteed) => "guaranteed",
                (None, _) => "best-effort",
            },
            durable: s.durable.clone(),
            group: s.group.clone(),
        };
        let core = &self.shared.core;
        if let Some(name) = s.durable {
            let spec =
                DurableSpec { name: self.durable_name(name), pattern: s.pattern, selector: s.selector, key: None };
            let subscription = core.subscribe_durable(s.id, spec, (pattern, selector), Arc::clone(&self.outbox))?;
            self.guaranteed.insert(s.id, subscription);
            self.conn.subscribed(info);
            return Ok(Next::Continue);
        }
        if let (DeliveryMode::Guaranteed, Some(group)) = (s.mode, &s.group) {
            let texts = (s.pattern, s.selector, s.queue_key);
            let outbox = Arc::clone(&self.outbox);
            let subscription = core.subscribe_member_guaranteed(s.id, group, texts, (pattern, selector), outbox)?;
            self.guaranteed.insert(s.id, subscription);
            self.conn.subscribed(info);
            return Ok(Next::Continue);
        }
        if s.mode == DeliveryMode::Guaranteed {
            let subscription = core.subscribe_guaranteed(s.id, (pattern, selector), Arc::clone(&self.outbox));
            self.guaranteed.insert(s.id, subscription);
            self.conn.subscribed(info);
            return Ok(Next::Continue);
        }
        let subscription = match &s.group {
            Some(group) => {
                let to = (s.id, Arc::clone(&self.outbox));
                let group = (group.as_str(), s.queue_key.as_deref());
                core.subscribe_member(group, to, (pattern, selector), &mut self.routes)?
            }
            None => {
                let target = Arc::new(Target::new(s.id, Arc::clone(&self.outbox)));
                core.subscribe(pattern, selector, target, &mut self.routes)
            }
        };
        self.subscriptions
            .insert(s.id, ActiveSubscription { core: subscription, pattern: s.pattern, selector: s.selector });
        self.conn.subscribed(info);
        Ok(Next::Continue)
    }

    /// Whether this session's publishes congested a queue it should hold back for: a caller
    /// that boxes [`Session::hold_back_for_congestion`] asks first, so an uncongested batch
    /// allocates nothing.
    pub fn congested(&self) -> bool {
        self.publisher.as_deref().is_some_and(Publisher::congested)
    }

    /// Waits, within the stall bound, for the queues this session's publishes congested.
    pub async fn hold_back_for_congestion(&mut self) {
        let Some(publisher) = self.publisher.as_deref_mut().filter(|p| p.congested()) else {
            return;
        };
        let deadline = tokio::time::Instant::now() + self.shared.live.max_stall();
        self.shared.metrics.publisher_stalls.inc();
        for outbox in publisher.dispatch.congested.drain(..) {
            outbox.wait_drained(deadline).await;
        }
        publisher.route.hold_back(deadline).await;
    }

    /// Lets the queues this session's publishes congested go, without waiting: one task
    /// serves every UDP client, so holding one UDP publisher back would stop them all (and UDP
    /// has no flow control to pass the wait on). Each congested subscriber's own overflow
    /// policy applies instead.
    pub fn forgo_hold_back(&mut self) {
        if let Some(publisher) = &mut self.publisher {
            publisher.dispatch.congested.clear();
            publisher.route.congested.clear();
        }
    }

    /// The number of active subscriptions.
    pub fn subscription_count(&self) -> usize {
        self.subscriptions.len() + self.guaranteed.len()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.connections.close(&self.conn);
        self.shared.metrics.protocol(self.conn.protocol().label()).dec();
        // Before anything leaves: the router must have counted what it is told ended.
        self.shared.core.route_pending(&mut self.routes);
        for subscription in std::mem::take(&mut self.guaranteed).into_values() {
            self.shared.core.leave_guaranteed(subscription);
        }
        let leaving: Vec<BestEffort> =
            std::mem::take(&mut self.subscriptions).into_values().map(|active| active.core).collect();
        self.shared.core.unsubscribe_all(leaving);
        self.shared
            .metrics
            .connections
            .get_or_create(&crate::metrics::TransportLabel { transport: self.transport.label() })
            .dec();
    }
}

/// The reason to give a client whose bytes did not decode.
pub fn wire_error_notice(error: &WireError) -> Notice {
    let reason = match error {
        WireError::FrameTooLarge { .. } => ReasonCode::FrameTooLarge,
        WireError::UnknownFrameType(_) => ReasonCode::UnknownFrameType,
        _ => ReasonCode::MalformedFrame,
    };
    Notice::new(reason, error.to_string())
}

/// The copy of a guaranteed retained publish that sets its topic's value and is delivered live
/// to nobody (`$retain_only`; the live copy is the guaranteed one). `None` only for a message
/// one property too long to re-encode.
pub(crate) fn retain_only(message: &Message) -> Option<Message> {
    let mut properties = message.properties();
    properties.push(tidings_wire::Property::new(tidings_wire::RETAIN_ONLY, true));
    Message::new(message.topic(), &properties, message.payload(), message.sent_us()).ok()
}

/// A session's publishing scratch, made at its first publish (see `Session::publisher`).
fn scratch(publisher: &mut Option<Box<Publisher>>) -> &mut Publisher {
    publisher.get_or_insert_with(Box::default)
}
