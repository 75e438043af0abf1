//! The driver task: the one owner of the delivery engine and the pubend log. Every input goes
//! through [`Driver::feed`], which runs the engine and carries out its actions (which may feed
//! more inputs, e.g. a full outbox); the loop sleeps until the next command or the engine's
//! next deadline.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tidings_delivery::{Counters, Engine, Input, Millis, PubendId, Settings, SubendId, Tick};
use tidings_node::publishes::Publishes;
use tidings_store::{Completion, Store, StoreStats};
use tidings_wire::SubId;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::journal;
use super::matcher::LocalMatcher;
use super::{Command, GuaranteedError, GuaranteedMetrics};
use crate::outbox::Outbox;

/// Commands served before a due turn of a catch-up (or any timer due now) is taken.
const COMMANDS_PER_TURN: usize = 64;

/// Commands already waiting that join the turn of the one that woke the loop. A turn's
/// publishes to a replicated pubend go to its group as one proposal (`replicas::gate`), and the
/// turn's own work (the groups' turn, checkpoints, retention, metrics) is done once for all of
/// them: one command a turn, a replicated publisher at 256 in flight made its group send an
/// append, a journal write and two answers per publish (docs/replication.md, "Replicated
/// throughput").
const COMMANDS_PER_BATCH: usize = 128;

/// A turn of the driver's loop this long is logged as a warning: every guaranteed message of
/// the broker waited for it.
const SLOW_TURN: Duration = Duration::from_millis(20);

/// A local guaranteed subscription.
pub(super) struct Subend {
    pub(super) id: SubId,
    /// `None` while a durable subscription's client is away.
    pub(super) outbox: Option<Arc<Outbox>>,
    /// Its outbox filled; the engine was told, and a room callback is pending.
    pub(super) blocked: bool,
    /// The barrier it waits for before SUBSCRIBED (in a network).
    pub(super) barrier: Option<u64>,
    /// When it was confirmed (SUBSCRIBED sent).
    pub(super) confirmed_at: Option<Millis>,
    /// A durable subscription's subend (see [`super::durable`]).
    pub(super) durable: bool,
    /// The pubends its client was told the start of (in SUBSCRIBED): a pubend appearing here
    /// again later (its stream moved or came back) continues where it was and is not
    /// announced again.
    pub(super) announced: std::collections::BTreeSet<PubendId>,
    /// Pubends it was confirmed without, their homes out of view then: each starts at the
    /// tick a later barrier brings from its home (`super::subscribe`, `start_unstarted`).
    pub(super) unstarted: std::collections::BTreeSet<PubendId>,
}

/// A publisher waiting for its PUBLISH_ACK.
pub(super) struct Waiter {
    pub(super) reply: Arc<Outbox>,
    pub(super) since: Instant,
}

