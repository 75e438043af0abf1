//! Subscriptions: what to ask for, and the stream of deliveries that answers.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use std::collections::BTreeMap;

use futures::Stream;
use tidings_wire::{DeliveryAck, DeliveryMode, Frame, PubendId, SubId, Tick};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::checkpoint::Checkpoint;
use crate::client::Handle;
use crate::delivery::{Delivery, Event, GapNotice, Position};
use crate::error::ClientError;
use crate::shared::{Batch, GuaranteedRoute, Route};

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
    /// A durable subscription's name (see [`durable`](Self::durable)).
    pub durable: Option<String>,
    /// Who acknowledges what a guaranteed subscription delivered.
    pub acks: Acks,
    /// What the application already holds (see [`resume_from`](Self::resume_from)).
    pub resume: Option<Checkpoint>,
    /// The queue group this subscription joins (see [`queue`](Self::queue)).
    pub group: Option<String>,
    /// With `group`: the property that keeps messages on one member (see
    /// [`queue_key`](Self::queue_key)).
    pub queue_key: Option<String>,
}

/// How a guaranteed subscription's deliveries are acknowledged to the broker. A durable
/// subscription resumes after the last acknowledged message, so this is where "processed"
/// is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// Each delivery counts as acknowledged once the application has taken it from the
    /// subscription (sent once per batch).
    #[default]
    Automatic,
    /// Only what the application passes to [`Subscription::ack`] is acknowledged: a message
    /// taken but not acknowledged comes again after a reconnect or a restart.
    Explicit,
}

impl SubscribeOptions {
    /// Every message whose topic matches `pattern`, best effort.
    pub fn new(pattern: impl Into<String>) -> SubscribeOptions {
        SubscribeOptions {
            pattern: pattern.into(),
            selector: None,
            mode: DeliveryMode::BestEffort,
            durable: None,
            acks: Acks::Automatic,
            resume: None,
            group: None,
            queue_key: None,
        }
    }

    /// Join the queue group `group`: each matching message goes to one member of the group,
    /// network-wide (members at the publisher's broker first), instead of to every member: a
    /// pool of workers sharing a topic. A member that is behind is skipped, not waited for.
    /// A name with a wildcard, a space, or over 64 bytes is refused.
    pub fn queue(mut self, group: impl Into<String>) -> SubscribeOptions {
        self.group = Some(group.into());
        self
    }

    /// With [`queue`](Self::queue): messages with the same value of the property `key` go to
    /// the same member at a broker while that member lives and keeps up (rendezvous hashing: a
    /// member leaving moves only its own values; one behind is skipped for the value's next
    /// member, not waited for). The group's members at one broker share one key; a member with
    /// another is refused (`invalid_queue_group`; `durable_mismatch` for a guaranteed group).
    pub fn queue_key(mut self, key: impl Into<String>) -> SubscribeOptions {
        self.queue_key = Some(key.into());
        self
    }

    /// A durable subscription named `name` (guaranteed): the broker keeps it while no client
    /// holds it, its messages are kept for it, and a client subscribing again with the same
    /// name (and the same pattern and selector) receives everything after the last message it
    /// acknowledged, exactly once, in order. Only one client may hold a name at a time;
    /// [`Subscription::unsubscribe`] deletes it, dropping the subscription only leaves it.
    pub fn durable(mut self, name: impl Into<String>) -> SubscribeOptions {
        self.mode = DeliveryMode::Guaranteed;
        self.durable = Some(name.into());
        self
    }

    /// Resume from the application's own `checkpoint` (kept with its output, from
    /// [`Subscription::checkpoint`]; [`Checkpoint::new`] the first time): deliveries it already
    /// holds, or that this subscription already yielded, are acknowledged to the broker and not
    /// handed over again (counted in [`Subscription::skipped`]). The broker's record of a
    /// durable subscription trails what it delivered; this is how an application that keeps
    /// its own position gets everything after it exactly once. Without it, such deliveries are
    /// handed over flagged [`Delivery::redelivered`](crate::Delivery::redelivered).
    pub fn resume_from(mut self, checkpoint: Checkpoint) -> SubscribeOptions {
        self.resume = Some(checkpoint);
        self
    }

