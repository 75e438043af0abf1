//! Each subscriber connection's bounded outbound queue, and the writers that drain it.
//!
//! A publisher's session pushes deliveries here and never waits on a socket: the queue is
//! bounded in messages and bytes, and what does not fit is handled by the configured policy
//! (drop and count, or disconnect). Past half full the push reports congestion, and the
//! publisher's session may hold back for a bounded time (see `SlowConsumer::max_stall`), which
//! absorbs bursts without loss yet never lets one stuck subscriber stall a publisher for long.
//!
//! The parts: [`queue`] is the queue itself and its rules (no lock, no runtime); [`encode`]
//! turns a taken batch into frames; [`stream`] writes them to a TCP connection and [`datagram`]
//! packs them into UDP datagrams; [`backpressure`] is how publishers and readers wait for a
//! queue; [`catch_up`] queues a durable catch-up's chunk at once. The [`Outbox`] here is the glue: the lock around the queue,
//! the broker's budget, the metrics, and the wake-ups between publishers and the writer.

mod backpressure;
mod catch_up;
mod datagram;
mod encode;
pub mod queue;
mod stream;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tidings_wire::{Frame, Message, PubendId, SubId, Tick};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::budget::{Cuttable, QueueBudget};
use crate::config::SlowConsumer;
use crate::metrics::Metrics;
use prometheus_client::metrics::counter::Counter;

pub use backpressure::NO_PROGRESS;
pub use catch_up::CatchUpItem;
pub use datagram::write_datagrams;
pub(crate) use queue::MAX_BATCH;
use queue::{Item, Queue};
pub use queue::{RoomCallback, Subscription};
pub(crate) use stream::write_chunks;
pub use stream::write_stream;

/// One subscription as the dispatcher sees it: where its deliveries go and how many it missed.
pub struct Target {
    /// The client's id for the subscription.
    pub id: SubId,
    /// The queue group the subscription is a member of: a message goes to one member of it.
    pub group: Option<Arc<crate::membership::QueueGroup>>,
    /// Deliveries dropped since the last one queued: the next one queued carries the count, so
    /// `missed` arrives on the first delivery after the gap, not on an older one still queued.
    missed: AtomicU32,
    /// The connection's queue.
    pub outbox: Arc<Outbox>,
}

impl Target {
    /// A subscription feeding `outbox`.
    pub fn new(id: SubId, outbox: Arc<Outbox>) -> Target {
        Target { id, group: None, missed: AtomicU32::new(0), outbox }
    }

    /// A queue group member's subscription feeding `outbox`.
    pub fn member(id: SubId, outbox: Arc<Outbox>, group: Arc<crate::membership::QueueGroup>) -> Target {
        Target { id, group: Some(group), missed: AtomicU32::new(0), outbox }
    }
}

impl Subscription for Target {
    fn missed(&self) -> &AtomicU32 {
        &self.missed
    }
}

/// What happened to a pushed guaranteed delivery. It is never dropped: the queue takes it even
/// past its limits, and says so, so that the delivery core stops sending to this subscriber
/// until [`Outbox::when_room`] fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuaranteedPush {
    /// Queued; there is room for more.
    Queued,
    /// Queued, and the queue is now at its limits: send no more until there is room.
    QueuedFull,
    /// The connection is closing; nothing was queued.
    Closed,
}

/// What happened to a pushed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Queued.
    Queued,
    /// Queued, and the queue is past half full: the publisher should hold back a little.
    Congested,
    /// Dropped under the drop policy (counted, and reported to the subscriber).
    Dropped,
    /// The queue overflowed under the disconnect policy; the connection is closing.
    Disconnected,
    /// The connection is already closing.
    Closed,
    /// Not queued: the subscriber's user may not receive the message's topic.
    Withheld,
}

/// Control replies a connection may have queued before its reader pauses: a client that sends
/// PINGs without reading the PONGs stalls itself, not the broker's memory.
pub const CONTROL_BACKLOG: usize = 64 * 1024;

