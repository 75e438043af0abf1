//! A client session: the handshake, and what each frame does. Shared by TCP connections and
//! UDP clients; the transports differ only in how bytes arrive and leave.

use std::collections::HashMap;
use std::sync::Arc;

use tidings_delivery::SubendId;
use tidings_matching::{Pattern, Selector, SubscriptionId, Topic};
use tidings_route::{Arrival, PubendId};
use tidings_wire::{
    DeliveryAck, DeliveryMode, Frame, GuaranteedPublish, Message, Notice, Pong, PublishRefused, ReasonCode, SubId,
    Subscribe, Welcome, WireError, PROTOCOL_VERSION,
};

use crate::cluster::RouteFilter;
use crate::dispatch::DispatchScratch;
use crate::guaranteed::durable::DurableSpec;
use crate::outbox::{Outbox, Target};
use crate::server::Shared;

/// Which transport a session runs over; they differ in handshake and renewal rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP connection: HELLO first, then anything.
    Tcp,
    /// A UDP client address: HELLO optional; an identical SUBSCRIBE renews.
    Udp,
}

impl Transport {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

struct ActiveSubscription {
    index_id: SubscriptionId,
    pattern: String,
    selector: Option<String>,
    /// What the router was told, when this broker has a cluster.
    route: Option<RouteFilter>,
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

/// A match this long makes a session's next publishes match off the worker (see
/// [`Session::publish`]): far above a normal match (microseconds), far below a stall anyone
/// notices.
const COSTLY_MATCH: std::time::Duration = std::time::Duration::from_millis(2);

/// How many publishes after a costly match still match off the worker.
const COSTLY_STREAK: u32 = 1_000;

/// Whether this thread is a worker of a multi-threaded runtime (where `block_in_place` works).
fn on_worker_pool() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// One client's state: its handshake, its subscriptions, its queue.
pub struct Session {
    transport: Transport,
    greeted: bool,
    subscriptions: HashMap<SubId, ActiveSubscription>,
    /// Guaranteed subscriptions, served by the guaranteed driver.
    /// Guaranteed subscriptions: subend, routing filter (the driver keeps a durable one's), and
    /// durable name.
    guaranteed: HashMap<SubId, (SubendId, Option<RouteFilter>, Option<String>)>,
    /// The client's outbound queue.
    pub outbox: Arc<Outbox>,
    shared: Arc<Shared>,
    /// Reused across publishes.
    pub scratch: DispatchScratch,
    /// The topic of the previous valid publish, to skip validating it again; `None` until the
    /// first, so that no topic (the empty one included) passes unchecked.
    last_valid_topic: Option<String>,
    /// This session's publishing endpoint, chosen at its first publish while links are up.
    pubend: Option<PubendId>,
    /// Publishes left to match off the runtime's worker (see [`Session::publish`]).
    costly_left: u32,
    /// Its entry in `/connz`.
    conn: Arc<crate::connz::Conn>,
    /// Routing filters of best-effort subscriptions not yet given to the router: a client
    /// subscribing thousands of patterns in one read costs the router one settle (and each peer
    /// one summary delta) per slice, not one per pattern. Given before any other router call of
    /// this session, at the end of each batch of frames, and on leaving.
    routes_pending: Vec<RouteFilter>,
}

impl Session {
    /// A session that has not yet said HELLO.
    pub fn new(transport: Transport, outbox: Arc<Outbox>, shared: Arc<Shared>) -> Session {
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
        let conn = shared.connections.open(transport, Arc::clone(&outbox));
        Session {
            conn,
            routes_pending: Vec::new(),
            transport,
            greeted: transport == Transport::Udp,
            subscriptions: HashMap::new(),
            guaranteed: HashMap::new(),
            outbox,
            shared,
            scratch: DispatchScratch::default(),
            last_valid_topic: None,
            pubend: None,
            costly_left: 0,
        }
    }

    /// Whether the client has said HELLO (always, over UDP).
    pub fn is_greeted(&self) -> bool {
        self.greeted
    }

