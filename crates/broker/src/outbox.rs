//! Each subscriber connection's bounded outbound queue, and the writers that drain it.
//!
//! A publisher's session pushes deliveries here and never waits on a socket: the queue is
//! bounded in messages and bytes, and what does not fit is handled by the configured policy
//! (drop and count, or disconnect). Past half full the push reports congestion, and the
//! publisher's session may hold back for a bounded time (see `SlowConsumer::max_stall`), which
//! absorbs bursts without loss yet never lets one stuck subscriber stall a publisher for long.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tidings_wire::{
    Deliver, Frame, GuaranteedDeliver, Message, Notice, PubendId, SubId, Tick, DELIVER_HEADER_LEN,
    GUARANTEED_DELIVER_HEADER_LEN,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::budget::{Cuttable, QueueBudget};
use crate::config::{OverflowPolicy, SlowConsumer};
use crate::metrics::Metrics;

/// Bodies up to this size are copied into the write buffer; larger ones go out by vectored
/// write straight from the published buffer. Copying a small body is cheaper than an extra
/// I/O slice; past a few hundred bytes the copy (once per subscriber) costs more.
const INLINE_BODY: usize = 512;

/// I/O slices per vectored write (Linux allows 1024).
const SLICES_PER_WRITE: usize = 256;

/// One subscription as the dispatcher sees it: where its deliveries go and how many it missed.
pub struct Target {
    /// The client's id for the subscription.
    pub id: SubId,
    /// Deliveries dropped since the last one queued: the next one queued carries the count, so
    /// `missed` arrives on the first delivery after the gap, not on an older one still queued.
    missed: AtomicU32,
    /// The connection's queue.
    pub outbox: Arc<Outbox>,
}

impl Target {
    /// A subscription feeding `outbox`.
    pub fn new(id: SubId, outbox: Arc<Outbox>) -> Target {
        Target { id, missed: AtomicU32::new(0), outbox }
    }
}

enum Item {
    /// A delivery and the drops just before it.
    Deliver(Arc<Target>, Message, u32),
    Guaranteed(SubId, PubendId, Tick, Message),
    Frame(Bytes),
}

impl Item {
    /// The bytes it was charged to the queue budget (deliveries; control frames are bounded
    /// apart, by [`CONTROL_BACKLOG`]).
    fn charged(&self) -> usize {
        match self {
            Item::Deliver(_, message, _) => DELIVER_HEADER_LEN + message.encoded_len(),
            Item::Guaranteed(.., message) => GUARANTEED_DELIVER_HEADER_LEN + message.encoded_len(),
            Item::Frame(_) => 0,
        }
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

/// Run once when a queue that was full has been taken by its writer.
pub type RoomCallback = Box<dyn FnOnce() + Send>;

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
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    bytes: usize,
    closing: Option<Bytes>,
    /// Set when a publisher gave up waiting on this queue; cleared when the writer finds it
    /// below a quarter full. A slow queue reports no congestion, so publishers stop waiting.
    slow: bool,
    /// Who waits for room (guaranteed subscriptions held back by a full queue).
    room: Vec<RoomCallback>,
    /// Bytes of control replies (PONG) queued: bounded by pausing the connection's reader.
    control: usize,
    /// Bytes of deliveries charged to the broker's [`QueueBudget`] and not yet refunded:
    /// those queued here and those in the batch being written.
    held: usize,
    /// Drops since the last slow-consumer warning, and when that was.
    drops_unreported: u64,
    warned_at: Option<std::time::Instant>,
}

/// A congested queue with no batch written for this long belongs to a client that stopped
/// reading: publishers stop waiting for it (see [`Outbox::wait_drained`]).
pub const NO_PROGRESS: std::time::Duration = std::time::Duration::from_millis(50);

/// A slow subscriber is named in the log at most this often.
const SLOW_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// At most this many queued items are encoded and written as one batch. The writer does a
/// batch in one poll of its task, and a durable subscriber's catch-up kept its queue at the
/// default bound (65,536 deliveries, about 20 MB): polls of 20-40 ms, while the task woken next
/// on that worker waited. That was the delivery driver, in tokio's LIFO slot, which the other
/// worker cannot steal: every live guaranteed message of the broker waited with it (its
/// publishes 29 ms in the driver's channel, timed one by one).
const MAX_BATCH: usize = 1024;

/// Control replies a connection may have queued before its reader pauses: a client that sends
/// PINGs without reading the PONGs stalls itself, not the broker's memory.
pub const CONTROL_BACKLOG: usize = 64 * 1024;

impl Drop for Outbox {
    fn drop(&mut self) {
        // Whatever was never written goes back to the budget with the connection.
        let held = std::mem::take(&mut self.state.get_mut().held);
        self.budget.refund(held);
    }
}

/// A bounded queue of frames for one connection (TCP) or one UDP client.
pub struct Outbox {
    /// Who the queue belongs to (address, and the client's name once it said HELLO), for the log.
    pub client: Mutex<String>,
    state: Mutex<State>,
    wake_writer: Notify,
    drained: Notify,
    limits: SlowConsumer,
    metrics: Metrics,
    /// Cancelled when the connection is finished, from either side ([`Outbox::finish`]).
    pub done: CancellationToken,
    /// Set with `done`, and read instead of it on the delivery path: the token's own check
    /// takes a lock, and at 10,000 subscribers it was a tenth of the broker's time.
    finished: std::sync::atomic::AtomicBool,
    /// This connection's own counts, for `/connz`.
    pub counts: OutboxCounts,
    budget: Arc<QueueBudget>,
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
}

impl Outbox {
    /// An empty queue with the broker's limits, charging what it queues to `budget`.
    pub fn new(limits: SlowConsumer, metrics: Metrics, budget: &Arc<QueueBudget>) -> Arc<Outbox> {
        let outbox = Arc::new(Outbox {
            client: Mutex::new(String::new()),
            state: Mutex::new(State::default()),
            wake_writer: Notify::new(),
            drained: Notify::new(),
            limits,
            metrics,
            done: CancellationToken::new(),
            finished: std::sync::atomic::AtomicBool::new(false),
            counts: OutboxCounts::default(),
            budget: Arc::clone(budget),
        });
        let weak: std::sync::Weak<dyn Cuttable> = Arc::downgrade(&outbox) as _;
        budget.register(weak);
        outbox
    }

