//! Durable subscriptions (seed 004's persistent clients) in the driver.
//!
//! A durable name is a guaranteed subscription that outlives its sessions. Its record (pattern,
//! selector, creation time) and, per pubend, its checkpoint (the last tick its application
//! acknowledged) are in the [`DurableStore`]. Its subend stays attached to every stream while
//! no client holds it, blocked, so the core keeps the stream's acknowledgement (and so the
//! pubend's log) at its checkpoint; its filter stays in the routing summaries, so upstream
//! never turns its messages into F.
//!
//! The order that makes a crash lose nothing (an acknowledgement reaches the core only once
//! its checkpoint is durable) is `tidings_node::durables`, which the simulator runs too; this
//! shell names the subscriptions, writes the batches to the [`DurableStore`] off the driver's
//! task, and feeds what the written ones allow.
//!
//! Sessions claim names through [`Claims`] synchronously (so a second holder is refused at
//! once, with the other refusals); the driver learns of claims through its commands, in order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tidings_delivery::{Input, Millis, PubendId, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_node::durables::Checkpoints;
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
    /// A queue group's key property.
    key: Option<String>,
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
        self.take(name, (pattern, selector, None), fresh, false)
    }

    /// A member joins the guaranteed queue group kept under durable name `name` (see
    /// [`super::groups`]): the group's subend (`fresh` if the group is new), or why not. Unlike
    /// a durable name, a group is held by all its members at once; it must keep one filter
    /// and one key property (or none).
    pub fn claim_group(
        &mut self,
        name: &str,
        (pattern, selector, key): (&str, Option<&str>, Option<&str>),
        fresh: SubendId,
    ) -> Result<SubendId, Notice> {
        self.take(name, (pattern, selector, key), fresh, true)
    }

    /// Takes `name` for one holder, or for one more if `shared` (a group's members).
    fn take(
        &mut self,
        name: &str,
        (pattern, selector, key): (&str, Option<&str>, Option<&str>),
        fresh: SubendId,
        shared: bool,
    ) -> Result<SubendId, Notice> {
        let claim = self.names.entry(name.to_string()).or_insert_with(|| Claim {
            subend: fresh,
            pattern: pattern.to_string(),
            selector: selector.map(str::to_string),
            key: key.map(str::to_string),
            held: false,
        });
        if claim.held && !shared {
            return Err(Notice::new(
                ReasonCode::DurableInUse,
                format!("the durable subscription {name:?} is held by another session"),
            ));
        }
        if claim.key.as_deref() != key {
            let had = claim.key.as_deref().map_or("no key".to_string(), |k| format!("the key {k:?}"));
            let why = format!("the guaranteed queue group {name:?} exists with {had}; its members share one key");
            return Err(Notice::new(ReasonCode::DurableMismatch, why));
        }
        if claim.pattern != pattern || claim.selector.as_deref() != selector {
            let (what, hint) = match shared {
                true => ("guaranteed queue group", "its members share one filter"),
                false => ("durable subscription", "unsubscribe it first"),
            };
            return Err(Notice::new(
                ReasonCode::DurableMismatch,
                format!(
                    "the {what} {name:?} exists for pattern {:?} and selector {:?}; {hint}",
                    claim.pattern,
                    claim.selector.as_deref().unwrap_or("")
                ),
            ));
        }
        claim.held = true;
        Ok(claim.subend)
    }

    /// `name` is held again (a group member joined).
    pub fn hold(&mut self, name: &str) {
        if let Some(claim) = self.names.get_mut(name) {
            claim.held = true;
        }
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
    /// A guaranteed queue group's key property (`--queue-key`); `None` for a durable name.
    pub key: Option<String>,
}

/// One durable name in the driver: what names it (its checkpoints are in
/// [`Durables::checkpoints`], under its subend).
pub(super) struct Durable {
    pub(super) record: Record,
    pub(super) subend: SubendId,
}