    /// Handles one frame.
    pub fn handle(&mut self, frame: Frame) -> Next {
        self.conn.frames_in.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !matches!(&frame, Frame::Subscribe(s) if s.mode != DeliveryMode::Guaranteed && s.durable.is_none())
            && !matches!(&frame, Frame::Publish(_) | Frame::Ping(_))
        {
            self.route_pending();
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
                if let Some((subend, route, durable)) = self.guaranteed.remove(&u.id) {
                    match durable {
                        Some(name) => self.shared.guaranteed.delete_durable(&name, subend),
                        None => self.shared.guaranteed.unsubscribe(subend),
                    }
                    if let Some(filter) = route {
                        self.shared.cluster.unsubscribe(filter);
                    }
                }
                Ok(Next::Continue)
            }
            Frame::Unsubscribe(u) => match self.subscriptions.remove(&u.id) {
                Some(active) => {
                    self.conn.unsubscribed(u.id.0);
                    self.shared.dispatcher.unsubscribe(active.index_id);
                    if let Some(filter) = active.route {
                        self.shared.cluster.unsubscribe(filter);
                    }
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
            Frame::Welcome(_)
            | Frame::Deliver(_)
            | Frame::Error(_)
            | Frame::PublishAck(_)
            | Frame::PublishRefused(_)
            | Frame::GuaranteedDeliver(_)
            | Frame::Gap(_)
            | Frame::Subscribed(_) => Err(Notice::new(
                ReasonCode::UnexpectedFrame,
                "WELCOME, DELIVER, ERROR and the guaranteed answers are sent by the broker, not to it",
            )),
            Frame::Token(_) => {
                Err(Notice::new(ReasonCode::UnexpectedFrame, "TOKEN is for UDP, and only first in a datagram"))
            }
            Frame::TokenIssued(_) => {
                Err(Notice::new(ReasonCode::UnexpectedFrame, "TOKEN_ISSUED is sent by the broker, not to it"))
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
        let spent = if self.costly_left > 0 && on_worker_pool() {
            // Matching this session's messages has been costly: do it with the worker's other
            // duties handed to another thread, so sockets are still polled meanwhile. A task
            // that computes for long on a worker stops the runtime's I/O until it yields (a
            // light client's round trip took as long as a burst of costly matches).
            tokio::task::block_in_place(|| self.shared.dispatcher.publish(message, &mut self.scratch))
        } else {
            self.shared.dispatcher.publish(message, &mut self.scratch)
        };
        self.costly_left = match spent {
            Some(spent) if spent >= COSTLY_MATCH => COSTLY_STREAK,
            _ => self.costly_left.saturating_sub(1),
        };
        let bound = self.shared.config.limits.max_match_time;
        if let Some(spent) = spent.filter(|spent| !bound.is_zero() && *spent > bound) {
            let text = format!(
                "matching this message took {} ms, past the broker's [limits] max_match_time of {} ms",
                spent.as_millis(),
                bound.as_millis()
            );
            return Err(Notice::new(ReasonCode::LimitExceeded, text));
        }
        let cluster = &self.shared.cluster;
        if cluster.is_active() {
            let pubend = *self.pubend.get_or_insert_with(|| cluster.new_pubend());
            cluster.forward(Arrival::Published { pubend }, message, &mut self.scratch.route);
        }
        Ok(Next::Continue)
    }

    /// Publishers tend to repeat a topic; validate each new one once.
    fn check_topic(&mut self, message: &Message) -> Result<(), Notice> {
        if self.last_valid_topic.as_deref() != Some(message.topic()) {
            Topic::parse(message.topic()).map_err(|e| Notice::new(ReasonCode::InvalidTopic, e.to_string()))?;
            let last = self.last_valid_topic.get_or_insert_with(String::new);
            last.clear();
            last.push_str(message.topic());
        }
        Ok(())
    }

    /// A GPUBLISH: logged by the guaranteed driver, which answers PUBLISH_ACK once it is durable
    /// (or PUBLISH_REFUSED). An invalid topic is refused with the publish, not the session.
    fn guaranteed_publish(&mut self, publish: GuaranteedPublish) -> Result<Next, Notice> {
        if self.transport == Transport::Udp {
            return Err(Notice::new(ReasonCode::UnsupportedDeliveryMode, "guaranteed publishing needs TCP"));
        }
        if let Err(reason) = self.check_topic(&publish.message) {
            let refused = PublishRefused { publisher: publish.publisher, seq: publish.seq, reason };
            self.outbox.push_frame(&Frame::PublishRefused(refused));
            return Ok(Next::Continue);
        }
        self.shared.guaranteed.publish(publish, Arc::clone(&self.outbox));
        Ok(Next::Continue)
    }

    /// A DELIVERY_ACK. One for a subscription that is gone is ignored: a client acknowledges a
    /// batch after the fact, so its last ack may cross its own UNSUBSCRIBE.
    fn delivery_ack(&mut self, ack: &DeliveryAck) -> Result<Next, Notice> {
        if let Some(&(subend, _, _)) = self.guaranteed.get(&ack.id) {
            self.shared.guaranteed.delivery_ack(subend, ack.pubend, ack.tick);
        }
        Ok(Next::Continue)
    }

    /// Ends a batch of frames read together (see [`crate::dispatch::Dispatcher::finish_batch`]).
    pub fn finish_batch(&mut self, read_at: std::time::Instant) {
        self.route_pending();
        self.shared.dispatcher.finish_batch(read_at, &mut self.scratch);
    }

    /// Gives the router the routing filters of the subscriptions taken since the last time.
    fn route_pending(&mut self) {
        if !self.routes_pending.is_empty() {
            self.shared.cluster.subscribe_many(std::mem::take(&mut self.routes_pending));
        }
    }

    fn hello(&mut self, version: u16, name: &str) -> Result<Next, Notice> {
        if self.greeted && self.transport == Transport::Tcp {
            return Err(Notice::new(ReasonCode::DuplicateHello, "HELLO was already received on this session"));
        }
        if version != PROTOCOL_VERSION {
            return Err(Notice::new(
                ReasonCode::UnsupportedVersion,
                format!("protocol version {version} is not supported; this broker speaks {PROTOCOL_VERSION}"),
            ));
        }
        self.greeted = true;
        {
            let mut client = self.outbox.client.lock();
            if !name.is_empty() && !client.contains(" (") {
                client.push_str(&format!(" ({name})"));
            }
        }
        self.outbox.push_frame(&Frame::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            max_frame: self.shared.config.limits.max_frame as u32,
            server_name: self.shared.config.name.clone(),
        }));
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
        let pattern = Pattern::parse(&s.pattern).map_err(|e| Notice::new(ReasonCode::InvalidPattern, e.to_string()))?;
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
        };
        if let Some(name) = s.durable {
            // The driver keeps a durable subscription's filter in the summaries, across sessions.
            let spec = DurableSpec { name: name.clone(), pattern: s.pattern, selector: s.selector };
            let subend =
                self.shared.guaranteed.subscribe_durable(s.id, spec, (pattern, selector), Arc::clone(&self.outbox))?;
            self.guaranteed.insert(s.id, (subend, None, Some(name)));
            self.conn.subscribed(info);
            return Ok(Next::Continue);
        }
        let route = self.shared.cluster.is_enabled().then(|| RouteFilter::new(pattern.clone(), selector.clone()));
        if s.mode == DeliveryMode::Guaranteed {
            // Into the summaries first: the driver's barrier then vouches for this filter.
            if let Some(filter) = &route {
                self.shared.cluster.subscribe(filter.clone());
            }
            let subend = self.shared.guaranteed.subscribe(s.id, pattern, selector, Arc::clone(&self.outbox));
            self.guaranteed.insert(s.id, (subend, route, None));
            self.conn.subscribed(info);
            return Ok(Next::Continue);
        }
        let target = Arc::new(Target::new(s.id, Arc::clone(&self.outbox)));
        let index_id = self.shared.dispatcher.subscribe(pattern, selector, target);
        if let Some(filter) = &route {
            self.routes_pending.push(filter.clone());
            if self.routes_pending.len() >= crate::dispatch::BULK_SLICE {
                self.route_pending();
            }
        }
        self.subscriptions
            .insert(s.id, ActiveSubscription { index_id, pattern: s.pattern, selector: s.selector, route });
        self.conn.subscribed(info);
        Ok(Next::Continue)
    }