/// A bounded queue of frames for one connection (TCP) or one UDP client.
pub struct Outbox {
    /// Who the queue belongs to (address, and the client's name once it said HELLO), for the log.
    pub client: Mutex<String>,
    state: Mutex<Queue<Target>>,
    wake_writer: Notify,
    drained: Notify,
    limits: SlowConsumer,
    metrics: OutboxMetrics,
    /// Cancelled when the connection is finished, from either side ([`Outbox::finish`]).
    pub done: CancellationToken,
    /// Set with `done`, and read instead of it on the delivery path: the token's own check
    /// takes a lock, and at 10,000 subscribers it was a tenth of the broker's time.
    finished: AtomicBool,
    /// This connection's own counts, for `/connz`.
    pub counts: OutboxCounts,
    budget: Arc<QueueBudget>,
    /// The permissions of the session's user once it holds a subscription whose wildcard
    /// overlaps a denied topic (`SubscribeDecision::Filtered`): a delivery on a denied topic is
    /// then withheld. Unset, nothing is checked per delivery.
    pub gate: std::sync::OnceLock<Arc<tidings_auth::Permissions>>,
}

/// The broker's counters an outbox counts into: its own handles on them, not a clone of every
/// metric the broker has (that clone was over half of an outbox, held by every connection).
struct OutboxMetrics {
    messages_out: Counter,
    bytes_out: Counter,
    slow_consumer_drops: Counter,
    slow_consumer_disconnects: Counter,
    udp_deliveries_too_large: Counter,
    udp_datagrams_sent: Counter,
    udp_send_errors: Counter,
}

impl OutboxMetrics {
    fn of(metrics: &Metrics) -> OutboxMetrics {
        OutboxMetrics {
            messages_out: metrics.messages_out.clone(),
            bytes_out: metrics.bytes_out.clone(),
            slow_consumer_drops: metrics.slow_consumer_drops.clone(),
            slow_consumer_disconnects: metrics.slow_consumer_disconnects.clone(),
            udp_deliveries_too_large: metrics.udp_deliveries_too_large.clone(),
            udp_datagrams_sent: metrics.udp_datagrams_sent.clone(),
            udp_send_errors: metrics.udp_send_errors.clone(),
        }
    }
}

/// What one outbox delivered and dropped (the broker-wide totals are in the metrics).
#[derive(Debug, Default)]
pub struct OutboxCounts {
    /// Messages written to the client.
    pub messages_out: AtomicU64,
    /// Bytes written to the client.
    pub bytes_out: AtomicU64,
    /// Deliveries dropped because the queue was full.
    pub dropped: AtomicU64,
    /// UDP: deliveries in datagrams the socket would not send (lost; the broker's own part of
    /// a UDP client's losses, beside `dropped`).
    pub send_failed: AtomicU64,
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // Whatever was never written goes back to the budget with the connection.
        let held = self.state.get_mut().take_charged();
        self.budget.refund(held);
    }
}

impl Outbox {
    /// An empty queue with the broker's limits, charging what it queues to `budget`.
    pub fn new(limits: SlowConsumer, metrics: Metrics, budget: &Arc<QueueBudget>) -> Arc<Outbox> {
        let outbox = Arc::new(Outbox {
            client: Mutex::new(String::new()),
            state: Mutex::new(Queue::default()),
            wake_writer: Notify::new(),
            drained: Notify::new(),
            limits,
            metrics: OutboxMetrics::of(&metrics),
            done: CancellationToken::new(),
            finished: AtomicBool::new(false),
            counts: OutboxCounts::default(),
            budget: Arc::clone(budget),
            gate: std::sync::OnceLock::new(),
        });
        let weak: std::sync::Weak<dyn Cuttable> = Arc::downgrade(&outbox) as _;
        budget.register(weak);
        outbox
    }

    /// Bytes this connection holds against the budget.
    pub fn held(&self) -> usize {
        self.state.lock().charged_total()
    }

    /// Cut by the budget: what is queued goes (and is refunded) and the connection ends at once,
    /// even a write in progress to a client that does not read.
    pub(crate) fn cut(&self) {
        let queued = self.state.lock().cut();
        self.budget.refund(queued);
        self.metrics.slow_consumer_disconnects.inc();
        self.abort();
    }

    /// The writer is gone: what is still queued will never be written. Queued deliveries
    /// hold their subscription's target, which holds this outbox, so left in place they would
    /// keep the outbox (and every byte queued in it, and its share of the broker's queue budget)
    /// alive forever after the connection ended: 400 MB stayed with a killed stalled
    /// subscriber before this.
    fn discard(&self) {
        let (items, room, held) = self.state.lock().discard();
        self.budget.refund(held);
        drop(items);
        drop(room);
    }

    /// A batch of `bytes` was written.
    fn written(&self, bytes: usize) {
        let refund = self.state.lock().written(bytes);
        self.budget.refund(refund);
    }

