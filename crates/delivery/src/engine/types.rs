//! The engine's inputs, actions, routes and the matching interface it asks verdicts from.

use bytes::Bytes;

use crate::error::DeliveryError;
use crate::message::Message;
use crate::names::{BrokerId, CellId, PubendId, PublisherId, SubendId, Tick, TickRange, TreeTag};
use crate::store::{StoreAction, StoreInput};

/// What a filter edge makes of one data tick for one downstream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// The message matches: it stays D.
    Data,
    /// The message cannot match anything behind this edge: it becomes F.
    Final,
    /// The matcher cannot prove either (e.g. summaries still settling): treated as D, because
    /// sending too much is safe and claiming F for a match is a silent loss.
    Unsure,
}

/// The content filter the core asks, per message. The broker implements it over its routing
/// summaries (children) and its local subscription index (subends).
pub trait Matcher {
    /// The filter edge towards downstream `cell` for pubend `pubend`.
    fn child(&self, pubend: PubendId, cell: CellId, payload: &Bytes) -> Verdict;
    /// Appends the local subends of `pubend` whose filter the message passes (one index walk:
    /// the cost does not grow with the number of subends that do not match).
    fn subends(&self, pubend: PubendId, payload: &Bytes, out: &mut Vec<SubendId>);
    /// Whether one local subend's filter passes the message (used while it catches up alone).
    fn subend(&self, pubend: PubendId, subend: SubendId, payload: &Bytes) -> bool;
    /// A number that changes whenever what [`Self::child`] judges by may have changed (a
    /// summary delta or vouch heard, a link up or down, a tree moved). An F judged at one epoch
    /// and told at another is judged again first: F told lazily must hold for the summaries of
    /// the moment it is told, not only of the moment it was judged. A matcher whose verdicts
    /// never change may return a constant.
    fn epoch(&self) -> u64;
    /// The tree [`Self::child`] judges `pubend`'s messages under now (see [`TreeTag`]): F told
    /// downstream is stamped with it, and F received is taken only under the same tag.
    fn tree(&self, pubend: PubendId) -> TreeTag;
}

/// The upstream cell of a stream: where its data comes from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UpstreamCell {
    /// The cell.
    pub cell: CellId,
    /// Its brokers linked to us; acks and nacks go to all of them when we do not know which one
    /// sends us the stream.
    pub brokers: Vec<BrokerId>,
}

/// One downstream cell of a stream and how to reach it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ChildLink {
    /// The downstream cell (the key of its ostream).
    pub cell: CellId,
    /// The broker of that cell that takes the stream (the bundle's entry for this pubend).
    pub broker: BrokerId,
    /// A cell mate of ours to relay through, when our own link to `broker` is down.
    pub via: Option<BrokerId>,
}

/// Where one pubend's stream flows at this broker, from the routing layer.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct StreamRoute {
    /// `None` at the pubend's own broker (or when the pubend is unreachable).
    pub upstream: Option<UpstreamCell>,
    /// Downstream cells in the pubend's tree below us.
    pub children: Vec<ChildLink>,
}

