//! The delivery core around the group ([`crate::replica::Mode::core`]): each replica also runs
//! what a broker of the publishers' cell runs for the pubend, so a run judges the path a
//! publish takes in the broker, not the group alone.
//!
//! Each replica has a production `tidings_delivery` engine over its own pubend log (the real
//! store on the simulated disk of `crate::gd::disk`, crashed with the replica), the broker's
//! retry table (`tidings_node::publishes`) and the seam between the two,
//! [`tidings_node::gate::Gate`]: a publish to the leader goes to the engine, is logged at the
//! engine's tick, proposed to the group at that tick, and acknowledged once both the log and a
//! quorum synced it; the engine hears a record synced only once the group committed it too. A
//! replica that leads and has applied an entry of its term opens the pubend from the group's
//! state (`tidings_node::replicated::seed`, or `reopen` of the log it found), as a successor
//! does; one that no longer leads closes its log (`Input::CloseLog`), as a deposed host does.
//! The shell steps here mirror the broker's (`crates/broker/src/guaranteed/replicas/gate.rs`,
//! `serve.rs`, `depose.rs`).
//!
//! Each time the pubend opens at a replica, a local subscriber attaches from the log's start
//! and the engine delivers what the log holds, then what is published. Every delivery, at any
//! replica, is judged: one tick always carries one publish and one publish one tick, so a
//! subscriber that follows the pubend from host to host (by tick, as a broker's stream does)
//! gets each message once and in order. At the end every acknowledged publish must have been
//! delivered, at its acknowledged tick.

use bytes::Bytes;
use tidings_delivery::{
    Action, CellId, Engine, Input, Matcher, Millis, PubendId, PublisherId, Recovered, StoreAction, StoreInput,
    StreamRoute, SubendId, Tick, TreeTag, Verdict,
};
use tidings_node::gate::{EngineAck, Gate, Outcome, Step};
use tidings_node::publishes::{Ack, Admit, PublishKey, Publishes};
use tidings_replica::{Record, ReplicaGroup};

use crate::gd::disk::Disk as Log;
use crate::replica::Mutation;

/// The one pubend of a run.
pub(crate) const PUBEND: PubendId = PubendId(1);
/// The local subscriber's subend at every replica.
const SUBEND: SubendId = SubendId(1);

/// The payload of a publish: its publisher and sequence number.
pub(crate) fn payload(publisher: u64, seq: u64) -> Vec<u8> {
    [publisher.to_le_bytes(), seq.to_le_bytes()].concat()
}

fn key_of(payload: &[u8]) -> Option<(u64, u64)> {
    let publisher = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let seq = u64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some((publisher, seq))
}

/// Every message matches the local subscriber; there are no other brokers.
struct Everything;

impl Matcher for Everything {
    fn child(&self, _: PubendId, _: CellId, _: &Bytes) -> Verdict {
        Verdict::Final
    }
    fn subends(&self, _: PubendId, _: &Bytes, out: &mut Vec<SubendId>) {
        out.push(SUBEND);
    }
    fn subend(&self, _: PubendId, _: SubendId, _: &Bytes) -> bool {
        true
    }
    fn epoch(&self) -> u64 {
        0
    }
    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

/// What the core asks of the world.
pub(crate) enum Effect {
    /// An answer to publisher `publisher` (`Acked` or `Refused`).
    Reply { publisher: u64, action: Box<tidings_replica::Action> },
    /// Propose these records to the group here.
    Propose(Vec<Record>),
    /// The local subscriber received this publish at this tick.
    Delivered { tick: u64, key: (u64, u64), opened: u64 },
    /// The pubend opened here from the group's state: `found`, resuming a log found at
    /// start or closed here (`reopen`), else writing the state into an empty log (`seed`).
    Opened { found: bool },
    /// The pubend's log closed here: this replica no longer leads.
    Closed,
    /// An invariant broke.
    Broken(String),
}

/// One replica's delivery core while it runs (its log outlives it).
pub(crate) struct Core {
    engine: Engine<Everything>,
    /// The retry table; a waiter is its publisher.
    publishes: Publishes<u64>,
    gate: Gate<u64>,
    /// The pubend is open in the engine here.
    hosted: bool,
    /// What the log held when found at start or closed here, to reopen it from.
    found: Option<Recovered>,
    /// The group's state being written into the log: what the engine opens with, and the writes
    /// not yet synced.
    seeding: Option<(Recovered, usize)>,
    sync_at: Option<u64>,
    /// The local subscriber is attached (at the first open of this life).
    attached: bool,
    /// The last tick delivered to the local subscriber in this life.
    delivered: Option<Tick>,
    /// Opens of the pubend here, over every replica's lives (for the judge's messages).
    opened: u64,
    mutation: Mutation,
    /// The log's sync delays, drawn per replica life from the run's seed.
    rng: crate::rng::Rng,
}

impl Core {
    /// Starts a replica's core on its log: the pubend found there waits for the group.
    pub(crate) fn start(log: &mut Log, mutation: Mutation, seed: u64) -> Result<Core, String> {
        let recovered = log.open().map_err(|e| format!("the pubend log does not open: {e}"))?;
        let store = log.store().ok_or("the pubend log is closed")?;
        let opened = tidings_node::journal::opened(store, recovered).map_err(|e| e.to_string())?;
        let found = opened.pubends.into_iter().find(|(p, _)| *p == PUBEND).map(|(_, r)| r);
        let settings = tidings_delivery::Settings { serve_orders: false, ..crate::gd::settings() };
        let ticks_per_ms = settings.ticks(1);
        Ok(Core {
            engine: Engine::new(settings, Everything),
            publishes: Publishes::recovered(opened.dedup, []),
            gate: Gate::new(ticks_per_ms),
            hosted: false,
            found,
            seeding: None,
            sync_at: None,
            attached: false,
            delivered: None,
            opened: 0,
            mutation,
            rng: crate::rng::Rng::new(seed),
        })
    }