    /// A writer is done with a taken batch that was charged `charged` bytes: they go back to
    /// the budget, and when it was written (`written`: deliveries and bytes), it is counted and
    /// whoever waits for the queue to drain is told. Every writer ends each batch here, whether
    /// it writes native frames ([`write_stream`]) or translates the items (the MQTT front door).
    pub(crate) fn batch_done(&self, charged: usize, written: Option<(u64, u64)>) {
        self.written(charged);
        let Some((delivered, bytes)) = written else { return };
        self.metrics.messages_out.inc_by(delivered);
        self.metrics.bytes_out.inc_by(bytes);
        self.counts.messages_out.fetch_add(delivered, Ordering::Relaxed);
        self.counts.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        self.drained.notify_waiters();
    }

    /// The writer stopped: the connection is finished, and what is still queued goes (see
    /// [`Outbox::discard`]).
    pub(crate) fn writer_gone(&self) {
        self.finish();
        self.discard();
        self.drained.notify_waiters();
    }

    /// Whether a queue group may choose this connection for its next message: not closing, not
    /// a slow consumer, under half full. A member that is behind is skipped, not waited for.
    pub fn has_room_for_group(&self) -> bool {
        let s = self.state.lock();
        s.closing.is_none() && !s.slow && !s.is_congested(&self.limits) && !self.is_finished()
    }