/// Everything that can happen to an engine.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Input {
    /// A local publisher published on a pubend this broker hosts.
    Publish {
        /// The stream.
        pubend: PubendId,
        /// The publisher.
        publisher: PublisherId,
        /// Its sequence number (retries repeat it).
        seq: u64,
        /// The message.
        payload: Bytes,
    },
    /// A protocol message from a peer broker.
    Received {
        /// The sender.
        from: BrokerId,
        /// The sender's cell (acks and nacks are kept per downstream cell).
        from_cell: CellId,
        /// The message.
        message: Message,
    },
    /// The routing layer (re)computed a stream's upstream and children.
    Route {
        /// The stream.
        pubend: PubendId,
        /// The new route.
        route: StreamRoute,
    },
    /// A peer broker came back with a new incarnation (its link handshake said so): what we
    /// believed it holds is void, so its ostreams stop trusting its old acks for answers and
    /// re-tell everything unacknowledged, and it is no longer "the broker that last sent us"
    /// anything. Feed it before any message of the new incarnation.
    PeerRestarted {
        /// The peer.
        broker: BrokerId,
    },
    /// A local subscription joins a stream; `start` is its start tick σ if already known,
    /// `None` while the subscription barrier runs (the subend then pins acknowledgements).
    SubendAttach {
        /// The stream.
        pubend: PubendId,
        /// The subend.
        subend: SubendId,
        /// σ, if known.
        start: Option<Tick>,
        /// A durable subscription's subend: acknowledged upstream only by the checkpoints fed
        /// with [`Input::SubendCheckpoint`], never by what reached its outbox. Attached again
        /// (its client back, or restored after a restart) with σ one past where its client
        /// acknowledged, it is replayed from there, even below what the stream delivered.
        durable: bool,
    },
    /// The application behind a durable subend acknowledged every tick up to `tick`, and that
    /// is now durable at this broker: the stream may acknowledge it upstream.
    SubendCheckpoint {
        /// The stream.
        pubend: PubendId,
        /// The durable subend.
        subend: SubendId,
        /// The last tick acknowledged.
        tick: Tick,
    },
    /// The barrier confirmed a pending subend's start tick.
    SubendStart {
        /// The stream.
        pubend: PubendId,
        /// The subend.
        subend: SubendId,
        /// σ.
        start: Tick,
    },
    /// A local subscription left a stream.
    SubendDetach {
        /// The stream.
        pubend: PubendId,
        /// The subend.
        subend: SubendId,
    },
    /// The subend's client outbox is full: stop delivering to it (nothing is dropped).
    OutboxFull {
        /// The subend.
        subend: SubendId,
    },
    /// The subend's client outbox has room again: resume, in order.
    OutboxReady {
        /// The subend.
        subend: SubendId,
    },
    /// A store completion.
    Store(StoreInput),
    /// An administrative early release: the pubend's log may drop everything up to `up_to`;
    /// later nacks for those ticks are answered as lost.
    EarlyRelease {
        /// The stream.
        pubend: PubendId,
        /// The new release prefix.
        up_to: Tick,
    },
    /// The pubend's replica group confirmed that this broker still led it at a time at or
    /// past `up_to` (a quorum answered, in this broker's term, a heartbeat or an append sent
    /// then): no successor can have assigned a tick at or below it. Once given for a pubend,
    /// its silence (F) is told only up to the highest one (T3): a host stalled or cut off past
    /// its term would otherwise tell F, from its own clock, over ticks a successor logged (the
    /// nemesis on a replicated cell lost a message that way). A pubend never given one (not
    /// replicated) is not capped. Given before the log opens, it holds from the first turn.
    ConfirmSilence {
        /// The stream.
        pubend: PubendId,
        /// The tick confirmed.
        up_to: Tick,
    },
    /// This broker no longer hosts the pubend, though it lives: its replica group elected
    /// another leader (a deposed host that was stalled or cut off, docs/replication.md). Two
    /// brokers must never serve one pubend, so the stream stops being the pubend here: its
    /// publishes still pending are refused ([`Action::PublishRefused`], the publisher retries at
    /// the new home), and it tells no more knowledge, answers no nack and releases nothing from
    /// its log. It becomes a relay stream that keeps its knowledge, subends and children, and
    /// follows the new home once the shell routes it there. Ask [`crate::Engine::log_holds`]
    /// first to reopen the log later ([`crate::StoreInput::Opened`]). Ignored unless the
    /// stream is the pubend here.
    CloseLog {
        /// The stream.
        pubend: PubendId,
    },
    /// The shell's cursor served serve order `order` ([`Action::Serve`]) to `subend` through
    /// `through`: every tick of the order up to it was handed to the subscriber's connection
    /// (if it matched) or told as a gap, in order. `done`: the cursor stopped (the order is
    /// complete when `through` is its end; short of it, a record was missing or damaged, or
    /// the connection closed, and the rest is replayed by the core). Reports for an order that
    /// was cancelled ([`Action::ServeCancel`]) or is not the subend's current one are ignored.
    SubendServed {
        /// The stream.
        pubend: PubendId,
        /// The subend.
        subend: SubendId,
        /// The order's id.
        order: u64,
        /// The last tick served.
        through: Tick,
        /// The cursor stopped.
        done: bool,
    },
    /// Time passed; call at [`crate::Engine::next_deadline`] (earlier calls are harmless).
    Tick,
}

