//! Guaranteed delivery in the broker: the shell around the `tidings-delivery` core and the
//! `tidings-store` pubend log.
//!
//! One driver task ([`driver`]) owns the delivery [`Engine`](tidings_delivery::Engine) and the
//! [`Store`](tidings_store::Store) and is fed by one channel of [`Command`]s: frames from
//! sessions (GPUBLISH, guaranteed SUBSCRIBE, UNSUBSCRIBE, DELIVERY_ACK, disconnects), store
//! completions (from the store's writer thread), reads done (on tokio's blocking pool), and
//! "room again" from subscriber outboxes; its own timer fires at the engine's next deadline. No
//! protocol state is behind a lock, so none is held across I/O. [`journal`] converts between the
//! core's store actions and the store; [`matcher`] is the core's view of local subscriptions.
//!
//! Pubends: a GPUBLISH names its pubend (an empty name is `default`); the pubend's id is
//! `tidings_route::PubendId::derive(broker name, pubend name)`, so it is the same after a
//! restart and its log (under `<data dir>/pubends`) is found again. Every pubend in the log is
//! reopened at start, before any client is served.
//!
//! Between brokers: [`peer`] converts the core's messages to and from the `wire::peer` frames,
//! but links do not carry guaranteed traffic yet; guaranteed delivery is local to one broker.

mod actions;
mod assigned;
mod driver;
mod journal;
mod matcher;
mod metrics;
pub mod peer;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tidings_delivery::SubendId;
use tidings_matching::{Pattern, Selector};
use tidings_store::Completion;
use tidings_wire::{GuaranteedPublish, PubendId, SubId, Tick};
use tokio::sync::mpsc;

use crate::outbox::Outbox;

pub use driver::Driver;
pub use metrics::GuaranteedMetrics;

/// The pubend a GPUBLISH with an empty pubend name goes to.
pub const DEFAULT_PUBEND: &str = "default";

/// Why guaranteed delivery could not start.
#[derive(Debug, thiserror::Error)]
pub enum GuaranteedError {
    /// The pubend log could not be opened (locked, unreadable...).
    #[error("cannot open the pubend log in {dir}: {source}")]
    Store {
        /// The log directory.
        dir: String,
        /// Why.
        source: tidings_store::StoreError,
    },
}

/// What the driver is asked to do; sessions send these through [`Guaranteed`].
pub(crate) enum Command {
    /// A GPUBLISH; the answer (PUBLISH_ACK or PUBLISH_REFUSED) goes to `reply`.
    Publish { publish: GuaranteedPublish, reply: Arc<Outbox> },
    /// A guaranteed SUBSCRIBE, already validated; SUBSCRIBED goes to `outbox`.
    Subscribe { subend: SubendId, id: SubId, pattern: Pattern, selector: Option<Selector>, outbox: Arc<Outbox> },
    /// An UNSUBSCRIBE or a closed session.
    Unsubscribe { subend: SubendId },
    /// A DELIVERY_ACK from the subscriber.
    DeliveryAck { subend: SubendId, pubend: PubendId, tick: Tick },
    /// A subend's outbox that was full has room again.
    Room { subend: SubendId },
    /// One group of store completions.
    Completed(Vec<Completion>),
    /// A read of the log finished.
    ReadDone {
        pubend: tidings_delivery::PubendId,
        range: tidings_delivery::TickRange,
        records: Vec<(tidings_delivery::Tick, bytes::Bytes)>,
        /// Ranges found damaged: they become L.
        lost: Vec<tidings_delivery::TickRange>,
    },
}

/// The sessions' handle on the driver: cheap to call, never blocks.
pub struct Guaranteed {
    tx: mpsc::UnboundedSender<Command>,
    next_subend: AtomicU64,
}

impl Guaranteed {
    /// Opens the pubend log under `data_dir/pubends`, recovers every pubend in it, and returns
    /// the handle and the driver (to be spawned; it runs until shutdown).
    pub fn start(
        data_dir: &Path,
        broker: &str,
        fsync: tidings_store::FsyncPolicy,
        metrics: GuaranteedMetrics,
    ) -> Result<(Guaranteed, Driver), GuaranteedError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let options = tidings_store::Options { fsync, ..tidings_store::Options::default() };
        let driver = Driver::open(&data_dir.join("pubends"), broker, options, metrics, tx.clone(), rx)?;
        Ok((Guaranteed { tx, next_subend: AtomicU64::new(1) }, driver))
    }

    fn send(&self, command: Command) {
        // Fails only once the driver has stopped (shutdown): nothing is promised then.
        let _ = self.tx.send(command);
    }

    /// A GPUBLISH: logged, then acknowledged (or refused) on `reply`.
    pub fn publish(&self, publish: GuaranteedPublish, reply: Arc<Outbox>) {
        self.send(Command::Publish { publish, reply });
    }

    /// A guaranteed SUBSCRIBE: attached to every pubend, confirmed with SUBSCRIBED on `outbox`.
    /// Returns the subend, to unsubscribe with.
    pub fn subscribe(&self, id: SubId, pattern: Pattern, selector: Option<Selector>, outbox: Arc<Outbox>) -> SubendId {
        let subend = SubendId(self.next_subend.fetch_add(1, Ordering::Relaxed));
        self.send(Command::Subscribe { subend, id, pattern, selector, outbox });
        subend
    }

    /// The subscription ended (UNSUBSCRIBE or the session closed).
    pub fn unsubscribe(&self, subend: SubendId) {
        self.send(Command::Unsubscribe { subend });
    }

    /// The subscriber took everything of `pubend` up to `tick`.
    pub fn delivery_ack(&self, subend: SubendId, pubend: PubendId, tick: Tick) {
        self.send(Command::DeliveryAck { subend, pubend, tick });
    }
}
