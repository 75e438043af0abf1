//! Links to other brokers and the routing core behind them.
//!
//! [`Cluster`] owns the route core's [`Router`] and the table of up link connections behind one
//! lock. Link tasks ([`link`]) read frames and feed the router; the router's actions are carried
//! out under the same lock (control frames queued on links, links closed), so summary deltas
//! leave in the order the router produced them. The data path ([`Cluster::forward`]) takes the
//! lock shared: one routing decision, then a frame prefix per copy, the message section shared.
//!
//! What the layer above must hear of (link-ups, routing's guaranteed-delivery actions, the
//! guaranteed frames links carry) goes out as an [`Event`] on the channel handed to
//! [`Cluster::new`]; the cluster knows nothing of guaranteed delivery.
//!
//! A broker with no links skips all of this (`is_active` is one atomic load), so a lone
//! broker's publish path is what it was before links existed.

pub mod auth;
mod convert;
mod data;
mod dial;
mod events;
mod filter;
mod forgotten;
mod handshake;
mod link;
mod link_stats;
mod queue;
mod redial;
mod servers;
mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tidings_route::{
    Action, BrokerName, CellName, Incarnation, Input, LivenessSettings, Millis, PeerMessage, PubendId, Router,
    RouterSettings,
};
use tidings_wire::hash::{finalise, fnv1a, GOLDEN_GAMMA};
use tidings_wire::peer::{AuthMode, Hello, NONCE_LEN, PEER_PROTOCOL_MIN_VERSION, PEER_PROTOCOL_VERSION};
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::config::Config;
use crate::metrics::Metrics;

pub use auth::{KeyError, NetworkKey};
pub use data::RouteScratch;
pub use dial::dial_loop;
pub use events::{is_guaranteed, Event, EventSink};
pub use filter::{FilterText, Probe, RouteFilter};
pub(crate) use forgotten::broker_id;
pub use forgotten::FORGOTTEN;
pub use link::{accept_loop, ticker, LinkContext};
pub use link_stats::{link_reporter, LinkReport};
pub use queue::{DataPush, LinkCounters, LinkLimits, LinkQueue};

/// Which side opened a link connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// We dialled the peer.
    Outbound,
    /// The peer dialled us.
    Inbound,
}

/// One up link connection, as the shell tracks it.
struct LinkEntry {
    connection: u64,
    /// The peer protocol version the link negotiated: frames newer than it are not sent.
    version: u16,
    incarnation: Incarnation,
    direction: Direction,
    remote: Option<SocketAddr>,
    queue: Arc<LinkQueue>,
    since: Instant,
    /// When a control frame (or a batch of data) last arrived: what "alive" means when a
    /// newcomer claims this peer's name.
    last_heard: Instant,
    /// The peer's cell, from its handshake: only cell mates' addresses are told to clients.
    cell: CellName,
}

struct Core {
    router: Router<RouteFilter>,
    links: BTreeMap<BrokerName, LinkEntry>,
    /// The client addresses each cell mate sent (peer frame SERVERS), kept when its link
    /// drops: a mate cut off from this broker may be the one serving its clients now.
    mates: BTreeMap<BrokerName, Vec<String>>,
    actions: Vec<Action<RouteFilter>>,
}