    /// Bytes this connection holds against the budget.
    pub fn held(&self) -> usize {
        self.state.lock().held
    }

    /// Cut by the budget: what is queued goes (and is refunded) and the connection ends at once,
    /// even a write in progress to a client that does not read.
    pub(crate) fn cut(&self) {
        let mut s = self.state.lock();
        let queued = std::mem::take(&mut s.bytes);
        s.items.clear();
        s.held -= queued.min(s.held);
        drop(s);
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
        let mut s = self.state.lock();
        let items = std::mem::take(&mut s.items);
        let room = std::mem::take(&mut s.room);
        s.bytes = 0;
        s.control = 0;
        let held = std::mem::take(&mut s.held);
        drop(s);
        self.budget.refund(held);
        drop(items);
        drop(room);
    }

    /// Charges `size` queued bytes (the state lock held by the caller); true when the broker's
    /// total is past its budget and connections must be cut once the lock is let go.
    fn charge(&self, s: &mut State, size: usize) -> bool {
        s.held += size;
        self.budget.charge(size)
    }

    /// A batch of `bytes` was written.
    fn written(&self, bytes: usize) {
        let mut s = self.state.lock();
        let refund = bytes.min(s.held);
        s.held -= refund;
        drop(s);
        self.budget.refund(refund);
    }

    /// Drop-oldest: removes the oldest queued delivery (control frames stay), carries its drop
    /// into its subscription's next `missed`, and returns the bytes to refund to the budget
    /// (an atomic, so the caller may refund them under the lock); `None` when no delivery is
    /// queued.
    fn drop_oldest(&self, s: &mut State) -> Option<usize> {
        let at = s.items.iter().position(|item| matches!(item, Item::Deliver(..)))?;
        let Some(Item::Deliver(target, message, missed)) = s.items.remove(at) else { return None };
        let size = DELIVER_HEADER_LEN + message.encoded_len();
        s.bytes -= size.min(s.bytes);
        let refund = size.min(s.held);
        s.held -= refund;
        target.missed.fetch_add(missed.saturating_add(1), Ordering::Relaxed);
        self.metrics.slow_consumer_drops.inc();
        self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        Some(refund)
    }

