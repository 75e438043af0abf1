//! State that a client's handles and its background tasks share, and what both transports do
//! with an inbound frame.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tidings_wire::{
    Deliver, Frame, Gap, GuaranteedDeliver, NoResponders, Ping, Pong, PublishAck, PublishRefused, SubId, Subscribed,
    Welcome,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch, Semaphore, TryAcquireError};
use tracing::{debug, warn};

use crate::builder::Config;
use crate::delivery::{Delivery, Event, GapNotice, Position};
use crate::error::ClientError;
use crate::event::ConnectionEvent;
use crate::inbox::Inbox;
use crate::publisher::{Receipt, Window};
use crate::registry::Registry;
use crate::request::Requests;
use crate::standing::Standing;
use crate::tcp::TcpLink;
use crate::udp::UdpLink;
use crate::waiters::Waiters;

/// What the reader hands a subscription: a batch of deliveries and the credit it took.
pub(crate) type Batch = (Vec<Event>, u32);

/// Where a subscription's deliveries go, and where the reason it ended is left.
///
/// The channel is unbounded; `credit` bounds it: the reader takes one permit per delivery
/// (at most `subscription_capacity` per batch) before sending, the subscription gives them
/// back as it takes batches out. A subscription that is dropped closes `credit`, so a reader
/// waiting for credit never waits for a consumer that is gone.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) tx: mpsc::UnboundedSender<Batch>,
    pub(crate) credit: Arc<Semaphore>,
    pub(crate) end: Arc<OnceLock<ClientError>>,
    /// For a guaranteed subscription: where it stands, and who waits for its first SUBSCRIBED.
    pub(crate) guaranteed: Option<GuaranteedRoute>,
}

/// The reader's side of a guaranteed subscription.
#[derive(Debug, Default)]
pub(crate) struct GuaranteedRoute {
    pub(crate) standing: Standing,
    pub(crate) confirm: Option<oneshot::Sender<()>>,
    /// A durable subscription resumes where the broker's checkpoint is, which may be past
    /// ticks this client never saw because none of them matched: the broker reports every loss
    /// itself (a GAP), so no gap is inferred from where it starts.
    pub(crate) durable: bool,
    /// For a durable subscription, the broker that first confirmed it. Its record and its
    /// checkpoints are on that broker's disk alone, so the client reconnects only there: a
    /// cell mate told in SERVERS would make a subscription of that name anew, from now, and
    /// what was published meanwhile would be lost without a word ([`Shared::durable_home`]).
    pub(crate) home: Option<String>,
    /// A guaranteed queue group member: it gets whichever ticks the group leases it, so its
    /// ticks say nothing of what it had (a redelivery is flagged by the broker) and no gap is
    /// inferred from where it starts either.
    pub(crate) member: bool,
}

impl Route {
    /// Ends the subscription's stream (once buffered deliveries are read) with `error`.
    fn end_with(self, error: Option<&ClientError>) {
        if let Some(e) = error {
            let _ = self.end.set(e.clone());
        }
    }
}

/// Where the outcome of one guaranteed publish goes.
pub(crate) type AckSink = oneshot::Sender<Result<Receipt, ClientError>>;

/// The transport-specific half.
#[derive(Debug)]
pub(crate) enum Link {
    Tcp(Arc<TcpLink>),
    Udp(Arc<UdpLink>),
}

/// Shared by every handle and task of one client.
///
/// Lock order, where two are held: the TCP outbox, then `registry`, then `waiters`; the TCP
/// outbox, then `publishing`.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) link: Link,
    pub(crate) registry: Mutex<Registry<Route>>,
    pub(crate) waiters: Mutex<Waiters>,
    /// Guaranteed publishes awaiting their PUBLISH_ACK.
    pub(crate) publishing: Mutex<Window<AckSink>>,
    /// One permit per free place in the guaranteed window; an outcome gives its place back.
    pub(crate) window_slots: Arc<Semaphore>,
    /// Orders SUBSCRIBEs and PINGs (whose nonce it is); see `registry.rs`.
    sequence: AtomicU64,
    sub_ids: AtomicU32,
    server_name: Mutex<Option<String>>,
    /// The broker's frame limit from WELCOME.
    send_limit: AtomicUsize,
    events: broadcast::Sender<ConnectionEvent>,
    /// Set once, when the client is closed for good: `None` for an orderly close.
    terminal: OnceLock<Option<ClientError>>,
    stop: watch::Sender<bool>,
    /// Requests in flight and their inbox.
    pub(crate) requests: Requests,
    /// The first refusal no caller has been told of: an ERROR for a best-effort publish (which
    /// has no caller waiting) arrives when it arrives, possibly before the next `flush` is
    /// staged; that flush would then succeed on the next connection, and the refusal would be
    /// lost. It is kept here until `flush` or `close` reports it.
    unreported: Mutex<Option<ClientError>>,
    /// Where the next tries of the server list start (`failover.rs`).
    pub(crate) failover: crate::failover::Failover,
}