    /// Acknowledge only what [`Subscription::ack`] is given.
    pub fn explicit_acks(mut self) -> SubscribeOptions {
        self.acks = Acks::Explicit;
        self
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
/// All subscriptions of a client share its connection: one that is not read for long enough
/// to fill its buffer ([`subscription_capacity`](crate::ClientBuilder::subscription_capacity))
/// holds back the others, and the PONGs that `subscribe`, `ping` and `flush` wait for. Give
/// consumers of very different speeds their own clients.
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
    rx: mpsc::UnboundedReceiver<Batch>,
    /// Given back to the reader as batches are taken out; see [`Route`](crate::shared::Route).
    credit: Arc<Semaphore>,
    /// The batch being yielded.
    current: std::vec::IntoIter<Event>,
    end: Arc<OnceLock<ClientError>>,
    /// `None` once unsubscribed, so that drop does not unsubscribe twice.
    client: Option<Arc<Handle>>,
    missed: u64,
    /// Gap notices passed over by [`recv`](Self::recv) and the stream, kept for
    /// [`gaps`](Self::gaps).
    gaps: Vec<GapNotice>,
    /// Per pubend, the last tick yielded and not yet acknowledged to the broker.
    unacked: BTreeMap<PubendId, Tick>,
    /// A guaranteed queue group member's acknowledgements, one per message: the broker takes
    /// a member's DELIVERY_ACK as naming one tick it finished, not a prefix (its ticks are
    /// whichever the group leased it, a redelivery below the others).
    unacked_each: Vec<(PubendId, Tick)>,
    /// Per pubend, the last tick (or gap end) yielded, with the resume checkpoint under it.
    checkpoint: Checkpoint,
    /// Deliveries not handed over because the checkpoint held them.
    skipped: u64,
    /// Deliveries handed over flagged [`Delivery::redelivered`].
    redelivered: u64,
}

impl Subscription {
    /// A subscription, the route the reader feeds it through and, for a guaranteed one, the
    /// receiver of its first SUBSCRIBED.
    pub(crate) fn new(
        id: SubId,
        options: SubscribeOptions,
        capacity: usize,
        client: Arc<Handle>,
    ) -> (Subscription, Route, Option<oneshot::Receiver<()>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(capacity.min(Semaphore::MAX_PERMITS)));
        let end = Arc::new(OnceLock::new());
        let (guaranteed, confirmed) = match options.mode {
            DeliveryMode::Guaranteed => {
                let (confirm, confirmed) = oneshot::channel();
                let (durable, member) = (options.durable.is_some(), options.group.is_some());
                (
                    Some(GuaranteedRoute { confirm: Some(confirm), durable, member, ..GuaranteedRoute::default() }),
                    Some(confirmed),
                )
            }
            DeliveryMode::BestEffort => (None, None),
        };
        let route = Route { tx, credit: credit.clone(), end: end.clone(), guaranteed };
        let checkpoint = options.resume.clone().unwrap_or_default();
        let subscription = Subscription {
            id,
            options,
            rx,
            credit,
            current: Vec::new().into_iter(),
            end,
            client: Some(client),
            missed: 0,
            gaps: Vec::new(),
            unacked: BTreeMap::new(),
            unacked_each: Vec::new(),
            checkpoint,
            skipped: 0,
            redelivered: 0,
        };
        (subscription, route, confirmed)
    }

    /// Keeps the subscription registered (re-subscribed after reconnects) without this handle:
    /// for the request inbox, whose deliveries the reader hands to their requests directly.
    /// Nothing reaches this handle's stream any more.
    pub(crate) fn detach(mut self) -> SubId {
        self.client = None;
        self.id
    }

    /// The id the client chose; deliveries carry it as [`Delivery::subscription`].
    pub fn id(&self) -> SubId {
        self.id
    }

    /// The pattern, selector and mode subscribed with.
    pub fn options(&self) -> &SubscribeOptions {
        &self.options
    }

    /// The next delivery; `None` once the stream has ended. A gap notice met on the way is
    /// kept for [`gaps`](Self::gaps); use [`next_event`](Self::next_event) to get gaps in
    /// stream order.
    pub async fn recv(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next message or gap notice, in stream order; `None` once the stream has ended.
    /// Only guaranteed subscriptions have gaps.
    pub async fn next_event(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// A delivery if one is buffered, without waiting.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        loop {
            if let Some(event) = self.current.next() {
                match self.note(event) {
                    Some(Event::Message(delivery)) => return Some(delivery),
                    Some(Event::Gap(gap)) => self.gaps.push(gap),
                    None => {}
                }
                continue;
            }
            let batch = self.rx.try_recv().ok()?;
            self.start(batch);
        }
    }

