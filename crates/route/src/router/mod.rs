//! The router: one broker's routing state machine. Inputs go in through [`Router::handle`],
//! actions come out into a caller-owned `Vec`; data messages ask [`Router::route`], a read-only
//! query, which link copies go to.
//!
//! Layout: this file holds the types and the dispatch; `links` handles link up/down, adverts and
//! timers; `interest` handles subscriptions and summaries (and their full rebuild, the oracle);
//! `propagate` carries interest changes forward as deltas; `reshape` carries topology changes
//! forward at the cost of what they changed; `stream` sends a link's first summary of a large
//! set a slice per input; `routes` holds what the data path precomputes and `forward` is the
//! data path.

mod barrier;
mod departed;
mod forward;
mod garbage;
mod groups;
mod interest;
mod links;
mod propagate;
mod pubend;
mod reshape;
mod routes;
mod snapshot;
mod stream;
mod sync;
mod verdicts;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{CloseReason, RouteError};
use crate::filter::Filter;
use crate::link_state::{Graph, LinkStateDb};
use crate::liveness::{LinkClock, LivenessSettings};
use crate::message::PeerMessage;
use crate::minimized::Minimized;
use crate::names::{BrokerName, CellName, Incarnation, Millis, PubendId, Tick, TreeId, ViewId};
use crate::summary::Scoped;
use crate::tree::RouteTable;

use barrier::Barriers;
use interest::{Advertised, Dirty};
pub use pubend::{PubendChild, PubendRef, PubendRoute, Via};
use routes::DataRoutes;
pub use snapshot::{
    ChildSnapshot, FilterPage, LinkSnapshot, RouterMetrics, RouterSnapshot, ScopeSnapshot, TreeSnapshot,
};

/// Who this broker is and how its links prove liveness: all the router needs from the shell's
/// configuration.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RouterSettings {
    /// This broker's name, as announced in link handshakes.
    pub name: BrokerName,
    /// This broker's cell (its own name for a cell of one).
    pub cell: CellName,
    /// This process's incarnation; must grow on every restart.
    pub incarnation: Incarnation,
    /// Heartbeat interval and missed-heartbeat limit.
    pub liveness: LivenessSettings,
    /// How long a departed link's interest still counts as ours (0: not at all); see
    /// `router/departed.rs`. Set it to guaranteed delivery's departed retention.
    pub departed_interest_ms: u64,
}

/// Everything that can happen to a router.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Input<F> {
    /// A link handshake completed: the peer announced its name, cell and incarnation. A second
    /// `LinkUp` for a linked peer (a new connection, or the peer restarted) replaces the link
    /// and re-synchronises it from scratch.
    LinkUp {
        /// The peer's name.
        peer: BrokerName,
        /// The peer's cell.
        cell: CellName,
        /// The peer's incarnation.
        incarnation: Incarnation,
    },
    /// The connection to a peer closed. Ignored unless it names the current incarnation of an up
    /// link, so a late close of a replaced connection cannot take the new one down.
    LinkDown {
        /// The peer's name.
        peer: BrokerName,
        /// The incarnation its handshake announced.
        incarnation: Incarnation,
    },
    /// A control message arrived from a linked peer.
    Received {
        /// The sender.
        from: BrokerName,
        /// The message.
        message: PeerMessage<F>,
    },
    /// A local client subscribed with this filter (counted: two equal subscriptions need two
    /// unsubscribes).
    Subscribe {
        /// The subscription's interest.
        filter: F,
    },
    /// A local subscription with this filter ended.
    Unsubscribe {
        /// The subscription's interest.
        filter: F,
    },
    /// Local clients subscribed with these filters: one settle for all of them, so a client
    /// subscribing thousands of patterns costs the peers one summary delta (in messages of
    /// [`crate::limits::SUMMARY_SLICE`] filters) instead of one message per pattern.
    SubscribeMany {
        /// The subscriptions' interests (each counted, as for [`Input::Subscribe`]).
        filters: Vec<F>,
    },
    /// Local subscriptions with these filters ended: one settle for all of them (a client
    /// leaving with many subscriptions).
    UnsubscribeMany {
        /// The subscriptions' interests.
        filters: Vec<F>,
    },
    /// Time passed; call at [`Router::next_deadline`] (earlier calls are harmless).
    Tick,
    /// A frame other than a control message (data, guaranteed-delivery traffic) arrived from
    /// this linked peer: proof of life, so a link busy with data is not declared dead while its
    /// heartbeats queue behind the data. Cheap; the shell may rate-limit it.
    Heard {
        /// The sender.
        peer: BrokerName,
    },
    /// The shell keeps guaranteed-delivery streams of this pubend here (or hosts it, when its
    /// home is this broker): its route changes are reported ([`GdAction::PubendsMoved`]), and a
    /// hosted pubend's next tick answers barriers and is listed in our link-state advert.
    TrackPubend {
        /// The pubend.
        pubend: PubendRef,
    },
    /// The shell no longer keeps streams of this pubend.
    UntrackPubend {
        /// The pubend.
        pubend: PubendRef,
    },
    /// The answer to [`GdAction::NextTicksWanted`]: the next tick of each local pubend.
    NextTicks {
        /// The round that asked.
        round: u64,
        /// Per hosted pubend, the tick its next message (or silence) will carry.
        ticks: Vec<(PubendId, Tick)>,
    },
}

