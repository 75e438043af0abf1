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
//! Between brokers ([`net`]): the driver keeps a stream of every pubend the link-state adverts
//! list, feeds the engine routing's routes for them, takes frames from the links (converted by
//! [`peer`]) and sends the engine's messages in the links' guaranteed lanes; subscriptions
//! start after routing's barrier ([`subscribe`]).

mod ack_leases;
mod actions;
mod children;
mod cursor;
mod driver;
pub mod durable;
mod durable_store;
mod edges;
mod group_links;
mod group_paths;
pub mod groups;
mod homes;
mod journal;
pub use crate::liveness;
mod matcher;
mod metrics;
mod net;
pub mod peer;
mod refusals;
pub mod relay;
mod relay_book;
mod remote_members;
mod replicas;
mod retained_values;
mod retention;
mod state;
mod subscribe;

pub use state::{DurableState, DurableStream, GuaranteedState, NackRanges, PubendState, ReplicaGroupState};

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tidings_delivery::SubendId;
use tidings_matching::{Pattern, Selector};
use tidings_store::Completion;
use tidings_wire::{GuaranteedPublish, PubendId, SubId, Tick};
use tokio::sync::mpsc;

use crate::outbox::Outbox;

pub(crate) use driver::set_clock_ahead;
pub use driver::Driver;
pub use metrics::GuaranteedMetrics;

/// The pubend a GPUBLISH with an empty pubend name goes to (clients derive its id too).
pub use tidings_wire::ids::DEFAULT_PUBEND;

/// A pubend's name as its id derives from it (`""` is [`DEFAULT_PUBEND`]).
fn pubend_name(name: &str) -> &str {
    if name.is_empty() {
        DEFAULT_PUBEND
    } else {
        name
    }
}

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
    /// The durable subscriptions' store could not be opened or read.
    #[error("{0}")]
    Durable(#[from] durable_store::DurableStoreError),
    /// The replica journals could not be opened or read.
    #[error("cannot open the replica journals: {0}")]
    Replicas(String),
}

/// What the driver is asked to do; sessions send these through [`Guaranteed`], the cluster as
/// its [`Event`](crate::cluster::Event)s on the channel `server` hands it ([`Inbox::sender`]).
pub(crate) enum Command {
    /// A link handshake with `peer` completed.
    PeerUp { peer: tidings_route::BrokerName, cell: tidings_route::CellName, incarnation: u64 },
    /// The link to `peer` went down.
    PeerDown { peer: tidings_route::BrokerName },
    /// A GROUP frame (a guaranteed queue group's member traffic) from linked peer `from`.
    Group { from: tidings_route::BrokerName, frame: tidings_wire::peer::Group },
    /// A guaranteed queue group member joins a group kept at another broker.
    JoinRemote(Box<group_links::RemoteJoin>),
    /// A guaranteed-delivery frame from a linked peer.
    Received { from: tidings_route::BrokerName, message: tidings_delivery::Message },
    /// A SIDEWAYS frame brought by linked peer `carrier` (for us, or for us to hand on).
    Sideways { carrier: tidings_route::BrokerName, frame: tidings_wire::peer::Sideways },
    /// One of routing's guaranteed-delivery actions.
    Routing(tidings_route::GdAction),
    /// A message of a pubend's Raft group from cell mate `from`.
    Replica { from: tidings_route::BrokerName, frame: tidings_wire::peer::Replica },
    /// An operator forgets `broker`, gone from the cell for good (`tidings cell forget`), or with
    /// `readmit` takes that back here (`tidings cell unforget`): the answer (what happened, or
    /// why not) goes to `reply`.
    Forget {
        broker: tidings_route::BrokerName,
        readmit: bool,
        reply: tokio::sync::oneshot::Sender<Result<String, String>>,
    },
    /// Writes of the replica journals completed.
    ReplicaSynced(Vec<Completion>),
    /// A GPUBLISH; the answer (PUBLISH_ACK or PUBLISH_REFUSED) goes to `reply`. `retained`:
    /// the retained value it sets (the copy the session applies), written to disk first.
    Publish { publish: GuaranteedPublish, reply: Arc<Outbox>, retained: Option<tidings_wire::Message> },
    /// A topic kept on disk got a new retained value in memory (`None`: cleared).
    RetainedChanged { topic: String, value: Option<bytes::Bytes> },
    /// A guaranteed SUBSCRIBE, already validated (a durable name already claimed); SUBSCRIBED
    /// goes to `outbox`.
    Subscribe {
        subend: SubendId,
        id: SubId,
        pattern: Pattern,
        selector: Option<Selector>,
        outbox: Arc<Outbox>,
        durable: Option<durable::DurableSpec>,
    },
    /// A guaranteed queue group member joins (the group's name already claimed).
    Join(Box<groups::Join>),
    /// An UNSUBSCRIBE or a closed session (a durable subscription is deleted; a group member
    /// leaves its group).
    Unsubscribe { subend: SubendId },
    /// The session holding a durable subscription closed: it stays.
    Away { subend: SubendId },
    /// A checkpoint write finished.
    CheckpointsSaved { saved: tidings_node::durables::Batch, result: Result<(), String> },
    /// An ack lease write finished.
    AckLeasesSaved {
        saved: std::collections::BTreeMap<tidings_delivery::PubendId, tidings_delivery::Tick>,
        result: Result<(), String>,
    },
    /// A DELIVERY_ACK from the subscriber.
    DeliveryAck { subend: SubendId, pubend: PubendId, tick: Tick },
    /// A subend's outbox that was full has room again.
    Room { subend: SubendId },
    /// One group of store completions.
    Completed(Vec<Completion>),
    /// An answer (PUBLISH_ACK, PUBLISH_REFUSED) to a relay's republish (`relay`).
    RelayAnswer { relay: SubendId, frame: tidings_wire::Frame },
    /// A relay's republishes of `origin` are due to be sent again after a refusal.
    RelayResend { relay: SubendId, origin: tidings_delivery::PubendId },
    /// A relay's watch: it had had `answers` answers when the watch was set (`relay`).
    RelayWatch { relay: SubendId, answers: u64 },
    /// A catch-up's cursor served a serve order this far (`cursor`).
    Served(cursor::Served),
    /// A read of the log finished.
    ReadDone {
        pubend: tidings_delivery::PubendId,
        range: tidings_delivery::TickRange,
        records: Vec<(tidings_delivery::Tick, bytes::Bytes)>,
        /// Ranges found damaged: they become L.
        lost: Vec<tidings_delivery::TickRange>,
    },
}

