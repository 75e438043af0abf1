//! Request/reply over publish/subscribe: one inbox subscription per client
//! (`_INBOX.<random>.>`), each request a unique reply subject under it, answers matched back
//! to their caller by that subject's last level.
//!
//! The reader resolves answers itself ([`Requests::answer`]), before the subscription
//! machinery: the inbox has no consumer task and no [`crate::Subscription`] (which would keep
//! the client open forever), only its registry entry, which is what re-subscribes it after a
//! reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tidings_wire::{Deliver, Message, Property, SubId, REPLY_TO};
use tokio::sync::oneshot;

use crate::client::Client;
use crate::delivery::Delivery;
use crate::error::ClientError;
use crate::now_us;

/// Where the answer to one request goes.
type Answer = oneshot::Sender<Result<Delivery, ClientError>>;

/// A client's requests in flight and the inbox their answers come to.
#[derive(Debug)]
pub(crate) struct Requests {
    /// `_INBOX.<random>.`: every reply subject of this client starts with it.
    prefix: String,
    /// The inbox subscription's id once it is set up; 0 (no id is) until then.
    inbox: AtomicU32,
    /// Held while the inbox is being set up, so concurrent first requests make one.
    setup: tokio::sync::Mutex<()>,
    next: AtomicU64,
    pending: Mutex<HashMap<u64, (String, Answer)>>,
}

impl Default for Requests {
    fn default() -> Requests {
        Requests {
            prefix: format!("_INBOX.{:016x}.", rand::random::<u64>()),
            inbox: AtomicU32::new(0),
            setup: tokio::sync::Mutex::new(()),
            next: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
        }
    }
}

impl Requests {
    /// Whether `id` is the inbox subscription.
    pub(crate) fn is_inbox(&self, id: SubId) -> bool {
        id.0 != 0 && self.inbox.load(Ordering::Relaxed) == id.0
    }

    /// The token of one of this client's reply subjects.
    fn token(&self, reply_to: &str) -> Option<u64> {
        reply_to.strip_prefix(self.prefix.as_str())?.parse().ok()
    }

    /// A delivery to the inbox: the answer to the request whose reply subject it was published
    /// on. An answer nobody waits for (late, after its timeout; a second responder's) is dropped.
    pub(crate) fn answer(&self, deliver: Deliver, read_us: u64) {
        let Some(token) = self.token(deliver.message.topic()) else { return };
        if let Some((_, answer)) = self.pending.lock().remove(&token) {
            let _ = answer.send(Ok(Delivery::new(deliver.id, deliver.missed, deliver.message, read_us)));
        }
    }

    /// NO_RESPONDERS for one of this client's reply subjects: its request fails at once.
    pub(crate) fn no_responders(&self, reply_to: &str) {
        let Some(token) = self.token(reply_to) else { return };
        if let Some((subject, answer)) = self.pending.lock().remove(&token) {
            let _ = answer.send(Err(ClientError::NoResponders { subject }));
        }
    }

    /// The client closed: every request waiting fails with `error`.
    pub(crate) fn fail_all(&self, error: &ClientError) {
        for (_, (_, answer)) in self.pending.lock().drain() {
            let _ = answer.send(Err(error.clone()));
        }
    }
}

impl Client {
    /// Sends a request on `subject` and waits up to `timeout` for the first answer. Fails at
    /// once with [`ClientError::NoResponders`] when nothing in the broker's network subscribes
    /// to `subject`, and with [`ClientError::Timeout`] when no answer came in time. Many
    /// requests may be in flight from one client; their answers share one inbox subscription,
    /// set up by the first request.
    pub async fn request(
        &self,
        subject: &str,
        payload: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<Delivery, ClientError> {
        self.request_with(subject, &[], payload.into(), timeout).await
    }

    /// [`request`](Self::request) with properties.
    pub async fn request_with(
        &self,
        subject: &str,
        properties: &[Property],
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Delivery, ClientError> {
        self.ensure_inbox().await?;
        let requests = &self.shared().requests;
        let token = requests.next.fetch_add(1, Ordering::Relaxed);
        let reply_to = format!("{}{token}", requests.prefix);
        let mut props = properties.to_vec();
        props.push(Property::new(REPLY_TO, reply_to));
        let message = Message::new(subject, &props, payload, now_us())?;
        let (tx, rx) = oneshot::channel();
        requests.pending.lock().insert(token, (subject.to_string(), tx));
        let answer = match self.publish_message(message).await {
            Err(e) => Err(e),
            Ok(()) => match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err(self.closed_error().unwrap_or(ClientError::Closed)),
                Err(_) => Err(ClientError::Timeout { operation: "waiting for a reply", after: timeout }),
            },
        };
        if answer.is_err() {
            requests.pending.lock().remove(&token);
        }
        answer
    }

    /// Answers `request` (a delivery that carries a reply subject) with `payload`; fails with
    /// [`ClientError::Protocol`] for a delivery that is not a request.
    pub async fn reply(&self, request: &Delivery, payload: impl Into<Bytes>) -> Result<(), ClientError> {
        let Some(reply_to) = request.reply_to() else {
            return Err(ClientError::Protocol { detail: format!("the message on {} is not a request", request.topic) });
        };
        self.publish(reply_to, payload).await
    }

    /// This client's reply subjects' prefix (`_INBOX.<random>.`).
    pub fn inbox_prefix(&self) -> &str {
        &self.shared().requests.prefix
    }

    /// Subscribes the inbox, once.
    async fn ensure_inbox(&self) -> Result<(), ClientError> {
        let requests = &self.shared().requests;
        if requests.inbox.load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let _setup = requests.setup.lock().await;
        if requests.inbox.load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let subscription = self.subscribe(&format!("{}>", requests.prefix)).await?;
        requests.inbox.store(subscription.detach().0, Ordering::Release);
        Ok(())
    }
}
