//! Durable subscribers (seed 004's persistent clients) at their broker, the SHB: the broker's
//! own checkpoint bookkeeping (`tidings_node::durables`, which its `guaranteed/durable.rs`
//! drives too) over the simulator's clock and store.
//!
//! A delivery goes into the client's outbox and reaches the application after a seeded delay;
//! the application acknowledges what it received after another; the acknowledgement, once at
//! the SHB, goes to [`Checkpoints`], which batches the checkpoints that moved into one write at
//! a time; the write lands in the store after a third delay, and only then are its
//! [`Input::SubendCheckpoint`]s fed to the engine. Everything in between is soft state of the
//! SHB ([`Clients`]) and is lost at its crash or, for the outbox and the acknowledgements on
//! their way, when the client goes away; the stored checkpoint ([`Durable::checkpoint`], the
//! store the broker keeps in redb) survives both. The application keeps what it received: a
//! redelivery of a tick at or below the last it received is skipped (and acknowledged again),
//! as the real client does, and every new tick is judged against Expected (I5).

use std::collections::VecDeque;

use crate::gd::disk::Disk;
use tidings_delivery::{Input, Millis, PubendId, SubendId, Tick};
use tidings_node::durables::{attach_order, Attach, Batch, Checkpoints};

use crate::gd::layer::{GdLayer, GdNode, Out};
use crate::gd::world::{Durable, World};

/// Upper bound of the seeded delay between a delivery and the application receiving it, in ms.
pub(crate) const MAX_RECEIVE_MS: u64 = 10;
/// Upper bound of the seeded delay of the application's acknowledgement reaching the SHB.
pub(crate) const MAX_APP_ACK_MS: u64 = 60;
/// Upper bound of the seeded delay of a checkpoint write at the SHB.
pub(crate) const MAX_WRITE_MS: u64 = 40;

/// One delivery in a client's outbox.
#[derive(Clone, Copy, Debug)]
struct Handed {
    due: Millis,
    subend: SubendId,
    pubend: PubendId,
    tick: Tick,
}

/// The durable-subscription shell's soft state at one broker (all lost at its crash).
#[derive(Default)]
pub(crate) struct Clients {
    /// Deliveries on their way to the applications, due times never decreasing.
    outbox: VecDeque<Handed>,
    /// Acknowledgements on their way from the applications: (due, subend, pubend, tick).
    acks: Vec<(Millis, SubendId, PubendId, Tick)>,
    /// The checkpoint write in flight (one at a time): when it lands, and what it writes.
    write: Option<(Millis, Batch)>,
    /// The broker's own checkpoint bookkeeping (`tidings_node::durables`): what reached this
    /// broker, what is stored, when the next write starts, and where a client resumes.
    checkpoints: Checkpoints,
}

impl Clients {
    /// When the next delivery, acknowledgement or write is due.
    pub(super) fn deadline(&self) -> Option<Millis> {
        let acks = self.acks.iter().map(|(due, ..)| *due);
        let writes = self.write.iter().map(|(due, _)| *due).chain(self.checkpoints.due());
        self.outbox.front().map(|h| h.due).into_iter().chain(acks).chain(writes).min()
    }

    /// A durable subscription was made here, held by its client.
    pub(super) fn created(&mut self, subend: SubendId) {
        self.checkpoints.create(subend);
    }

    /// `subend` was unsubscribed (durable or not).
    pub(super) fn removed(&mut self, subend: SubendId) {
        self.checkpoints.remove(subend);
    }

    /// `subend` got its start on `pubend` (a durable one keeps it across restarts).
    pub(super) fn started(&mut self, subend: SubendId, pubend: PubendId, start: Tick) {
        self.checkpoints.started(subend, pubend, start);
    }
}

impl World {
    fn durable_mut(&mut self, subend: SubendId) -> Option<&mut Durable> {
        self.subs.get_mut(&subend).filter(|s| !s.gone).and_then(|s| s.durable.as_mut())
    }

    /// A delivery handed to a durable subscriber's outbox: at its broker, while its client is
    /// connected (a blocked subend gets nothing), and exactly the pubend's durable record.
    /// Returns whether the outbox takes it.
    fn judge_handed(&mut self, node: usize, subend: SubendId, pubend: PubendId, tick: Tick, msg: Option<u64>) -> bool {
        let Some(sub) = self.subs.get(&subend) else { return false };
        let connected = sub.durable.as_ref().is_some_and(|d| d.connected);
        if sub.node != node || sub.gone || !connected {
            let text =
                format!("durable {subend:?} (gone {}) got {pubend:?} {tick:?} at node {node} while away", sub.gone);
            self.violation(text);
            return false;
        }
        let truth = self.durable.get(&pubend).and_then(|log| log.get(&tick)).copied();
        if truth.is_none() || truth != msg {
            self.violation(format!("{subend:?} got {pubend:?} tick {tick:?} msg {msg:?}; the log holds {truth:?}"));
            return false;
        }
        true
    }

