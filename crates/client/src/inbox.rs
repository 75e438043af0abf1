//! Deliveries decoded from one socket read, grouped by subscription, so that each
//! subscription is handed one batch per read instead of one message at a time.
//!
//! Why: handing a message to another task costs a wake-up, and a consumer that keeps up parks
//! after every message, so one wake-up per message dominated the receive path. Batching
//! keeps latency (a batch goes out as soon as the read is decoded) and pays one wake-up per
//! read. Pure: no channels, no locks.

use tidings_wire::SubId;

use crate::delivery::Event;

/// Batches in first-seen order. A client has few subscriptions per connection, so a linear
/// search (after checking the batch used last) beats hashing.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    batches: Vec<(SubId, Vec<Event>)>,
    last: usize,
}

impl Inbox {
    pub(crate) fn push(&mut self, delivery: Event) {
        let id = delivery.subscription();
        if self.batches.get(self.last).is_some_and(|(last, _)| *last == id) {
            self.batches[self.last].1.push(delivery);
            return;
        }
        match self.batches.iter().position(|(b, _)| *b == id) {
            Some(i) => {
                self.last = i;
                self.batches[i].1.push(delivery);
            }
            None => {
                self.last = self.batches.len();
                self.batches.push((id, vec![delivery]));
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Takes every batch, leaving the inbox empty.
    pub(crate) fn take(&mut self) -> std::vec::Drain<'_, (SubId, Vec<Event>)> {
        self.last = 0;
        self.batches.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_wire::Message;

    use super::*;
    use crate::delivery::Delivery;

    fn delivery(id: u32, n: u8) -> Event {
        Event::Message(Delivery::new(SubId(id), 0, Message::new("t", &[], Bytes::from(vec![n]), 0).unwrap(), 0))
    }

    fn first_byte(event: &Event) -> u8 {
        match event {
            Event::Message(d) => d.payload[0],
            Event::Gap(_) => u8::MAX,
        }
    }

    #[test]
    fn deliveries_are_grouped_by_subscription_in_arrival_order() {
        let mut inbox = Inbox::default();
        for (id, n) in [(1, 0), (2, 1), (1, 2), (1, 3), (3, 4), (2, 5)] {
            inbox.push(delivery(id, n));
        }
        let batches: Vec<(u32, Vec<u8>)> =
            inbox.take().map(|(id, b)| (id.0, b.iter().map(first_byte).collect())).collect();
        assert_eq!(batches, [(1, vec![0, 2, 3]), (2, vec![1, 5]), (3, vec![4])]);
        assert!(inbox.is_empty());
        inbox.push(delivery(9, 9));
        assert_eq!(inbox.take().count(), 1);
    }
}
