//! The queue inside an [`Outbox`](super::Outbox): its state and the rules that bound it, with
//! no lock, no runtime and no I/O, so every rule is tested here as a core is. What is queued,
//! how many bytes it holds, what a push does to a full queue under each overflow policy
//! (drop, drop-oldest, disconnect), when a publisher should hold back, and how the writer takes
//! a bounded batch. The outbox around it holds the lock, charges and refunds the broker's
//! budget with the byte counts these methods return, counts metrics and wakes tasks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_wire::{
    Frame, Message, Notice, PubendId, ReasonCode, SubId, Tick, DELIVER_HEADER_LEN, GUARANTEED_DELIVER_HEADER_LEN,
};

use crate::config::{OverflowPolicy, SlowConsumer};

/// At most this many queued items are encoded and written as one batch. The writer does a
/// batch in one poll of its task, and a durable subscriber's catch-up kept its queue at the
/// default bound (65,536 deliveries, about 20 MB): polls of 20-40 ms, while the task woken next
/// on that worker waited. That was the delivery driver, in tokio's LIFO slot, which the other
/// worker cannot steal: every live guaranteed message of the broker waited with it (its
/// publishes 29 ms in the driver's channel, timed one by one).
pub const MAX_BATCH: usize = 1024;

/// A slow subscriber is named in the log at most this often.
const SLOW_WARN_EVERY: Duration = Duration::from_secs(10);

/// Bytes a busy queue takes from the broker's budget at a time and keeps for its next
/// deliveries. The budget's total is one atomic shared by every thread; charged per delivery,
/// it and its refunds were the largest single cost of a 1->100 fan-out on two threads (18 % of
/// the broker's CPU, `perf`, issue 45), and it grows with cores. Taken 16 KiB at a time, a
/// 256 B fan-out touches it once per ~50 deliveries; the total overstates what is queued by at
/// most this much per connection with something queued, and by nothing once a queue drains.
pub const BUDGET_RESERVE: usize = 16 * 1024;

/// Run once when a queue that was full has been taken by its writer.
pub type RoomCallback = Box<dyn FnOnce() + Send>;

/// A subscription as the queue needs it: where the count of its dropped deliveries goes.
pub trait Subscription {
    /// Deliveries dropped since the last one queued: the next one queued carries the count, so
    /// `missed` arrives on the first delivery after the gap, not on an older one still queued.
    fn missed(&self) -> &AtomicU32;
}

/// One queued frame.
pub enum Item<T> {
    /// A delivery to a subscription, and the drops just before it.
    Deliver(Arc<T>, Message, u32),
    /// A guaranteed delivery.
    Guaranteed(SubId, PubendId, Tick, Message),
    /// A control frame, already encoded.
    Frame(Bytes),
}

impl<T> Item<T> {
    /// The bytes it was charged to the queue budget (deliveries; control frames are bounded
    /// apart, by [`super::CONTROL_BACKLOG`]).
    pub fn charged(&self) -> usize {
        match self {
            Item::Deliver(_, message, _) => DELIVER_HEADER_LEN + message.encoded_len(),
            Item::Guaranteed(.., message) => GUARANTEED_DELIVER_HEADER_LEN + message.encoded_len(),
            Item::Frame(_) => 0,
        }
    }
}

/// What a best-effort push did, and what the outbox owes the budget and the metrics for it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Queued (or, if false, dropped or overflowed: see `overflowed`).
    pub queued: bool,
    /// Queued, and the queue is past half full: the publisher should hold back a little.
    pub congested: bool,
    /// The queue overflowed under the disconnect policy: it is closing with an ERROR.
    pub overflowed: bool,
    /// The queue was empty before: its writer must be woken.
    pub was_empty: bool,
    /// Deliveries dropped by this push (older ones under drop-oldest, or this one).
    pub dropped: u64,
    /// Bytes to refund to the budget (what was dropped), before `charge`.
    pub refund: usize,
    /// Bytes to charge to the budget (what was queued).
    pub charge: usize,
    /// Drops to name in a slow-consumer warning now (at most one every 10 s).
    pub warn_dropped: Option<u64>,
}