/// What the shell must carry out.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Action<F> {
    /// Send a control message on the link to this peer.
    Send {
        /// The peer.
        to: BrokerName,
        /// The message.
        message: PeerMessage<F>,
    },
    /// Close the connection to this peer; the router already treats the link as down, so no
    /// `LinkDown` needs to follow (one that does is ignored). Redial with backoff.
    CloseLink {
        /// The peer.
        peer: BrokerName,
        /// Why.
        reason: CloseReason,
    },
    /// The link-state view changed and trees were recomputed. Data already routed under a
    /// changed tree is still carried under it for one generation; guaranteed-delivery streams
    /// of the listed roots may need to move to new links.
    RoutesChanged {
        /// The new view.
        view: ViewId,
        /// Publishing cells whose tree (shape or bundle entries) changed, appeared or vanished.
        trees_changed: Vec<CellName>,
    },
    /// An input was refused; nothing else changed (see [`RouteError`]).
    Rejected {
        /// What was wrong.
        error: RouteError,
    },
    /// Something only guaranteed delivery needs; a best-effort shell ignores it.
    Guaranteed(GdAction),
}

/// Actions for the guaranteed-delivery layer. Kept in one variant of [`Action`] so a shell
/// without guaranteed delivery handles them all with one arm.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum GdAction {
    /// Tracked pubends (see [`Input::TrackPubend`]) whose upstream, entry, children or tree
    /// changed in a view change: only their streams reset.
    PubendsMoved {
        /// The pubends, sorted.
        pubends: Vec<PubendId>,
    },
    /// The pubends hosted anywhere in the network, as the link-state adverts list them,
    /// changed: the shell tracks the new ones ([`Input::TrackPubend`]) to keep their streams.
    PubendsAdvertised {
        /// Every advertised pubend with its home, sorted.
        pubends: Vec<PubendRef>,
    },
    /// A barrier round reached this broker in the pubends' own cell: answer with
    /// [`Input::NextTicks`] for this round (each pubend's next tick, picked now).
    NextTicksWanted {
        /// The round to answer.
        round: u64,
        /// The hosted pubends.
        pubends: Vec<PubendId>,
    },
    /// The barrier request with this number (see [`Router::request_barrier`]) came back: every
    /// broker between here and every reachable publisher's broker holds the summaries of
    /// every subscription fed before the request. From each listed pubend's tick on, every
    /// matching message reaches this broker; pubends not listed had no tracking host.
    BarrierConfirmed {
        /// The request number.
        number: u64,
        /// Per pubend, the first tick the confirmed subscriptions are owed.
        ticks: Vec<(PubendId, Tick)>,
    },
}

/// One up link.
#[derive(Clone, Debug)]
struct PeerLink {
    cell: CellName,
    incarnation: Incarnation,
    clock: LinkClock,
    up_since: Millis,
}

/// Counters for metrics; they only grow.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    route_recomputations: u64,
    adverts_accepted: u64,
    summary_deltas_sent: u64,
    links_declared_dead: u64,
}

