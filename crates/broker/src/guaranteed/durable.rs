//! Durable subscriptions (seed 004's persistent clients) in the driver.
//!
//! A durable name is a guaranteed subscription that outlives its sessions. Its record (pattern,
//! selector, creation time) and, per pubend, its checkpoint (the last tick its application
//! acknowledged) are in the [`DurableStore`]. Its subend stays attached to every stream while
//! no client holds it, blocked, so the core keeps the stream's acknowledgement (and so the
//! pubend's log) at its checkpoint; its filter stays in the routing summaries, so upstream
//! never turns its messages into F.
//!
//! The order that makes a crash lose nothing: a DELIVERY_ACK moves the name's in-memory
//! `acked`; checkpoints are written in batches, one transaction in flight at a time, off the
//! driver's task; only once a write is durable is [`Input::SubendCheckpoint`] fed, and only then
//! may the core acknowledge those ticks upstream. After a restart the name resumes from the
//! stored checkpoint: ticks acknowledged by a client but not yet written come again (the
//! client skips ticks it already has), never fewer.
//!
//! Sessions claim names through [`Claims`] synchronously (so a second holder is refused at
//! once, with the other refusals); the driver learns of claims through its commands, in order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tidings_delivery::{Input, Millis, PubendId, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_wire::{Notice, ReasonCode, SubId, Subscribed};
use tracing::{info, warn};

use super::driver::{now, Driver, Subend};
use super::durable_store::{Batch, DurableStore, Record};
use super::Command;
use crate::outbox::Outbox;

/// Longest durable name.
pub const MAX_NAME: usize = 128;

/// Checks a durable name: 1 to [`MAX_NAME`] letters, digits, `-`, `_` or `.` (it is a key in the
/// store and a word on the command line).
pub fn check_name(name: &str) -> Result<(), Notice> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(Notice::new(
            ReasonCode::DurableMismatch,
            format!("invalid durable name {name:?}: use 1 to {MAX_NAME} letters, digits, '-', '_' or '.'"),
        ))
    }
}

/// Which session holds which durable name; shared by the sessions and the driver.
#[derive(Default)]
pub struct Claims {
    names: HashMap<String, Claim>,
}

struct Claim {
    subend: SubendId,
    pattern: String,
    selector: Option<String>,
    held: bool,
}

impl Claims {
    /// A session takes `name` for a subscription of `pattern` and `selector`: the name's subend
    /// (`fresh` if the name is new), or why not.
    pub fn claim(
        &mut self,
        name: &str,
        pattern: &str,
        selector: Option<&str>,
        fresh: SubendId,
    ) -> Result<SubendId, Notice> {
        check_name(name)?;
        let claim = self.names.entry(name.to_string()).or_insert_with(|| Claim {
            subend: fresh,
            pattern: pattern.to_string(),
            selector: selector.map(str::to_string),
            held: false,
        });
        if claim.held {
            return Err(Notice::new(
                ReasonCode::DurableInUse,
                format!("the durable subscription {name:?} is held by another session"),
            ));
        }
        if claim.pattern != pattern || claim.selector.as_deref() != selector {
            return Err(Notice::new(
                ReasonCode::DurableMismatch,
                format!(
                    "the durable subscription {name:?} exists for pattern {:?} and selector {:?}; unsubscribe it first",
                    claim.pattern,
                    claim.selector.as_deref().unwrap_or("")
                ),
            ));
        }
        claim.held = true;
        Ok(claim.subend)
    }

    /// The session holding `name` left; the name stays.
    pub fn release(&mut self, name: &str) {
        if let Some(claim) = self.names.get_mut(name) {
            claim.held = false;
        }
    }

    /// `name` was deleted.
    pub fn remove(&mut self, name: &str) {
        self.names.remove(name);
    }

    /// `None` if `name` does not exist; else its subend if no session holds it.
    pub fn free_subend(&self, name: &str) -> Option<Option<SubendId>> {
        self.names.get(name).map(|claim| (!claim.held).then_some(claim.subend))
    }
}

/// A durable SUBSCRIBE as the client wrote it: the name, and the pattern and selector texts
/// (stored as written, so the same client text matches again after a restart).
#[derive(Clone, Debug)]
pub struct DurableSpec {
    /// The durable name.
    pub name: String,
    /// The pattern text.
    pub pattern: String,
    /// The selector text.
    pub selector: Option<String>,
}

/// One durable name in the driver.
pub(super) struct Durable {
    pub(super) record: Record,
    pub(super) subend: SubendId,
    /// Per pubend, the last tick its clients acknowledged (or one before its start).
    pub(super) acked: BTreeMap<PubendId, Tick>,
    /// Per pubend, the checkpoint in the store (fed to the core).
    pub(super) saved: BTreeMap<PubendId, Tick>,
    /// A session holds it.
    pub(super) held: bool,
    /// Per pubend, the last tick handed to its outbox.
    pub(super) delivered: BTreeMap<PubendId, Tick>,
}

