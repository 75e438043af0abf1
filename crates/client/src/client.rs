//! The client handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_wire::{Frame, Message, Property, SubId, Subscribe, WireError};
use tokio::sync::broadcast;

use crate::builder::{ClientBuilder, Config, Transport};
use crate::error::ClientError;
use crate::event::ConnectionEvent;
use crate::publisher::Receipt;
use crate::shared::{Link, Shared};
use crate::subscription::{SubscribeOptions, Subscription};
use crate::waiters::Outcome;
use crate::{now_us, tcp, udp};

/// A connection to a tidings broker: a cheap, cloneable handle (`Send + Sync`).
///
/// The connection lives while any `Client` clone or [`Subscription`] exists; dropping the last
/// one closes it as [`close`](Self::close) would, without waiting. See the crate docs for
/// what happens on a lost connection.
///
/// ```no_run
/// use tidings_client::{Client, Property};
///
/// # async fn demo() -> Result<(), tidings_client::ClientError> {
/// let client = Client::connect("127.0.0.1:4222").await?;
/// client.publish("plant.line3.temp", "21.5").await?;
/// client.publish_with("trades.ibm", &[Property::new("price", 120i64)], "buy".into()).await?;
/// client.flush().await?; // both have reached the broker and been handled
/// println!("round trip {:?}", client.ping().await?);
/// client.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    handle: Arc<Handle>,
}

/// What every `Client` clone and `Subscription` holds; when the last goes, the client closes.
#[derive(Debug)]
pub(crate) struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.begin_close();
        // The orderly close finishes in the background; should the broker stop reading, give
        // up after the request timeout rather than keep the task and socket forever.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = self.shared.clone();
            runtime.spawn(async move {
                let limit = shared.config.request_timeout;
                if tokio::time::timeout(limit, shared.stopped()).await.is_err() {
                    shared.finish(None);
                }
            });
        }
    }
}

impl Handle {
    fn begin_close(&self) {
        match &self.shared.link {
            Link::Tcp(tcp) => tcp.begin_close(&self.shared),
            Link::Udp(udp) => udp.close(&self.shared),
        }
    }

    /// Stops setting a subscription up again after reconnects, telling the broker nothing (a
    /// dropped durable [`Subscription`]: left, not deleted).
    pub(crate) fn leave(&self, id: SubId) {
        self.shared.registry.lock().remove(id);
    }

    /// Removes a subscription without waiting (a dropped [`Subscription`]).
    pub(crate) fn forget(&self, id: SubId) {
        match &self.shared.link {
            Link::Tcp(tcp) => tcp.forget(&self.shared, id),
            Link::Udp(udp) => udp.forget(&self.shared, id),
        }
    }

    pub(crate) async fn unsubscribe(&self, id: SubId) -> Result<(), ClientError> {
        match &self.shared.link {
            Link::Tcp(tcp) => tcp.unsubscribe(&self.shared, id).await,
            Link::Udp(udp) => udp.unsubscribe(&self.shared, id).await,
        }
    }

    /// Sends a small frame without waiting (an acknowledgement); dropped while disconnected.
    pub(crate) fn send_control(&self, frame: &Frame) {
        match &self.shared.link {
            Link::Tcp(tcp) => tcp.push_control(frame),
            Link::Udp(udp) => udp.try_send_frame(frame),
        }
    }

    async fn barrier(&self) -> Outcome {
        match &self.shared.link {
            Link::Tcp(tcp) => tcp.barrier(&self.shared).await,
            Link::Udp(udp) => udp.barrier(&self.shared).await,
        }
    }
}

impl Client {
    /// Starts configuring a client for the broker at `addr` (`"host:port"`).
    pub fn builder(addr: impl std::fmt::Display) -> ClientBuilder {
        ClientBuilder::new(addr)
    }

    /// Connects over TCP with the defaults of [`ClientBuilder`].
    pub async fn connect(addr: impl std::fmt::Display) -> Result<Client, ClientError> {
        ClientBuilder::new(addr).connect().await
    }