/// The broker's side of the network: identity, router, links.
pub struct Cluster {
    name: BrokerName,
    cell: CellName,
    incarnation: Incarnation,
    /// The network key links authenticate with; `None` on an insecure network.
    key: Option<NetworkKey>,
    liveness: LivenessSettings,
    limits: LinkLimits,
    started: Instant,
    core: RwLock<Core>,
    /// True while at least one link is up; the publish path checks it before anything else.
    active: AtomicBool,
    /// The broker keeping the network's guaranteed queue groups (`[cluster] queue_home`).
    queue_home: Option<BrokerName>,
    /// Whether this broker has a link listener or peers to dial; without either, local
    /// subscriptions are not fed to the router (summaries cost a covering pass per change).
    enabled: bool,
    next_connection: AtomicU64,
    next_pubend: AtomicU64,
    /// Woken when the router's next deadline may have moved earlier.
    timer: Notify,
    metrics: Metrics,
    /// When routes last changed (ms since start), for `/state`.
    last_route_change: AtomicU64,
    /// Where link-ups, routing's guaranteed actions and the links' guaranteed frames go (sent
    /// under the lock, never blocking); handed in at construction.
    events: Box<dyn EventSink>,
    /// The network's link reports for the web view (see [`link_stats`]); its own lock, never
    /// taken with the router's.
    link_stats: parking_lot::Mutex<link_stats::Book>,
    /// Where this broker says its clients connect (`[cluster] client_advertise`).
    advertise: servers::Advertise,
    /// What clients are told (SERVERS): this broker's addresses, then its linked cell
    /// mates'. Sessions watch it and send the list again when it changes.
    servers: tokio::sync::watch::Sender<Arc<Vec<String>>>,
    /// Brokers forgotten in this cell, and whether this one is ([`forgotten`]); its own lock,
    /// never held while taking the router's.
    forgotten: parking_lot::Mutex<forgotten::Forgotten>,
}

/// Why a handshake was refused; the text goes into the CLOSE frame.
pub type Refusal = String;

impl Cluster {
    /// The cluster of a broker with `config`, this life's `incarnation` (from the data
    /// directory) and the network `key` (`None`: insecure), telling `events` what happens; no
    /// links yet.
    pub fn new(
        config: &Config,
        metrics: Metrics,
        incarnation: u64,
        key: Option<NetworkKey>,
        events: Box<dyn EventSink>,
    ) -> Cluster {
        let name = BrokerName::new(&config.name);
        let cell = CellName::new(config.cell());
        let liveness = LivenessSettings {
            heartbeat_interval_ms: config.cluster.heartbeat_interval.as_millis() as u64,
            missed_heartbeats: config.cluster.missed_heartbeats,
        };
        // Departed links' interest is held as long as guaranteed delivery holds a departed
        // cell's log, so no tick the log still keeps for it is judged F meanwhile.
        let departed_interest_ms = config.guaranteed.liveness.settings().departed_retention_ms.unwrap_or(u64::MAX);
        let settings = RouterSettings {
            name: name.clone(),
            cell: cell.clone(),
            incarnation: Incarnation(incarnation),
            liveness,
            departed_interest_ms,
        };
        Cluster {
            name,
            cell,
            incarnation: Incarnation(incarnation),
            key,
            liveness,
            limits: LinkLimits {
                max_messages: config.cluster.link_queue_messages,
                max_bytes: config.cluster.link_queue_bytes,
            },
            started: Instant::now(),
            core: RwLock::new(Core {
                router: Router::new(settings),
                links: BTreeMap::new(),
                mates: BTreeMap::new(),
                actions: Vec::new(),
            }),
            active: AtomicBool::new(false),
            enabled: !config.cluster.listen.is_empty() || !config.peer.is_empty(),
            queue_home: (!config.cluster.queue_home.is_empty()).then(|| BrokerName::new(&config.cluster.queue_home)),
            next_connection: AtomicU64::new(1),
            next_pubend: AtomicU64::new(1),
            timer: Notify::new(),
            metrics,
            last_route_change: AtomicU64::new(0),
            events,
            link_stats: parking_lot::Mutex::default(),
            advertise: servers::Advertise::Nothing,
            servers: tokio::sync::watch::Sender::new(Arc::new(Vec::new())),
            forgotten: parking_lot::Mutex::default(),
        }
    }

    /// The same cluster, telling cell mates that its clients connect at `setting` (`[cluster]
    /// client_advertise`) or, when that is empty, at `bound` (the client TCP listener's
    /// address, `None` without one).
    pub fn advertising(mut self, setting: &str, bound: Option<SocketAddr>) -> Cluster {
        self.advertise = servers::Advertise::new(setting, bound);
        self
    }

    /// The client addresses to send a linked broker whose link's local end is `local`.
    pub(crate) fn own_servers(&self, local: Option<std::net::IpAddr>) -> Vec<String> {
        self.advertise.for_link(local)
    }