    /// Frames and bytes queued now.
    pub fn depth(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.items.len(), s.bytes)
    }

    /// Whether the session's user may receive a message on `topic` (always, without a gate;
    /// with one, unless a deny rule matches: see `Permissions::withholds`).
    pub fn admits(&self, topic: &str) -> bool {
        self.gate.get().is_none_or(|permissions| !permissions.withholds(topic))
    }

    /// Queues one delivery for `target` (whose outbox is `self`). The writer is not woken
    /// here: when the queue was empty, the outbox is added to `wake`, and the caller wakes
    /// every writer once it has dispatched its whole batch of frames. One wake and one write
    /// per subscriber per batch, instead of per message, is what makes fan-out cheap.
    pub fn push(&self, target: &Arc<Target>, message: &Message, wake: &mut Vec<Arc<Outbox>>) -> Push {
        if !self.admits(message.topic()) {
            return Push::Withheld;
        }
        let mut s = self.state.lock();
        if s.closing.is_some() || self.is_finished() {
            return Push::Closed;
        }
        let pushed = s.push(target, message, &self.limits);
        // Refunds before the charge (both atomics, under the lock), so room made by dropping
        // the oldest is not taken for an overrun of the broker's budget.
        self.budget.refund(pushed.refund);
        let over = pushed.charge > 0 && self.budget.charge(pushed.charge);
        drop(s);
        if pushed.dropped > 0 {
            self.metrics.slow_consumer_drops.inc_by(pushed.dropped);
            self.counts.dropped.fetch_add(pushed.dropped, Ordering::Relaxed);
        }
        if let Some(dropped) = pushed.warn_dropped {
            let client = self.client.lock().clone();
            tracing::warn!(%client, dropped, "slow consumer: its queue is full, deliveries dropped");
        }
        if pushed.overflowed {
            self.metrics.slow_consumer_disconnects.inc();
            let client = self.client.lock().clone();
            tracing::warn!(%client, "slow consumer disconnected: its queue overflowed");
            self.wake_writer.notify_one();
            return Push::Disconnected;
        }
        if !pushed.queued {
            return Push::Dropped;
        }
        if over {
            self.budget.shed();
        }
        if pushed.was_empty {
            wake.push(Arc::clone(&target.outbox));
        }
        if pushed.congested {
            Push::Congested
        } else {
            Push::Queued
        }
    }

    /// Queues one guaranteed delivery. Unlike [`Outbox::push`] it never drops: the delivery
    /// core hands over a message only once, so the queue takes it even when full, and
    /// [`GuaranteedPush::QueuedFull`] tells the caller to stop until [`Outbox::when_room`].
    /// The overshoot is bounded by what the core delivers in one step.
    pub fn push_guaranteed(&self, id: SubId, pubend: PubendId, tick: Tick, message: &Message) -> GuaranteedPush {
        if !self.admits(message.topic()) {
            // Withheld, and as good as delivered: a later acknowledgement covers its tick.
            return GuaranteedPush::Queued;
        }
        let mut s = self.state.lock();
        if s.closing.is_some() || self.is_finished() {
            return GuaranteedPush::Closed;
        }
        let (was_empty, full, charge) = s.push_guaranteed((id, pubend, tick), message, &self.limits);
        let over = charge > 0 && self.budget.charge(charge);
        drop(s);
        self.guaranteed_queued(over, was_empty, full)
    }

    /// After guaranteed deliveries were queued (and charged, under the lock): sheds when the
    /// charge went over the broker's budget, wakes the writer when the queue was empty, and
    /// says whether the queue is full.
    fn guaranteed_queued(&self, over: bool, wake: bool, full: bool) -> GuaranteedPush {
        if over {
            self.budget.shed();
        }
        if wake {
            self.wake_writer.notify_one();
        }
        if full {
            GuaranteedPush::QueuedFull
        } else {
            GuaranteedPush::Queued
        }
    }

    /// Runs `callback` once the writer has taken what is queued (at once if the queue is
    /// empty or closing: there is room, or nothing will ever drain it).
    pub fn when_room(&self, callback: RoomCallback) {
        let mut s = self.state.lock();
        if s.items.is_empty() || s.closing.is_some() || self.is_finished() {
            drop(s);
            callback();
            return;
        }
        s.room.push(callback);
    }

    /// Queues a control frame (WELCOME, PONG). It is never dropped, and it is counted: past
    /// [`CONTROL_BACKLOG`] the connection's reader waits ([`Outbox::wait_control_room`]) until the
    /// client has read its replies, so a client asking without reading is held back by TCP.
    pub fn push_frame(&self, frame: &Frame) {
        let Ok(bytes) = frame.to_bytes() else { return };
        let mut s = self.state.lock();
        if s.closing.is_some() {
            return;
        }
        let was_empty = s.push_frame(bytes);
        drop(s);
        if was_empty {
            self.wake_writer.notify_one();
        }
    }

    /// Resolves once something asked for the writer (a push, a close, an abort): a connection
    /// that starts its writer only when there is something to write (an idle MQTT connection
    /// holds no delivery task, issue 42) waits on this. Once the writer runs, only it may wait
    /// here, or the two would take each other's wake-ups; the writer checks the queue before
    /// its first wait, so the wake-up this took is not lost.
    pub(crate) async fn writer_wanted(&self) {
        self.wake_writer.notified().await;
    }

    /// Wakes the writer (see [`Outbox::push`]).
    pub fn wake(&self) {
        self.wake_writer.notify_one();
    }

    /// Writes `frame` after what is already queued, then closes the connection.
    pub fn close_with(&self, frame: &Frame) {
        let bytes = frame.to_bytes().unwrap_or_default();
        let mut s = self.state.lock();
        if s.closing.is_none() {
            s.closing = Some(bytes);
        }
        drop(s);
        self.wake_writer.notify_one();
    }

    /// Marks the connection finished: the writer and reader stop.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
        self.done.cancel();
    }

    /// Whether [`Outbox::finish`] was called (`done` is cancelled), without taking a lock.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Closes at once, dropping anything queued (the peer is gone).
    pub fn abort(&self) {
        self.finish();
        self.wake_writer.notify_one();
        self.drained.notify_waiters();
    }

    /// Takes what is queued, at most [`queue::MAX_BATCH`] items; returns the closing frame once
    /// the queue is closing. Whoever waited for room is told, after the lock is released.
    fn take(&self, batch: &mut VecDeque<Item<Target>>) -> Option<Bytes> {
        let (closing, room) = self.state.lock().take(batch, &self.limits);
        for callback in room {
            callback();
        }
        closing
    }

    /// Waits until the writer has something to do: a batch taken into `batch`, the closing
    /// frame, or nothing more (the connection finished).
    pub(crate) async fn next_batch(&self, batch: &mut VecDeque<Item<Target>>) -> Turn {
        loop {
            if self.is_finished() {
                return Turn::Stop;
            }
            if let Some(closing) = self.take(batch) {
                return Turn::Close(closing);
            }
            if !batch.is_empty() {
                return Turn::Write;
            }
            tokio::select! {
                _ = self.wake_writer.notified() => continue,
                _ = self.done.cancelled() => return Turn::Stop,
            }
        }
    }
}

/// What a writer does next (see [`Outbox::next_batch`]).
pub(crate) enum Turn {
    /// Write the batch taken.
    Write,
    /// Write this last frame, then close.
    Close(Bytes),
    /// Stop: the connection is finished.
    Stop,
}

impl Cuttable for Outbox {
    fn held(&self) -> usize {
        Outbox::held(self)
    }

    fn is_cut(&self) -> bool {
        self.done.is_cancelled()
    }

    fn client(&self) -> String {
        self.client.lock().clone()
    }

    fn cut(&self) {
        Outbox::cut(self);
    }
}

#[cfg(test)]
mod tests;