    /// A publish reached this replica: taken if it leads and the pubend is open here
    /// (`replica_gate`), else refused so that its publisher tries another.
    pub(crate) fn publish(&mut self, log: &mut Log, now: u64, leads: bool, publisher: u64, seq: u64) -> Vec<Effect> {
        let mut out = Vec::new();
        if !(leads && self.hosted) {
            let action = Box::new(tidings_replica::Action::Refused { publisher, seq, leader: None });
            out.push(Effect::Reply { publisher, action });
            return out;
        }
        let key = (PUBEND, PublisherId(publisher), seq);
        self.gate.take(key, payload(publisher, seq));
        match self.publishes.publish(key, publisher) {
            Admit::New => {
                let payload = Bytes::from(payload(publisher, seq));
                let input = Input::Publish { pubend: PUBEND, publisher: PublisherId(publisher), seq, payload };
                self.drive(log, now, input, &mut out);
            }
            Admit::Ack(ack) => self.engine_acked(key, ack, &mut out),
            Admit::Wait => {}
        }
        out
    }

    /// The engine acknowledged `key`: answered once the group did too (`answer_when_replicated`).
    fn engine_acked(&mut self, key: PublishKey, ack: Ack<u64>, out: &mut Vec<Effect>) {
        let ack = match self.mutation {
            // The mutation: the group's half is not waited for.
            Mutation::AckBeforeGroup => EngineAck::Answer(ack),
            _ => self.gate.engine_acked(key, ack),
        };
        match ack {
            EngineAck::Answer(ack) => answer(key, ack, out),
            EngineAck::NotTaken(ack) => refuse(key, ack.waiter, out),
            EngineAck::Parked => {}
        }
    }

    /// What the group decided for publishers here.
    pub(crate) fn outcomes(&mut self, log: &mut Log, now: u64, outcomes: Vec<Outcome>) -> Vec<Effect> {
        let mut out = Vec::new();
        let steps = self.gate.outcomes(outcomes, &self.publishes);
        self.steps(log, now, steps, &mut out);
        out
    }

    fn steps(&mut self, log: &mut Log, now: u64, steps: Vec<Step<u64>>, out: &mut Vec<Effect>) {
        for step in steps {
            match step {
                Step::Answer(key, ack) => answer(key, ack, out),
                Step::Refuse(key, waiter, _) => refuse(key, waiter, out),
                Step::Propose(_, records) => out.push(Effect::Propose(records)),
                Step::Feed(input) => self.drive(log, now, input, out),
                Step::Disagree { key, group, log } => out.push(Effect::Broken(format!(
                    "the group holds publish {key:?} at tick {group}, the host's log at {log}"
                ))),
                Step::Won(_) | Step::Unknown { .. } | Step::RefusedLeading { .. } => {}
            }
        }
    }

    /// One turn of the broker's driver for the pubend (`replica_turn`): a deposed host closes
    /// its log, a leader serving the group's state opens the pubend from it, the engine's
    /// timers run, and the turn's publishes are proposed.
    pub(crate) fn turn(&mut self, log: &mut Log, now: u64, group: &ReplicaGroup) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.hosted && group.leading().is_none() {
            self.close(log, now, &mut out);
        }
        if !self.hosted && self.seeding.is_none() {
            if let Some((_, state)) = group.serving() {
                let found = self.found.take();
                out.push(Effect::Opened { found: found.is_some() });
                let seed = match found {
                    Some(found) => tidings_node::replicated::reopen(PUBEND, state, found),
                    None => tidings_node::replicated::seed(PUBEND, state),
                };
                self.seed(log, now, seed, &mut out);
            }
        }
        if self.engine.next_deadline().is_some_and(|at| at.0 <= now) {
            self.drive(log, now, Input::Tick, &mut out);
        }
        while self.gate.has_batch() {
            let steps = self.gate.take_batch();
            self.steps(log, now, steps, &mut out);
        }
        out
    }