    /// What clients are told now, and a receiver that wakes when it changes.
    pub fn servers(&self) -> tokio::sync::watch::Receiver<Arc<Vec<String>>> {
        self.servers.subscribe()
    }

    /// A linked broker's client addresses arrived on `connection`: kept (when it is a cell
    /// mate's current connection) until it sends others, and the clients' list follows.
    pub(crate) fn servers_received(&self, peer: &BrokerName, connection: u64, addresses: Vec<String>) {
        let mut guard = self.core.write();
        let core = &mut *guard;
        let Some(entry) = core.links.get(peer).filter(|entry| entry.connection == connection) else { return };
        if entry.cell != self.cell {
            return;
        }
        info!(%peer, ?addresses, "cell mate's client addresses");
        core.mates.insert(peer.clone(), addresses);
        self.tell_servers(&core.mates);
    }

    /// The client addresses `peer` sent, if it is a cell mate that sent any.
    fn mate_servers(&self, core: &Core, peer: &BrokerName) -> Vec<String> {
        core.mates.get(peer).cloned().unwrap_or_default()
    }

    /// Recomputes what clients are told from the mates' addresses (in name order).
    fn tell_servers(&self, mates: &BTreeMap<BrokerName, Vec<String>>) {
        let list = servers::told(self.advertise.own(), mates.values().map(Vec::as_slice));
        self.servers.send_if_modified(|told| {
            let changed = **told != list;
            if changed {
                *told = Arc::new(list);
            }
            changed
        });
    }

    /// Tells the layer above what happened (see [`events`]).
    pub(crate) fn tell(&self, event: Event) {
        self.events.send(event);
    }

    /// This broker's cell.
    pub fn cell(&self) -> &CellName {
        &self.cell
    }

    /// Asks routing to confirm every subscription fed so far (the start-tick barrier); the
    /// number comes back in `GdAction::BarrierConfirmed`, through the driver's inbox.
    pub(crate) fn request_barrier(&self) -> u64 {
        let mut guard = self.core.write();
        let core = &mut *guard;
        let number = core.router.request_barrier(&mut core.actions);
        self.execute(core);
        drop(guard);
        self.timer.notify_one();
        number
    }

    /// Where a pubend's stream comes from and goes to here (see `Router::pubend_route`).
    pub(crate) fn pubend_route(&self, pubend: &tidings_route::PubendRef) -> Option<tidings_route::PubendRoute> {
        self.core.read().router.pubend_route(pubend)
    }

    /// Whether `cell` is reachable in the tree rooted at `root` (see `Router::cell_reachable`).
    pub(crate) fn cell_reachable(&self, root: &CellName, cell: &CellName) -> bool {
        self.core.read().router.cell_reachable(root, cell)
    }

    /// Runs `judge` over the router under its read lock: guaranteed delivery's filter edges and
    /// trees (`tidings_node::edges`) ask it, the same code the simulator runs over its routers.
    pub(crate) fn with_router<T>(&self, judge: impl FnOnce(&Router<RouteFilter>) -> T) -> T {
        judge(&self.core.read().router)
    }

    /// The router's verdict epoch (see `Router::verdict_epoch`): guaranteed delivery judges
    /// again an F it told lazily when this moved.
    pub(crate) fn verdict_epoch(&self) -> u64 {
        self.core.read().router.verdict_epoch()
    }

    /// Where to hand a guaranteed frame for `to` that has no link from here (see
    /// `Router::sideways_hop`).
    pub(crate) fn sideways_hop(&self, to: &BrokerName, via: Option<&BrokerName>) -> Option<BrokerName> {
        self.core.read().router.sideways_hop(to, via)
    }

    /// The cell of `broker` in routing's view, linked to us or not.
    pub(crate) fn cell_of_broker(&self, broker: &BrokerName) -> Option<CellName> {
        self.core.read().router.cell_of_broker(broker)
    }