/// The guaranteed-delivery driver (spawn [`Driver::run`]).
pub struct Driver {
    pub(super) engine: Engine<LocalMatcher>,
    pub(super) store: Arc<Store>,
    pub(super) rx: mpsc::UnboundedReceiver<Command>,
    pub(super) tx: mpsc::UnboundedSender<Command>,
    pub(super) broker: tidings_route::BrokerName,
    pub(super) metrics: GuaranteedMetrics,
    /// Pubends hosted here (their log is open in the engine).
    pub(super) hosted: BTreeSet<PubendId>,
    pub(super) subends: BTreeMap<SubendId, Subend>,
    /// Ticks given to publishes, what the log synced, and the publishers waiting for their
    /// PUBLISH_ACK (the rules shared with the simulator: `tidings_node::publishes`).
    pub(super) publishes: Publishes<Waiter>,
    pub(super) next_token: u64,
    pub(super) inputs: VecDeque<Input>,
    pub(super) counters: Counters,
    pub(super) stats: StoreStats,
    /// The broker network, when this broker takes part in one.
    pub(super) net: Option<super::net::Net>,
    /// The `/state` snapshot, shared with the admin endpoint, and when it was last refreshed.
    pub(super) state: Arc<parking_lot::Mutex<super::state::GuaranteedState>>,
    pub(super) snapshot_at: Option<Instant>,
    /// Durable subscriptions and their store.
    pub(super) durables: super::durable::Durables,
    /// Ack leases asked for by the core and being written.
    pub(super) ack_leases: super::ack_leases::AckLeases,
    /// Subend numbers, shared with the sessions' handle.
    pub(super) next_subend: Arc<std::sync::atomic::AtomicU64>,
    /// Retention limits, and what each hosted pubend's log holds.
    pub(crate) retention: crate::config::Retention,
    pub(super) retained: BTreeMap<PubendId, super::retention::Retained>,
    /// Publishes waiting for room under the backpressure policy, oldest first.
    pub(super) held: VecDeque<(tidings_wire::GuaranteedPublish, Arc<Outbox>, Instant)>,
    /// The replica groups on this broker (`None`: no network, or `[storage] replicas = 1`).
    pub(super) replicas: Option<super::replicas::Replicas>,
    /// Acknowledgements of replicated publishes waiting for their other half, and what the
    /// engine is told of a replicated pubend's syncs (`tidings_node::gate`).
    pub(super) gate: tidings_node::gate::Gate<Waiter>,
    /// Publishes waiting for this broker to lead their replica group (`replicas::gate`).
    pub(super) leaderless: VecDeque<(tidings_wire::GuaranteedPublish, Arc<Outbox>, Instant)>,
    /// Pubends being opened from their replica groups, their writes in flight.
    pub(super) seeds: super::replicas::Seeds,
    /// Pubends whose log was found at start and is not open yet: all of them until
    /// `open_found`, then the replicated ones until their group serves here (`serve`).
    pub(super) found: BTreeMap<PubendId, tidings_delivery::Recovered>,
    /// Guaranteed queue groups and their members.
    pub(super) groups: super::groups::Groups,
    /// Remote members of the groups kept here (`[cluster] queue_home` is this broker).
    pub(super) homed: super::remote_members::Homed,
    /// Members here of groups kept at another broker.
    pub(super) away: super::remote_members::Away<super::group_links::AwaySession>,
    /// Which links GROUP frames went over (`super::group_paths`), and the breaks not yet
    /// told (settled once a turn).
    pub(super) paths: super::group_paths::Paths,
    pub(super) broken: Vec<super::group_paths::Broken>,
    /// When members waiting for a path to their home were last tried.
    pub(super) joins_tried: Instant,
    /// The retained values on disk (`super::retained_values`).
    pub(super) kept: super::retained_values::KeptValues,
    /// Per pubend, the last tick its log held at start: a queue group's message up to it may
    /// have been leased before the restart (leases are not recorded), so it goes out flagged
    /// redelivered (`super::groups`).
    pub(super) restart_marks: BTreeMap<PubendId, Tick>,
    /// When this life of the driver started: a group restored from a previous life flags
    /// what other brokers' pubends replay to it from before then (`super::groups`).
    pub(super) started_ms: Millis,
    /// Whether this broker started without a durable store (a first start, or a wiped data
    /// directory): it then has no ack leases, and takes its start time as their floor
    /// (`Driver::late_start`).
    pub(super) empty_start: bool,
    /// The barrier asked for subscriptions' unstarted pubends, while it climbs.
    pub(super) unstarted_barrier: Option<u64>,
    /// When that barrier was last asked (`Driver::unstarted_turn`).
    pub(super) unstarted_tried: Instant,
    /// Each publisher's last publish refused as unavailable (`super::refusals`).
    pub(super) refusals: super::refusals::Refusals,
    /// Durable subscriptions stored in the cell: their relays and readers (`super::relay`).
    pub(super) relays: super::relay::Relays,
    /// Catch-ups served outside the driver's turns (`super::cursor`).
    pub(super) cursors: super::cursor::Cursors,
}

/// What the driver shares with the sessions' handle, and its command channel.
pub(super) struct Handles {
    pub(super) claims: Arc<parking_lot::Mutex<super::durable::Claims>>,
    pub(super) next_subend: Arc<std::sync::atomic::AtomicU64>,
    pub(super) tx: mpsc::UnboundedSender<Command>,
    pub(super) rx: mpsc::UnboundedReceiver<Command>,
}

/// Milliseconds since the Unix epoch: ticks are the pubend's clock, and must keep growing
/// across restarts (the core's lease guards against a clock stepped back). Plus
/// [`CLOCK_AHEAD_MS`].
pub(super) fn now() -> Millis {
    let ahead = CLOCK_AHEAD_MS.load(std::sync::atomic::Ordering::Relaxed);
    Millis(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64).saturating_add(ahead))
}