/// The cluster's events are commands to the driver.
impl TryFrom<crate::cluster::Event> for Command {
    type Error = ();

    fn try_from(event: crate::cluster::Event) -> Result<Command, ()> {
        use crate::cluster::Event;
        Ok(match event {
            Event::PeerUp { peer, cell, incarnation } => Command::PeerUp { peer, cell, incarnation },
            Event::PeerDown { peer } => Command::PeerDown { peer },
            Event::Group { from, frame } => Command::Group { from, frame },
            Event::Routing(action) => Command::Routing(action),
            Event::Sideways { carrier, frame } => Command::Sideways { carrier, frame },
            Event::Replica { from, frame } => Command::Replica { from, frame },
            Event::Guaranteed { from, frame } => match peer::from_frame(&frame) {
                Some(message) => Command::Received { from, message },
                None => {
                    // The cluster hands on only what `cluster::is_guaranteed` passes, and every
                    // such frame converts: only a change to one side without the other gets here.
                    tracing::error!(%from, "a link frame handed on as guaranteed delivery is none");
                    return Err(());
                }
            },
        })
    }
}

/// The driver's command channel, made before the cluster (which sends its events into it) and
/// the driver (which reads it) exist, so neither needs the other to be built first.
pub struct Inbox {
    tx: mpsc::UnboundedSender<Command>,
    rx: mpsc::UnboundedReceiver<Command>,
}

impl Inbox {
    /// A new, empty inbox.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Inbox {
        let (tx, rx) = mpsc::unbounded_channel();
        Inbox { tx, rx }
    }

    /// A sending end for the cluster's events.
    pub fn sender(&self) -> Box<dyn crate::cluster::EventSink> {
        Box::new(self.tx.clone())
    }
}

impl Command {
    /// Its name, for the driver's warning about a long turn.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Command::PeerUp { .. } => "peer up",
            Command::PeerDown { .. } => "peer down",
            Command::Group { .. } => "group frame",
            Command::JoinRemote(_) => "join a remote group",
            Command::Received { .. } => "received",
            Command::Sideways { .. } => "sideways",
            Command::Routing(_) => "routing",
            Command::Replica { .. } => "replica message",
            Command::Forget { .. } => "forget a broker",
            Command::ReplicaSynced(_) => "replica journal completions",
            Command::Publish { .. } => "publish",
            Command::RetainedChanged { .. } => "retained value changed",
            Command::Subscribe { .. } => "subscribe",
            Command::Join(_) => "join group",
            Command::Unsubscribe { .. } => "unsubscribe",
            Command::Away { .. } => "away",
            Command::CheckpointsSaved { .. } => "checkpoints saved",
            Command::AckLeasesSaved { .. } => "ack leases saved",
            Command::DeliveryAck { .. } => "delivery ack",
            Command::Room { .. } => "room",
            Command::Completed(_) => "log completions",
            Command::ReadDone { .. } => "log read",
            Command::Served(_) => "catch-up served",
            Command::RelayAnswer { .. } => "relay answer",
            Command::RelayResend { .. } => "relay resend",
            Command::RelayWatch { .. } => "relay watch",
        }
    }
}