    /// Queues a guaranteed-delivery frame in the guaranteed lane of the link to `to`; false if
    /// there is no up link to it (the core recovers by nacks and re-sends).
    pub(crate) fn send_guaranteed(&self, to: &BrokerName, frame: bytes::Bytes) -> bool {
        match self.core.read().links.get(to) {
            Some(entry) => entry.queue.push_guaranteed(frame),
            None => false,
        }
    }

    /// Queues a GROUP frame (a guaranteed queue group's member traffic) in the guaranteed lane
    /// of the link to `to`; false if there is no up link to it or the link's peer protocol is
    /// older than GROUP ([`tidings_wire::peer::GROUP_VERSION`]).
    pub(crate) fn send_group(&self, to: &BrokerName, frame: bytes::Bytes) -> bool {
        match self.core.read().links.get(to) {
            Some(entry) if entry.version >= tidings_wire::peer::GROUP_VERSION => entry.queue.push_guaranteed(frame),
            _ => false,
        }
    }

    /// Linked peers that speak GROUP on a shortest path to `to` (see `Router::next_hops`):
    /// where a GROUP frame for `to` goes next.
    pub(crate) fn group_hops(&self, to: &BrokerName) -> Vec<BrokerName> {
        let core = self.core.read();
        let speaks =
            |hop: &BrokerName| core.links.get(hop).is_some_and(|e| e.version >= tidings_wire::peer::GROUP_VERSION);
        core.router.next_hops(to).into_iter().filter(speaks).collect()
    }

    /// The broker keeping the network's guaranteed queue groups, if one is configured.
    pub fn queue_home(&self) -> Option<&BrokerName> {
        self.queue_home.as_ref()
    }

    /// This broker's name.
    pub fn name(&self) -> &BrokerName {
        &self.name
    }

    /// The incarnation announced in handshakes.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// Whether this broker takes part in a network (a link listener or peers to dial).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether any link is up (if not, published messages have nowhere else to go).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Milliseconds since this broker started: the route core's clock.
    pub fn now(&self) -> Millis {
        Millis(self.started.elapsed().as_millis() as u64)
    }

    /// A fresh publishing endpoint id for a client session: distinct across sessions and
    /// restarts, so rendezvous hashing spreads publishers over the links of a bundle.
    pub fn new_pubend(&self) -> PubendId {
        let counter = self.next_pubend.fetch_add(1, Ordering::Relaxed);
        let hash = fnv1a(self.name.as_str().as_bytes());
        PubendId(finalise(hash ^ finalise(self.incarnation.0) ^ finalise(counter.wrapping_mul(GOLDEN_GAMMA))))
    }

    /// The HELLO this broker sends, with a fresh `nonce`.
    pub fn hello(&self, nonce: [u8; NONCE_LEN]) -> Hello {
        Hello {
            min_version: PEER_PROTOCOL_MIN_VERSION,
            max_version: PEER_PROTOCOL_VERSION,
            auth: if self.key.is_some() { AuthMode::SharedKey } else { AuthMode::Insecure },
            nonce,
            name: self.name.to_string(),
            cell: self.cell.to_string(),
            incarnation: tidings_wire::peer::Incarnation(self.incarnation.0),
        }
    }

    /// The network key, if links authenticate.
    pub fn key(&self) -> Option<&NetworkKey> {
        self.key.as_ref()
    }

    /// A local subscription with this filter started.
    pub fn subscribe(&self, filter: RouteFilter) {
        if !self.enabled {
            return;
        }
        self.handle(Input::Subscribe { filter });
    }

    /// A local subscription with this filter ended.
    pub fn unsubscribe(&self, filter: RouteFilter) {
        if !self.enabled {
            return;
        }
        self.handle(Input::Unsubscribe { filter });
    }

    /// Local subscriptions with these filters started: one router input (one settle, one
    /// summary delta to each peer) per [`crate::dispatch::BULK_SLICE`] filters, with the
    /// router's lock let go between slices so others' routing interleaves.
    pub fn subscribe_many(&self, filters: Vec<RouteFilter>) {
        self.many(filters, |filters| Input::SubscribeMany { filters });
    }