    /// Frames and bytes queued now.
    pub fn depth(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.items.len(), s.bytes)
    }

    /// Queues one delivery for `target` (whose outbox is `self`). The writer is not woken
    /// here: when the queue was empty, the outbox is added to `wake`, and the caller wakes
    /// every writer once it has dispatched its whole batch of frames. One wake and one write
    /// per subscriber per batch, instead of per message, is what makes fan-out cheap.
    pub fn push(&self, target: &Arc<Target>, message: &Message, wake: &mut Vec<Arc<Outbox>>) -> Push {
        let size = DELIVER_HEADER_LEN + message.encoded_len();
        let mut s = self.state.lock();
        if s.closing.is_some() || self.is_finished() {
            return Push::Closed;
        }
        let full = |s: &State| s.items.len() >= self.limits.max_messages || s.bytes + size > self.limits.max_bytes;
        if full(&s) && self.limits.policy == OverflowPolicy::DropOldest {
            let mut refund = 0;
            while full(&s) {
                let Some(freed) = self.drop_oldest(&mut s) else { break };
                refund += freed;
            }
            self.budget.refund(refund);
        }
        if full(&s) {
            return match self.limits.policy {
                OverflowPolicy::Drop | OverflowPolicy::DropOldest => {
                    target.missed.fetch_add(1, Ordering::Relaxed);
                    self.metrics.slow_consumer_drops.inc();
                    self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                    s.drops_unreported += 1;
                    if s.warned_at.is_none_or(|at| at.elapsed() >= SLOW_WARN_EVERY) {
                        let dropped = std::mem::take(&mut s.drops_unreported);
                        s.warned_at = Some(std::time::Instant::now());
                        drop(s);
                        let client = self.client.lock().clone();
                        tracing::warn!(%client, dropped, "slow consumer: its queue is full, deliveries dropped");
                    }
                    Push::Dropped
                }
                OverflowPolicy::Disconnect => {
                    s.items.clear();
                    let queued = std::mem::take(&mut s.bytes);
                    s.held -= queued.min(s.held);
                    self.budget.refund(queued);
                    let notice = Notice::new(
                        tidings_wire::ReasonCode::SlowConsumer,
                        format!(
                            "outbound queue over {} messages or {} bytes",
                            self.limits.max_messages, self.limits.max_bytes
                        ),
                    );
                    s.closing = Some(Frame::Error(notice).to_bytes().unwrap_or_default());
                    drop(s);
                    self.metrics.slow_consumer_disconnects.inc();
                    let client = self.client.lock().clone();
                    tracing::warn!(%client, "slow consumer disconnected: its queue overflowed");
                    self.wake_writer.notify_one();
                    Push::Disconnected
                }
            };
        }
        let was_empty = s.items.is_empty();
        let missed = target.missed.swap(0, Ordering::Relaxed);
        s.items.push_back(Item::Deliver(Arc::clone(target), message.clone(), missed));
        s.bytes += size;
        // Under drop-oldest a full queue makes room by itself: publishers are never held back.
        let congested = !s.slow
            && self.limits.policy != OverflowPolicy::DropOldest
            && (s.items.len() * 2 > self.limits.max_messages || s.bytes * 2 > self.limits.max_bytes);
        let over = self.charge(&mut s, size);
        drop(s);
        if over {
            self.budget.shed();
        }
        if was_empty {
            wake.push(Arc::clone(&target.outbox));
        }
        if congested {
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
        let size = GUARANTEED_DELIVER_HEADER_LEN + message.encoded_len();
        let mut s = self.state.lock();
        if s.closing.is_some() || self.is_finished() {
            return GuaranteedPush::Closed;
        }
        let was_empty = s.items.is_empty();
        s.items.push_back(Item::Guaranteed(id, pubend, tick, message.clone()));
        s.bytes += size;
        let full = s.items.len() >= self.limits.max_messages || s.bytes >= self.limits.max_bytes;
        let over = self.charge(&mut s, size);
        drop(s);
        if over {
            self.budget.shed();
        }
        if was_empty {
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
        let was_empty = s.items.is_empty();
        s.control += bytes.len();
        s.items.push_back(Item::Frame(bytes));
        drop(s);
        if was_empty {
            self.wake_writer.notify_one();
        }
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

    /// Waits while this connection's queued control replies are past [`CONTROL_BACKLOG`] (the
    /// writer takes them as the client reads), or until the connection is done.
    pub async fn wait_control_room(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.lock().control <= CONTROL_BACKLOG || self.done.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    /// True while a publisher should hold back for this queue.
    pub fn is_congested(&self) -> bool {
        let s = self.state.lock();
        !s.slow
            && s.closing.is_none()
            && (s.items.len() * 2 > self.limits.max_messages || s.bytes * 2 > self.limits.max_bytes)
    }

    /// Waits (at most until `deadline`) for the queue to fall below half full, as long as the
    /// client keeps reading: a queue whose writer wrote nothing for [`NO_PROGRESS`] belongs to
    /// a client that stopped, and waiting longer would only pause the publisher (and every
    /// other subscriber of it) for nothing. Returns false if it gave up; the queue is then marked slow
    /// so no publisher waits on it again until it has emptied.
    pub async fn wait_drained(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.is_congested() || self.done.is_cancelled() {
                return true;
            }
            let wake = deadline.min(tokio::time::Instant::now() + NO_PROGRESS);
            if tokio::time::timeout_at(wake, notified).await.is_err() {
                self.state.lock().slow = true;
                return false;
            }
        }
    }

    /// Takes what is queued, at most [`MAX_BATCH`] items; `Err` carries the closing frame once
    /// the queue is closing.
    /// Whoever waited for room is told, after the lock is released.
    fn take(&self, batch: &mut VecDeque<Item>) -> Option<Bytes> {
        let (closing, room) = self.take_locked(batch);
        for callback in room {
            callback();
        }
        closing
    }

    fn take_locked(&self, batch: &mut VecDeque<Item>) -> (Option<Bytes>, Vec<RoomCallback>) {
        let mut s = self.state.lock();
        // A slow queue is forgiven once the writer finds it below a quarter full: the
        // subscriber is keeping up again, so publishers may wait for it once more.
        if s.items.len() * 4 < self.limits.max_messages && s.bytes * 4 < self.limits.max_bytes {
            s.slow = false;
        }
        if s.items.len() <= MAX_BATCH {
            std::mem::swap(&mut s.items, batch);
            s.bytes = 0;
            s.control = 0;
        } else {
            batch.extend(s.items.drain(..MAX_BATCH));
            let (bytes, control) = batch.iter().fold((0, 0), |(bytes, control), item| match item {
                Item::Frame(frame) => (bytes, control + frame.len()),
                delivery => (bytes + delivery.charged(), control),
            });
            s.bytes = s.bytes.saturating_sub(bytes);
            s.control = s.control.saturating_sub(control);
        }
        let room = std::mem::take(&mut s.room);
        if batch.is_empty() {
            (s.closing.clone(), room)
        } else {
            (None, room)
        }
    }
}

/// Appends the frames of `batch` to `chunks`: small bodies copied into `scratch`, large ones
/// shared. Returns (deliveries, bytes).
fn encode_batch(batch: &mut VecDeque<Item>, scratch: &mut BytesMut, chunks: &mut VecDeque<Bytes>) -> (u64, u64) {
    let (mut delivered, mut bytes) = (0u64, 0u64);
    for item in batch.drain(..) {
        match item {
            Item::Deliver(target, message, missed) => {
                Deliver::encode_header(target.id, missed, &message, scratch);
                push_body(message.as_bytes(), scratch, chunks);
                delivered += 1;
                bytes += (DELIVER_HEADER_LEN + message.encoded_len()) as u64;
            }
            Item::Guaranteed(id, pubend, tick, message) => {
                GuaranteedDeliver::encode_header(id, pubend, tick, &message, scratch);
                push_body(message.as_bytes(), scratch, chunks);
                delivered += 1;
                bytes += (GUARANTEED_DELIVER_HEADER_LEN + message.encoded_len()) as u64;
            }
            Item::Frame(frame) => scratch.extend_from_slice(&frame),
        }
    }
    if !scratch.is_empty() {
        chunks.push_back(scratch.split().freeze());
    }
    (delivered, bytes)
}

/// A message body after its header: copied when small, shared when large (see [`INLINE_BODY`]).
fn push_body(body: &Bytes, scratch: &mut BytesMut, chunks: &mut VecDeque<Bytes>) {
    if body.len() <= INLINE_BODY {
        scratch.extend_from_slice(body);
    } else {
        chunks.push_back(scratch.split().freeze());
        chunks.push_back(body.clone());
    }
}

/// Drains `outbox` into a stream until the connection closes. Owns the write half.
pub async fn write_stream<W: AsyncWrite + Unpin>(mut writer: W, outbox: Arc<Outbox>) {
    let mut batch = VecDeque::new();
    // Grows with the batches written; an idle subscriber holds none.
    let mut scratch = BytesMut::new();
    let mut chunks = VecDeque::new();
    loop {
        if outbox.is_finished() {
            break;
        }
        if let Some(closing) = outbox.take(&mut batch) {
            let _ = writer.write_all(&closing).await;
            break;
        }
        if batch.is_empty() {
            tokio::select! {
                _ = outbox.wake_writer.notified() => continue,
                _ = outbox.done.cancelled() => break,
            }
        }
        let charged: usize = batch.iter().map(Item::charged).sum();
        let taken = batch.len();
        let (delivered, bytes) = encode_batch(&mut batch, &mut scratch, &mut chunks);
        // A connection cut (by the queue budget, or its peer gone) stops even mid-write: a
        // client that never reads would otherwise hold this batch forever.
        let written = tokio::select! {
            result = write_chunks_with(&mut writer, &mut chunks, || outbox.drained.notify_waiters()) => result.is_ok(),
            () = outbox.done.cancelled() => false,
        };
        outbox.written(charged);
        if !written {
            break;
        }
        outbox.metrics.messages_out.inc_by(delivered);
        outbox.metrics.bytes_out.inc_by(bytes);
        outbox.counts.messages_out.fetch_add(delivered, Ordering::Relaxed);
        outbox.counts.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        outbox.drained.notify_waiters();
        if taken == MAX_BATCH {
            // More is queued: the tasks woken meanwhile on this worker go first.
            tokio::task::yield_now().await;
        }
    }
    let _ = writer.shutdown().await;
    outbox.finish();
    outbox.discard();
    outbox.drained.notify_waiters();
}

/// Writes every chunk with vectored writes, advancing past what each write took. Shared by
/// client outboxes and broker-link queues.
pub(crate) async fn write_chunks<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &mut VecDeque<Bytes>,
) -> std::io::Result<()> {
    write_chunks_with(writer, chunks, || ()).await
}

/// [`write_chunks`], calling `progress` after every write that took bytes: a client reading a
/// large batch slowly is still reading.
async fn write_chunks_with<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &mut VecDeque<Bytes>,
    mut progress: impl FnMut(),
) -> std::io::Result<()> {
    while !chunks.is_empty() {
        let n = {
            let slices: Vec<IoSlice<'_>> = chunks.iter().take(SLICES_PER_WRITE).map(|c| IoSlice::new(c)).collect();
            writer.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        progress();
        let mut left = n;
        while left > 0 {
            let Some(front) = chunks.front_mut() else { break };
            if front.len() <= left {
                left -= front.len();
                chunks.pop_front();
            } else {
                bytes::Buf::advance(front, left);
                left = 0;
            }
        }
    }
    Ok(())
}

/// Drains `outbox` to one UDP client, a datagram per frame. A delivery too large for a
/// datagram is counted and skipped.
pub async fn write_datagrams(socket: Arc<UdpSocket>, peer: SocketAddr, outbox: Arc<Outbox>, max_datagram: usize) {
    let mut batch = VecDeque::new();
    let mut packer = Packer::new(max_datagram);
    loop {
        if outbox.is_finished() {
            break;
        }
        if let Some(closing) = outbox.take(&mut batch) {
            let _ = socket.send_to(&closing, peer).await;
            break;
        }
        if batch.is_empty() {
            tokio::select! {
                _ = outbox.wake_writer.notified() => continue,
                _ = outbox.done.cancelled() => break,
            }
        }
        let charged: usize = batch.iter().map(Item::charged).sum();
        // Deliveries too large for a datagram, by subscription: told on its next one here.
        let mut too_large: Vec<(Arc<Target>, u32)> = Vec::new();
        for item in batch.drain(..) {
            let start = packer.open();
            let delivered = match item {
                Item::Deliver(target, message, missed) => {
                    let carried = too_large.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &target));
                    let missed = missed.saturating_add(carried.map_or(0, |(_, n)| std::mem::take(n)));
                    if DELIVER_HEADER_LEN + message.encoded_len() > MAX_DATAGRAM {
                        outbox.metrics.udp_deliveries_too_large.inc();
                        match too_large.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &target)) {
                            Some((_, n)) => *n = missed.saturating_add(1),
                            None => too_large.push((target, missed.saturating_add(1))),
                        }
                        continue;
                    }
                    Deliver::encode_header(target.id, missed, &message, &mut packer.buf);
                    packer.buf.extend_from_slice(message.as_bytes());
                    true
                }
                Item::Guaranteed(..) => {
                    // Guaranteed subscriptions are refused over UDP; nothing queues these here.
                    continue;
                }
                Item::Frame(bytes) => {
                    packer.buf.extend_from_slice(&bytes);
                    false
                }
            };
            if let Some(full) = packer.close(start, delivered) {
                send_datagram(&socket, peer, &outbox, &full).await;
            }
        }
        if let Some(last) = packer.flush() {
            send_datagram(&socket, peer, &outbox, &last).await;
        }
        // Not followed by another delivery in this batch: the next one queued carries them.
        for (target, n) in too_large {
            target.missed.fetch_add(n, Ordering::Relaxed);
        }
        outbox.written(charged);
        outbox.drained.notify_waiters();
    }
    outbox.finish();
    outbox.discard();
}

/// Largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;

/// One datagram to send, and how many deliveries it carries.
struct Packed {
    bytes: BytesMut,
    deliveries: u64,
}

/// Packs whole frames into datagrams of at most `max` bytes (a frame larger than that goes
/// alone): a client reads every frame of a datagram, so a queue drained in one batch costs a
/// send per datagram, not per message.
struct Packer {
    max: usize,
    /// The datagram being filled: whole frames, then possibly the frame being encoded.
    buf: BytesMut,
    deliveries: u64,
}

impl Packer {
    fn new(max: usize) -> Packer {
        Packer { max, buf: BytesMut::with_capacity(MAX_DATAGRAM), deliveries: 0 }
    }

    /// Where the next frame starts in `buf`.
    fn open(&self) -> usize {
        self.buf.len()
    }

    /// The frame from `start` is complete. Returns a datagram to send when it no longer fits
    /// beside what was packed before it (that earlier part goes; the frame starts the next).
    fn close(&mut self, start: usize, delivery: bool) -> Option<Packed> {
        let mut full = None;
        if self.buf.len() > self.max && start > 0 {
            let frame = self.buf.split_off(start);
            let earlier = std::mem::replace(&mut self.buf, frame);
            full = Some(Packed { bytes: earlier, deliveries: std::mem::take(&mut self.deliveries) });
        }
        self.deliveries += u64::from(delivery);
        full
    }