/// Every durable name, and their checkpoints (`tidings_node::durables`, the bookkeeping the
/// simulator runs too).
pub(super) struct Durables {
    pub(super) store: Arc<DurableStore>,
    pub(super) claims: Arc<parking_lot::Mutex<Claims>>,
    pub(super) by_name: BTreeMap<String, Durable>,
    pub(super) by_subend: BTreeMap<SubendId, String>,
    /// Acknowledged and stored checkpoints, and when the next write may start.
    pub(super) checkpoints: Checkpoints,
    /// The checkpoint writer's clock starts here (monotonic: the write interval must not jump
    /// with the wall clock).
    epoch: std::time::Instant,
}

impl Durables {
    pub(super) fn new(store: DurableStore, claims: Arc<parking_lot::Mutex<Claims>>) -> Durables {
        Durables {
            store: Arc::new(store),
            claims,
            by_name: BTreeMap::new(),
            by_subend: BTreeMap::new(),
            checkpoints: Checkpoints::default(),
            epoch: std::time::Instant::now(),
        }
    }

    /// Now on the checkpoint writer's clock.
    fn now(&self) -> Millis {
        Millis(self.epoch.elapsed().as_millis() as u64)
    }
}

impl Driver {
    /// Loads every durable name and attaches it, away, to every stream known now (streams
    /// seen later get it through `attach_late`). Called once the hosted pubends are open and
    /// before any session, so each stream starts at its lowest checkpoint.
    pub(super) fn restore_durables(&mut self) -> Result<(), super::GuaranteedError> {
        let stored = self.durables.store.load().map_err(super::GuaranteedError::Durable)?;
        let mut names = Vec::with_capacity(stored.len());
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
                Claim {
                    subend,
                    pattern: record.pattern.clone(),
                    selector: record.selector.clone(),
                    key: record.key.clone(),
                    held: false,
                },
            );
            if let Some(net) = &self.net {
                net.cluster.subscribe(crate::cluster::RouteFilter::new(pattern.clone(), selector.clone()));
            }
            names.push((name.clone(), subend, pattern, selector));
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
                unstarted: Default::default(),
            };
            self.subends.insert(subend, entry);
            self.durables.by_subend.insert(subend, name.clone());
            self.durables.checkpoints.restore(subend, checkpoints);
            self.durables.by_name.insert(name, Durable { record, subend });
        }
        // Relays and their readers (`super::relay`) are known before any filter is matched.
        let named: Vec<(String, SubendId)> = names.iter().map(|(name, subend, ..)| (name.clone(), *subend)).collect();
        self.restore_relays(&named);
        for (_, subend, pattern, selector) in names {
            self.insert_filter(subend, pattern, selector);
            self.relay_entry_restored(subend);
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
        self.durables.checkpoints.start(subend, pubend)
    }

    /// A durable subend got its start `start` on `pubend`: from there it is held for it, across
    /// restarts too.
    pub(super) fn durable_started(&mut self, subend: SubendId, pubend: PubendId, start: Tick) {
        self.durables.checkpoints.started(subend, pubend, start);
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
        if !self.durables.by_name.contains_key(&spec.name) {
            if let Err(notice) = self.create_durable(subend, id, spec, filter, Some(Arc::clone(&outbox))) {
                outbox.push_frame(&tidings_wire::Frame::Error(notice));
            }
            return;
        }
        self.durables.checkpoints.hold(subend);
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
            .filter(|&pubend| self.relays.attaches(subend, pubend))
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

    /// Creates durable subscription `spec` (written to the store first) and subscribes it,
    /// delivering to `outbox` (`None`: a queue group's own, whose deliveries go to its work
    /// queue). Refused only if the store cannot write it.
    pub(super) fn create_durable(
        &mut self,
        subend: SubendId,
        id: SubId,
        spec: DurableSpec,
        filter: (Pattern, Option<Selector>),
        outbox: Option<Arc<Outbox>>,
    ) -> Result<(), Notice> {
        match outbox {
            // `[durable] store = "cell"`: a client's durable subscription reads from a relay.
            Some(outbox) if self.relays.enabled && spec.key.is_none() => {
                self.create_relayed(subend, id, spec, filter, outbox)
            }
            outbox => self.create_durable_here(subend, id, spec, filter, outbox),
        }
    }

    /// [`Driver::create_durable`] of a subscription that reads the pubends themselves (a
    /// queue group's, a relay's, any under `[durable] store = "publisher"`).
    pub(super) fn create_durable_here(
        &mut self,
        subend: SubendId,
        id: SubId,
        spec: DurableSpec,
        (pattern, selector): (Pattern, Option<Selector>),
        outbox: Option<Arc<Outbox>>,
    ) -> Result<(), Notice> {
        let name = spec.name;
        let record = Record { pattern: spec.pattern, selector: spec.selector, created_ms: now().0, key: spec.key };
        // Written before anything is promised: a name the client was told about survives a crash.
        let batch = Batch { created: vec![(name.clone(), record.clone())], ..Batch::default() };
        if let Err(error) = self.durables.store.write(&batch) {
            warn!(%error, name, "cannot store a durable subscription; refused");
            self.durables.claims.lock().remove(&name);
            let notice =
                Notice::new(ReasonCode::StorageUnavailable, format!("cannot store the durable subscription: {error}"));
            return Err(notice);
        }
        if let Some(net) = &self.net {
            net.cluster.subscribe(crate::cluster::RouteFilter::new(pattern.clone(), selector.clone()));
        }
        self.durables.checkpoints.create(subend);
        self.durables.by_name.insert(name.clone(), Durable { record, subend });
        self.durables.by_subend.insert(subend, name);
        self.metrics.durable_created.inc();
        self.metrics.durables.set(self.durables.by_name.len() as i64);
        self.subscribe(subend, id, (pattern, selector), true, outbox);
        Ok(())
    }

    /// The session holding a durable subscription went away: it stays, blocked.
    pub(super) fn durable_away(&mut self, subend: SubendId) {
        if !self.durables.by_subend.contains_key(&subend) {
            return;
        }
        // What its client acknowledged before leaving is written now (see `Checkpoints::away`).
        self.durables.checkpoints.away(subend);
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
        self.durables.checkpoints.remove(subend);
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
        self.relay_deleted(subend, &name);
    }

    /// A DELIVERY_ACK for a durable subend: remembered, written with the next batch.
    pub(super) fn durable_ack(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) {
        self.durables.checkpoints.ack(subend, pubend, tick);
    }

    /// A delivery to a durable subend's outbox (checked against its client's acks).
    pub(super) fn durable_delivered(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) {
        self.durables.checkpoints.delivered(subend, pubend, tick);
    }

    /// Starts a checkpoint write, off this task, if `Checkpoints::flush` gives one.
    pub(super) fn flush_checkpoints(&mut self) {
        let now = self.durables.now();
        let Some(batch) = self.durables.checkpoints.flush(now, &self.engine) else { return };
        let d = &self.durables;
        let mut write = Batch::default();
        for (subend, pubend, tick) in &batch {
            let Some(name) = d.by_subend.get(subend) else { continue };
            write.checkpoints.push((name.clone(), pubend.0, tick.0));
        }
        let store = Arc::clone(&d.store);
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let result = store.write(&write).map_err(|e| e.to_string());
            let _ = tx.send(Command::CheckpointsSaved { saved: batch, result });
        });
    }

    /// A checkpoint write finished: what it wrote may now be acknowledged upstream.
    pub(super) fn checkpoints_saved(&mut self, saved: tidings_node::durables::Batch, result: Result<(), String>) {
        if let Err(error) = &result {
            warn!(%error, "cannot write durable subscriptions' checkpoints; retrying (their messages stay held)");
            self.metrics.durable_checkpoint_failures.inc();
        } else {
            self.metrics.durable_checkpoints.inc();
        }
        let now = self.durables.now();
        for input in self.durables.checkpoints.written(now, saved, result.is_ok()) {
            self.feed(input);
        }
    }
}