/// One broker's routing core, generic over the subscription filter.
///
/// Invariants: `table` is always built from the current `db` once `settle` ran (its `view` is
/// `db.digest()`); `received` and `sent` only hold up links; `routes` reflects `table`,
/// `received` and `local`.
#[derive(Clone, Debug)]
pub struct Router<F: Filter> {
    settings: RouterSettings,
    db: LinkStateDb,
    links: BTreeMap<BrokerName, PeerLink>,
    table: RouteTable,
    routes: DataRoutes<F>,
    /// Local subscriptions, counted, and minimized: what we advertise as our own interest.
    local: Minimized<F>,
    /// Departed mates' own subscribers, while they are held: an input of every tree's
    /// subtree, as a linked mate's are, never told to mates as ours (`router/departed.rs`).
    held_local: Minimized<F>,
    /// Departed links' interest for one tree, per root, while it is held: an input of that
    /// tree's `advertised.down` (so of its subtree too) and of no other tree's, as it was
    /// when their links told it (`router/departed.rs`).
    held: BTreeMap<CellName, Minimized<F>>,
    /// Departed links' interest held in `held_local` and `held`, per peer.
    departed: BTreeMap<BrokerName, departed::Departed<F>>,
    /// Summaries per up link, as the peer sent them.
    received: BTreeMap<BrokerName, Scoped<F>>,
    /// Summaries per up link, as we last sent them.
    sent: BTreeMap<BrokerName, Scoped<F>>,
    /// Per up link: the last `Synced` the peer sent (absent: none since the link came up).
    synced: BTreeMap<BrokerName, BTreeMap<CellName, TreeId>>,
    /// Per up link: the last `Synced` we sent.
    vouched: BTreeMap<BrokerName, BTreeMap<CellName, TreeId>>,
    /// Links, trees or received `Synced` changed since the last `settle`.
    sync_dirty: bool,
    /// What changed since the last `settle`.
    dirty: Dirty<F>,
    /// What we advertise, per scope, as of the last `settle`.
    advertised: Advertised<F>,
    /// Pubends the shell keeps streams of, with their last route.
    tracked: pubend::Tracked,
    /// Barrier rounds and requests.
    barriers: Barriers,
    /// The pubends the adverts listed when last reported, and the view that was in.
    advertised_pubends: (ViewId, Vec<PubendRef>),
    /// Adverts that arrived by a path that could not vouch for them, per origin, with the
    /// peers that sent that version; offered again when the view changes.
    pending_adverts: BTreeMap<BrokerName, (crate::link_state::LinkStateAdvert, std::collections::BTreeSet<BrokerName>)>,
    /// When our own advert is next re-issued (set once a link came up).
    next_refresh: Option<Millis>,
    /// The time of the input being handled.
    now: Millis,
    counters: Counters,
    /// Bumped by every input that may change a filter verdict (see [`Router::verdict_epoch`]).
    verdict_epoch: u64,
    /// First summaries still streaming to links, and what waits behind them (`stream.rs`).
    streams: stream::Streams<F>,
    /// Filters per streamed slice ([`crate::limits::SUMMARY_SLICE`]; smaller in tests, so
    /// small networks stream too).
    stream_slice: usize,
    /// Large sets let go of, freed a slice per input (`garbage.rs`).
    garbage: garbage::Garbage<F>,
}

impl<F: Filter> Router<F> {
    /// A router with no links: it knows only itself, and its own cell is its only tree.
    pub fn new(settings: RouterSettings) -> Self {
        let db = LinkStateDb::new(settings.name.clone(), settings.cell.clone(), settings.incarnation);
        let table = RouteTable::build(db.digest(), settings.name.clone(), settings.cell.clone(), db.graph());
        let routes = DataRoutes::empty(&table);
        // What a rebuild would advertise: nothing yet, for our own cell's tree.
        let down = routes.trees.keys().map(|root| (root.clone(), Minimized::default())).collect();
        let advertised = Advertised { down, subtree: BTreeMap::new() };
        Self {
            settings,
            db,
            links: BTreeMap::new(),
            table,
            routes,
            local: Minimized::default(),
            held_local: Minimized::default(),
            held: BTreeMap::new(),
            departed: BTreeMap::new(),
            received: BTreeMap::new(),
            sent: BTreeMap::new(),
            synced: BTreeMap::new(),
            vouched: BTreeMap::new(),
            sync_dirty: false,
            dirty: Dirty::default(),
            advertised,
            tracked: pubend::Tracked::new(),
            barriers: Barriers::default(),
            advertised_pubends: (ViewId(0), Vec::new()),
            pending_adverts: BTreeMap::new(),
            next_refresh: None,
            now: Millis(0),
            counters: Counters::default(),
            verdict_epoch: 0,
            streams: stream::Streams::default(),
            stream_slice: crate::limits::SUMMARY_SLICE,
            garbage: garbage::Garbage::default(),
        }
    }

