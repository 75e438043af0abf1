//! A durable subscriber's catch-up queued a chunk at a time: the cursor (issue 45) hands the
//! outbox a whole chunk of deliveries and GAP frames, queued under one lock with one wake of the
//! writer. Pushed one at a time, every delivery found the queue just emptied by a writer that
//! kept up and woke it again: a third of the cursor's time was that wake (a futex and an eventfd
//! write), and the writer wrote one message a `writev` (`perf`, 2026-12-01).

use bytes::Bytes;
use tidings_wire::{Message, PubendId, SubId, Tick};

use super::{GuaranteedPush, Outbox};

/// One item of a catch-up chunk, in tick order.
pub enum CatchUpItem {
    /// A guaranteed delivery of the message at this tick.
    Deliver(Tick, Message),
    /// A control frame in its place, encoded (a GAP for ticks the log lost).
    Frame(Bytes),
}

impl Outbox {
    /// Queues `items` for subscription `id` of stream `pubend` in order, under one lock, and
    /// wakes the writer once. Like [`Outbox::push_guaranteed`] it never drops: the chunk is
    /// queued whole even past the limits (the overshoot is bounded by a chunk), and
    /// [`GuaranteedPush::QueuedFull`] tells the caller to wait for [`Outbox::when_room`] before
    /// the next one. [`GuaranteedPush::Closed`]: nothing was queued.
    pub fn push_catch_up(&self, id: SubId, pubend: PubendId, items: Vec<CatchUpItem>) -> GuaranteedPush {
        let mut s = self.state.lock();
        if s.closing.is_some() || self.is_finished() {
            return GuaranteedPush::Closed;
        }
        let (was_empty, mut full, mut charge) = (s.items.is_empty(), false, 0);
        for item in items {
            match item {
                // Withheld (the user may not read the topic), and as good as delivered.
                CatchUpItem::Deliver(_, message) if !self.admits(message.topic()) => {}
                CatchUpItem::Deliver(tick, message) => {
                    let (_, now_full, more) = s.push_guaranteed((id, pubend, tick), &message, &self.limits);
                    (full, charge) = (now_full, charge + more);
                }
                CatchUpItem::Frame(bytes) => _ = s.push_frame(bytes),
            }
        }
        let wake = was_empty && !s.items.is_empty();
        let over = charge > 0 && self.budget.charge(charge);
        drop(s);
        self.guaranteed_queued(over, wake, full)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use super::super::queue::Item;
    use super::*;
    use crate::budget::QueueBudget;
    use crate::config::SlowConsumer;
    use crate::metrics::Metrics;
    use tidings_wire::Frame;

    fn message(topic: &str) -> Message {
        Message::new(topic, &[], Bytes::from_static(b"p"), 0).unwrap()
    }

    fn outbox(max_messages: usize) -> Arc<Outbox> {
        let limits = SlowConsumer { max_messages, ..SlowConsumer::default() };
        let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
        Outbox::new(limits, metrics, &QueueBudget::new(0))
    }

    #[test]
    fn a_chunk_is_queued_whole_in_order_past_the_limit_and_says_it_is_full() {
        let o = outbox(2);
        let gap = Frame::Gap(tidings_wire::Gap { id: SubId(1), pubend: PubendId(1), from: Tick(2), to: Tick(3) });
        let chunk = vec![
            CatchUpItem::Deliver(Tick(1), message("a")),
            CatchUpItem::Frame(gap.to_bytes().unwrap()),
            CatchUpItem::Deliver(Tick(4), message("b")),
            CatchUpItem::Deliver(Tick(5), message("c")),
        ];
        assert_eq!(o.push_catch_up(SubId(1), PubendId(1), chunk), GuaranteedPush::QueuedFull);
        let mut batch = VecDeque::new();
        assert_eq!(o.take(&mut batch), None);
        let order: Vec<_> = batch
            .iter()
            .map(|item| match item {
                Item::Guaranteed(_, _, tick, _) => tick.0,
                Item::Frame(_) => 0,
                Item::Deliver(..) => u64::MAX,
            })
            .collect();
        assert_eq!(order, [1, 0, 4, 5], "every item, in order, none dropped");
        let small = vec![CatchUpItem::Deliver(Tick(6), message("d"))];
        assert_eq!(o.push_catch_up(SubId(1), PubendId(1), small), GuaranteedPush::Queued);
    }

    #[test]
    fn a_closed_outbox_queues_nothing() {
        let o = outbox(16);
        o.finish();
        let chunk = vec![CatchUpItem::Deliver(Tick(1), message("a"))];
        assert_eq!(o.push_catch_up(SubId(1), PubendId(1), chunk), GuaranteedPush::Closed);
        assert_eq!(o.depth(), (0, 0));
    }
}