impl Shared {
    pub(crate) fn new(config: Config, link: Link) -> Shared {
        let send_limit = AtomicUsize::new(config.max_frame);
        let window_slots = Arc::new(Semaphore::new(config.guaranteed_window.min(Semaphore::MAX_PERMITS)));
        let failover = crate::failover::Failover::new(crate::tcp::addresses(&config.addr), config.ignore_told_servers);
        Shared {
            publishing: Mutex::new(Window::new(config.publisher)),
            window_slots,
            config,
            link,
            registry: Mutex::new(Registry::default()),
            waiters: Mutex::new(Waiters::default()),
            sequence: AtomicU64::new(1),
            sub_ids: AtomicU32::new(1),
            server_name: Mutex::new(None),
            send_limit,
            events: broadcast::channel(64).0,
            terminal: OnceLock::new(),
            stop: watch::Sender::new(false),
            requests: Requests::default(),
            unreported: Mutex::new(None),
            failover,
        }
    }

    /// The next sequence number (PING nonce or SUBSCRIBE order).
    pub(crate) fn next_seq(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_sub_id(&self) -> SubId {
        SubId(self.sub_ids.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn send_limit(&self) -> usize {
        self.send_limit.load(Ordering::Relaxed)
    }

    pub(crate) fn server_name(&self) -> Option<String> {
        self.server_name.lock().clone()
    }

    pub(crate) fn subscribe_events(&self) -> broadcast::Receiver<ConnectionEvent> {
        self.events.subscribe()
    }

    pub(crate) fn emit(&self, event: ConnectionEvent) {
        let _ = self.events.send(event);
    }

    /// Records what the broker said in WELCOME.
    pub(crate) fn welcomed(&self, welcome: &Welcome) {
        *self.server_name.lock() = Some(welcome.server_name.clone());
        self.send_limit.store(welcome.max_frame as usize, Ordering::Relaxed);
    }

    /// The error for an operation on a closed client, if it is closed.
    pub(crate) fn closed_error(&self) -> Option<ClientError> {
        self.terminal.get().map(|t| t.clone().unwrap_or(ClientError::Closed))
    }

    /// Resolves when the client is closed for good.
    pub(crate) async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }

    /// The client is closing: no subscription takes more deliveries, so the reader never waits
    /// for a consumer that will not read again (what arrives from now on is dropped; a durable
    /// subscription gets it again, unacknowledged, on its next run).
    pub(crate) fn stop_taking_deliveries(&self) {
        for route in self.registry.lock().sinks() {
            route.credit.close();
        }
    }

    /// Closes the client for good (idempotent): ends every subscription stream and fails
    /// every waiting call with `error` (or [`ClientError::Closed`]), and stops the tasks.
    pub(crate) fn finish(&self, error: Option<ClientError>) {
        if self.terminal.set(error.clone()).is_err() {
            return;
        }
        let cause = error.clone().unwrap_or(ClientError::Closed);
        if let Link::Tcp(tcp) = &self.link {
            tcp.closed(error.clone());
        }
        for route in self.registry.lock().drain() {
            route.end_with(error.as_ref());
        }
        self.waiters.lock().fail_all(&cause);
        self.requests.fail_all(&cause);
        for sink in self.publishing.lock().drain() {
            let _ = sink.send(Err(cause.clone()));
        }
        self.window_slots.close();
        self.emit(ConnectionEvent::Closed { error });
        self.stop.send_replace(true);
    }

    /// Handles one frame from the broker; deliveries are collected in `inbox` for
    /// [`hand_over`](Self::hand_over). Returns the error that ends the connection when the
    /// frame is ERROR or DISCONNECT.
    pub(crate) fn handle_inbound(&self, frame: Frame, read_us: u64, inbox: &mut Inbox) -> Option<ClientError> {
        match frame {
            Frame::Deliver(deliver) if self.requests.is_inbox(deliver.id) => self.requests.answer(deliver, read_us),
            Frame::NoResponders(NoResponders { reply_to }) => self.requests.no_responders(&reply_to),
            Frame::Deliver(Deliver { id, missed, message }) => {
                inbox.push(Event::Message(Delivery::new(id, missed, message, read_us)));
            }
            Frame::GuaranteedDeliver(GuaranteedDeliver { id, pubend, tick, message, redelivered }) => {
                let mut delivery = Delivery::guaranteed(id, Position { pubend, tick }, message, read_us);
                // Flagged by the broker (a queue group member that left had it), or below what
                // this client already had (a durable subscription resumed from its last
                // acknowledgement): handed over flagged, for the application to judge.
                delivery.redelivered = !self.reached(id, pubend, tick) || redelivered;
                inbox.push(Event::Message(delivery));
            }
            Frame::Gap(Gap { id, pubend, from, to }) => {
                self.reached(id, pubend, to);
                inbox.push(Event::Gap(GapNotice { subscription: id, pubend, from, to }));
            }
            Frame::Subscribed(subscribed) => self.subscribed(subscribed, inbox),
            Frame::Pong(Pong { nonce }) => {
                self.registry.lock().confirm_before(nonce);
                self.waiters.lock().resolve(nonce);
            }
            Frame::Error(notice) => {
                self.doom();
                let error = ClientError::refused(&notice);
                self.refused(&error);
                return Some(error);
            }
            Frame::Disconnect(notice) => {
                self.doom();
                return Some(ClientError::disconnected(&notice));
            }
            Frame::Ping(Ping { nonce }) => self.send_control(Frame::Pong(Pong { nonce })),
            Frame::Welcome(welcome) => self.welcomed(&welcome),
            Frame::PublishAck(ack) => {
                self.failover.acknowledged();
                self.publish_outcome(ack.publisher, ack.seq, Ok(ack));
            }
            Frame::PublishRefused(refused) => {
                let PublishRefused { publisher, seq, reason } = refused;
                // Not logged, nothing promised: the publish stays in the window, this connection
                // ends, and the window goes to the next broker of the list (or the only one
                // again), until the refusals in a row reach `Failover`'s bound.
                let unavailable = reason.reason() == Some(tidings_wire::ReasonCode::StorageUnavailable);
                if unavailable && self.config.reconnect.is_some() && self.failover.refused() {
                    self.doom();
                    return Some(ClientError::refused(&reason));
                }
                self.publish_outcome(publisher, seq, Err(ClientError::refused(&reason)));
            }
            Frame::Servers(servers) => {
                debug!(addresses = ?servers.addresses, "the broker told its cell's addresses");
                self.failover.told(&servers.addresses);
            }
            other => debug!(frame = ?other.frame_type(), "ignoring a frame a broker should not send"),
        }
        None
    }

    /// A guaranteed subscription has everything of `pubend` through `tick`; false if it had
    /// `tick` already.
    fn reached(&self, id: SubId, pubend: tidings_wire::PubendId, tick: tidings_wire::Tick) -> bool {
        match self.registry.lock().sink_mut(id).and_then(|r| r.guaranteed.as_mut()) {
            Some(g) if g.member => true,
            Some(g) => g.standing.reached(pubend, tick),
            None => true,
        }
    }

    /// SUBSCRIBED: the first one confirms the subscription to its caller; one after a
    /// reconnect may open gaps, which go to the subscription in stream order.
    fn subscribed(&self, subscribed: Subscribed, inbox: &mut Inbox) {
        let mut registry = self.registry.lock();
        let Some(g) = registry.sink_mut(subscribed.id).and_then(|r| r.guaranteed.as_mut()) else {
            debug!(subscription = subscribed.id.0, "SUBSCRIBED for no guaranteed subscription");
            return;
        };
        let gaps = g.standing.confirmed(subscribed.id, &subscribed.starts);
        for gap in gaps.into_iter().filter(|_| !g.durable && !g.member) {
            warn!(subscription = gap.subscription.0, pubend = %gap.pubend, from = gap.from.0, to = gap.to.0,
                "the subscription was set up again after a lost connection; these ticks were possibly missed");
            inbox.push(Event::Gap(gap));
        }
        if g.durable && g.home.is_none() {
            g.home = self.server_name();
        }
        if let Some(confirm) = g.confirm.take() {
            let _ = confirm.send(());
        }
    }

    /// The broker this client's durable subscriptions live at, once one is confirmed: a
    /// reconnect takes only that broker and passes over any other its list names (each
    /// connection is made under one name, so they all live at the same one).
    pub(crate) fn durable_home(&self) -> Option<String> {
        let registry = self.registry.lock();
        let mut homes = registry.sinks().filter_map(|r| r.guaranteed.as_ref().and_then(|g| g.home.clone()));
        homes.next()
    }

    /// A guaranteed publish has its answer: its caller learns it and its window place is free.
    fn publish_outcome(
        &self,
        publisher: tidings_wire::PublisherId,
        seq: u64,
        outcome: Result<PublishAck, ClientError>,
    ) {
        let acked_by = outcome.as_ref().ok().map(|a| a.pubend);
        let Some(sink) = self.publishing.lock().close(publisher, seq, acked_by) else {
            debug!(seq, "an answer for a guaranteed publish no longer in flight");
            return;
        };
        self.window_slots.add_permits(1);
        let receipt = outcome.map(|a| Receipt { publisher: a.publisher, seq: a.seq, pubend: a.pubend, tick: a.tick });
        let _ = sink.send(receipt);
    }

    /// Hands each subscription its batch. Waits while a subscription has no credit: the
    /// reader then stops reading, and the broker sees backpressure.
    pub(crate) async fn hand_over(&self, inbox: &mut Inbox) {
        if inbox.is_empty() {
            return;
        }
        let limit = u32::try_from(self.config.subscription_capacity).unwrap_or(u32::MAX);
        for (id, batch) in inbox.take() {
            let permits = u32::try_from(batch.len()).unwrap_or(u32::MAX).min(limit);
            let (credit, tx) = {
                let registry = self.registry.lock();
                let Some(route) = registry.sink(id) else {
                    debug!(subscription = id.0, "deliveries for an unknown subscription dropped");
                    continue;
                };
                let acquired = match route.credit.try_acquire_many(permits) {
                    Ok(granted) => {
                        granted.forget();
                        true
                    }
                    Err(TryAcquireError::Closed) => continue,
                    Err(TryAcquireError::NoPermits) => false,
                };
                if acquired {
                    let _ = route.tx.send((batch, permits));
                    continue;
                }
                (route.credit.clone(), route.tx.clone())
            };
            let acquired = match credit.acquire_many(permits).await {
                Ok(granted) => {
                    granted.forget();
                    true
                }
                Err(_) => false,
            };
            if acquired {
                let _ = tx.send((batch, permits));
            }
        }
    }

    /// An ERROR arrived: the subscription it refused (if any) ends with it, and every call
    /// waiting for a PONG fails with it. A refusal that ended no subscription is also kept for
    /// the next `flush` or `close`, since it may be for a publish no one waits for.
    fn refused(&self, error: &ClientError) {
        warn!(%error, "broker refused a request");
        let ended = {
            let mut registry = self.registry.lock();
            let waiting = |route: &Route| route.guaranteed.as_ref().is_some_and(|g| g.member && g.confirm.is_some());
            registry.take_refused(error.reason()).or_else(|| registry.take_waiting(error.reason(), waiting))
        };
        match ended {
            Some((_, route)) => route.end_with(Some(error)),
            None => {
                self.unreported.lock().get_or_insert_with(|| error.clone());
            }
        }
        self.waiters.lock().fail_all(error);
        self.emit(ConnectionEvent::Refused { error: error.clone() });
    }

    /// Takes the refusal no caller has been told of yet: the caller now reports it (or has
    /// reported it, when the refusal reached it through a failed PONG wait).
    pub(crate) fn take_unreported(&self) -> Option<ClientError> {
        self.unreported.lock().take()
    }

    /// Over TCP, the broker closes the connection after ERROR or DISCONNECT: stop using it
    /// before anyone is told, so that calls made after the news wait for the next connection.
    fn doom(&self) {
        if let Link::Tcp(tcp) = &self.link {
            tcp.doom();
        }
    }

    /// Sends a small control frame without waiting (best effort).
    fn send_control(&self, frame: Frame) {
        match &self.link {
            Link::Tcp(tcp) => tcp.push_control(&frame),
            Link::Udp(udp) => udp.try_send_frame(&frame),
        }
    }
}
