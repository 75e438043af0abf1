//! Durable subscribers' checkpoints at their broker, sans-IO: what the broker's driver
//! (`guaranteed/durable.rs`) and the simulator (`gd/durable.rs`) both decide about them, so a
//! simulated crash judges the broker's own bookkeeping rather than a model of it.
//!
//! The order that makes a crash lose nothing: a DELIVERY_ACK moves the subend's in-memory
//! `acked`; checkpoints are written in batches ([`Checkpoints::flush`]), one write in flight at
//! a time, at most one per [`CHECKPOINT_EVERY_MS`] (a second after a failed one); only once a
//! write is durable ([`Checkpoints::written`]) is [`Input::SubendCheckpoint`] fed, and only then
//! may the core acknowledge those ticks upstream. After a restart the subend resumes from the
//! stored checkpoint ([`Checkpoints::restore`]): ticks acknowledged by a client but not yet
//! written come again (the client skips ticks it already has), never fewer.
//!
//! The caller does the I/O (the broker a redb transaction off its task, the simulator a seeded
//! delay over its store) and keeps what names a subscription (the broker's durable name and
//! record); here a subscription is its subend, which is stable within one incarnation.

use std::collections::{BTreeMap, BTreeSet};

use tidings_delivery::{Engine, Input, Matcher, Millis, PubendId, SubendId, Tick};

/// At most one checkpoint write per this interval. Each is a synced transaction on the disk the
/// pubend log syncs on too: back to back, a fast catch-up's checkpoints would put a sync ahead
/// of every live publish. A checkpoint written later only holds the log a little longer.
pub const CHECKPOINT_EVERY_MS: u64 = 100;

/// After a failed write the next waits this long (the store is likely still failing).
pub const RETRY_MS: u64 = 1000;

/// A checkpoint moves over ticks that did not match once they are this far (one second of the
/// pubend's clock) past it.
pub const PASSED_TICKS: u64 = 1_000_000;

/// A tick per pubend (what a subscription acknowledged, or what is stored for it).
pub type Ticks = BTreeMap<PubendId, Tick>;

/// One checkpoint write: `(subend, pubend, tick)` per checkpoint moved.
pub type Batch = Vec<(SubendId, PubendId, Tick)>;

/// One durable subscription's checkpoint state.
#[derive(Debug, Default)]
struct Entry {
    /// Per pubend, the last tick its clients acknowledged (or one before its start).
    acked: BTreeMap<PubendId, Tick>,
    /// Per pubend, the checkpoint in the store (fed to the core).
    saved: BTreeMap<PubendId, Tick>,
    /// A client holds it.
    held: bool,
    /// Per pubend, the last tick handed to its client.
    delivered: BTreeMap<PubendId, Tick>,
}

/// Every durable subscription of one broker, and the checkpoint writer's state (all soft: lost
/// at a crash, rebuilt from the store by [`Checkpoints::restore`]).
#[derive(Debug, Default)]
pub struct Checkpoints {
    entries: BTreeMap<SubendId, Entry>,
    /// Checkpoints moved and not yet written.
    dirty: BTreeSet<(SubendId, PubendId)>,
    /// A write is in flight (one at a time, so writes land in order).
    writing: bool,
    /// The next write starts no earlier than this.
    retry_at: Option<Millis>,
    /// A client left: its last acknowledgements are written at once, not after the interval.
    urgent: bool,
}

impl Checkpoints {
    /// A subscription loaded from the store after a restart, with its stored checkpoints: no
    /// client holds it yet, and it resumes one past them.
    pub fn restore(&mut self, subend: SubendId, stored: BTreeMap<PubendId, Tick>) {
        let entry = Entry { acked: stored.clone(), saved: stored, held: false, delivered: BTreeMap::new() };
        self.entries.insert(subend, entry);
    }

    /// A subscription just created (and stored): held by the client that made it, with no
    /// checkpoint until a start is known.
    pub fn create(&mut self, subend: SubendId) {
        self.entries.insert(subend, Entry { held: true, ..Entry::default() });
    }

    /// The subscription was deleted: nothing of it is written any more.
    pub fn remove(&mut self, subend: SubendId) {
        self.entries.remove(&subend);
        self.dirty.retain(|(s, _)| *s != subend);
    }

    /// Whether `subend` is a durable subscription here.
    pub fn contains(&self, subend: SubendId) -> bool {
        self.entries.contains_key(&subend)
    }

    /// Whether a client holds `subend`.
    pub fn is_held(&self, subend: SubendId) -> bool {
        self.entries.get(&subend).is_some_and(|entry| entry.held)
    }

    /// Where `subend` (re)starts on `pubend`: one past its acknowledged tick, if it has one.
    pub fn start(&self, subend: SubendId, pubend: PubendId) -> Option<Tick> {
        self.entries.get(&subend)?.acked.get(&pubend).map(|tick| tick.next())
    }

    /// Per pubend, what `subend`'s clients acknowledged and what is stored (for reports).
    pub fn of(&self, subend: SubendId) -> Option<(&Ticks, &Ticks)> {
        self.entries.get(&subend).map(|entry| (&entry.acked, &entry.saved))
    }

    /// `subend` got its start `start` on `pubend`: from there it is held for it, across
    /// restarts too (written with the next batch). A start it already has stays.
    pub fn started(&mut self, subend: SubendId, pubend: PubendId, start: Tick) {
        let Some(entry) = self.entries.get_mut(&subend) else { return };
        if let std::collections::btree_map::Entry::Vacant(vacant) = entry.acked.entry(pubend) {
            vacant.insert(start.prev());
            self.dirty.insert((subend, pubend));
        }
    }