    /// Whatever is packed, as the last datagram of a batch.
    fn flush(&mut self) -> Option<Packed> {
        if self.buf.is_empty() {
            return None;
        }
        let bytes = self.buf.split();
        self.buf.reserve(MAX_DATAGRAM);
        Some(Packed { bytes, deliveries: std::mem::take(&mut self.deliveries) })
    }
}

/// Sends one datagram. An error (the peer's port closed, ICMP unreachable) loses this
/// datagram only; the session lives until its keepalive lapses.
async fn send_datagram(socket: &UdpSocket, peer: SocketAddr, outbox: &Outbox, packed: &Packed) {
    if socket.send_to(&packed.bytes, peer).await.is_ok() && packed.deliveries > 0 {
        let bytes = packed.bytes.len() as u64;
        outbox.metrics.messages_out.inc_by(packed.deliveries);
        outbox.metrics.bytes_out.inc_by(bytes);
        outbox.metrics.udp_datagrams_sent.inc();
        outbox.counts.messages_out.fetch_add(packed.deliveries, Ordering::Relaxed);
        outbox.counts.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    }
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
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn outbox(max_messages: usize) -> Arc<Outbox> {
        let limits = SlowConsumer { max_messages, ..SlowConsumer::default() };
        Outbox::new(limits, Metrics::new(&mut prometheus_client::registry::Registry::default()), &QueueBudget::new(0))
    }

    fn message() -> Message {
        Message::new("t", &[], Bytes::from_static(b"p"), 0).unwrap()
    }

    /// Packs frames of `sizes` bytes (deliveries) and returns each datagram's (bytes, deliveries).
    fn pack(max: usize, sizes: &[usize]) -> Vec<(usize, u64)> {
        let mut packer = Packer::new(max);
        let mut out = Vec::new();
        for &size in sizes {
            let start = packer.open();
            packer.buf.extend_from_slice(&vec![7u8; size]);
            out.extend(packer.close(start, true).map(|p| (p.bytes.len(), p.deliveries)));
        }
        out.extend(packer.flush().map(|p| (p.bytes.len(), p.deliveries)));
        out
    }

    #[test]
    fn deliveries_are_packed_whole_into_datagrams_up_to_the_size_and_a_large_one_goes_alone() {
        assert_eq!(pack(1000, &[300, 300, 300, 300]), [(900, 3), (300, 1)]);
        assert_eq!(pack(1000, &[300, 2000, 300]), [(300, 1), (2000, 1), (300, 1)]);
        assert_eq!(pack(1000, &[1000, 1]), [(1000, 1), (1, 1)]);
        assert_eq!(pack(1000, &[]), []);
    }

    #[test]
    fn guaranteed_deliveries_are_queued_past_the_limit_and_say_when_it_is_reached() {
        let o = outbox(2);
        assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(1), &message()), GuaranteedPush::Queued);
        assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(2), &message()), GuaranteedPush::QueuedFull);
        assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(3), &message()), GuaranteedPush::QueuedFull);
        let mut batch = VecDeque::new();
        assert_eq!(o.take(&mut batch), None);
        assert_eq!(batch.len(), 3, "nothing guaranteed was dropped");
    }

    #[test]
    fn whoever_waits_for_room_is_told_when_the_writer_takes_the_queue() {
        let o = outbox(1);
        o.push_guaranteed(SubId(1), PubendId(1), Tick(1), &message());
        let told = Arc::new(AtomicBool::new(false));
        let flag = told.clone();
        o.when_room(Box::new(move || flag.store(true, Ordering::SeqCst)));
        assert!(!told.load(Ordering::SeqCst), "the queue is still full");
        o.take(&mut VecDeque::new());
        assert!(told.load(Ordering::SeqCst));
        let again = Arc::new(AtomicBool::new(false));
        let flag = again.clone();
        o.when_room(Box::new(move || flag.store(true, Ordering::SeqCst)));
        assert!(again.load(Ordering::SeqCst), "an empty queue has room at once");
    }

    #[test]
    fn the_writer_takes_a_long_queue_a_bounded_batch_at_a_time_and_its_bytes_with_it() {
        let o = outbox(65_536);
        for tick in 0..2_500 {
            o.push_guaranteed(SubId(1), PubendId(1), Tick(tick), &message());
        }
        o.push_frame(&Frame::Ping(tidings_wire::Ping { nonce: 1 }));
        let (queued, bytes) = o.depth();
        assert_eq!(queued, 2_501);
        let mut taken = Vec::new();
        let mut batch = VecDeque::new();
        while o.depth().0 > 0 {
            assert_eq!(o.take(&mut batch), None);
            let charged: usize = batch.iter().map(Item::charged).sum();
            taken.push((batch.len(), charged));
            batch.clear();
        }
        assert_eq!(taken.iter().map(|t| t.0).collect::<Vec<_>>(), [MAX_BATCH, MAX_BATCH, 2_501 - 2 * MAX_BATCH]);
        assert_eq!(taken.iter().map(|t| t.1).sum::<usize>(), bytes, "the bytes left with the batches");
        assert_eq!(o.depth(), (0, 0));
    }

    #[test]
    fn a_closing_queue_takes_no_guaranteed_delivery() {
        let o = outbox(8);
        o.close_with(&Frame::Ping(tidings_wire::Ping { nonce: 1 }));
        assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(1), &message()), GuaranteedPush::Closed);
    }

    #[test]
    fn a_guaranteed_delivery_is_written_as_gdeliver() {
        let o = outbox(8);
        o.push_guaranteed(SubId(4), PubendId(5), Tick(6), &message());
        let mut batch = VecDeque::new();
        o.take(&mut batch);
        let (mut scratch, mut chunks) = (BytesMut::new(), VecDeque::new());
        assert_eq!(encode_batch(&mut batch, &mut scratch, &mut chunks).0, 1);
        let mut wire: BytesMut = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let frame = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap().unwrap();
        let expected = GuaranteedDeliver { id: SubId(4), pubend: PubendId(5), tick: Tick(6), message: message() };
        assert_eq!(frame, Frame::GuaranteedDeliver(expected));
    }

    #[test]
    fn missed_arrives_on_the_first_delivery_after_the_gap_not_on_an_older_one_still_queued() {
        let o = outbox(2);
        let target = Arc::new(Target::new(SubId(3), Arc::clone(&o)));
        let mut wake = Vec::new();
        let mut push = || o.push(&target, &message(), &mut wake);
        assert_ne!(push(), Push::Dropped);
        assert_ne!(push(), Push::Dropped);
        assert_eq!((push(), push()), (Push::Dropped, Push::Dropped), "the queue holds two");
        let mut older = VecDeque::new();
        o.take(&mut older);
        assert_ne!(o.push(&target, &message(), &mut wake), Push::Dropped);
        let mut newer = VecDeque::new();
        o.take(&mut newer);
        let missed = |batch: &mut VecDeque<Item>| -> Vec<u32> {
            let (mut scratch, mut chunks) = (BytesMut::new(), VecDeque::new());
            encode_batch(batch, &mut scratch, &mut chunks);
            let mut wire: BytesMut = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            let mut out = Vec::new();
            while let Some(Frame::Deliver(d)) = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap() {
                out.push(d.missed);
            }
            out
        };
        assert_eq!(missed(&mut older), [0, 0], "the deliveries queued before the gap say nothing");
        assert_eq!(missed(&mut newer), [2], "the first one after it says two");
    }

    #[test]
    fn drop_oldest_keeps_the_newest_deliveries_and_counts_what_it_dropped() {
        let limits = SlowConsumer { max_messages: 3, policy: OverflowPolicy::DropOldest, ..SlowConsumer::default() };
        let budget = QueueBudget::new(0);
        let o = Outbox::new(limits, Metrics::new(&mut prometheus_client::registry::Registry::default()), &budget);
        let target = Arc::new(Target::new(SubId(3), Arc::clone(&o)));
        let numbered = |n: u8| Message::new("t", &[], Bytes::from(vec![n]), 0).unwrap();
        let mut wake = Vec::new();
        o.push_frame(&Frame::Ping(tidings_wire::Ping { nonce: 9 }));
        for n in 0..8 {
            assert_eq!(o.push(&target, &numbered(n), &mut wake), Push::Queued, "never dropped nor congested");
        }
        // The queued PING takes one of the three places.
        assert_eq!(o.counts.dropped.load(Ordering::Relaxed), 6);
        assert_eq!(o.held(), 2 * (DELIVER_HEADER_LEN + numbered(0).encoded_len()), "the dropped bytes were refunded");
        let mut batch = VecDeque::new();
        o.take(&mut batch);
        let (mut scratch, mut chunks) = (BytesMut::new(), VecDeque::new());
        encode_batch(&mut batch, &mut scratch, &mut chunks);
        let mut wire: BytesMut = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut frames = Vec::new();
        while let Some(frame) = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap() {
            frames.push(frame);
        }
        assert!(matches!(frames[0], Frame::Ping(_)), "control frames are never dropped: {frames:?}");
        let delivered: Vec<(u8, u32)> = frames[1..]
            .iter()
            .map(|f| match f {
                Frame::Deliver(d) => (d.message.payload()[0], d.missed),
                other => panic!("{other:?}"),
            })
            .collect();
        let payloads: Vec<u8> = delivered.iter().map(|(n, _)| *n).collect();
        assert_eq!(payloads, [6, 7], "the newest two, in order");
        let reported: u32 =
            delivered.iter().map(|(_, missed)| missed).sum::<u32>() + target.missed.load(Ordering::Relaxed);
        assert_eq!(reported, 6, "every drop is reported once: {delivered:?}");
    }
}
