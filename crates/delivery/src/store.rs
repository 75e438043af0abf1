//! The store interface of a publisher-hosting broker, as actions and inputs: the core asks for
//! durable writes and reads with [`StoreAction`]s and learns of their completion through
//! [`StoreInput`]s, so it never blocks and a simulator can lose, delay or crash them.

use bytes::Bytes;

use crate::names::{PubendId, PublisherId, Tick, TickRange};

/// A durable operation the shell must carry out on the pubend's log.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StoreAction {
    /// Append one record. Appends complete in the order they were issued: "synced up to `t`"
    /// means every earlier append is durable too (T2).
    Append {
        /// The stream.
        pubend: PubendId,
        /// The tick assigned to the message.
        tick: Tick,
        /// The message.
        record: Bytes,
        /// Who published it.
        publisher: PublisherId,
        /// The publisher's sequence number (kept for duplicate suppression after a restart).
        seq: u64,
    },
    /// Read the records in a range (to answer a nack); answered by [`StoreInput::ReadDone`].
    ReadRange {
        /// The stream.
        pubend: PubendId,
        /// The ticks wanted.
        range: TickRange,
    },
    /// Records at or below `tick` will never be read again: delete them, and persist the prefix.
    ReleasePrefix {
        /// The stream.
        pubend: PubendId,
        /// The new release prefix.
        tick: Tick,
    },
    /// Durably raise the tick lease H (T1); answered by [`StoreInput::LeaseDone`].
    LeaseRaise {
        /// The stream.
        pubend: PubendId,
        /// The new lease.
        up_to: Tick,
    },
    /// Void everything the pubend's log held (records, lease, release prefix, publishers), in
    /// order with appends: those issued after it start again at any tick. Never issued by the
    /// core: the shell voids a replicated pubend's log that its replica group contradicts
    /// before seeding it again from the group's state (`tidings_node::replicated`).
    Void {
        /// The stream.
        pubend: PubendId,
    },
    /// Durably remember that this broker may acknowledge `pubend`'s stream upstream up to
    /// `up_to` (its *ack lease*); answered by [`StoreInput::AckLeaseDone`]. Not a write to the
    /// pubend's log: it is kept for streams this broker relays or subscribes to. A broker that
    /// restarts starts every new subscription above it, because what it acknowledged upstream
    /// was settled there for the subscriptions it had then: a subscription made after the
    /// restart would get those ticks as silence, its matching messages lost without a word.
    AckLease {
        /// The stream.
        pubend: PubendId,
        /// The new ack lease.
        up_to: Tick,
    },
}

/// What a pubend's log held when the broker (re)started.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Recovered {
    /// The durable tick lease H.
    pub lease: Tick,
    /// The durable release prefix.
    pub release: Tick,
    /// Ticks of the records still in the log (above `release`), ascending.
    pub logged: Vec<Tick>,
    /// Per publisher, the highest sequence number logged.
    pub publishers: Vec<(PublisherId, u64)>,
    /// Ticks whose records were damaged on disk and can never be served: they become L, so a
    /// subscriber gets a gap notice for them instead of a silent F.
    pub lost: Vec<TickRange>,
}

/// A completion coming back from the store.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StoreInput {
    /// The pubend's log was opened (on start or restart): the stream begins serving.
    Opened {
        /// The stream.
        pubend: PubendId,
        /// What the log held.
        recovered: Recovered,
    },
    /// Every append up to and including `synced_up_to` is durable.
    AppendDone {
        /// The stream.
        pubend: PubendId,
        /// The highest durable tick.
        synced_up_to: Tick,
    },
    /// The append of `tick` failed (nothing of it is durable); later appends may still succeed.
    /// Feed it before any [`StoreInput::AppendDone`] covering a later tick.
    AppendFailed {
        /// The stream.
        pubend: PubendId,
        /// The tick of the failed append.
        tick: Tick,
    },
    /// A read finished: the records of the range still in the log.
    ReadDone {
        /// The stream.
        pubend: PubendId,
        /// The range asked for.
        range: TickRange,
        /// `(tick, record)` for each record found, ascending.
        records: Vec<(Tick, Bytes)>,
        /// Ticks whose records the store found damaged (checksum mismatch): they can never be
        /// served and become L (gap notices), never F.
        lost: Vec<TickRange>,
    },
    /// The lease is durable up to `lease`.
    LeaseDone {
        /// The stream.
        pubend: PubendId,
        /// The durable lease.
        lease: Tick,
    },
    /// The ack lease ([`StoreAction::AckLease`]) is durable up to `lease`; also fed at start for
    /// every ack lease found, before any subscription.
    AckLeaseDone {
        /// The stream.
        pubend: PubendId,
        /// The durable ack lease.
        lease: Tick,
    },
    /// The lease could not be raised (a full disk): it is asked for again at the next silence
    /// interval. Until it is, silence stops at the old lease.
    LeaseFailed {
        /// The stream.
        pubend: PubendId,
    },
}