    pub(crate) async fn open(config: Config) -> Result<Client, ClientError> {
        let shared = match config.transport {
            Transport::Tcp => tcp::connect(config).await?,
            Transport::Udp => udp::connect(config).await?,
        };
        Ok(Client { handle: Arc::new(Handle { shared }) })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// Publishes `payload` on `topic`, stamped with [`now_us`], without properties.
    ///
    /// Returns once the message is in the write buffer (TCP) or sent as a datagram (UDP);
    /// [`flush`](Self::flush) waits for the broker.
    pub async fn publish(&self, topic: &str, payload: impl Into<Bytes>) -> Result<(), ClientError> {
        self.publish_with(topic, &[], payload.into()).await
    }

    /// Publishes with properties, which subscribers' selectors can test.
    pub async fn publish_with(&self, topic: &str, properties: &[Property], payload: Bytes) -> Result<(), ClientError> {
        self.publish_message(Message::new(topic, properties, payload, now_us())?).await
    }

    /// Publishes an already encoded message as is (its `sent_us` included): for load
    /// generators that build messages ahead, and for forwarding a [`Delivery::message`](crate::Delivery::message).
    ///
    /// Fails without sending with [`WireError::FrameTooLarge`] when the frame is over the
    /// broker's limit from WELCOME.
    pub async fn publish_message(&self, message: Message) -> Result<(), ClientError> {
        let len = 1 + message.encoded_len();
        let max = self.shared().send_limit();
        if len > max {
            return Err(WireError::FrameTooLarge { len, max }.into());
        }
        let frame = Frame::Publish(message);
        // The fast path takes no await; the waiting path is boxed so that its larger state
        // does not make every publish future bigger (they are moved on every call).
        let shared = self.shared();
        match &shared.link {
            Link::Tcp(tcp) => {
                if tcp.try_publish(&frame)? {
                    return Ok(());
                }
                Box::pin(tcp.publish(shared, &frame)).await
            }
            Link::Udp(udp) => {
                if let Some(e) = shared.closed_error() {
                    return Err(e);
                }
                if udp.try_publish(&frame)? {
                    return Ok(());
                }
                Box::pin(udp.publish(&frame)).await
            }
        }
    }

    /// Publishes with guaranteed delivery and waits for the broker's acknowledgement: when
    /// this returns `Ok`, the message is on disk at the broker and will reach every matching
    /// guaranteed subscription exactly once, in this publisher's order. A lost connection
    /// does not fail it: the publish is sent again after the reconnect, and the broker
    /// recognises a retry by its `(publisher, seq)`.
    pub async fn publish_guaranteed(
        &self,
        topic: &str,
        properties: &[Property],
        payload: Bytes,
    ) -> Result<Receipt, ClientError> {
        self.send_guaranteed(Message::new(topic, properties, payload, now_us())?).await?.await
    }

    /// Sends a guaranteed publish without waiting for its acknowledgement; the returned
    /// [`PendingAck`] resolves to it. Waits only while
    /// [`guaranteed_window`](crate::ClientBuilder::guaranteed_window) publishes are in flight,
    /// so a loop of `send_guaranteed` keeps that many in flight. Over UDP it fails with
    /// [`ClientError::Unsupported`]: a datagram transport cannot carry the window.
    pub async fn send_guaranteed(&self, message: Message) -> Result<PendingAck, ClientError> {
        let shared = self.shared();
        let Link::Tcp(tcp) = &shared.link else {
            return Err(ClientError::Unsupported { operation: "guaranteed publishing", transport: "UDP" });
        };
        let len = 1 + 8 + 8 + 2 + shared.config.pubend.len() + message.encoded_len();
        let max = shared.send_limit();
        if len > max {
            return Err(WireError::FrameTooLarge { len, max }.into());
        }
        match shared.window_slots.acquire().await {
            Ok(place) => place.forget(),
            Err(_) => return Err(shared.closed_error().unwrap_or(ClientError::Closed)),
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Err(e) = tcp.publish_guaranteed(shared, message, tx) {
            shared.window_slots.add_permits(1);
            return Err(e);
        }
        Ok(PendingAck { rx, client: self.handle.clone() })
    }

    /// Subscribes to every message whose topic matches `pattern`, best effort. Returns once
    /// the broker has the subscription active.
    pub async fn subscribe(&self, pattern: &str) -> Result<Subscription, ClientError> {
        self.subscribe_with(SubscribeOptions::new(pattern)).await
    }

    /// Subscribes with a selector or another delivery mode. A pattern or selector the
    /// broker rejects fails with [`ClientError::Refused`], carrying its reason code and text
    /// (over TCP the broker then closes the connection, and the client reconnects).
    ///
    /// A guaranteed subscription ([`DeliveryMode::Guaranteed`](crate::DeliveryMode), TCP only)
    /// returns once the broker confirmed it with SUBSCRIBED: from then on every matching
    /// guaranteed publish reaches it exactly once, per publisher in order, with its
    /// [`Delivery::position`]. What the application takes is acknowledged to the broker
    /// automatically each time the subscription's buffer runs dry.
    pub async fn subscribe_with(&self, options: SubscribeOptions) -> Result<Subscription, ClientError> {
        let shared = self.shared();
        if options.mode == tidings_wire::DeliveryMode::Guaranteed && matches!(shared.link, Link::Udp(_)) {
            return Err(ClientError::Unsupported { operation: "guaranteed subscriptions", transport: "UDP" });
        }
        let id = shared.next_sub_id();
        let frame = Subscribe {
            queue_key: options.queue_key.clone(),
            id,
            mode: options.mode,
            pattern: options.pattern.clone(),
            selector: options.selector.clone().filter(|s| !s.is_empty()),
            durable: options.durable.clone(),
            group: options.group.clone(),
        };
        let (subscription, route, confirmed) =
            Subscription::new(id, options, shared.config.subscription_capacity, self.handle.clone());
        let sent = match &shared.link {
            Link::Tcp(tcp) => tcp.subscribe(shared, frame, route).await,
            Link::Udp(udp) => udp.subscribe(shared, frame, route).await,
        };
        if let Err(error) = sent {
            if matches!(error, ClientError::Refused { .. }) {
                // This caller is told; a later flush must not report the refusal again.
                shared.take_unreported();
            }
            return Err(error);
        }
        if let Some(confirmed) = confirmed {
            // Accepted (the PONG came); in force once the broker's barrier returned.
            let limit = shared.config.request_timeout;
            match tokio::time::timeout(limit, confirmed).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(subscription.error().unwrap_or(ClientError::ConnectionLost)),
                Err(_) => return Err(ClientError::Timeout { operation: "waiting for SUBSCRIBED", after: limit }),
            }
        }
        Ok(subscription)
    }

    /// Round trip: PING until PONG. Over TCP the PING queues behind buffered publishes, so
    /// under load this includes their transfer (and, while disconnected, the wait for the
    /// reconnect); over UDP it counts from the first send, retries included.
    pub async fn ping(&self) -> Result<Duration, ClientError> {
        let start = Instant::now();
        self.handle.barrier().await?;
        Ok(start.elapsed())
    }

    /// Waits until everything sent so far has reached the broker and been handled (a PING
    /// barrier; over UDP, what of it arrived). Over TCP it fails with the connection's error
    /// if the connection drops before the PONG, since buffered frames were then lost; frames
    /// lost with an earlier connection are reported by [`events`](Self::events), not here.
    ///
    /// A refusal by the broker since the last `flush` (an ERROR for a publish: the broker
    /// closes the connection, and the client reconnects) fails this call with the refusal,
    /// even when the barrier itself passed on the next connection.
    pub async fn flush(&self) -> Result<(), ClientError> {
        let outcome = self.handle.barrier().await;
        let unreported = self.shared().take_unreported();
        match (outcome, unreported) {
            (_, Some(refusal)) => Err(refusal),
            (outcome, None) => outcome,
        }
    }

    /// Closes the client: waits until the broker has handled what was sent (a PING barrier,
    /// while connected), writes DISCONNECT, and ends every subscription stream. Both waits
    /// together are bounded by the request timeout; closing a closed client is fine.
    ///
    /// Why the barrier: a connection closed with deliveries still unread is reset, and a broker
    /// writing to it then may drop the session before reading the frames that came before the
    /// reset, such as a durable subscription's last acknowledgements, whose next client would
    /// receive those messages again.
    ///
    /// Fails with a refusal by the broker that no earlier call reported (see
    /// [`flush`](Self::flush)), after closing all the same.
    pub async fn close(&self) -> Result<(), ClientError> {
        let deadline = tokio::time::Instant::now() + self.shared().config.request_timeout;
        let mut refused = None;
        if matches!(self.shared().link, Link::Tcp(_)) && self.is_connected() {
            self.shared().stop_taking_deliveries();
            if let Ok(Err(error @ ClientError::Refused { .. })) = tokio::time::timeout_at(deadline, self.flush()).await
            {
                refused = Some(error);
            }
        }
        self.handle.begin_close();
        if tokio::time::timeout_at(deadline, self.shared().stopped()).await.is_err() {
            self.shared().finish(None);
        }
        match refused.or_else(|| self.shared().take_unreported()) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The broker's name from WELCOME.
    pub fn server_name(&self) -> Option<String> {
        self.shared().server_name()
    }

    /// The brokers the client tries when it (re)connects, in order: the addresses it was given,
    /// then those the broker told it of its cell (SERVERS), unless it ignores them. Shown so an
    /// operator can see where a client would fail over to.
    pub fn servers(&self) -> Vec<String> {
        self.shared().failover.entries()
    }

    /// Whether the client can send right now: over TCP, connected and past the handshake;
    /// over UDP, not closed.
    pub fn is_connected(&self) -> bool {
        match &self.shared().link {
            Link::Tcp(tcp) => tcp.is_up(),
            Link::Udp(_) => self.shared().closed_error().is_none(),
        }
    }

    /// The error operations fail with now that the client is closed; `None` while open.
    pub fn closed_error(&self) -> Option<ClientError> {
        self.shared().closed_error()
    }

    /// Guaranteed publishes sent and not yet answered by the broker.
    pub fn guaranteed_in_flight(&self) -> usize {
        self.shared().publishing.lock().len()
    }

    /// Live subscriptions.
    pub fn subscription_count(&self) -> usize {
        self.shared().registry.lock().len()
    }

    /// Connection events from now on (connected, disconnected, reconnecting, refused,
    /// closed).
    pub fn events(&self) -> broadcast::Receiver<ConnectionEvent> {
        self.shared().subscribe_events()
    }
}

/// The acknowledgement of one guaranteed publish, to come: a future of its [`Receipt`], or
/// of why the broker refused it ([`ClientError::Refused`]) or the client closed first.
/// Keeps the client open while held.
#[derive(Debug)]
pub struct PendingAck {
    rx: tokio::sync::oneshot::Receiver<Result<Receipt, ClientError>>,
    client: Arc<Handle>,
}

impl std::future::Future for PendingAck {
    type Output = Result<Receipt, ClientError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|outcome| {
            outcome.unwrap_or_else(|_| Err(self.client.shared.closed_error().unwrap_or(ClientError::Closed)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send>(_: &T) {}
    fn is_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        is_send_sync::<Client>();
        is_send_sync::<Subscription>();
    }

    /// Never called: type-checks that every operation's future can be spawned.
    #[allow(dead_code)]
    fn futures_are_send(client: &Client, subscription: Subscription) {
        is_send(&client.publish("a", "b"));
        is_send(&client.publish_guaranteed("a", &[], Bytes::new()));
        is_send(&client.publish_message(Message::new("a", &[], Bytes::new(), 0).unwrap()));
        is_send(&client.subscribe("a"));
        is_send(&client.ping());
        is_send(&client.flush());
        is_send(&client.close());
        is_send(&subscription.unsubscribe());
    }
}