/// How far ahead of the machine's clock this broker's guaranteed delivery runs
/// (`[storage] fault_clock_ahead`, fault tests only): two brokers whose clocks differ, on one
/// machine. Process-wide, as the machine's clock is.
static CLOCK_AHEAD_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets [`CLOCK_AHEAD_MS`] (at start, before any tick is given).
pub(crate) fn set_clock_ahead(ahead: Duration) {
    let ms = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX);
    CLOCK_AHEAD_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

impl Driver {
    pub(super) fn open(
        dir: &Path,
        broker: &str,
        (options, fs, settings): (tidings_store::Options, Arc<dyn tidings_store::Fs>, Settings),
        metrics: GuaranteedMetrics,
        cluster: Arc<crate::cluster::Cluster>,
        handles: Handles,
    ) -> Result<Driver, GuaranteedError> {
        let Handles { claims, next_subend, tx, rx } = handles;
        let opened = journal::open(dir, (options, fs), tx.clone(), metrics.fsync_seconds.clone())?;
        let data_dir = dir.parent().unwrap_or(dir);
        let empty = !data_dir.join("durable.redb").exists();
        let store = super::durable_store::DurableStore::open(data_dir).map_err(GuaranteedError::Durable)?;
        let names = super::edges::SharedNames::default();
        let matcher = match cluster.is_enabled() {
            true => LocalMatcher::with_edges(super::edges::Edges::new(Arc::clone(&cluster), Arc::clone(&names))),
            false => LocalMatcher::default(),
        };
        let mut driver = Driver {
            // This shell stores ack leases (`super::ack_leases`).
            engine: Engine::new(tidings_delivery::Settings { ack_leases: true, ..settings }, matcher),
            store: opened.store,
            rx,
            tx,
            broker: tidings_route::BrokerName::new(broker),
            metrics,
            hosted: BTreeSet::new(),
            subends: BTreeMap::new(),
            publishes: Publishes::recovered(opened.dedup, []),
            next_token: 0,
            inputs: VecDeque::new(),
            counters: Counters::default(),
            stats: StoreStats::default(),
            net: cluster
                .is_enabled()
                .then(|| super::net::Net::new(Arc::clone(&cluster), dir.with_file_name("gd-children.json"), names)),
            state: Arc::default(),
            snapshot_at: None,
            durables: super::durable::Durables::new(store, claims),
            next_subend,
            retention: crate::config::Retention::default(),
            retained: BTreeMap::new(),
            held: VecDeque::new(),
            replicas: None,
            gate: tidings_node::gate::Gate::new(settings.ticks(1)),
            leaderless: VecDeque::new(),
            seeds: super::replicas::Seeds::default(),
            found: BTreeMap::new(),
            groups: super::groups::Groups::default(),
            homed: Default::default(),
            away: Default::default(),
            paths: Default::default(),
            broken: Vec::new(),
            joins_tried: Instant::now(),
            kept: Default::default(),
            restart_marks: BTreeMap::new(),
            started_ms: now(),
            empty_start: empty,
            unstarted_barrier: None,
            unstarted_tried: Instant::now(),
            refusals: Default::default(),
            ack_leases: Default::default(),
            relays: Default::default(),
            cursors: Default::default(),
        };
        let average = journal::average_record_bytes(dir, opened.pubends.iter().map(|(_, r)| r.logged.len()).sum());
        for (pubend, recovered) in opened.pubends {
            let retained = driver.retained.entry(pubend).or_default();
            for &tick in &recovered.logged {
                retained.add(tick, average);
            }
            let highest = recovered.logged.last().copied().unwrap_or_default();
            driver.publishes.synced(pubend, highest);
            if let Some(&last) = recovered.logged.last() {
                driver.restart_marks.insert(pubend, last);
            }
            driver.found.insert(pubend, recovered);
        }
        Ok(driver)
    }

