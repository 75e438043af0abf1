//! The guaranteed-delivery layer of one simulated broker: a production `tidings_delivery`
//! [`Engine`] driven by the contract of its `lib.rs`, over the real pubend log
//! (`tidings-store` on a simulated disk, [`Disk`]) whose group commits run at a seeded delay
//! and whose crashes run the real recovery. Every action the engine takes is judged against the
//! run's [`World`] as it happens.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::gd::disk::Disk;
use bytes::Bytes;
use tidings_delivery::{
    BrokerId, Engine, Input, Know, Matcher, Message, Millis, PubendId, PublisherId, Recovered, Settings, StoreInput,
    StreamRoute, SubendId, Tick,
};
use tidings_route::matching::RouteFilter;
use tidings_route::{BrokerName, GdAction, Millis as RouteMillis, Router};

use crate::gd::durable::Clients;
use crate::gd::matcher::SimMatcher;
use crate::gd::world::{Subscriber, World};
use crate::layer::{Layer, LayerInput, LayerOutput};
use crate::rng::Rng;

pub use tidings_node::edges::MATE_CELL;
use tidings_node::publishes::{Admit, Publishes};

/// Upper bound of the seeded delay of a store sync, in ms.
pub const MAX_SYNC_MS: u64 = 15;

/// What the driver asks a broker's layer to do (delivered as a frame from the broker itself).
#[derive(Clone, Debug)]
pub enum Command {
    /// Routing changed this pubend's stream here.
    Route {
        /// The stream.
        pubend: PubendId,
        /// Its route.
        route: StreamRoute,
    },
    /// A local guaranteed publisher publishes (or retries) message `msg` as `seq`.
    Publish {
        /// Its sequence number.
        seq: u64,
        /// The message id.
        msg: u64,
    },
    /// A local guaranteed subscription joins every pubend, start pending on the barrier.
    Attach {
        /// The subend.
        subend: SubendId,
        /// A durable subscription (acknowledged by its checkpoints).
        durable: bool,
    },
    /// The client of a durable subscription went away (its subend stays, blocked).
    ClientAway {
        /// The subend.
        subend: SubendId,
    },
    /// The client of a durable subscription came back.
    ClientBack {
        /// The subend.
        subend: SubendId,
    },
    /// A local subscription ends.
    Detach {
        /// The subend.
        subend: SubendId,
    },
    /// A peer came back with a new incarnation.
    PeerRestarted {
        /// The peer's node.
        peer: usize,
    },
    /// The local publisher reconnected after a crash of its broker: it retries.
    Retry,
    /// Replays a barrier confirmation that arrived before the driver knew its number.
    Confirmed {
        /// The request number.
        number: u64,
        /// Per pubend, the start tick.
        ticks: Vec<(PubendId, Tick)>,
    },
}

/// A frame of the layer: a protocol message between brokers (relayed by a common neighbour
/// when the two are not linked), or a driver command.
#[derive(Clone, Debug)]
pub enum GdFrame {
    /// A protocol message from `origin` to `to`.
    Peer {
        /// The sending broker.
        origin: usize,
        /// The broker it is for.
        to: usize,
        /// The message.
        message: Message,
    },
    /// A driver command.
    Command(Command),
}

/// One broker's delivery state (all of it is lost at a crash but the store).
pub struct GdNode {
    pub(super) index: usize,
    /// The engine.
    pub engine: Engine<SimMatcher>,
    pub(super) booted: bool,
    pub(super) rng: Rng,
    pub(super) sync_at: Option<Millis>,
    /// Appends issued and not yet synced: (pubend, tick, message).
    pub(super) pending: Vec<(PubendId, Tick, u64)>,
    /// The routes last fed, per pubend.
    pub routes: BTreeMap<PubendId, StreamRoute>,
    /// I1: the final value last seen per (pubend, tick) in this incarnation.
    pub(super) seen: BTreeMap<(PubendId, Tick), Know>,
    /// How far this incarnation's clock is behind the network's, ms, negative when ahead (a
    /// restart may step the clock back, as NTP may: only the durable tick lease keeps a pubend
    /// from reusing ticks; `Mode::clock_spread_ms` sets every broker off by its own amount).
    pub(super) skew: i64,
    /// The durable subscribers' outboxes, acknowledgements and checkpoint writes in flight.
    pub(super) clients: Clients,
    /// What its log recovered for its pubend, told to the engine at boot.
    pub(super) recovered: Option<(PubendId, Recovered)>,
    /// The broker's retry table and publish acknowledgements (`tidings_node::publishes`),
    /// rebuilt from the log at a restart; each waiter is the message published.
    pub(super) publishes: Publishes<u64>,
    /// When this incarnation started, if on an empty data directory (its late starts' floor:
    /// `tidings_node::starts::late_start`).
    pub(super) empty_since: Option<Millis>,
    /// Serve orders waiting for the modelled cursor (`super::cursor`), and when each is served.
    pub(super) serving: Vec<(Millis, tidings_delivery::ServeOrder)>,
}