    /// A client took `subend` again.
    pub fn hold(&mut self, subend: SubendId) {
        if let Some(entry) = self.entries.get_mut(&subend) {
            entry.held = true;
        }
    }

    /// The client holding `subend` went away. What it acknowledged before leaving is written
    /// at once: a crash of this broker right after must not give the next client those
    /// messages again.
    pub fn away(&mut self, subend: SubendId) {
        if let Some(entry) = self.entries.get_mut(&subend) {
            entry.held = false;
        }
        self.urgent = true;
        if self.retry_at.is_some() && !self.writing {
            self.retry_at = None;
        }
    }

    /// A client acknowledged `tick` of `pubend` (and everything before it): remembered, written
    /// with the next batch. An older acknowledgement arriving late moves nothing.
    pub fn ack(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) {
        let Some(entry) = self.entries.get_mut(&subend) else { return };
        let acked = entry.acked.entry(pubend).or_insert(tick);
        if tick >= *acked {
            *acked = tick;
            self.dirty.insert((subend, pubend));
        }
    }

    /// `tick` of `pubend` was handed to `subend`'s client (checked against its acks before a
    /// checkpoint moves over unmatched ticks).
    pub fn delivered(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) {
        if let Some(entry) = self.entries.get_mut(&subend) {
            entry.delivered.insert(pubend, tick);
        }
    }

    /// When [`Checkpoints::flush`] has a batch to give, if it is waiting only for time.
    pub fn due(&self) -> Option<Millis> {
        (!self.writing && !self.dirty.is_empty()).then(|| self.retry_at.unwrap_or(Millis(0)))
    }

    /// The batch to write now, if checkpoints moved, none is in flight and the interval passed;
    /// the caller writes it durably and reports with [`Checkpoints::written`]. Before that, a
    /// held subscription whose client acknowledged everything delivered to it moves its
    /// checkpoint to where its stream in `engine` stands once that is [`PASSED_TICKS`] further:
    /// ticks that did not match it are not held for it.
    pub fn flush<M: Matcher>(&mut self, now: Millis, engine: &Engine<M>) -> Option<Batch> {
        let waiting = self.retry_at.is_some_and(|at| at > now);
        if self.writing || waiting {
            return None;
        }
        self.pass_unmatched(engine);
        if self.dirty.is_empty() {
            return None;
        }
        let mut batch = Batch::new();
        for (subend, pubend) in std::mem::take(&mut self.dirty) {
            let Some(&tick) = self.entries.get(&subend).and_then(|entry| entry.acked.get(&pubend)) else { continue };
            batch.push((subend, pubend, tick));
        }
        self.writing = true;
        Some(batch)
    }

    fn pass_unmatched<M: Matcher>(&mut self, engine: &Engine<M>) {
        for (&subend, entry) in self.entries.iter_mut().filter(|(_, entry)| entry.held) {
            for (&pubend, acked) in entry.acked.iter_mut() {
                let delivered = entry.delivered.get(&pubend).copied().unwrap_or_default();
                let position = engine.inspect(pubend).and_then(|view| view.subend_position(subend));
                if let Some(position) = position.filter(|&p| *acked >= delivered && p.0 >= acked.0 + PASSED_TICKS) {
                    *acked = position;
                    self.dirty.insert((subend, pubend));
                }
            }
        }
    }

    /// The write of `batch` finished at `now` (`ok`: durably). On success, the inputs that
    /// let the core acknowledge those ticks upstream; on failure, none, and the batch is
    /// written again after [`RETRY_MS`] (its messages stay held meanwhile).
    pub fn written(&mut self, now: Millis, batch: Batch, ok: bool) -> Vec<Input> {
        self.writing = false;
        if !ok {
            self.retry_at = Some(now.after(RETRY_MS));
            self.dirty.extend(batch.into_iter().map(|(subend, pubend, _)| (subend, pubend)));
            return Vec::new();
        }
        let urgent = std::mem::take(&mut self.urgent);
        self.retry_at = (!urgent).then(|| now.after(CHECKPOINT_EVERY_MS));
        let mut inputs = Vec::new();
        for (subend, pubend, tick) in batch {
            let Some(entry) = self.entries.get_mut(&subend) else { continue };
            let stored = entry.saved.entry(pubend).or_insert(tick);
            *stored = (*stored).max(tick);
            inputs.push(Input::SubendCheckpoint { pubend, subend, tick });
        }
        inputs
    }
}

/// One subend to attach to a stream that appeared (or came back after a restart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attach {
    /// The subend.
    pub subend: SubendId,
    /// Where it starts (`None`: pending, its barrier is still to come).
    pub start: Option<Tick>,
    /// Durable: resumed from its checkpoint.
    pub durable: bool,
}

/// The order in which subends attach to a stream: lowest start first, pending ones last. The
/// first subend a fresh stream gets sets its start and done prefix, and every later one must be
/// at or above them (the core cannot take back an acknowledgement it made); the broker's
/// restart and the simulator's both attach in this order.
pub fn attach_order(mut attach: Vec<Attach>) -> Vec<Attach> {
    attach.sort_by_key(|a| (a.start.is_none(), a.start, a.subend));
    attach
}

#[cfg(test)]
pub(crate) mod tests;