    /// Local subscriptions with these filters ended, a slice at a time as for
    /// [`Cluster::subscribe_many`].
    pub fn unsubscribe_many(&self, filters: Vec<RouteFilter>) {
        self.many(filters, |filters| Input::UnsubscribeMany { filters });
    }

    fn many(&self, filters: Vec<RouteFilter>, input: fn(Vec<RouteFilter>) -> Input<RouteFilter>) {
        if !self.enabled || filters.is_empty() {
            return;
        }
        let mut filters = filters.into_iter().peekable();
        while filters.peek().is_some() {
            self.handle(input(filters.by_ref().take(crate::dispatch::BULK_SLICE).collect()));
        }
    }

    /// The router's lock, and the clock read once it is held: an input that waited for the
    /// lock (behind a rebuild) happens when the router sees it, so a heartbeat that waited is
    /// not judged by the time it began to wait.
    fn lock_core(&self) -> (parking_lot::RwLockWriteGuard<'_, Core>, Millis) {
        let guard = self.core.write();
        let now = self.now();
        (guard, now)
    }

    /// Feeds the router one input, and says so when that held the router's lock long enough
    /// for other brokers' heartbeats and this broker's publishers to notice. After such an
    /// input every link counts as heard: the time the router spent busy is not the peers'
    /// silence (their heartbeats wait in the sockets meanwhile), and judging it so took a
    /// healthy link down after every rebuild longer than the liveness timeout, which rebuilt
    /// again at the next link-up, without end.
    fn feed(&self, core: &mut Core, now: Millis, input: Input<RouteFilter>) {
        let started = Instant::now();
        let kind = input_kind(&input);
        core.router.handle(now, input, &mut core.actions);
        let spent = started.elapsed();
        if spent >= SLOW_ROUTE {
            warn!(input = kind, ?spent, "the router held its lock long");
            let now = self.now();
            for peer in core.links.keys() {
                core.router.handle(now, Input::Heard { peer: peer.clone() }, &mut core.actions);
            }
        }
    }

    /// Feeds one input to the router and carries out its actions.
    pub fn handle(&self, input: Input<RouteFilter>) {
        let (mut guard, now) = self.lock_core();
        let core = &mut *guard;
        self.feed(core, now, input);
        self.execute(core);
        drop(guard);
        self.timer.notify_one();
    }

    /// A control message from `peer` as the messages to feed [`Cluster::received`] one at a
    /// time: a summary message of more than [`crate::dispatch::BULK_SLICE`] filters in pieces
    /// of that size (`Router::summary_pieces`), so the router's lock is let go, and the link
    /// task yields, between them, as for a client's bulk subscriptions.
    pub fn pieces(&self, peer: &BrokerName, message: PeerMessage<RouteFilter>) -> Vec<PeerMessage<RouteFilter>> {
        let slice = crate::dispatch::BULK_SLICE;
        match message {
            PeerMessage::Summary(deltas) if summary_filters(&deltas) > slice => {
                let pieces = self.core.read().router.summary_pieces(peer, deltas, slice);
                pieces.into_iter().map(PeerMessage::Summary).collect()
            }
            message => vec![message],
        }
    }

    /// A control message from the connection `connection` to `peer`; ignored unless that is
    /// the peer's current connection (a replaced connection's leftovers must not touch the
    /// new link's summaries).
    pub fn received(&self, peer: &BrokerName, connection: u64, message: PeerMessage<RouteFilter>) {
        let (mut guard, now) = self.lock_core();
        let core = &mut *guard;
        let Some(entry) = core.links.get_mut(peer).filter(|entry| entry.connection == connection) else {
            return;
        };
        entry.last_heard = Instant::now();
        self.feed(core, now, Input::Received { from: peer.clone(), message });
        self.execute(core);
    }

    /// A frame other than a control message came in on `connection` from `peer`: proof the
    /// link is alive, so a link busy with data is not declared dead while heartbeats queue
    /// behind the data (ignored unless it is the peer's current connection).
    pub fn heard(&self, peer: &BrokerName, connection: u64) {
        let (mut guard, now) = self.lock_core();
        let core = &mut *guard;
        if core.links.get(peer).map(|entry| entry.connection) != Some(connection) {
            return;
        }
        self.feed(core, now, Input::Heard { peer: peer.clone() });
        self.execute(core);
    }