    /// A number that changes whenever the verdicts of the filter edges
    /// ([`Router::child_cell_verdict`], [`Router::mate_verdict`]) may have changed: with every
    /// summary, vouch or advert a peer sends, every link up or down, and every tick (a link
    /// judged dead, a departed hold ended). Heartbeats, barriers and local subscriptions leave
    /// it alone. Guaranteed delivery judges a lazily told F again when it moved.
    pub fn verdict_epoch(&self) -> u64 {
        self.verdict_epoch
    }

    /// A number that changes whenever [`Router::pubend_route`]'s answers or the filter edges'
    /// verdicts may have changed: the verdict epoch, plus one for every recomputation of the
    /// trees. A caller that turns routes into something else (the simulator's delivery routes)
    /// redoes it only when this moved.
    pub fn route_epoch(&self) -> u64 {
        self.verdict_epoch + self.counters.route_recomputations
    }

    /// Feeds one input at time `now`; actions to carry out are appended to `out`.
    pub fn handle(&mut self, now: Millis, input: Input<F>, out: &mut Vec<Action<F>>) {
        self.now = self.now.max(now);
        let verdicts_may_move = match &input {
            Input::LinkUp { .. } | Input::LinkDown { .. } | Input::Tick => true,
            Input::Received { message, .. } => {
                matches!(message, PeerMessage::Summary(_) | PeerMessage::Synced(_) | PeerMessage::Adverts(_))
            }
            _ => false,
        };
        self.verdict_epoch += u64::from(verdicts_may_move);
        match input {
            Input::LinkUp { peer, cell, incarnation } => self.handle_link_up(now, peer, cell, incarnation, out),
            Input::LinkDown { peer, incarnation } => self.handle_link_down(&peer, incarnation, out),
            Input::Received { from, message } => self.handle_received(now, from, message, out),
            Input::Subscribe { filter } => self.handle_subscribe(filter),
            Input::Unsubscribe { filter } => self.handle_unsubscribe(filter, out),
            Input::SubscribeMany { filters } => filters.into_iter().for_each(|filter| self.handle_subscribe(filter)),
            Input::UnsubscribeMany { filters } => {
                filters.into_iter().for_each(|filter| self.handle_unsubscribe(filter, out));
            }
            Input::Tick => self.handle_tick(now, out),
            Input::Heard { peer } => {
                if let Some(link) = self.links.get_mut(&peer) {
                    link.clock.heard(now);
                }
            }
            Input::TrackPubend { pubend } => {
                self.track(pubend);
                self.advertise_own_pubends(out);
            }
            Input::UntrackPubend { pubend } => {
                self.tracked.remove(&pubend);
                self.advertise_own_pubends(out);
            }
            Input::NextTicks { round, ticks } => self.handle_next_ticks(round, ticks),
        }
        let start = out.len();
        self.settle(out);
        self.advance_streams(start, out);
        self.garbage.free();
    }

    /// When the shell must next call `handle(now, Input::Tick)`: the earliest heartbeat or
    /// liveness verdict over all links, or end of a departed link's interest hold; `None`
    /// without either. Now, while a link's first summary is streaming or large sets wait to be
    /// freed: every input sends one more slice of it and frees a slice, so the shell ticks
    /// again at once, letting go of its lock in between (`router/stream.rs`, `garbage.rs`).
    pub fn next_deadline(&self) -> Option<Millis> {
        let links = self.links.values().map(|link| link.clock.next_deadline(&self.settings.liveness)).min();
        let refresh = self.next_refresh.filter(|_| !self.links.is_empty());
        let expiry = self.db.next_expiry(self.advert_max_age_ms());
        let streaming = (self.streams.under_way() || self.garbage.pending()).then_some(self.now);
        [links, refresh, expiry, self.next_departed_expiry(), streaming].into_iter().flatten().min()
    }

    /// How long adverts of other origins are held without renewal.
    fn advert_max_age_ms(&self) -> u64 {
        self.settings.liveness.heartbeat_interval_ms.max(1).saturating_mul(crate::limits::ADVERT_MAX_AGE_HEARTBEATS)
    }

