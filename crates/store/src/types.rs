//! The store's own value types. They mirror the delivery core's names but do not depend on it:
//! the broker converts at the boundary, so the log format never changes because a core did.

use bytes::Bytes;

/// Which pubend a record belongs to (the route crate's `PubendId` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PubendId(pub u64);

/// A slot in a pubend's stream (microseconds of the publisher-hosting broker's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tick(pub u64);

/// Who published a message; with [`PublisherSeq`] it makes retried publishes detectable (T4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublisherId(pub u64);

/// The publisher's own sequence number for a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublisherSeq(pub u64);

/// The caller's handle for one submitted operation, echoed back in its [`crate::Completion`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

/// One logged message: what the pubend needs to answer a nack after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The pubend whose stream holds the message.
    pub pubend: PubendId,
    /// The message's tick.
    pub tick: Tick,
    /// The publisher that sent it.
    pub publisher: PublisherId,
    /// The publisher's sequence number.
    pub seq: PublisherSeq,
    /// The message bytes, exactly as appended.
    pub payload: Bytes,
}

/// An inclusive range of ticks, `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TickRange {
    /// The first tick of the range.
    pub first: Tick,
    /// The last tick of the range (inclusive).
    pub last: Tick,
}