/// The sessions' handle on the driver: cheap to call, never blocks.
pub struct Guaranteed {
    tx: mpsc::UnboundedSender<Command>,
    next_subend: Arc<AtomicU64>,
    claims: Arc<parking_lot::Mutex<durable::Claims>>,
    state: Arc<parking_lot::Mutex<GuaranteedState>>,
    /// The retained values found on disk at start, until the server takes them.
    restored: parking_lot::Mutex<Vec<tidings_wire::Message>>,
}

impl Guaranteed {
    /// Opens the pubend log under `data_dir/pubends`, recovers every pubend in it, and returns
    /// the handle and the driver (to be spawned; it runs until shutdown), which reads `inbox`
    /// (where `cluster` already sends its events).
    pub fn start(
        data_dir: &Path,
        broker: &str,
        (options, retention, (drop_unsynced, replicas, store_cell), guaranteed): (
            tidings_store::Options,
            crate::config::Retention,
            (bool, crate::config::ReplicaSizes, bool),
            liveness::GuaranteedConfig,
        ),
        metrics: GuaranteedMetrics,
        (cluster, Inbox { tx, rx }): (Arc<crate::cluster::Cluster>, Inbox),
    ) -> Result<(Guaranteed, Driver), GuaranteedError> {
        let dir = data_dir.join("pubends");
        let next_subend = Arc::new(AtomicU64::new(1));
        let claims = Arc::default();
        let handles =
            driver::Handles { claims: Arc::clone(&claims), next_subend: Arc::clone(&next_subend), tx: tx.clone(), rx };
        let fs: Arc<dyn tidings_store::Fs> = match drop_unsynced {
            true => Arc::new(tidings_store::DropUnsyncedFs),
            false => Arc::new(tidings_store::StdFs),
        };
        let replica_store = (options, Arc::clone(&fs), replicas);
        let replica_cluster = Arc::clone(&cluster);
        let mut driver = Driver::open(&dir, broker, (options, fs, guaranteed.settings()), metrics, cluster, handles)?;
        driver.retention = retention;
        driver.relays.enabled = store_cell;
        driver.replicas = replicas::Replicas::open(data_dir, replica_store, replica_cluster, tx.clone())?;
        driver.open_found()?;
        let (kept, restored) = retained_values::load(&driver.durables.store)?;
        driver.kept = kept;
        let state = driver.shared_state();
        let restored = parking_lot::Mutex::new(restored);
        Ok((Guaranteed { tx, next_subend, claims, state, restored }, driver))
    }

    /// The latest snapshot of guaranteed delivery here, for `/state`.
    pub fn state(&self) -> GuaranteedState {
        self.state.lock().clone()
    }

    fn send(&self, command: Command) {
        // Fails only once the driver has stopped (shutdown): nothing is promised then.
        let _ = self.tx.send(command);
    }

    /// A GPUBLISH: logged, then acknowledged (or refused) on `reply`. With `retained` (the
    /// retained value it sets, as the session applies it), that value is written to disk
    /// first, so an acknowledged value survives a restart.
    pub fn publish(&self, publish: GuaranteedPublish, reply: Arc<Outbox>, retained: Option<tidings_wire::Message>) {
        if let Some(reason) = relay::reserved_publish(&publish) {
            let refused = tidings_wire::PublishRefused { publisher: publish.publisher, seq: publish.seq, reason };
            reply.push_frame(&tidings_wire::Frame::PublishRefused(refused));
            return;
        }
        self.send(Command::Publish { publish, reply, retained });
    }

    /// The retained values kept on disk here (once: the server gives them to the in-memory
    /// store at start), and the hook that store hands every later change of their topics to
    /// (see [`crate::retained`]).
    pub fn retained_on_disk(&self) -> (Vec<tidings_wire::Message>, crate::retained::DurableHook) {
        let values = std::mem::take(&mut *self.restored.lock());
        let tx = self.tx.clone();
        let hook = move |topic: &str, value: Option<&tidings_wire::Message>| {
            let value = value.map(|m| m.as_bytes().clone());
            // Fails only once the driver has stopped (shutdown).
            let _ = tx.send(Command::RetainedChanged { topic: topic.to_string(), value });
        };
        (values, Box::new(hook))
    }

    /// A guaranteed SUBSCRIBE: attached to every pubend, confirmed with SUBSCRIBED on `outbox`.
    /// Returns the subend, to unsubscribe with.
    pub fn subscribe(&self, id: SubId, pattern: Pattern, selector: Option<Selector>, outbox: Arc<Outbox>) -> SubendId {
        let subend = SubendId(self.next_subend.fetch_add(1, Ordering::Relaxed));
        self.send(Command::Subscribe { subend, id, pattern, selector, outbox, durable: None });
        subend
    }