    /// The application of durable `subend` receives `tick`: skipped if at or below the last
    /// tick it received, else judged (I5: the next tick of Expected). Returns the tick it
    /// acknowledges (everything it received).
    fn judge_received(&mut self, subend: SubendId, pubend: PubendId, tick: Tick) -> Option<Tick> {
        let sub = self.subs.get(&subend).filter(|s| !s.gone)?;
        let last = sub.delivered.get(&pubend).and_then(|d| d.last()).copied();
        if let Some(last) = last.filter(|&last| tick <= last) {
            self.stats.skipped += 1;
            if let Some(durable) = self.durable_mut(subend) {
                durable.skipped += 1;
            }
            return Some(last);
        }
        self.stats.deliveries += 1;
        if !self.may_deliver(sub, pubend, last, tick) {
            let owed = self.owed(sub, pubend, last.map_or(Tick(0), Tick::next), tick);
            let text = format!(
                "I5: durable {subend:?} at node {} received {pubend:?} tick {tick:?} after {last:?} (start {:?}{}); Expected from there: {owed:?}",
                sub.node,
                sub.starts.get(&pubend),
                super::world::late_note(sub, pubend)
            );
            self.violation(text);
            return None;
        }
        self.subs.get_mut(&subend)?.delivered.entry(pubend).or_default().push(tick);
        Some(tick)
    }
}

impl World {
    /// At the end: every durable subscriber's client is back and its checkpoint covers
    /// everything it received (the acknowledgement pipeline drained).
    pub fn judge_checkpointed(&self) -> Result<(), String> {
        for (id, sub) in self.subs.iter().filter(|(_, s)| !s.gone) {
            let Some(durable) = &sub.durable else { continue };
            if !durable.connected {
                return Err(format!("durable {id:?}'s client is still away"));
            }
            for (pubend, received) in &sub.delivered {
                let checkpoint = durable.checkpoint.get(pubend).copied();
                let last = received.last().copied();
                if last.is_some_and(|last| checkpoint.is_none_or(|c| c < last)) {
                    return Err(format!("durable {id:?} checkpoint {checkpoint:?} on {pubend:?} below {last:?}"));
                }
            }
        }
        Ok(())
    }

    /// The lowest stored checkpoint of a live durable subscriber on `pubend` (the log cannot
    /// be released above it); the highest tick without one.
    pub fn checkpoint_floor(&self, pubend: PubendId) -> Tick {
        let durables = self.subs.values().filter(|s| !s.gone).filter_map(|s| s.durable.as_ref());
        durables.filter_map(|d| d.checkpoint.get(&pubend).copied()).min().unwrap_or(Tick(u64::MAX))
    }
}

impl GdLayer {
    /// A delivery to durable `subend`, judged and put in its client's outbox.
    pub(super) fn hand(&self, node: &mut GdNode, now: Millis, delivery: (SubendId, PubendId, Tick, Option<u64>)) {
        let (subend, pubend, tick, msg) = delivery;
        if !self.world.borrow_mut().judge_handed(node.index, subend, pubend, tick, msg) {
            return;
        }
        let due = now.after(node.rng.below(MAX_RECEIVE_MS as usize + 1) as u64);
        let due = node.clients.outbox.back().map_or(due, |last| last.due.max(due));
        node.clients.outbox.push_back(Handed { due, subend, pubend, tick });
        node.clients.checkpoints.delivered(subend, pubend, tick);
    }

    /// Runs what is due: applications receive and acknowledge, acknowledgements reach this
    /// broker and are written, written checkpoints are fed to the engine.
    pub(super) fn run_clients(&self, node: &mut GdNode, store: &mut Disk, now: Millis, out: &mut Out) {
        while let Some(handed) = node.clients.outbox.front().copied().filter(|h| h.due <= now) {
            node.clients.outbox.pop_front();
            let acked = self.world.borrow_mut().judge_received(handed.subend, handed.pubend, handed.tick);
            if let Some(tick) = acked {
                let due = now.after(node.rng.below(MAX_APP_ACK_MS as usize + 1) as u64);
                node.clients.acks.push((due, handed.subend, handed.pubend, tick));
            }
        }
        let (arrived, waiting) = node.clients.acks.drain(..).partition(|(due, ..)| *due <= now);
        node.clients.acks = waiting;
        for (_, subend, pubend, tick) in arrived {
            node.clients.checkpoints.ack(subend, pubend, tick);
        }
        if let Some((_, batch)) = node.clients.write.take_if(|(due, _)| *due <= now) {
            self.store_checkpoints(&batch);
            for input in node.clients.checkpoints.written(now, batch, true) {
                self.drive(node, store, now, input, out);
            }
        }
        if let Some(batch) = node.clients.checkpoints.flush(now, &node.engine) {
            let due = now.after(node.rng.below(MAX_WRITE_MS as usize + 1) as u64);
            node.clients.write = Some((due, batch));
        }
    }