    /// The next message or gap notice if one is buffered, without waiting.
    pub fn try_next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.current.next() {
                match self.note(event) {
                    Some(event) => return Some(event),
                    None => continue,
                }
            }
            let batch = self.rx.try_recv().ok()?;
            self.start(batch);
        }
    }

    /// Gap notices that [`recv`](Self::recv), [`try_recv`](Self::try_recv) or the stream
    /// passed over: ticks this guaranteed subscription possibly missed.
    pub fn gaps(&self) -> &[GapNotice] {
        &self.gaps
    }

    /// Total of [`Delivery::missed`] over the deliveries yielded so far: messages the broker
    /// dropped for this subscription.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Where the application stands: per pubend, the last tick yielded (or the end of a gap
    /// notice yielded), on top of the checkpoint resumed from. Store it with the output it
    /// covers and resume from it with [`SubscribeOptions::resume_from`].
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Deliveries not handed over because the checkpoint resumed from held them.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Deliveries handed over flagged [`Delivery::redelivered`].
    pub fn redelivered(&self) -> u64 {
        self.redelivered
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

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        loop {
            match ready!(self.poll_event(cx)) {
                Some(Event::Message(delivery)) => return Poll::Ready(Some(delivery)),
                Some(Event::Gap(gap)) => self.gaps.push(gap),
                None => return Poll::Ready(None),
            }
        }
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(event) = self.current.next() {
                match self.note(event) {
                    Some(event) => return Poll::Ready(Some(event)),
                    None => continue,
                }
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(batch) => self.start(batch),
                None => return Poll::Ready(None),
            }
        }
    }

    /// Acknowledges `position` and everything before it in its pubend's stream (with
    /// [`Acks::Explicit`]; automatic acks do this by themselves). Acknowledgements are
    /// cumulative and go out with [`flush_acks`](Self::flush_acks). For a guaranteed queue
    /// group member ([`SubscribeOptions::queue`]) it acknowledges that one message only: what
    /// it was not given an ack for goes to another member if this one leaves.
    pub fn ack(&mut self, position: Position) {
        self.acknowledge(position.pubend, position.tick);
    }

    /// Sends the acknowledgements not yet sent (one DELIVERY_ACK per pubend). Call it when the
    /// application has caught up, before it closes or waits.
    pub fn flush_acks(&mut self) {
        self.send_acks();
    }

    /// Sends one cumulative DELIVERY_ACK per pubend for what the application has taken.
    fn send_acks(&mut self) {
        let Some(client) = &self.client else { return };
        let each = std::mem::take(&mut self.unacked_each);
        for (pubend, tick) in std::mem::take(&mut self.unacked).into_iter().chain(each) {
            client.send_control(&Frame::DeliveryAck(DeliveryAck { id: self.id, pubend, tick }));
        }
    }

    /// Counts what the broker dropped, stamps the moment the application receives a delivery
    /// ([`Delivery::received_us`]), and remembers its place for the checkpoint and for the next
    /// acknowledgement, which goes out as the last event of a batch is handed over: one ack per
    /// pubend per batch. A delivery the resume checkpoint holds is acknowledged and not handed
    /// over (`None`).
    fn note(&mut self, mut event: Event) -> Option<Event> {
        let held = match &event {
            Event::Message(d) => d.position.filter(|&p| self.options.resume.is_some() && self.checkpoint.holds(p)),
            Event::Gap(_) => None,
        };
        let handed = match (&mut event, held) {
            (_, Some(p)) => {
                self.skipped += 1;
                self.acknowledge(p.pubend, p.tick);
                false
            }
            (Event::Message(delivery), None) => {
                delivery.received_us = crate::now_us();
                self.missed += u64::from(delivery.missed);
                self.redelivered += u64::from(delivery.redelivered);
                if let Some(p) = delivery.position {
                    self.checkpoint.advance(p.pubend, p.tick);
                    if self.options.acks == Acks::Automatic {
                        self.acknowledge(p.pubend, p.tick);
                    }
                }
                true
            }
            (Event::Gap(gap), None) => {
                self.checkpoint.advance(gap.pubend, gap.to);
                if self.options.acks == Acks::Automatic {
                    self.acknowledge(gap.pubend, gap.to);
                }
                true
            }
        };
        if self.current.as_slice().is_empty() && (self.options.acks == Acks::Automatic || held.is_some()) {
            self.send_acks();
        }
        handed.then_some(event)
    }

    /// Marks `pubend` acknowledged through `tick` for the next DELIVERY_ACK (never lower); a
    /// queue group member's `tick` alone.
    fn acknowledge(&mut self, pubend: PubendId, tick: Tick) {
        if self.options.group.is_some() && self.options.mode == DeliveryMode::Guaranteed {
            self.unacked_each.push((pubend, tick));
            return;
        }
        let last = self.unacked.entry(pubend).or_insert(tick);
        *last = (*last).max(tick);
    }

    /// Takes a batch out of the channel and gives its credit back to the reader.
    fn start(&mut self, (batch, permits): Batch) {
        self.credit.add_permits(permits as usize);
        self.current = batch.into_iter();
    }
}

impl Stream for Subscription {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.credit.close();
        if let Some(client) = self.client.take() {
            if self.options.durable.is_some() {
                // A durable subscription is left, not deleted: it is not set up again after a
                // reconnect, and the broker keeps the name (held by this connection until it
                // closes; `unsubscribe` deletes it).
                client.leave(self.id);
            } else {
                client.forget(self.id);
            }
        }
    }
}