/// A bounded queue of frames for one connection.
pub struct Queue<T> {
    /// Frames in order.
    pub items: VecDeque<Item<T>>,
    /// Bytes of deliveries queued.
    pub bytes: usize,
    /// The last frame, once the connection is closing.
    pub closing: Option<Bytes>,
    /// Set when a publisher gave up waiting on this queue; cleared when the writer finds it
    /// below a quarter full. A slow queue reports no congestion, so publishers stop waiting.
    pub slow: bool,
    /// Who waits for room (guaranteed subscriptions held back by a full queue).
    pub room: Vec<RoomCallback>,
    /// Bytes of control replies (PONG) queued: bounded by pausing the connection's reader.
    pub control: usize,
    /// Bytes of deliveries charged to the broker's budget and not yet refunded: those queued
    /// here and those in the batch being written.
    pub held: usize,
    /// Bytes charged to the budget beyond `held`, for deliveries to come
    /// ([`BUDGET_RESERVE`]); given back once the queue drains.
    pub spare: usize,
    /// Drops since the last slow-consumer warning, and when that was.
    drops_unreported: u64,
    warned_at: Option<Instant>,
}

impl<T> Default for Queue<T> {
    fn default() -> Queue<T> {
        Queue {
            items: VecDeque::new(),
            bytes: 0,
            closing: None,
            slow: false,
            room: Vec::new(),
            control: 0,
            held: 0,
            spare: 0,
            drops_unreported: 0,
            warned_at: None,
        }
    }
}

impl<T: Subscription> Queue<T> {
    /// Queues one delivery for `target` within `limits`; a full queue is handled by the
    /// overflow policy. The caller checks first that the queue is not closing.
    pub fn push(&mut self, target: &Arc<T>, message: &Message, limits: &SlowConsumer) -> Pushed {
        let size = DELIVER_HEADER_LEN + message.encoded_len();
        let mut pushed = Pushed::default();
        let full = |q: &Queue<T>| q.items.len() >= limits.max_messages || q.bytes + size > limits.max_bytes;
        if full(self) && limits.policy == OverflowPolicy::DropOldest {
            while full(self) {
                let Some(freed) = self.drop_oldest() else { break };
                pushed.refund += freed;
                pushed.dropped += 1;
            }
        }
        if full(self) {
            match limits.policy {
                OverflowPolicy::Drop | OverflowPolicy::DropOldest => {
                    target.missed().fetch_add(1, Ordering::Relaxed);
                    pushed.dropped += 1;
                    self.drops_unreported += 1;
                    if self.warned_at.is_none_or(|at| at.elapsed() >= SLOW_WARN_EVERY) {
                        pushed.warn_dropped = Some(std::mem::take(&mut self.drops_unreported));
                        self.warned_at = Some(Instant::now());
                    }
                }
                OverflowPolicy::Disconnect => {
                    self.items.clear();
                    let queued = std::mem::take(&mut self.bytes);
                    self.held -= queued.min(self.held);
                    pushed.refund += queued;
                    pushed.overflowed = true;
                    let text =
                        format!("outbound queue over {} messages or {} bytes", limits.max_messages, limits.max_bytes);
                    let notice = Notice::new(ReasonCode::SlowConsumer, text);
                    self.closing = Some(Frame::Error(notice).to_bytes().unwrap_or_default());
                }
            }
            return pushed;
        }
        pushed.was_empty = self.items.is_empty();
        let missed = target.missed().swap(0, Ordering::Relaxed);
        self.items.push_back(Item::Deliver(Arc::clone(target), message.clone(), missed));
        self.bytes += size;
        // Under drop-oldest a full queue makes room by itself: publishers are never held back.
        pushed.congested = limits.policy != OverflowPolicy::DropOldest && self.is_congested(limits);
        pushed.queued = true;
        self.held += size;
        pushed.charge = self.reserve(size);
        pushed
    }

    /// Drop-oldest: removes the oldest queued delivery (control frames stay), carries its drop
    /// into its subscription's next `missed`, and returns the bytes to refund to the budget;
    /// `None` when no delivery is queued.
    fn drop_oldest(&mut self) -> Option<usize> {
        let at = self.items.iter().position(|item| matches!(item, Item::Deliver(..)))?;
        let Some(Item::Deliver(target, message, missed)) = self.items.remove(at) else { return None };
        let size = DELIVER_HEADER_LEN + message.encoded_len();
        self.bytes -= size.min(self.bytes);
        let refund = size.min(self.held);
        self.held -= refund;
        target.missed().fetch_add(missed.saturating_add(1), Ordering::Relaxed);
        Some(refund)
    }
}

impl<T> Queue<T> {
    /// Bytes to charge the budget for a delivery of `size`: none while the spare covers it,
    /// else at least [`BUDGET_RESERVE`], the rest kept as spare.
    fn reserve(&mut self, size: usize) -> usize {
        if self.spare >= size {
            self.spare -= size;
            return 0;
        }
        let take = (size - self.spare).max(BUDGET_RESERVE);
        self.spare = self.spare + take - size;
        take
    }