/// Every durable name, and the checkpoint writer's state.
pub(super) struct Durables {
    pub(super) store: Arc<DurableStore>,
    pub(super) claims: Arc<parking_lot::Mutex<Claims>>,
    pub(super) by_name: BTreeMap<String, Durable>,
    pub(super) by_subend: BTreeMap<SubendId, String>,
    /// Checkpoints moved and not yet written.
    dirty: BTreeSet<(String, PubendId)>,
    /// A write is in flight (one at a time, so writes land in order).
    writing: bool,
    /// The next write starts no earlier than this (after a failure: a second later; after a
    /// success: [`CHECKPOINT_EVERY`] later).
    retry_at: Option<std::time::Instant>,
    /// A client left: its last acknowledgements are written at once, not after the interval.
    urgent: bool,
}

/// At most one checkpoint write per this interval. Each is a synced transaction on the disk the
/// pubend log syncs on too: back to back, a fast catch-up's checkpoints would put a sync ahead
/// of every live publish. A checkpoint written later only holds the log a little longer.
/// A checkpoint moves over ticks that did not match once they are this far (one second of the
/// pubend's clock) past it.
const PASSED_TICKS: u64 = 1_000_000;

pub(super) const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Durables {
    pub(super) fn new(store: DurableStore, claims: Arc<parking_lot::Mutex<Claims>>) -> Durables {
        Durables {
            store: Arc::new(store),
            claims,
            by_name: BTreeMap::new(),
            by_subend: BTreeMap::new(),
            dirty: BTreeSet::new(),
            writing: false,
            retry_at: None,
            urgent: false,
        }
    }

    fn name_of(&self, subend: SubendId) -> Option<&String> {
        self.by_subend.get(&subend)
    }
}