    /// A handshake completed (authenticated, unless the network is insecure) on a new
    /// connection. A live link is never taken over: while the claimed name has a link heard
    /// from within the liveness timeout, a newcomer claiming it is refused, whatever
    /// incarnation it announces. The one exception is two connections crossing between the
    /// same two processes (same incarnation, dialled from opposite sides): both ends keep the
    /// one dialled by the broker with the smaller name. A link silent for the liveness timeout
    /// is presumed dead and replaced. `version` is the peer protocol version the handshake
    /// agreed on. Returns the connection id, or why it is refused.
    pub fn establish(
        &self,
        (hello, version): (&Hello, u16),
        direction: Direction,
        remote: Option<SocketAddr>,
        queue: Arc<LinkQueue>,
    ) -> Result<u64, Refusal> {
        if hello.name.is_empty() || hello.cell.is_empty() {
            return Err("the handshake must name a broker and a cell".to_string());
        }
        if hello.name == self.name.as_str() {
            return Err(format!(
                "a broker named {} cannot link to itself (a loop, or two brokers share the name)",
                self.name
            ));
        }
        let peer = BrokerName::new(&hello.name);
        let incarnation = Incarnation(hello.incarnation.0);
        let connection = self.next_connection.fetch_add(1, Ordering::Relaxed);
        let (mut guard, now) = self.lock_core();
        let core = &mut *guard;
        if let Some(existing) = core.links.get(&peer) {
            self.may_replace(existing, &peer, incarnation, direction)?;
            existing.queue.close("replaced by a newer connection");
            self.metrics.link_closed("replaced");
        }
        let since = Instant::now();
        let cell = CellName::new(&hello.cell);
        let last_heard = since;
        let entry = LinkEntry {
            connection,
            version,
            incarnation,
            direction,
            remote,
            queue,
            since,
            last_heard,
            cell: cell.clone(),
        };
        core.links.insert(peer.clone(), entry);
        // Before the router's actions and before any frame of this connection is read, so the
        // driver learns of a restarted peer ahead of its messages.
        self.tell(Event::PeerUp { peer: peer.clone(), cell: cell.clone(), incarnation: incarnation.0 });
        let input = Input::LinkUp { peer: peer.clone(), cell, incarnation };
        self.feed(core, now, input);
        self.execute(core);
        self.metrics.links_established.inc();
        drop(guard);
        if hello.cell == self.cell.as_str() {
            self.mate_linked();
        }
        self.timer.notify_one();
        Ok(connection)
    }

    /// Whether a new connection claiming `peer` may replace the `existing` link (see
    /// [`Cluster::establish`]).
    fn may_replace(
        &self,
        existing: &LinkEntry,
        peer: &BrokerName,
        incarnation: Incarnation,
        direction: Direction,
    ) -> Result<(), Refusal> {
        let timeout = self.liveness.heartbeat_interval_ms.saturating_mul(u64::from(self.liveness.missed_heartbeats));
        if existing.last_heard.elapsed() >= Duration::from_millis(timeout) {
            return Ok(());
        }
        if existing.incarnation == incarnation && existing.direction != direction {
            let dialled_by_smaller = (existing.direction == Direction::Outbound) == (self.name < *peer);
            return if dialled_by_smaller {
                Err(format!("{} already has a link to {peer}; duplicate connection refused", self.name))
            } else {
                Ok(())
            };
        }
        self.metrics.link_takeovers_refused.inc();
        Err(format!("{peer} is linked to {} and alive; a second connection claiming that name is refused", self.name))
    }

    /// A connection ended. If it was the peer's current one, the link is down.
    pub fn closed(&self, peer: &BrokerName, connection: u64, why: &'static str) {
        let (mut guard, now) = self.lock_core();
        let core = &mut *guard;
        let Some(entry) = core.links.get(peer).filter(|entry| entry.connection == connection) else { return };
        let incarnation = entry.incarnation;
        core.links.remove(peer);
        self.tell(Event::PeerDown { peer: peer.clone() });
        self.feed(core, now, Input::LinkDown { peer: peer.clone(), incarnation });
        self.execute(core);
        self.metrics.link_closed(why);
        info!(%peer, why, "link down");
    }