    /// Everything this queue holds against the budget: its deliveries and its spare.
    pub fn charged_total(&self) -> usize {
        self.held + self.spare
    }

    /// Lets go of everything charged (to be refunded): the queue holds nothing against the
    /// budget afterwards.
    pub fn take_charged(&mut self) -> usize {
        std::mem::take(&mut self.held) + std::mem::take(&mut self.spare)
    }

    /// Queues one guaranteed delivery even past the limits (the delivery core hands a message
    /// over only once). Returns (the queue was empty, it is now at its limits, bytes to charge).
    pub fn push_guaranteed(
        &mut self,
        (id, pubend, tick): (SubId, PubendId, Tick),
        message: &Message,
        limits: &SlowConsumer,
    ) -> (bool, bool, usize) {
        let size = GUARANTEED_DELIVER_HEADER_LEN + message.encoded_len();
        let was_empty = self.items.is_empty();
        self.items.push_back(Item::Guaranteed(id, pubend, tick, message.clone()));
        self.bytes += size;
        self.held += size;
        let full = self.items.len() >= limits.max_messages || self.bytes >= limits.max_bytes;
        (was_empty, full, self.reserve(size))
    }

    /// Queues a control frame; returns whether the queue was empty.
    pub fn push_frame(&mut self, bytes: Bytes) -> bool {
        let was_empty = self.items.is_empty();
        self.control += bytes.len();
        self.items.push_back(Item::Frame(bytes));
        was_empty
    }

    /// True while a publisher should hold back for this queue: past half full, not given up
    /// on, not closing.
    pub fn is_congested(&self, limits: &SlowConsumer) -> bool {
        !self.slow
            && self.closing.is_none()
            && (self.items.len() * 2 > limits.max_messages || self.bytes * 2 > limits.max_bytes)
    }

    /// Takes what is queued into `batch`, at most [`MAX_BATCH`] items, and who waits for room.
    /// The closing frame comes back once nothing else is left.
    pub fn take(&mut self, batch: &mut VecDeque<Item<T>>, limits: &SlowConsumer) -> (Option<Bytes>, Vec<RoomCallback>) {
        // A slow queue is forgiven once the writer finds it below a quarter full: the
        // subscriber is keeping up again, so publishers may wait for it once more.
        if self.items.len() * 4 < limits.max_messages && self.bytes * 4 < limits.max_bytes {
            self.slow = false;
        }
        if self.items.len() <= MAX_BATCH {
            std::mem::swap(&mut self.items, batch);
            self.bytes = 0;
            self.control = 0;
        } else {
            batch.extend(self.items.drain(..MAX_BATCH));
            let (bytes, control) = batch.iter().fold((0, 0), |(bytes, control), item| match item {
                Item::Frame(frame) => (bytes, control + frame.len()),
                delivery => (bytes + delivery.charged(), control),
            });
            self.bytes = self.bytes.saturating_sub(bytes);
            self.control = self.control.saturating_sub(control);
        }
        let room = std::mem::take(&mut self.room);
        if batch.is_empty() {
            (self.closing.clone(), room)
        } else {
            (None, room)
        }
    }

    /// A batch of `bytes` was written: returns what to refund to the budget. The written bytes
    /// become spare; a drained queue gives back all of it, a busy one keeps one
    /// [`BUDGET_RESERVE`] for what is queued next.
    pub fn written(&mut self, bytes: usize) -> usize {
        let done = bytes.min(self.held);
        self.held -= done;
        self.spare += done;
        let keep = if self.items.is_empty() { 0 } else { BUDGET_RESERVE };
        let refund = self.spare.saturating_sub(keep);
        self.spare -= refund;
        refund
    }

    /// Cut by the budget: drops what is queued and returns the bytes to refund (a batch being
    /// written stays held until it is done).
    pub fn cut(&mut self) -> usize {
        let queued = std::mem::take(&mut self.bytes);
        self.items.clear();
        self.held -= queued.min(self.held);
        queued + std::mem::take(&mut self.spare)
    }

    /// Empties the queue for good: returns what was queued and who waited (to be dropped once
    /// the lock is let go: they may hold the outbox) and every byte still held.
    pub fn discard(&mut self) -> (VecDeque<Item<T>>, Vec<RoomCallback>, usize) {
        let items = std::mem::take(&mut self.items);
        let room = std::mem::take(&mut self.room);
        self.bytes = 0;
        self.control = 0;
        (items, room, self.take_charged())
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