/// What the shell must carry out.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Action {
    /// Send a protocol message to a broker (through `via`, a cell mate, when given).
    Send {
        /// The destination.
        to: BrokerId,
        /// The cell mate to relay through.
        via: Option<BrokerId>,
        /// The message.
        message: Message,
    },
    /// Hand a message to a local subscriber. Must not be dropped: a full outbox is reported
    /// back with [`Input::OutboxFull`] instead.
    Deliver {
        /// The subend.
        subend: SubendId,
        /// The stream.
        pubend: PubendId,
        /// The message's tick.
        tick: Tick,
        /// The message.
        payload: Bytes,
    },
    /// Tell a subscriber that messages in `range` may have been lost (early release).
    GapNotice {
        /// The subend.
        subend: SubendId,
        /// The stream.
        pubend: PubendId,
        /// The ticks concerned.
        range: TickRange,
    },
    /// The publish `(publisher, seq)` and every earlier one of that publisher are durable.
    PublishAcked {
        /// The stream.
        pubend: PubendId,
        /// The publisher.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
    },
    /// The publish `(publisher, seq)` could not be logged (the store failed its append, e.g. a
    /// full disk): it was not acknowledged and will not be delivered; the publisher may retry.
    PublishRefused {
        /// The stream.
        pubend: PubendId,
        /// The publisher.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
    },
    /// A durable operation for the store.
    Store(StoreAction),
    /// Payloads the stream no longer needs: drop them, off any path latency depends on if
    /// there are many (a thread of their own); a simulator may drop them at once.
    Free(crate::cache::Released),
    /// Serve a catching-up subend a range of ticks already final here, outside the engine's
    /// turns ([`crate::Settings::serve_orders`]): the shell reads the order's D ticks from the
    /// pubend's log, hands those that pass the subend's filter to its connection and tells the
    /// L runs as gaps, all in tick order and with backpressure, and reports progress with
    /// [`Input::SubendServed`]. Until the order ends, the engine delivers nothing else of the
    /// stream to the subend.
    Serve(ServeOrder),
    /// Stop serving order `order` at once (the subend was rewound or left): nothing more of it
    /// may reach the subscriber after this action is carried out.
    ServeCancel {
        /// The stream.
        pubend: PubendId,
        /// The subend.
        subend: SubendId,
        /// The order's id.
        order: u64,
    },
    /// An input was refused; nothing else changed.
    Rejected {
        /// Why.
        error: DeliveryError,
    },
}

/// A range of one stream's ticks to serve to one subend from the log (see [`Action::Serve`]).
/// Every tick in `from..=to` is final in the engine's knowledge; `runs` lists, in tick order,
/// the D runs (each D tick is delivered if the subend's filter passes it) and the L runs (told
/// as one gap each); the ticks between are F (nothing to do).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ServeOrder {
    /// Unique per stream; reports name it.
    pub id: u64,
    /// The stream.
    pub pubend: PubendId,
    /// The subend.
    pub subend: SubendId,
    /// The first tick of the order.
    pub from: Tick,
    /// The last tick of the order: reporting it served (`done`) completes the order.
    pub to: Tick,
    /// The D and L runs, ascending.
    pub runs: Vec<ServeRun>,
}

/// One run of a [`ServeOrder`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ServeRun {
    /// The ticks.
    pub range: TickRange,
    /// L (a gap to tell) rather than D (messages to read and filter).
    pub lost: bool,
}