    /// Whether `peer` has an up link (dialers wait instead of opening a duplicate).
    pub fn is_linked(&self, peer: &BrokerName) -> bool {
        self.core.read().links.contains_key(peer)
    }

    /// When the router next needs a tick.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.core.read().router.next_deadline()
    }

    fn execute(&self, core: &mut Core) {
        for action in core.actions.drain(..) {
            match action {
                Action::Send { to, message } => {
                    let Some(entry) = core.links.get(&to) else { continue };
                    match convert::control_frame(&message).to_bytes() {
                        Ok(bytes) => entry.queue.push_control(bytes),
                        Err(e) => {
                            // A name or filter over its field's limit: the peer would miss this
                            // change, so start the link afresh rather than let summaries drift.
                            warn!(peer = %to, error = %e, "cannot encode a control frame; closing the link");
                            entry.queue.close(&format!("cannot encode a control frame: {e}"));
                        }
                    }
                }
                Action::CloseLink { peer, reason } => {
                    if let Some(entry) = core.links.remove(&peer) {
                        warn!(%peer, ?reason, "closing link");
                        entry.queue.close(&format!("{reason:?}"));
                        self.metrics.link_closed(match reason {
                            tidings_route::CloseReason::MissedHeartbeats => "missed_heartbeats",
                            tidings_route::CloseReason::Refused => "refused",
                            tidings_route::CloseReason::OutOfSync => "out_of_sync",
                            tidings_route::CloseReason::LimitExceeded(_) => "limit_exceeded",
                        });
                    }
                }
                Action::RoutesChanged { view, trees_changed } => {
                    self.metrics.route_recomputations.inc();
                    self.last_route_change.store(self.now().0, Ordering::Relaxed);
                    info!(view = view.0, trees = trees_changed.len(), "routes recomputed");
                }
                Action::Rejected { error } => warn!(%error, "routing refused an input"),
                Action::Guaranteed(gd) => self.tell(Event::Routing(gd)),
            }
        }
        self.active.store(!core.links.is_empty(), Ordering::Relaxed);
        self.metrics.links_up.set(core.links.len() as i64);
    }

    /// Copies the router's summary sizes into the metrics (called on scrape).
    pub fn report_metrics(&self) {
        let metrics = self.core.read().router.metrics();
        for (peer, size) in &metrics.summary_size_received {
            let label = crate::metrics::PeerLabel { peer: peer.to_string() };
            self.metrics.summary_filters_received.get_or_create(&label).set(*size as i64);
        }
        for (peer, size) in &metrics.summary_size_sent {
            let label = crate::metrics::PeerLabel { peer: peer.to_string() };
            self.metrics.summary_filters_sent.get_or_create(&label).set(*size as i64);
        }
    }
}

/// Filters added or removed in a summary message.
fn summary_filters(deltas: &[tidings_route::SummaryDelta<RouteFilter>]) -> usize {
    deltas.iter().map(|delta| delta.added.len() + delta.removed.len()).sum()
}

/// A router input this long is logged as a warning (see [`Cluster::feed`]).
const SLOW_ROUTE: Duration = Duration::from_millis(50);

/// An input's name, for logs.
fn input_kind(input: &Input<RouteFilter>) -> &'static str {
    match input {
        Input::LinkUp { .. } => "link up",
        Input::LinkDown { .. } => "link down",
        Input::Received { message: PeerMessage::Summary(_), .. } => "summary",
        Input::Received { .. } => "control message",
        Input::Subscribe { .. } | Input::SubscribeMany { .. } => "subscribe",
        Input::Unsubscribe { .. } | Input::UnsubscribeMany { .. } => "unsubscribe",
        Input::Tick => "tick",
        Input::Heard { .. } => "heard",
        _ => "pubend tracking",
    }
}