/// Upper bound of the clock step back of a restarted broker, in ms.
pub const MAX_SKEW_MS: u64 = 1500;

/// The layer: settings, names and the shared truth.
pub struct GdLayer {
    /// The engines' settings.
    pub settings: Settings,
    /// The run's truth.
    pub world: Rc<RefCell<World>>,
    /// Broker names by node index.
    pub names: Vec<BrokerName>,
    /// Node index by broker name.
    pub index: BTreeMap<BrokerName, usize>,
    /// The run's seed.
    pub seed: u64,
    /// The last reading of the brokers' wall clock in µs (for incarnations): the virtual time,
    /// but never the same reading twice (a restart takes more than a microsecond).
    pub wall_us: Cell<u64>,
    /// Each broker's clock is off the network's by a fixed amount drawn in
    /// `-clock_spread_ms..=clock_spread_ms` (0: every clock is the network's until a restart).
    pub clock_spread_ms: u64,
}

pub(super) type Out = Vec<LayerOutput<GdFrame>>;

impl GdLayer {
    /// Broker `index`'s own clock offset (behind the network's when positive), the same in
    /// every incarnation: drawn from the seed and the broker alone (`Mode::clock_spread_ms`).
    fn clock_offset(&self, index: usize) -> i64 {
        if self.clock_spread_ms == 0 {
            return 0;
        }
        let spread = self.clock_spread_ms as usize;
        let mut rng = Rng::new(self.seed ^ 0x00c1_0c00 ^ (index as u64) << 24);
        rng.below(2 * spread + 1) as i64 - spread as i64
    }

    fn boot(&self, node: &mut GdNode, store: &mut Disk, now: Millis, out: &mut Out) {
        node.booted = true;
        node.empty_since = store.fresh.then_some(now);
        if let Some((pubend, recovered)) = node.recovered.take() {
            self.drive(node, store, now, Input::Store(StoreInput::Opened { pubend, recovered }), out);
        }
        // As the broker: the ack leases before any subscription.
        let leases: Vec<(PubendId, Tick)> = store.ack_leases.iter().map(|(&p, &t)| (p, t)).collect();
        for (pubend, lease) in leases {
            self.drive(node, store, now, Input::Store(StoreInput::AckLeaseDone { pubend, lease }), out);
        }
        self.restore_durables(node, store, now, out);
    }

    pub(super) fn command(&self, node: &mut GdNode, store: &mut Disk, now: Millis, command: Command, out: &mut Out) {
        let pubends: Vec<PubendId> = self.world.borrow().pubends.values().copied().collect();
        match command {
            Command::Route { pubend, route } => {
                node.routes.insert(pubend, route.clone());
                self.drive(node, store, now, Input::Route { pubend, route }, out);
            }
            Command::Publish { seq, msg } => {
                let Some(&pubend) = self.world.borrow().pubends.get(&node.index) else { return };
                let payload = Bytes::copy_from_slice(&msg.to_le_bytes());
                let publisher = PublisherId(node.index as u64);
                // The broker's rules (`tidings_node::publishes`): a retry of a publish already
                // given a tick never reaches the core twice.
                match node.publishes.publish((pubend, publisher, seq), msg) {
                    Admit::New => self.drive(node, store, now, Input::Publish { pubend, publisher, seq, payload }, out),
                    Admit::Ack(ack) => self.publish_acked(node.index, (pubend, publisher, seq), ack),
                    Admit::Wait => {}
                }
            }
            Command::Attach { subend, durable } => {
                node.engine.matcher_mut().insert(subend);
                if durable {
                    node.clients.created(subend);
                }
                for pubend in pubends {
                    self.drive(node, store, now, Input::SubendAttach { pubend, subend, start: None, durable }, out);
                }
            }
            Command::ClientAway { subend } => self.client_away(node, store, now, subend, out),
            Command::ClientBack { subend } => self.client_back(node, store, now, subend, out),
            Command::Detach { subend } => {
                node.clients.removed(subend);
                node.engine.matcher_mut().local.remove(subend);
                for pubend in pubends {
                    self.drive(node, store, now, Input::SubendDetach { pubend, subend }, out);
                }
            }
            Command::PeerRestarted { peer } => {
                let broker = BrokerId(peer as u32);
                self.drive(node, store, now, Input::PeerRestarted { broker }, out);
            }
            Command::Retry => self.retry(node, store, now, out),
            Command::Confirmed { number, ticks } => self.confirmed(node, store, now, number, ticks, out),
        }
    }