    /// `close_deposed`: the engine closes the log, and every publisher waiting here is refused.
    fn close(&mut self, log: &mut Log, now: u64, out: &mut Vec<Effect>) {
        let holds = self.engine.log_holds(PUBEND);
        self.hosted = false;
        out.push(Effect::Closed);
        self.drive(log, now, Input::CloseLog { pubend: PUBEND }, out);
        let (parked, acked) = self.gate.forget_pubend(PUBEND);
        for (key, ack) in parked {
            refuse(key, ack.waiter, out);
        }
        for key in acked {
            if let Some(waiter) = self.publishes.unwait(key) {
                refuse(key, waiter, out);
            }
        }
        self.found = holds;
    }

    /// `serve::seed`: the group's state written into the log; the pubend opens once it is synced.
    fn seed(&mut self, log: &mut Log, now: u64, seed: tidings_node::replicated::Seed, out: &mut Vec<Effect>) {
        self.publishes.keep_logged(PUBEND, seed.recovered.release, &seed.recovered.logged);
        for ((publisher, seq), tick) in seed.ticks {
            self.publishes.appending((PUBEND, publisher, seq), tick);
        }
        let mut left = 0;
        for write in &seed.writes {
            let token = log.token();
            let Some(store) = log.store() else { return out.push(Effect::Broken("the log is closed".into())) };
            if let Err(e) = tidings_node::journal::submit(store, token, write) {
                return out.push(Effect::Broken(format!("the log refused the group's state: {e}")));
            }
            left += 1;
        }
        match left {
            0 => self.open(log, now, seed.recovered, out),
            _ => {
                self.seeding = Some((seed.recovered, left));
                self.schedule_sync(now);
            }
        }
    }

    /// `open_seeded` and `open_pubend`: the pubend opens from its log, its silence capped by the
    /// group's confirmations, and the local subscriber attaches from the log's start.
    fn open(&mut self, log: &mut Log, now: u64, recovered: Recovered, out: &mut Vec<Effect>) {
        let highest = recovered.logged.last().copied().unwrap_or_default();
        let start = recovered.release.next();
        self.publishes.synced(PUBEND, highest);
        self.hosted = true;
        self.opened += 1;
        self.drive(log, now, Input::ConfirmSilence { pubend: PUBEND, up_to: Tick(1) }, out);
        // Attached at the first open of this life, before the log opens (a stream with no
        // subscriber releases what it opened with at once), and kept through closes: a closed
        // log's stream keeps its subends and knowledge, as at a deposed broker.
        if !std::mem::replace(&mut self.attached, true) {
            let attach = Input::SubendAttach { pubend: PUBEND, subend: SUBEND, start: Some(start), durable: false };
            self.drive(log, now, attach, out);
        }
        self.drive(log, now, Input::Store(StoreInput::Opened { pubend: PUBEND, recovered }), out);
        self.drive(log, now, Input::Route { pubend: PUBEND, route: StreamRoute::default() }, out);
    }