    /// A summary message from `from` cut into messages of at most `max` filters, for the shell
    /// to feed as inputs of their own, letting go of its lock between them: a 1,024-filter
    /// message applied whole held the router 60-75 ms in a debug build (issue 46). The pieces
    /// applied in order leave what the whole message leaves (a prefix of them is a summary the
    /// peer held on its way, see `summary::split`); one out of sync closes the link as the
    /// whole would, after the pieces before it were applied and passed on, which the link's
    /// loss then takes back. A message refused whole (too large, or `Local` from another
    /// cell) comes back whole, to be refused as before.
    pub fn summary_pieces(
        &self,
        from: &BrokerName,
        deltas: Vec<crate::summary::SummaryDelta<F>>,
        max: usize,
    ) -> Vec<Vec<crate::summary::SummaryDelta<F>>> {
        if self.summary_refusal(from, &deltas).is_some() {
            return vec![deltas];
        }
        crate::summary::split(deltas, max)
    }

    /// This broker's name.
    pub fn name(&self) -> &BrokerName {
        &self.settings.name
    }

    /// This broker's cell.
    pub fn cell(&self) -> &CellName {
        &self.settings.cell
    }

    /// The current link-state view; data headers carry it.
    pub fn view(&self) -> ViewId {
        self.table.view
    }

    /// Peers with an up link, sorted.
    pub fn peers(&self) -> impl Iterator<Item = &BrokerName> {
        self.links.keys()
    }

    /// Linked peers in our cell's parent cell in the tree of `root` (messages published there
    /// arrive from them): where guaranteed delivery sends acks and nacks upstream. Empty at the
    /// root, or when `root` is not reachable.
    pub fn upstream_peers(&self, root: &CellName) -> Vec<BrokerName> {
        let Some(parent) = self.table.trees.get(root).and_then(|place| place.parent.as_ref()) else {
            return Vec::new();
        };
        let graph = &self.table.graph;
        graph.neighbours(&self.settings.name).into_iter().filter(|peer| graph.cell_of(peer) == Some(parent)).collect()
    }

    /// After any change: recompute trees if the view moved, send summary changes, and refresh
    /// the data path's precomputed routes.
    fn settle(&mut self, out: &mut Vec<Action<F>>) {
        self.settle_view(out);
        // A new view may let waiting adverts be vouched for; they change the view again.
        while !self.pending_adverts.is_empty() && self.retry_pending_adverts(out) {
            self.settle_view(out);
        }
        self.settle_advertised_pubends(out);
        self.settle_interest(out);
        self.settle_sync(out);
        self.settle_barriers(out);
    }

    /// Recomputes the trees if the link-state view moved.
    fn settle_view(&mut self, out: &mut Vec<Action<F>>) {
        // Our own advert changes with our links, so a link change also means a view check.
        if self.dirty.view || self.dirty.all {
            self.dirty.view = false;
            let view = self.db.digest();
            if view != self.table.view {
                let graph = self.db.graph();
                if graph == self.table.graph {
                    // A half-open or half-closed link, or news from beyond our reach: same routes.
                    self.table.view = view;
                } else {
                    // A tree that kept its id kept its routes, unless our own two-way links
                    // changed (a peer's advert can complete or break one of them).
                    // The interest is then reshaped: only what the new trees changed moves.
                    self.rebuild_table(view, graph, out);
                    self.dirty.table = true;
                }
            }
        }
    }

    /// Recomputes the trees and reports the roots whose tree changed.
    fn rebuild_table(&mut self, view: ViewId, graph: Graph, out: &mut Vec<Action<F>>) {
        let table = RouteTable::build(view, self.settings.name.clone(), self.settings.cell.clone(), graph);
        let old = std::mem::replace(&mut self.table, table);
        self.counters.route_recomputations += 1;
        let trees_changed = changed_trees(&old, &self.table);
        out.push(Action::RoutesChanged { view, trees_changed });
        self.report_moved_pubends(out);
        self.routes_moved_for_barriers();
    }
}

/// Roots whose tree id differs between two tables, including roots present in only one.
fn changed_trees(old: &RouteTable, new: &RouteTable) -> Vec<CellName> {
    let ids = |table: &RouteTable| -> BTreeMap<CellName, TreeId> {
        table.trees.iter().map(|(root, place)| (root.clone(), place.id)).collect()
    };
    let (old, new) = (ids(old), ids(new));
    let roots: std::collections::BTreeSet<&CellName> = old.keys().chain(new.keys()).collect();
    roots.into_iter().filter(|root| old.get(*root) != new.get(*root)).cloned().collect()
}

#[cfg(test)]
mod tests;