    fn routing(&self, node: &mut GdNode, store: &mut Disk, now: Millis, gd: GdAction, out: &mut Out) {
        match gd {
            GdAction::NextTicksWanted { round, pubends } => {
                // The broker's answer: the next tick as its pubend's stream knows it.
                let next =
                    |p: &tidings_route::PubendId| tidings_node::starts::next_tick(node.engine.inspect(PubendId(p.0)));
                let ticks = pubends.iter().map(|p| (*p, tidings_route::Tick(next(p).0))).collect();
                out.push(LayerOutput::Route(tidings_route::Input::NextTicks { round, ticks }));
            }
            GdAction::BarrierConfirmed { number, ticks } => {
                let confirmed: Vec<(PubendId, Tick)> = ticks.iter().map(|(p, t)| (PubendId(p.0), Tick(t.0))).collect();
                self.world.borrow_mut().confirmed.insert(node.index, (number, confirmed.clone()));
                self.confirmed(node, store, now, number, confirmed, out);
            }
            GdAction::PubendsMoved { .. } | GdAction::PubendsAdvertised { .. } => {}
        }
    }

    /// The barrier `number` confirmed with `ticks`: its subends start on every pubend, as the
    /// broker's driver starts them (`barrier_confirmed`): at the tick a pubend's home answered,
    /// or, for one the barrier did not report though its home is in view (the pubend is newer
    /// than the answer), at the late start. One whose home is out of view waits for a later
    /// barrier (the run asks again).
    fn confirmed(
        &self,
        node: &mut GdNode,
        store: &mut Disk,
        now: Millis,
        number: u64,
        ticks: Vec<(PubendId, Tick)>,
        out: &mut Out,
    ) {
        for &(pubend, tick) in &ticks {
            self.start_subends(node, store, now, number, pubend, Ok(tick), out);
        }
        let late = tidings_node::starts::late_start(&node.engine, now, node.empty_since);
        let floored = late > tidings_node::starts::late_start(&node.engine, now, None);
        let pubends: Vec<PubendId> = self.world.borrow().pubends.values().copied().collect();
        let missed = pubends.into_iter().filter(|pubend| ticks.iter().all(|(p, _)| p != pubend));
        for pubend in missed.collect::<Vec<_>>() {
            if !tidings_node::starts::may_start_late(node.routes.get(&pubend)) {
                continue;
            }
            let started = self.start_subends(node, store, now, number, pubend, Err(late), out);
            let stats = &mut self.world.borrow_mut().stats;
            stats.late_starts += started;
            stats.empty_floors += if floored { started } else { 0 };
        }
    }

    /// The barrier `number` confirmed: subends waiting on it (or an earlier one) start on
    /// `pubend`, at the tick its home answered (`Ok`) or at their late start (`Err`); returns
    /// how many started.
    #[allow(clippy::too_many_arguments)]
    fn start_subends(
        &self,
        node: &mut GdNode,
        store: &mut Disk,
        now: Millis,
        number: u64,
        pubend: PubendId,
        start: Result<Tick, Tick>,
        out: &mut Out,
    ) -> u64 {
        let waiting: Vec<SubendId> = {
            let world = self.world.borrow();
            if !world.pubends.values().any(|p| *p == pubend) {
                return 0;
            }
            let me = node.index;
            let subs = world.subs.iter().filter(|(_, s)| s.node == me && !s.gone);
            let waiting = |(_, sub): &(&SubendId, &Subscriber)| {
                sub.barrier.is_some_and(|b| b <= number) && !sub.starts.contains_key(&pubend)
            };
            subs.filter(waiting).map(|(&id, _)| id).collect()
        };
        let count = waiting.len() as u64;
        for subend in waiting {
            // The broker's rule: never below what the stream here can still serve.
            let (sigma, late) = (start.unwrap_or_else(|late| late), start.is_err());
            let start = tidings_node::starts::confirmed_start(&node.engine, pubend, subend, sigma);
            let mut world = self.world.borrow_mut();
            let promised = world.assigned.get(&pubend).copied().unwrap_or(Tick(0));
            if let Some(sub) = world.subs.get_mut(&subend) {
                sub.starts.insert(pubend, start);
                sub.promised.insert(pubend, promised);
                if late {
                    sub.late.insert(pubend);
                }
                // Stored with the start (the shell writes it before promising anything).
                if let Some(durable) = sub.durable.as_mut() {
                    durable.checkpoint.entry(pubend).or_insert(start.prev());
                    node.clients.started(subend, pubend, start);
                }
            }
            drop(world);
            self.drive(node, store, now, Input::SubendStart { pubend, subend, start }, out);
        }
        count
    }