impl Driver {
    /// Loads every durable name and attaches it, away, to every stream known now (streams
    /// seen later get it through `attach_late`). Called once the hosted pubends are open and
    /// before any session, so each stream starts at its lowest checkpoint.
    pub(super) fn restore_durables(&mut self) -> Result<(), super::GuaranteedError> {
        let stored = self.durables.store.load().map_err(super::GuaranteedError::Durable)?;
        for (name, record, checkpoints) in stored {
            let pattern = Pattern::parse(&record.pattern);
            let selector = record.selector.as_deref().map(Selector::parse).transpose();
            let (Ok(pattern), Ok(selector)) = (pattern, selector) else {
                warn!(name, "a stored durable subscription no longer parses; skipped (it stays in the store)");
                continue;
            };
            let subend = SubendId(self.next_subend.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            self.durables.claims.lock().names.insert(
                name.clone(),
                Claim { subend, pattern: record.pattern.clone(), selector: record.selector.clone(), held: false },
            );
            if let Some(net) = &self.net {
                net.cluster.subscribe(crate::cluster::RouteFilter::new(pattern.clone(), selector.clone()));
            }
            self.engine.matcher_mut().insert(subend, pattern, selector);
            let checkpoints: BTreeMap<PubendId, Tick> =
                checkpoints.into_iter().map(|(pubend, tick)| (PubendId(pubend), Tick(tick))).collect();
            let confirmed_at = Some(Millis(record.created_ms));
            let entry = Subend {
                id: SubId(0),
                outbox: None,
                blocked: true,
                barrier: None,
                confirmed_at,
                durable: true,
                announced: Default::default(),
            };
            self.subends.insert(subend, entry);
            self.durables.by_subend.insert(subend, name.clone());
            let durable = Durable {
                record,
                subend,
                acked: checkpoints.clone(),
                saved: checkpoints,
                held: false,
                delivered: BTreeMap::new(),
            };
            self.durables.by_name.insert(name, durable);
        }
        self.metrics.subends.set(self.subends.len() as i64);
        self.metrics.durables.set(self.durables.by_name.len() as i64);
        for pubend in self.pubends() {
            let start = self.hosted.contains(&pubend).then(|| self.next_tick(pubend));
            self.attach_late(pubend, start);
        }
        if !self.durables.by_name.is_empty() {
            info!(durables = self.durables.by_name.len(), "durable subscriptions restored");
        }
        Ok(())
    }

    /// Where a durable subend starts on `pubend`: one past its acknowledged tick, if it has one.
    pub(super) fn durable_start(&self, subend: SubendId, pubend: PubendId) -> Option<Tick> {
        let name = self.durables.name_of(subend)?;
        self.durables.by_name.get(name)?.acked.get(&pubend).map(|tick| tick.next())
    }

    /// A durable subend got its start `start` on `pubend`: from there it is held for it, across
    /// restarts too.
    pub(super) fn durable_started(&mut self, subend: SubendId, pubend: PubendId, start: Tick) {
        let Some(name) = self.durables.name_of(subend).cloned() else { return };
        let Some(durable) = self.durables.by_name.get_mut(&name) else { return };
        if let std::collections::btree_map::Entry::Vacant(entry) = durable.acked.entry(pubend) {
            entry.insert(start.prev());
            self.durables.dirty.insert((name, pubend));
        }
    }

    /// A durable SUBSCRIBE (the session claimed the name): resume it or create it.
    pub(super) fn subscribe_durable(
        &mut self,
        subend: SubendId,
        id: SubId,
        spec: DurableSpec,
        filter: (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) {
        let Some(durable) = self.durables.by_name.get_mut(&spec.name) else {
            self.create_durable(subend, id, spec, filter, outbox);
            return;
        };
        durable.held = true;
        let Some(entry) = self.subends.get_mut(&subend) else { return };
        entry.id = id;
        entry.outbox = Some(Arc::clone(&outbox));
        entry.blocked = false;
        if entry.confirmed_at.is_none() {
            // Its first confirmation is still to come (the barrier); SUBSCRIBED goes then.
            self.feed(Input::OutboxReady { subend });
            return;
        }
        let starts: Vec<(PubendId, Tick)> = self
            .pubends()
            .into_iter()
            .filter_map(|pubend| Some((pubend, self.durable_start(subend, pubend)?)))
            .collect();
        // SUBSCRIBED first: the replay that attaching starts comes after it on the connection.
        let wire = starts.iter().map(|(p, t)| (tidings_wire::PubendId(p.0), tidings_wire::Tick(t.0))).collect();
        outbox.push_frame(&tidings_wire::Frame::Subscribed(Subscribed { id, starts: wire }));
        self.metrics.durable_resumed.inc();
        for (pubend, start) in starts {
            self.feed(Input::SubendAttach { pubend, subend, start: Some(start), durable: true });
        }
    }

    fn create_durable(
        &mut self,
        subend: SubendId,
        id: SubId,
        spec: DurableSpec,
        (pattern, selector): (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) {
        let name = spec.name;
        let record = Record { pattern: spec.pattern, selector: spec.selector, created_ms: now().0 };
        // Written before anything is promised: a name the client was told about survives a crash.
        let batch = Batch { created: vec![(name.clone(), record.clone())], ..Batch::default() };
        if let Err(error) = self.durables.store.write(&batch) {
            warn!(%error, name, "cannot store a durable subscription; refused");
            self.durables.claims.lock().remove(&name);
            let notice =
                Notice::new(ReasonCode::StorageUnavailable, format!("cannot store the durable subscription: {error}"));
            outbox.push_frame(&tidings_wire::Frame::Error(notice));
            return;
        }
        if let Some(net) = &self.net {
            net.cluster.subscribe(crate::cluster::RouteFilter::new(pattern.clone(), selector.clone()));
        }
        let durable = Durable {
            record,
            subend,
            acked: BTreeMap::new(),
            saved: BTreeMap::new(),
            held: true,
            delivered: BTreeMap::new(),
        };
        self.durables.by_name.insert(name.clone(), durable);
        self.durables.by_subend.insert(subend, name);
        self.metrics.durable_created.inc();
        self.metrics.durables.set(self.durables.by_name.len() as i64);
        self.subscribe(subend, id, (pattern, selector), true, outbox);
    }

    /// The session holding a durable subscription went away: it stays, blocked.
    pub(super) fn durable_away(&mut self, subend: SubendId) {
        let Some(name) = self.durables.name_of(subend).cloned() else { return };
        if let Some(durable) = self.durables.by_name.get_mut(&name) {
            durable.held = false;
        }
        // What its client acknowledged before leaving is written now: a crash of this broker
        // right after must not give the next client those messages again.
        self.durables.urgent = true;
        if self.durables.retry_at.is_some() && !self.durables.writing {
            self.durables.retry_at = None;
        }
        if let Some(entry) = self.subends.get_mut(&subend) {
            entry.outbox = None;
            if !entry.blocked {
                entry.blocked = true;
                self.feed(Input::OutboxFull { subend });
            }
        }
    }

    /// UNSUBSCRIBE of a durable subscription (or `tidings durable rm`): the name, its
    /// checkpoints, its filter and its pins go.
    pub(super) fn delete_durable(&mut self, subend: SubendId) {
        let Some(name) = self.durables.by_subend.remove(&subend) else { return };
        let Some(durable) = self.durables.by_name.remove(&name) else { return };
        self.durables.dirty.retain(|(n, _)| *n != name);
        if let Err(error) = self.durables.store.write(&Batch { deleted: vec![name.clone()], ..Batch::default() }) {
            warn!(%error, name, "cannot delete a durable subscription from the store; it comes back after a restart");
        }
        self.durables.claims.lock().remove(&name);
        if let Some(net) = &self.net {
            if let (Ok(pattern), Ok(selector)) = (
                Pattern::parse(&durable.record.pattern),
                durable.record.selector.as_deref().map(Selector::parse).transpose(),
            ) {
                net.cluster.unsubscribe(crate::cluster::RouteFilter::new(pattern, selector));
            }
        }
        self.metrics.durable_deleted.inc();
        self.metrics.durables.set(self.durables.by_name.len() as i64);
        info!(name, "durable subscription deleted");
        self.remove_subend(subend);
    }

    /// A DELIVERY_ACK for a durable subend: remembered, written with the next batch.
    pub(super) fn durable_ack(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) {
        let Some(name) = self.durables.name_of(subend).cloned() else { return };
        let Some(durable) = self.durables.by_name.get_mut(&name) else { return };
        let acked = durable.acked.entry(pubend).or_insert(tick);
        if tick >= *acked {
            *acked = tick;
            self.durables.dirty.insert((name, pubend));
        }
    }

    /// A delivery to a durable subend's outbox (checked against its client's acks).
    pub(super) fn durable_delivered(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) {
        let Some(name) = self.durables.by_subend.get(&subend) else { return };
        if let Some(durable) = self.durables.by_name.get_mut(name) {
            durable.delivered.insert(pubend, tick);
        }
    }

    /// A held durable subscription whose client acknowledged everything delivered to it moves
    /// its checkpoint to where its stream stands, once that is [`PASSED_TICKS`] further: ticks
    /// that did not match it are not held for it.
    fn checkpoint_passed_ticks(&mut self) {
        let mut moved = Vec::new();
        for (name, durable) in self.durables.by_name.iter_mut().filter(|(_, d)| d.held) {
            for (pubend, acked) in durable.acked.iter_mut() {
                let delivered = durable.delivered.get(pubend).copied().unwrap_or_default();
                let position = self.engine.inspect(*pubend).and_then(|view| view.subend_position(durable.subend));
                if let Some(position) = position.filter(|&p| *acked >= delivered && p.0 >= acked.0 + PASSED_TICKS) {
                    *acked = position;
                    moved.push((name.clone(), *pubend));
                }
            }
        }
        self.durables.dirty.extend(moved);
    }

    /// Starts a checkpoint write if some moved and none is in flight.
    pub(super) fn flush_checkpoints(&mut self) {
        if !self.durables.writing && self.durables.retry_at.is_none_or(|at| at <= std::time::Instant::now()) {
            self.checkpoint_passed_ticks();
        }
        let d = &mut self.durables;
        if d.writing || d.dirty.is_empty() || d.retry_at.is_some_and(|at| at > std::time::Instant::now()) {
            return;
        }
        let mut batch = Batch::default();
        let mut saved = Vec::new();
        for (name, pubend) in std::mem::take(&mut d.dirty) {
            let Some(durable) = d.by_name.get(&name) else { continue };
            let Some(&tick) = durable.acked.get(&pubend) else { continue };
            batch.checkpoints.push((name.clone(), pubend.0, tick.0));
            saved.push((name, pubend, tick));
        }
        d.writing = true;
        let store = Arc::clone(&d.store);
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let result = store.write(&batch).map_err(|e| e.to_string());
            let _ = tx.send(Command::CheckpointsSaved { saved, result });
        });
    }

    /// A checkpoint write finished: what it wrote may now be acknowledged upstream.
    pub(super) fn checkpoints_saved(&mut self, saved: Vec<(String, PubendId, Tick)>, result: Result<(), String>) {
        self.durables.writing = false;
        if let Err(error) = result {
            warn!(%error, "cannot write durable subscriptions' checkpoints; retrying (their messages stay held)");
            self.metrics.durable_checkpoint_failures.inc();
            self.durables.retry_at = Some(std::time::Instant::now() + std::time::Duration::from_secs(1));
            for (name, pubend, _) in saved {
                self.durables.dirty.insert((name, pubend));
            }
            return;
        }
        let urgent = std::mem::take(&mut self.durables.urgent);
        self.durables.retry_at = (!urgent).then(|| std::time::Instant::now() + CHECKPOINT_EVERY);
        self.metrics.durable_checkpoints.inc();
        for (name, pubend, tick) in saved {
            let Some(durable) = self.durables.by_name.get_mut(&name) else { continue };
            let stored = durable.saved.entry(pubend).or_insert(tick);
            *stored = (*stored).max(tick);
            let subend = durable.subend;
            self.feed(Input::SubendCheckpoint { pubend, subend, tick });
        }
    }
}