    /// A checkpoint write landed: the store (which outlives the broker's crashes) holds it.
    fn store_checkpoints(&self, batch: &Batch) {
        let mut world = self.world.borrow_mut();
        for &(subend, pubend, tick) in batch {
            world.stats.checkpoints += 1;
            let Some(durable) = world.durable_mut(subend) else { continue };
            let stored = durable.checkpoint.entry(pubend).or_insert(tick);
            *stored = (*stored).max(tick);
        }
    }

    /// After a restart: every durable subscription of this broker is attached again from its
    /// stored checkpoint (pending where it has none yet), blocked until its client is back.
    pub(super) fn restore_durables(&self, node: &mut GdNode, store: &mut Disk, now: Millis, out: &mut Out) {
        let (pubends, restored) = {
            let mut world = self.world.borrow_mut();
            let pubends: Vec<PubendId> = world.pubends.values().copied().collect();
            let mut restored = Vec::new();
            for (&id, sub) in world.subs.iter_mut().filter(|(_, s)| s.node == node.index && !s.gone) {
                let Some(durable) = sub.durable.as_mut() else { continue };
                durable.connected = false;
                restored.push((id, durable.checkpoint.clone()));
            }
            (pubends, restored)
        };
        for (subend, checkpoints) in &restored {
            node.engine.matcher_mut().insert(*subend);
            node.clients.checkpoints.restore(*subend, checkpoints.clone());
        }
        for &pubend in &pubends {
            // The broker's order (`attach_order`, as its `attach_late`): lowest start first.
            let durable = |&(subend, _): &(SubendId, _)| Attach {
                subend,
                start: node.clients.checkpoints.start(subend, pubend),
                durable: true,
            };
            for attach in attach_order(restored.iter().map(durable).collect()) {
                let Attach { subend, start, durable } = attach;
                self.drive(node, store, now, Input::SubendAttach { pubend, subend, start, durable }, out);
            }
        }
        for (subend, _) in restored {
            self.drive(node, store, now, Input::OutboxFull { subend }, out);
        }
    }

    /// The client of durable `subend` went away: what its outbox held and its
    /// acknowledgements on their way are lost; its subend stays attached, blocked.
    pub(super) fn client_away(
        &self,
        node: &mut GdNode,
        store: &mut Disk,
        now: Millis,
        subend: SubendId,
        out: &mut Out,
    ) {
        if let Some(durable) = self.world.borrow_mut().durable_mut(subend) {
            durable.connected = false;
        }
        node.clients.outbox.retain(|h| h.subend != subend);
        node.clients.acks.retain(|(_, s, ..)| *s != subend);
        node.clients.checkpoints.away(subend);
        self.drive(node, store, now, Input::OutboxFull { subend }, out);
    }

    /// The client of durable `subend` came back: attached again one past what it acknowledged
    /// (on every pubend it has a start on), then unblocked.
    pub(super) fn client_back(
        &self,
        node: &mut GdNode,
        store: &mut Disk,
        now: Millis,
        subend: SubendId,
        out: &mut Out,
    ) {
        let resume: Vec<(PubendId, Tick)> = {
            let mut world = self.world.borrow_mut();
            let starts = world.subs.get(&subend).map(|s| s.starts.clone()).unwrap_or_default();
            let Some(durable) = world.durable_mut(subend) else { return };
            durable.connected = true;
            let checkpoints = &node.clients.checkpoints;
            let resume = |pubend| checkpoints.start(subend, pubend);
            starts.iter().map(|(&pubend, &start)| (pubend, resume(pubend).unwrap_or(start))).collect()
        };
        node.clients.checkpoints.hold(subend);
        for (pubend, start) in resume {
            self.drive(
                node,
                store,
                now,
                Input::SubendAttach { pubend, subend, start: Some(start), durable: true },
                out,
            );
        }
        self.drive(node, store, now, Input::OutboxReady { subend }, out);
    }
}