    /// A durable SUBSCRIBE: claims the name (refused at once if another session holds it or it
    /// stands for another filter), then resumes or creates it. Returns the name's subend.
    pub fn subscribe_durable(
        &self,
        id: SubId,
        spec: durable::DurableSpec,
        (pattern, selector): (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) -> Result<SubendId, tidings_wire::Notice> {
        // A number is taken whether or not the name is new: they are plentiful.
        let fresh = SubendId(self.next_subend.fetch_add(1, Ordering::Relaxed));
        let subend = self.claims.lock().claim(&spec.name, &spec.pattern, spec.selector.as_deref(), fresh)?;
        self.send(Command::Subscribe { subend, id, pattern, selector, outbox, durable: Some(spec) });
        Ok(subend)
    }

    /// A guaranteed queue group member joins `group` (keyed by the property `key`, if given):
    /// refused at once if the group exists for another pattern, selector or key (its members share one filter: the group is one
    /// subscription). Returns the member's own subend number (its acks and its end name it).
    pub fn join_group(
        &self,
        id: SubId,
        group: &str,
        (pattern_text, selector_text, key): (String, Option<String>, Option<String>),
        filter: (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) -> Result<SubendId, tidings_wire::Notice> {
        let name = groups::durable_name(group);
        let fresh = SubendId(self.next_subend.fetch_add(1, Ordering::Relaxed));
        let texts = (pattern_text.as_str(), selector_text.as_deref(), key.as_deref());
        let subend = self.claims.lock().claim_group(&name, texts, fresh)?;
        let member = SubendId(self.next_subend.fetch_add(1, Ordering::Relaxed));
        let spec = durable::DurableSpec { name, pattern: pattern_text, selector: selector_text, key };
        let dest = groups::Dest::Local { id, outbox };
        self.send(Command::Join(Box::new(groups::Join { member, group: subend, dest, spec, filter })));
        Ok(member)
    }

    /// A guaranteed queue group member joins `group`, kept at broker `home`: its broker joins
    /// it there over the link (SUBSCRIBED once the home confirms, an ERROR if it refuses).
    /// Returns the member's subend number here (its acks and its end name it).
    pub fn join_remote_group(
        &self,
        (id, outbox): (SubId, Arc<Outbox>),
        group: &str,
        (pattern, selector, key): (String, Option<String>, Option<String>),
        home: tidings_route::BrokerName,
    ) -> SubendId {
        let member = SubendId(self.next_subend.fetch_add(1, Ordering::Relaxed));
        let join = tidings_wire::peer::GroupBody::Join { group: group.to_string(), pattern, selector, key };
        self.send(Command::JoinRemote(Box::new(group_links::RemoteJoin { member, home, id, outbox, join })));
        member
    }

    /// The session holding durable subscription `name` closed: the subscription stays.
    pub fn leave_durable(&self, name: &str, subend: SubendId) {
        self.claims.lock().release(name);
        self.send(Command::Away { subend });
    }

    /// Deletes durable subscription `name` for an operator (`tidings durable rm`): `None` if
    /// there is no such name, `Some(false)` if a client holds it (it is not taken from under it).
    pub fn delete_durable_by_name(&self, name: &str) -> Option<bool> {
        let subend = {
            let mut claims = self.claims.lock();
            match claims.free_subend(name)? {
                Some(subend) => {
                    claims.remove(name);
                    subend
                }
                None => return Some(false),
            }
        };
        self.send(Command::Unsubscribe { subend });
        Some(true)
    }

    /// Forgets `broker`, removed from the cell for good, for an operator (`tidings cell
    /// forget`): every replica group that has it as a member removes it and grows again with a
    /// linked mate (docs/replication.md, "Membership"). `Err` with the reason when it cannot be.
    pub async fn forget_broker(&self, broker: tidings_route::BrokerName) -> Result<String, String> {
        self.cell_change(broker, false).await
    }

    /// Takes back a forget of `broker` on this broker, for an operator (`tidings cell
    /// unforget`): its links are accepted here again (docs/replication.md, "Membership
    /// changes", re-using a name).
    pub async fn readmit_broker(&self, broker: tidings_route::BrokerName) -> Result<String, String> {
        self.cell_change(broker, true).await
    }

    async fn cell_change(&self, broker: tidings_route::BrokerName, readmit: bool) -> Result<String, String> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.send(Command::Forget { broker, readmit, reply });
        answer.await.unwrap_or_else(|_| Err("the broker is shutting down".to_string()))
    }

    /// UNSUBSCRIBE of durable subscription `name`: it is deleted.
    pub fn delete_durable(&self, name: &str, subend: SubendId) {
        self.claims.lock().remove(name);
        self.send(Command::Unsubscribe { subend });
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
