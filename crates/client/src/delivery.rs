//! One message as a subscription receives it.

use std::time::Duration;

use bytes::Bytes;
use tidings_wire::{Message, Property, PubendId, SubId, Tick, Value};

/// A message delivered to a [`Subscription`](crate::Subscription).
///
/// The payload shares the buffer the client read it into (no copy); properties are decoded
/// once, and a message without properties costs no allocation for them.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The subscription that matched (its [`id`](crate::Subscription::id)).
    pub subscription: SubId,
    /// The topic the message was published on.
    pub topic: String,
    /// The message's properties, in the order the publisher gave them.
    pub properties: Vec<Property>,
    /// The payload.
    pub payload: Bytes,
    /// The publisher's clock at sending, microseconds since the Unix epoch ([`now_us`](crate::now_us)).
    pub sent_us: u64,
    /// This client's clock when the application received the delivery: when the
    /// [`Subscription`](crate::Subscription) yielded it ([`now_us`](crate::now_us)). Latency
    /// measured from here includes the time the delivery waited in the subscription's queue,
    /// as a callback-based client (NATS) measures it.
    pub received_us: u64,
    /// This client's clock when the bytes were read off the socket, before the delivery
    /// waited for the consumer: `received_us - read_us` is the client-side queueing time.
    pub read_us: u64,
    /// Messages the broker dropped for this subscription (slow-consumer policy) since the
    /// previous delivery. Always 0 for a guaranteed subscription: nothing is dropped there.
    pub missed: u32,
    /// For a guaranteed subscription, the message's place in its publisher's stream; `None`
    /// for best effort.
    pub position: Option<Position>,
    /// The broker delivered this tick to this subscription before (a durable subscription
    /// resumed from its last acknowledgement, which trails what was taken). It is handed over
    /// flagged, never dropped silently, so the application decides and a "no duplicate" check
    /// sees it; [`SubscribeOptions::resume_from`](crate::SubscribeOptions::resume_from) skips
    /// what the application's own checkpoint already holds.
    pub redelivered: bool,
    message: Message,
}

/// Where a guaranteed delivery sits: its pubend (one publisher's ordered stream) and its tick
/// there. Per pubend, a subscription sees ticks only increase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The stream.
    pub pubend: PubendId,
    /// The place in it.
    pub tick: Tick,
}

/// Ticks `from..=to` of `pubend` that a guaranteed subscription may have missed for good:
/// the broker could no longer supply them (retention, damage on disk), or the subscription was
/// set up anew after a lost connection and starts later than where it stood. Messages there
/// may or may not have matched; a gap says so rather than skipping them silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapNotice {
    /// The subscription concerned.
    pub subscription: SubId,
    /// The stream with the gap.
    pub pubend: PubendId,
    /// First tick possibly missed.
    pub from: Tick,
    /// Last tick possibly missed (inclusive).
    pub to: Tick,
}

/// What a subscription yields through [`Subscription::next_event`](crate::Subscription::next_event):
/// a message, or (guaranteed subscriptions only) a gap notice, in stream order.
// A delivery inline, not boxed: events move through the subscription's channel in batches,
// and a box would cost one allocation per message on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Event {
    /// A message.
    Message(Delivery),
    /// Ticks possibly missed; see [`GapNotice`].
    Gap(GapNotice),
}

impl Event {
    /// The subscription the event is for.
    pub fn subscription(&self) -> SubId {
        match self {
            Event::Message(d) => d.subscription,
            Event::Gap(g) => g.subscription,
        }
    }
}

impl Delivery {
    /// Builds a delivery from a DELIVER frame's parts read off the socket at `read_us`
    /// (public so that tools can build deliveries in their own tests). `received_us` starts
    /// equal to `read_us`; a subscription restamps it when it yields the delivery.
    pub fn new(subscription: SubId, missed: u32, message: Message, read_us: u64) -> Delivery {
        Delivery {
            subscription,
            topic: message.topic().to_string(),
            properties: message.properties(),
            payload: message.payload(),
            sent_us: message.sent_us(),
            received_us: read_us,
            read_us,
            missed,
            position: None,
            redelivered: false,
            message,
        }
    }

    /// Builds a delivery from a GDELIVER frame's parts read off the socket at `read_us`.
    pub fn guaranteed(subscription: SubId, position: Position, message: Message, read_us: u64) -> Delivery {
        Delivery { position: Some(position), ..Delivery::new(subscription, 0, message, read_us) }
    }

    /// `received_us - sent_us` (zero if the publisher's clock is ahead of ours): publish to
    /// the application, queueing in this client included.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.received_us.saturating_sub(self.sent_us))
    }

    /// `read_us - sent_us` (zero if the publisher's clock is ahead of ours): publish to this
    /// client's socket read, without the wait for the consumer.
    pub fn wire_latency(&self) -> Duration {
        Duration::from_micros(self.read_us.saturating_sub(self.sent_us))
    }

    /// The first property called `key`, if any.
    pub fn property(&self, key: &str) -> Option<&Value> {
        tidings_wire::lookup(&self.properties, key)
    }

    /// The message as it travelled, for forwarding it unchanged with
    /// [`Client::publish_message`](crate::Client::publish_message).
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// A request's reply subject, where [`Client::reply`](crate::Client::reply) sends the
    /// answer; `None` for a message that is not a request.
    pub fn reply_to(&self) -> Option<&str> {
        self.message.reply_to()
    }

    /// Whether this is a topic's retained value, kept by the broker and delivered because
    /// the subscription is new, rather than a live message.
    pub fn retained(&self) -> bool {
        self.message.is_retained()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_exposes_every_field_of_the_message() {
        let m = Message::new("a.b", &[Property::new("k", 7i64)], Bytes::from_static(b"xy"), 1_000).unwrap();
        let d = Delivery::new(SubId(3), 2, m.clone(), 1_250);
        assert_eq!((d.subscription, d.missed, d.sent_us, d.received_us, d.read_us), (SubId(3), 2, 1_000, 1_250, 1_250));
        assert_eq!(d.topic, "a.b");
        assert_eq!(d.payload, Bytes::from_static(b"xy"));
        assert_eq!(d.property("k"), Some(&Value::Int(7)));
        assert_eq!(d.latency(), Duration::from_micros(250));
        assert_eq!(d.wire_latency(), Duration::from_micros(250));
        assert_eq!(d.message(), &m);
    }

    #[test]
    fn latency_is_zero_when_the_publisher_clock_is_ahead() {
        let m = Message::new("a", &[], Bytes::new(), 2_000).unwrap();
        assert_eq!(Delivery::new(SubId(1), 0, m, 1_000).latency(), Duration::ZERO);
    }
}