    /// Waits, within the stall bound, for the queues this session's publishes congested.
    pub async fn hold_back_for_congestion(&mut self) {
        if self.scratch.congested.is_empty() && self.scratch.route.congested.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + self.shared.live.max_stall();
        self.shared.metrics.publisher_stalls.inc();
        for outbox in self.scratch.congested.drain(..) {
            outbox.wait_drained(deadline).await;
        }
        self.scratch.route.hold_back(deadline).await;
    }

    /// Lets the queues this session's publishes congested go, without waiting: one task
    /// serves every UDP client, so holding one UDP publisher back would stop them all (and UDP
    /// has no flow control to pass the wait on). Each congested subscriber's own overflow
    /// policy applies instead.
    pub fn forgo_hold_back(&mut self) {
        self.scratch.congested.clear();
        self.scratch.route.congested.clear();
    }

    /// The number of active subscriptions.
    pub fn subscription_count(&self) -> usize {
        self.subscriptions.len() + self.guaranteed.len()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.connections.close(&self.conn);
        // Before anything leaves: the router must have counted what it is told ended.
        self.route_pending();
        for (_, (subend, route, durable)) in self.guaranteed.drain() {
            match durable {
                Some(name) => self.shared.guaranteed.leave_durable(&name, subend),
                None => self.shared.guaranteed.unsubscribe(subend),
            }
            if let Some(filter) = route {
                self.shared.cluster.unsubscribe(filter);
            }
        }
        let leaving: Vec<(SubscriptionId, Option<RouteFilter>)> =
            self.subscriptions.drain().map(|(_, active)| (active.index_id, active.route)).collect();
        // A session with many subscriptions (a million took 3.1 s) leaves off the runtime's
        // workers, in slices, so no other client waits for it.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if leaving.len() > crate::dispatch::BULK_SLICE => {
                let shared = Arc::clone(&self.shared);
                drop(runtime.spawn_blocking(move || unsubscribe_all(&shared, leaving)));
            }
            _ => unsubscribe_all(&self.shared, leaving),
        }
        self.shared
            .metrics
            .connections
            .get_or_create(&crate::metrics::TransportLabel { transport: self.transport.label() })
            .dec();
    }
}

/// Removes a leaving session's subscriptions, from the index and then the router, a slice at a
/// time (see [`crate::dispatch::Dispatcher::unsubscribe_many`]).
fn unsubscribe_all(shared: &Shared, leaving: Vec<(SubscriptionId, Option<RouteFilter>)>) {
    let mut leaving = leaving.into_iter().peekable();
    while leaving.peek().is_some() {
        let (ids, routes): (Vec<SubscriptionId>, Vec<Option<RouteFilter>>) =
            leaving.by_ref().take(crate::dispatch::BULK_SLICE).unzip();
        shared.dispatcher.unsubscribe_many(&ids);
        shared.cluster.unsubscribe_many(routes.into_iter().flatten().collect());
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
