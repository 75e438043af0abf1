//! Subscriptions: what to ask for, and the stream of deliveries that answers.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures::Stream;
use tidings_wire::{DeliveryMode, SubId};
use tokio::sync::mpsc;

use crate::client::Handle;
use crate::delivery::Delivery;
use crate::error::ClientError;

/// What to subscribe to.
///
/// ```
/// use tidings_client::{DeliveryMode, SubscribeOptions};
///
/// let options = SubscribeOptions::new("trades.>").selector("sym = 'IBM' AND price > 100");
/// assert_eq!(options.mode, DeliveryMode::BestEffort);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// Topic pattern: `*` matches one level, `>` every remaining level.
    pub pattern: String,
    /// Selector over message properties; `None` takes every message of the pattern.
    pub selector: Option<String>,
    /// Best effort (the default) or guaranteed.
    pub mode: DeliveryMode,
}

impl SubscribeOptions {
    /// Every message whose topic matches `pattern`, best effort.
    pub fn new(pattern: impl Into<String>) -> SubscribeOptions {
        SubscribeOptions { pattern: pattern.into(), selector: None, mode: DeliveryMode::BestEffort }
    }

    /// Only messages whose properties make `selector` true.
    pub fn selector(mut self, selector: impl Into<String>) -> SubscribeOptions {
        self.selector = Some(selector.into());
        self
    }

    /// The delivery mode.
    pub fn mode(mut self, mode: DeliveryMode) -> SubscribeOptions {
        self.mode = mode;
        self
    }
}

/// An active subscription: a [`Stream`] of [`Delivery`] values.
///
/// The stream ends when the client is closed ([`Client::close`](crate::Client::close), or
/// every `Client` and `Subscription` dropped — a subscription keeps its client alive), when a
/// TCP client gives up reconnecting, or when the broker refused this subscription after a
/// reconnect. Deliveries already buffered are still yielded first. After the end,
/// [`error`](Self::error) says why: `None` for an orderly close.
///
/// Dropping a subscription unsubscribes it without waiting; [`unsubscribe`](Self::unsubscribe)
/// waits for the broker to confirm.
///
/// ```no_run
/// use futures::StreamExt;
/// # async fn demo(client: tidings_client::Client) -> Result<(), tidings_client::ClientError> {
/// let mut sub = client.subscribe("plant.>").await?;
/// while let Some(delivery) = sub.next().await {
///     if delivery.missed > 0 {
///         eprintln!("the broker dropped {} messages for us", delivery.missed);
///     }
/// }
/// if let Some(why) = sub.error() {
///     eprintln!("subscription ended: {why}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Subscription {
    id: SubId,
    options: SubscribeOptions,
    rx: mpsc::Receiver<Delivery>,
    end: Arc<OnceLock<ClientError>>,
    /// `None` once unsubscribed, so that drop does not unsubscribe twice.
    client: Option<Arc<Handle>>,
    missed: u64,
}

impl Subscription {
    pub(crate) fn new(
        id: SubId,
        options: SubscribeOptions,
        rx: mpsc::Receiver<Delivery>,
        end: Arc<OnceLock<ClientError>>,
        client: Arc<Handle>,
    ) -> Subscription {
        Subscription { id, options, rx, end, client: Some(client), missed: 0 }
    }

    /// The id the client chose; deliveries carry it as [`Delivery::subscription`].
    pub fn id(&self) -> SubId {
        self.id
    }

    /// The pattern, selector and mode subscribed with.
    pub fn options(&self) -> &SubscribeOptions {
        &self.options
    }

    /// The next delivery; `None` once the stream has ended.
    pub async fn recv(&mut self) -> Option<Delivery> {
        let delivery = self.rx.recv().await;
        self.count(delivery)
    }

    /// A delivery if one is buffered, without waiting.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        let delivery = self.rx.try_recv().ok();
        self.count(delivery)
    }

    /// Total of [`Delivery::missed`] over the deliveries yielded so far: messages the broker
    /// dropped for this subscription.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Why the stream ended, when it ended for a reason other than an orderly close: the
    /// broker's refusal, or the error that made a TCP client give up.
    pub fn error(&self) -> Option<ClientError> {
        self.end.get().cloned()
    }

    /// Ends the subscription and waits until the broker has handled the UNSUBSCRIBE (over
    /// TCP, a connection that is down has forgotten it already: that counts as done).
    pub async fn unsubscribe(mut self) -> Result<(), ClientError> {
        match self.client.take() {
            Some(client) => client.unsubscribe(self.id).await,
            None => Ok(()),
        }
    }

    fn count(&mut self, delivery: Option<Delivery>) -> Option<Delivery> {
        if let Some(d) = &delivery {
            self.missed += u64::from(d.missed);
        }
        delivery
    }
}

impl Stream for Subscription {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let this = self.get_mut();
        this.rx.poll_recv(cx).map(|delivery| this.count(delivery))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            client.forget(self.id);
        }
    }
}