    /// Serves commands and timers until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        // What opening the log found (damage included) shows in the metrics at once.
        self.report();
        let (mut busy, mut what);
        loop {
            // Woken at least every snapshot period, so `/state` is never older than that.
            let sleep = self.sleep_time().min(super::state::EVERY);
            if sleep.is_zero() {
                // A catch-up's next turn is due: the sessions' tasks (live traffic) run first.
                // Without this the loop would find a branch ready at every turn and keep its
                // worker thread until the runtime's budget ran out, tens of milliseconds.
                tokio::task::yield_now().await;
                // Then the commands that came meanwhile (live traffic first, but at most
                // [`COMMANDS_PER_TURN`], so a steady flow of them cannot put the turn off
                // forever), then the turn, without the timer: a zero sleep still waits for the
                // timer wheel's next millisecond, about 0.9 ms per turn of a catch-up (`bench
                // catch-up`: 529 k against 595 k msg/s with turns of 1,024; 217 k against 562 k
                // with turns of 256).
                if shutdown.is_cancelled() {
                    break;
                }
                (busy, what) = (Instant::now(), "catch-up turn");
                for _ in 0..COMMANDS_PER_TURN {
                    match self.rx.try_recv() {
                        Ok(command) => self.command(command),
                        Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                        Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return,
                    }
                }
                self.feed(Input::Tick);
            } else {
                tokio::select! {
                    command = self.rx.recv() => match command {
                        Some(command) => {
                            busy = Instant::now();
                            what = command.kind();
                            self.command(command);
                            if !self.waiting_commands() {
                                break;
                            }
                        }
                        None => break,
                    },
                    () = tokio::time::sleep(sleep) => {
                        busy = Instant::now();
                        what = "timer";
                        self.feed(Input::Tick);
                    }
                    () = shutdown.cancelled() => break,
                }
            }
            self.replica_turn();
            self.flush_checkpoints();
            self.flush_ack_leases();
            self.flush_retained();
            self.enforce_retention();
            self.report();
            self.snapshot();
            self.group_paths_turn();
            self.unstarted_turn();
            self.busy(busy, what);
        }
    }

    /// Serves the commands already waiting, up to [`COMMANDS_PER_BATCH`], in this turn; false
    /// once the channel is closed.
    fn waiting_commands(&mut self) -> bool {
        for _ in 0..COMMANDS_PER_BATCH {
            match self.rx.try_recv() {
                Ok(command) => self.command(command),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => return true,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        true
    }

    /// Times one turn of the loop: every guaranteed message of this broker waits for it.
    fn busy(&self, since: Instant, what: &'static str) {
        let took = since.elapsed();
        self.metrics.driver_turn_seconds.observe(took.as_secs_f64());
        if took >= SLOW_TURN {
            warn!(took_ms = took.as_millis() as u64, what, "the guaranteed-delivery driver was busy for long");
        }
    }

    fn sleep_time(&self) -> Duration {
        let engine = match self.engine.next_deadline() {
            // Due now (a catch-up's next turn): it takes turns with the commands waiting.
            Some(deadline) if deadline <= now() => Duration::ZERO,
            Some(deadline) => Duration::from_millis(deadline.since(now()).max(1)),
            None => Duration::from_secs(1),
        };
        // The replica groups' next tick (never zero: a tick is not a catch-up's turn).
        let replicas = self
            .replica_deadline()
            .map_or(engine, |at| at.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)));
        engine.min(replicas)
    }

    /// Feeds one input, then every input its actions caused, carrying out every action.
    pub(super) fn feed(&mut self, input: Input) {
        self.inputs.push_back(input);
        self.run_inputs();
    }

    /// Runs the inputs queued (see [`Driver::feed`]), carrying out every action.
    pub(super) fn run_inputs(&mut self) {
        let mut actions = Vec::new();
        while let Some(input) = self.inputs.pop_front() {
            if tracing::enabled!(tracing::Level::TRACE) && !matches!(input, Input::Tick | Input::Publish { .. }) {
                // The protocol's inputs, one per line, for tracing a network's exchange.
                tracing::trace!(me = %self.broker, ?input, "gd in");
            }
            self.engine.handle(now(), input, &mut actions);
            for action in actions.drain(..) {
                self.carry_out(action);
            }
        }
        // Republished by relays during the turn (publishing feeds the engine in turn).
        self.relay_pending();
    }

    /// Opens a pubend's stream in the engine and attaches every local subend to it from its
    /// next tick (pubends that appear after a subscription are covered from their start).
    pub(super) fn open_pubend(&mut self, pubend: PubendId, recovered: tidings_delivery::Recovered) {
        if self.replicas.as_ref().is_some_and(|r| r.is_replicated(pubend)) {
            // Its silence waits for its group's confirmations from the first turn: a host deposed
            // meanwhile must not tell F from its clock (`ConfirmSilence`).
            self.feed(Input::ConfirmSilence { pubend, up_to: Tick(1) });
        }
        self.hosted.insert(pubend);
        self.metrics.pubends.set(self.hosted.len() as i64);
        self.feed(Input::Store(tidings_delivery::StoreInput::Opened { pubend, recovered }));
        self.host(pubend);
        let start = self.next_tick(pubend);
        self.attach_late(pubend, Some(start));
    }

    /// The start a new subscription gets on `pubend` here (`tidings_node::starts::next_tick`).
    pub(super) fn next_tick(&self, pubend: PubendId) -> Tick {
        tidings_node::starts::next_tick(self.engine.inspect(pubend))
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Publish { publish, reply, retained } => {
                if retained.is_none_or(|copy| self.keep_retained(&copy, &publish, &reply)) {
                    self.admit(publish, reply);
                }
            }
            Command::RetainedChanged { topic, value } => self.retained_changed(topic, value),
            Command::Subscribe { subend, id, pattern, selector, outbox, durable } => match durable {
                Some(spec) => self.subscribe_durable(subend, id, spec, (pattern, selector), outbox),
                None => self.subscribe(subend, id, (pattern, selector), false, Some(outbox)),
            },
            Command::Join(join) => self.join_group(*join),
            Command::JoinRemote(join) => self.join_remote(*join),
            Command::Group { from, frame } => self.group_frame(from, frame),
            Command::PeerDown { peer } => self.group_peer_reset(&peer, false),
            Command::Unsubscribe { subend } if self.away.get(subend).is_some() => self.leave_remote(subend),
            Command::DeliveryAck { subend, pubend, tick } if self.away.get(subend).is_some() => {
                self.ack_remote(subend, pubend, tick);
            }
            Command::Unsubscribe { subend } if self.groups.is_member(subend) => self.leave_group(subend),
            Command::Unsubscribe { subend } => match self.subends.get(&subend).is_some_and(|entry| entry.durable) {
                true => {
                    self.delete_durable(subend);
                    self.forget_group(subend);
                }
                false => self.remove_subend(subend),
            },
            Command::Away { subend } => self.durable_away(subend),
            Command::DeliveryAck { subend, pubend, tick } if self.groups.is_member(subend) => {
                self.group_ack(subend, PubendId(pubend.0), Tick(tick.0));
            }
            Command::DeliveryAck { subend, pubend, tick } => {
                debug!(subend = subend.0, pubend = pubend.0, tick = tick.0, "delivery ack");
                self.durable_ack(subend, PubendId(pubend.0), Tick(tick.0));
            }
            Command::CheckpointsSaved { saved, result } => self.checkpoints_saved(saved, result),
            Command::AckLeasesSaved { saved, result } => self.ack_leases_saved(saved, result),
            Command::Room { subend } => {
                // A durable subscription's old outbox may call back after its client left.
                if let Some(entry) = self.subends.get_mut(&subend).filter(|entry| entry.outbox.is_some()) {
                    entry.blocked = false;
                    self.feed(Input::OutboxReady { subend });
                }
            }
            Command::Completed(group) => self.completed(&group),
            Command::Served(served) => self.served(served),
            Command::ReadDone { pubend, range, records, lost } => {
                self.feed(Input::Store(tidings_delivery::StoreInput::ReadDone { pubend, range, records, lost }))
            }
            Command::PeerUp { peer, cell, incarnation } => self.peer_up(peer, cell, incarnation),
            Command::Received { from, message } => self.received(from, message),
            Command::Sideways { carrier, frame } => self.sideways(carrier, frame),
            Command::Routing(action) => self.routing(action),
            Command::Replica { from, frame } => {
                if let Some(replicas) = self.replicas.as_mut() {
                    replicas.received(&from, frame);
                }
            }
            Command::Forget { broker, readmit, reply } => {
                let answer = match self.replicas.as_mut() {
                    Some(replicas) if readmit => replicas.readmit(&broker),
                    Some(replicas) => replicas.forget(&broker),
                    None => {
                        Err("this broker keeps no replica groups (no cell mates, or [storage] replicas = 1)".into())
                    }
                };
                let _ = reply.send(answer);
            }
            Command::RelayAnswer { relay, frame } => self.relay_answer(relay, frame),
            Command::RelayResend { relay, origin } => self.relay_resend(relay, origin),
            Command::RelayWatch { relay, answers } => self.relay_watched(relay, answers),
            Command::ReplicaSynced(group) => {
                let outcomes = self.replicas.as_mut().map(|r| r.synced(&group)).unwrap_or_default();
                self.replica_outcomes(outcomes);
            }
        }
    }

    /// A subend leaves every stream and the matcher.
    pub(super) fn remove_subend(&mut self, subend: SubendId) {
        for pubend in self.pubends() {
            self.feed(Input::SubendDetach { pubend, subend });
        }
        self.engine.matcher_mut().remove(subend);
        self.cursors.remove_filter(subend);
        self.subends.remove(&subend);
        self.metrics.subends.set(self.subends.len() as i64);
    }

    fn completed(&mut self, group: &[Completion]) {
        let rest;
        let group = match self.seeding() {
            true => {
                rest = self.seeded(group);
                rest.as_slice()
            }
            false => group,
        };
        let (inputs, appends) = self.publishes.completed(group);
        if appends > 0 {
            self.metrics.group_size.observe(appends as f64);
        }
        for input in inputs {
            // A replicated pubend's records are sent once its group committed them too (`gate`).
            if let tidings_delivery::StoreInput::AppendDone { pubend, synced_up_to } = input {
                if self.store_synced(pubend, synced_up_to) {
                    continue;
                }
            }
            self.feed(Input::Store(input));
        }
    }

    /// Copies the engine's and the store's counters into the metrics.
    fn report(&mut self) {
        let c = self.engine.counters();
        let old = std::mem::replace(&mut self.counters, c);
        self.metrics.nacks_sent.inc_by(c.nacks_sent - old.nacks_sent);
        self.metrics.nack_ticks_sent.inc_by(c.nack_ticks_sent - old.nack_ticks_sent);
        self.metrics.nack_ticks_absorbed.inc_by(c.nack_ticks_absorbed - old.nack_ticks_absorbed);
        self.metrics.retransmits.inc_by(c.retransmitted - old.retransmitted);
        self.metrics.damaged_ticks.inc_by(c.damaged_ticks - old.damaged_ticks);
        self.metrics.foreign_finals.inc_by(c.foreign_finals - old.foreign_finals);
        self.metrics.rejudged.inc_by(c.rejudged - old.rejudged);
        self.metrics.stale_tree_finals.inc_by(c.stale_tree_finals - old.stale_tree_finals);
        self.metrics.duplicates_dropped.inc_by(c.duplicates_dropped - old.duplicates_dropped);
        self.metrics.conflicts.inc_by(c.conflicts - old.conflicts);
        let refused = |c: tidings_delivery::Counters| c.malformed + c.unknown_stream;
        self.metrics.refused_messages.inc_by(refused(c) - refused(old));
        // Retries the tick table no longer held (older, or released before a restart) that the
        // core still knew by its publishers' high-water marks.
        self.metrics.duplicate_publishes.inc_by(c.duplicate_publishes - old.duplicate_publishes);
        let s = self.store.stats();
        let old = std::mem::replace(&mut self.stats, s);
        self.metrics.fsyncs.inc_by(s.syncs.saturating_sub(old.syncs));
        self.metrics.lingers.inc_by(s.lingers.saturating_sub(old.lingers));
        self.metrics.lingers_fruitless.inc_by(s.lingers_fruitless.saturating_sub(old.lingers_fruitless));
        self.metrics.log_bytes.inc_by(s.bytes.saturating_sub(old.bytes));
        self.metrics.corrupt_records.inc_by(s.corrupt_records.saturating_sub(old.corrupt_records));
        self.metrics.segments_deleted.inc_by(s.segments_deleted.saturating_sub(old.segments_deleted));
        self.metrics.corrupt_at_open.inc_by(s.corrupt_spans_at_open.saturating_sub(old.corrupt_spans_at_open));
    }

    pub(super) fn token(&mut self) -> tidings_store::Token {
        self.next_token += 1;
        tidings_store::Token(self.next_token)
    }

    pub(super) fn warn_rejected(error: &tidings_delivery::DeliveryError) {
        warn!(%error, "the delivery core refused an input");
    }
}