    /// One input, with the router lent to the matcher.
    fn handle_input(
        &self,
        node: &mut GdNode,
        store: &mut Disk,
        now: RouteMillis,
        input: LayerInput<GdFrame>,
        out: &mut Out,
    ) {
        let now = Millis(now.0.saturating_add_signed(-node.skew));
        if !node.booted {
            self.boot(node, store, now, out);
        }
        match input {
            LayerInput::Frame { frame: GdFrame::Command(command), .. } => self.command(node, store, now, command, out),
            LayerInput::Frame { frame: GdFrame::Peer { origin, to, message }, .. } => {
                let entry = self.sideways_entry(node, origin, &message);
                if to != node.index {
                    self.send(node.index, to, None, GdFrame::Peer { origin, to, message }, out);
                } else if let Some(entry) = entry {
                    self.send(node.index, entry, None, GdFrame::Peer { origin, to: entry, message }, out);
                } else {
                    let from_cell = self.cell_for(origin, to);
                    if let Message::Data { pubend, tree, .. } | Message::Silence { pubend, tree, .. } = &message {
                        let any_tree = self.settings.mutations.take_f_from_any_tree;
                        if any_tree || *tree == node.engine.matcher().tree(*pubend) {
                            self.world.borrow_mut().judge_receipt(origin, to, &message);
                        }
                    }
                    let input = Input::Received { from: BrokerId(origin as u32), from_cell, message };
                    self.drive(node, store, now, input, out);
                }
            }
            LayerInput::Routing(gd) => self.routing(node, store, now, gd, out),
            LayerInput::Tick => {
                if node.sync_at.is_some_and(|at| at <= now) {
                    self.sync(node, store, now, out);
                }
                // Every tick, as the broker's driver flushes checkpoints after every event: a
                // checkpoint may also move over ticks that did not match (`Checkpoints::flush`).
                self.run_clients(node, store, now, out);
                self.run_cursors(node, store, now, out);
                if node.engine.next_deadline().is_some_and(|d| d <= now) {
                    self.drive(node, store, now, Input::Tick, out);
                }
            }
        }
        self.judge_knowledge(node);
    }
}

impl Layer for GdLayer {
    type Frame = GdFrame;
    type Node = GdNode;
    type Store = Disk;

    fn start(&self, broker: &BrokerName, disk: &mut Disk) -> GdNode {
        let index = self.index[broker];
        let (recovered, publishes) = self.open_log(index, disk);
        let incarnation = {
            let mut world = self.world.borrow_mut();
            let starts = world.starts.entry(index).or_default();
            *starts += 1;
            *starts
        };
        let matcher = SimMatcher::new(index, self.world.clone());
        let mut rng = Rng::new(self.seed ^ (index as u64) << 32 ^ incarnation);
        let step = if incarnation > 1 { rng.below(MAX_SKEW_MS as usize + 1) as i64 } else { 0 };
        let skew = step + self.clock_offset(index);
        GdNode {
            index,
            engine: Engine::new(self.settings.clone(), matcher),
            booted: false,
            rng,
            skew,
            sync_at: None,
            pending: Vec::new(),
            routes: BTreeMap::new(),
            seen: BTreeMap::new(),
            clients: Clients::default(),
            recovered,
            publishes,
            empty_since: None,
            serving: Vec::new(),
        }
    }

    fn crash(&self, store: &mut Disk) {
        store.crash(self.seed);
    }

    /// The broker's rule over the simulated data directory, the virtual time as its wall clock.
    fn incarnation(&self, store: &mut Disk, now: RouteMillis, _: u64) -> u64 {
        let clock = (now.0 * 1000).max(self.wall_us.get() + 1);
        self.wall_us.set(clock);
        store.incarnation(clock)
    }

    /// The engine's matcher holds the router while the input runs (its filter verdicts come
    /// from the summaries), and gives it back after.
    fn handle(
        &self,
        node: &mut GdNode,
        store: &mut Disk,
        router: &mut Option<Router<RouteFilter>>,
        now: RouteMillis,
        input: LayerInput<GdFrame>,
        out: &mut Out,
    ) {
        std::mem::swap(router, &mut node.engine.matcher_mut().router);
        self.handle_input(node, store, now, input, out);
        std::mem::swap(router, &mut node.engine.matcher_mut().router);
    }

    fn next_deadline(&self, node: &GdNode) -> Option<RouteMillis> {
        if !node.booted {
            return Some(RouteMillis(0));
        }
        let clients = node.clients.deadline();
        let at =
            [node.engine.next_deadline(), node.sync_at, clients, Self::cursors_due(node)].into_iter().flatten().min();
        at.map(|at| RouteMillis(at.0.saturating_add_signed(node.skew)))
    }

    fn answers_ticks(&self) -> bool {
        true
    }

    fn departed_interest_ms(&self) -> u64 {
        self.settings.departed_retention_ms.unwrap_or(u64::MAX)
    }
}