    /// The log's group commit, if due: completions to the seed being written, or to the
    /// engine (a record's sync through the gate: told once the group committed it too).
    pub(crate) fn sync(&mut self, log: &mut Log, now: u64) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.sync_at.is_none_or(|at| at > now) {
            return out;
        }
        self.sync_at = None;
        let done = log.step();
        if let Some((recovered, left)) = self.seeding.take() {
            let failed = done.iter().any(|c| c.result.is_err());
            let left = left.saturating_sub(done.len());
            match (failed, left) {
                (true, _) => out.push(Effect::Broken("a write of the group's state failed".into())),
                (false, 0) => self.open(log, now, recovered, &mut out),
                (false, _) => {
                    self.seeding = Some((recovered, left));
                    self.schedule_sync(now);
                }
            }
            return out;
        }
        for input in self.publishes.completed(&done).0 {
            match input {
                StoreInput::AppendDone { pubend, synced_up_to } if self.mutation != Mutation::SendBeforeCommit => {
                    let steps = self.gate.store_synced(pubend, synced_up_to).into_iter().collect();
                    self.steps(log, now, steps, &mut out);
                }
                input => self.drive(log, now, Input::Store(input), &mut out),
            }
        }
        out
    }

    fn schedule_sync(&mut self, now: u64) {
        if self.sync_at.is_none() {
            self.sync_at = Some(now + 1 + self.rng.below(6) as u64);
        }
    }

    /// Feeds the engine one input and carries out what it asks (`Driver::carry_out`).
    fn drive(&mut self, log: &mut Log, now: u64, input: Input, out: &mut Vec<Effect>) {
        let mut work = vec![input];
        while let Some(input) = work.pop() {
            let mut actions = Vec::new();
            self.engine.handle(Millis(now), input, &mut actions);
            for action in actions {
                if let Some(next) = self.act(log, now, action, out) {
                    work.push(next);
                }
            }
        }
    }

    fn act(&mut self, log: &mut Log, now: u64, action: Action, out: &mut Vec<Effect>) -> Option<Input> {
        match action {
            Action::Store(StoreAction::AckLease { pubend, up_to }) => {
                return Some(Input::Store(StoreInput::AckLeaseDone { pubend, lease: up_to }));
            }
            Action::Store(StoreAction::ReadRange { pubend, range }) => {
                return Some(Input::Store(tidings_node::journal::read(log.store()?, pubend, range)));
            }
            Action::Store(store) => {
                if let StoreAction::Append { pubend, tick, publisher, seq, .. } = &store {
                    self.publishes.appending((*pubend, *publisher, *seq), *tick);
                    self.gate.appended((*pubend, *publisher, *seq), *tick);
                }
                let token = log.token();
                let submitted = log.store().map(|s| tidings_node::journal::submit(s, token, &store));
                if let Some(Err(e)) = submitted {
                    out.push(Effect::Broken(format!("the log refused {store:?}: {e}")));
                }
                self.schedule_sync(now);
            }
            Action::PublishAcked { pubend, publisher, seq } => {
                let key = (pubend, publisher, seq);
                if let Some(ack) = self.publishes.acked(key) {
                    self.engine_acked(key, ack, out);
                }
            }
            Action::PublishRefused { pubend, publisher, seq } => {
                let key = (pubend, publisher, seq);
                self.gate.forget(key);
                let waiter = match self.hosted {
                    true => self.publishes.refused(key),
                    false => self.publishes.unwait(key),
                };
                if let Some(waiter) = waiter {
                    refuse(key, waiter, out);
                }
            }
            Action::Deliver { subend, tick, payload, .. } => {
                let Some(key) = key_of(&payload).filter(|_| subend == SUBEND) else {
                    out.push(Effect::Broken(format!("a delivery of {payload:?} to {subend:?}")));
                    return None;
                };
                if self.delivered.is_some_and(|last| tick <= last) {
                    let last = self.delivered;
                    out.push(Effect::Broken(format!("tick {tick:?} delivered after {last:?} in one life")));
                }
                self.delivered = Some(tick);
                out.push(Effect::Delivered { tick: tick.0, key, opened: self.opened });
            }
            Action::GapNotice { range, .. } => {
                out.push(Effect::Broken(format!("a gap notice for {range:?}: nothing is released early")));
            }
            Action::Rejected { error } => out.push(Effect::Broken(format!("the engine rejected an input: {error}"))),
            Action::Send { to, message, .. } => {
                out.push(Effect::Broken(format!("the engine sent {message:?} to {to:?}: it has no peers")));
            }
            Action::Serve(_) | Action::ServeCancel { .. } => {
                out.push(Effect::Broken("a serve order with serve_orders off".into()));
            }
            Action::Free(_) => {}
        }
        None
    }

    /// Where the core stands, for a trace.
    pub(crate) fn describe(&self) -> String {
        let view = self.engine.inspect(PUBEND).map(|v| (v.done(), v.horizon(), v.release(), v.subend_position(SUBEND)));
        format!(
            "hosted {} seeding {:?} found {} delivered {:?} view {view:?}",
            self.hosted,
            self.seeding.as_ref().map(|s| s.1),
            self.found.is_some(),
            self.delivered
        )
    }

    /// Whether the pubend is open here (for the quiet phase's end).
    pub(crate) fn hosted(&self) -> bool {
        self.hosted
    }
}

fn answer(key: PublishKey, ack: Ack<u64>, out: &mut Vec<Effect>) {
    let (_, publisher, seq) = key;
    let action = tidings_replica::Action::Acked { publisher: publisher.0, seq, tick: ack.tick.map(|t| t.0) };
    out.push(Effect::Reply { publisher: ack.waiter, action: Box::new(action) });
}

fn refuse(key: PublishKey, waiter: u64, out: &mut Vec<Effect>) {
    let (_, _, seq) = key;
    let action = tidings_replica::Action::Refused { publisher: waiter, seq, leader: None };
    out.push(Effect::Reply { publisher: waiter, action: Box::new(action) });
}
