//! What the driver does with a GPUBLISH and with each action of the engine.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tidings_delivery::{Action, Input, PubendId, PublisherId, Recovered, StoreAction, StoreInput, SubendId, Tick};
use tidings_node::publishes::{Ack, Admit};
use tidings_wire::{Frame, Gap, GuaranteedPublish, Message, Notice, PublishAck, PublishRefused, ReasonCode};
use tracing::{debug, warn};

use super::driver::{Driver, Waiter};
use super::journal;
use super::net::Sent;
use crate::outbox::{GuaranteedPush, Outbox};

type Key = (PubendId, PublisherId, u64);

impl Driver {
    /// The id of a pubend of this broker by its name (`""` is [`super::DEFAULT_PUBEND`]).
    pub(super) fn pubend_id(&self, name: &str) -> PubendId {
        PubendId(tidings_route::PubendId::derive(&self.broker, super::pubend_name(name)).0)
    }

    /// A GPUBLISH. A retry of a publish already given a tick is answered from the driver's
    /// table (at once if durable, else when its append completes) and never reaches the core
    /// twice; the core's own duplicate check covers retries of publishes logged before a
    /// restart whose record was released since.
    pub(super) fn publish(&mut self, publish: GuaranteedPublish, reply: Arc<Outbox>) {
        self.publish_since(publish, reply, Instant::now());
    }

    /// [`Driver::publish`] of a publish that arrived at `since` (it may have waited for its
    /// replica group to have a leader here: see `replicas::gate`).
    pub(super) fn publish_since(&mut self, publish: GuaranteedPublish, reply: Arc<Outbox>, since: Instant) {
        if self.refusals.behind(&publish, &reply, since) {
            let why = "an earlier publish of this publisher was refused on this connection; send again in order";
            self.refuse_unavailable(&publish, &reply, why);
            return;
        }
        let pubend = self.publish_pubend(&publish);
        if let Some(why) = self.home_elsewhere(&publish, pubend) {
            self.refuse_unavailable(&publish, &reply, &why);
            return;
        }
        if !self.replica_gate(&publish, &reply, pubend, since) {
            return;
        }
        if !self.hosted.contains(&pubend) {
            self.open_pubend(pubend, Recovered::default());
        }
        let publisher = PublisherId(publish.publisher.0);
        let key = (pubend, publisher, publish.seq);
        match self.publishes.publish(key, Waiter { reply, since }) {
            Admit::New => {}
            Admit::Ack(ack) => {
                self.metrics.duplicate_publishes.inc();
                self.answer_when_replicated(key, ack);
                return;
            }
            Admit::Wait => {
                self.metrics.duplicate_publishes.inc();
                return;
            }
        }
        let payload = publish.message.as_bytes().clone();
        self.feed(Input::Publish { pubend, publisher, seq: publish.seq, payload });
    }

    /// Carries out one action of the engine.
    pub(super) fn carry_out(&mut self, action: Action) {
        match action {
            Action::Send { to, message, via } => {
                tracing::trace!(me = %self.broker, to = to.0, ?via, ?message, "gd out");
                let sent = self.net.as_mut().map_or(Sent::Not, |net| net.send(to, via, &message));
                if sent != Sent::Not {
                    if sent == Sent::Sideways {
                        self.metrics.sideways_sent.inc();
                    }
                    self.metrics.peer_frames_sent.inc();
                    self.metrics.pubend_sent.message(&message);
                } else {
                    self.metrics.peer_frames_unsent.inc();
                    debug!(to = to.0, ?via, ?message, "no link to the destination; guaranteed message not sent");
                }
            }
            Action::Deliver { subend, pubend, tick, payload } => self.deliver(subend, pubend, tick, payload),
            Action::GapNotice { subend, pubend, range } if self.relays.is_relay(subend) => {
                self.relay_gap(subend, pubend, range);
            }
            Action::GapNotice { subend, pubend, range } => {
                if let Some((entry, outbox)) = self.subends.get(&subend).and_then(|e| Some((e, e.outbox.as_ref()?))) {
                    let (from, to) = (tidings_wire::Tick(range.from.0), tidings_wire::Tick(range.to.0));
                    let gap = Gap { id: entry.id, pubend: tidings_wire::PubendId(pubend.0), from, to };
                    outbox.push_frame(&Frame::Gap(gap));
                }
            }
            Action::PublishAcked { pubend, publisher, seq } => self.acked((pubend, publisher, seq)),
            Action::PublishRefused { pubend, publisher, seq } => self.refused((pubend, publisher, seq)),
            Action::Store(StoreAction::ReadRange { pubend, range }) => {
                journal::read(Arc::clone(&self.store), pubend, range, self.tx.clone());
            }
            Action::Store(StoreAction::AckLease { pubend, up_to }) => self.ask_ack_lease(pubend, up_to),
            Action::Store(store) => self.store_action(store),
            Action::Rejected { error } => Self::warn_rejected(&error),
            action @ (Action::Serve(_) | Action::ServeCancel { .. }) => self.serve_action(action),
            Action::Free(released) => free(released),
        }
    }

    fn store_action(&mut self, action: StoreAction) {
        match &action {
            StoreAction::Append { pubend, tick, publisher, seq, record } => {
                self.publishes.appending((*pubend, *publisher, *seq), *tick);
                self.retained.entry(*pubend).or_default().add(*tick, record.len() as u64);
                self.propose_appended((*pubend, *publisher, *seq), *tick);
            }
            StoreAction::ReleasePrefix { pubend, tick } => {
                self.retained.entry(*pubend).or_default().release(*tick);
            }
            StoreAction::LeaseRaise { .. }
            | StoreAction::ReadRange { .. }
            | StoreAction::AckLease { .. }
            | StoreAction::Void { .. } => {}
        }
        let token = self.token();
        if let Err(error) = journal::submit(&self.store, token, &action) {
            warn!(%error, "the pubend log did not take a write");
            if let StoreAction::Append { pubend, tick, .. } = action {
                self.inputs.push_back(Input::Store(StoreInput::AppendFailed { pubend, tick }));
            }
        }
    }

    fn deliver(&mut self, subend: SubendId, pubend: PubendId, tick: Tick, payload: Bytes) {
        tracing::trace!(me = %self.broker, subend = subend.0, pubend = pubend.0, tick = tick.0, "gd deliver");
        if self.groups.is_group(subend) {
            return self.group_deliver(subend, pubend, tick, payload);
        }
        if self.relays.is_relay(subend) {
            return self.relay_deliver(subend, pubend, tick, payload);
        }
        if self.subends.get(&subend).is_some_and(|entry| entry.durable && entry.outbox.is_some()) {
            self.durable_delivered(subend, pubend, tick);
        }
        let Some(entry) = self.subends.get_mut(&subend) else { return };
        let Some(outbox) = entry.outbox.clone() else { return };
        let message = match Message::decode(payload) {
            Ok(message) => message,
            Err(error) => {
                warn!(%error, pubend = pubend.0, tick = tick.0, "a logged message does not decode; not delivered");
                return;
            }
        };
        let wire = (tidings_wire::PubendId(pubend.0), tidings_wire::Tick(tick.0));
        let reading = self.relays.unwrap_for(subend, &message);
        let message = match reading {
            None => message,
            Some(Some(super::relay::Reading::Message(message))) => message,
            Some(Some(super::relay::Reading::Gap)) => {
                // The origin lost ticks here: the client is told a gap at this tick.
                outbox.push_frame(&Frame::Gap(Gap { id: entry.id, pubend: wire.0, from: wire.1, to: wire.1 }));
                return;
            }
            Some(None) => {
                warn!(pubend = pubend.0, tick = tick.0, "a relayed message does not unwrap; not delivered");
                return;
            }
        };
        self.metrics.deliveries.inc();
        match outbox.push_guaranteed(entry.id, wire.0, wire.1, &message) {
            GuaranteedPush::Queued | GuaranteedPush::Closed => {}
            GuaranteedPush::QueuedFull if entry.blocked => {}
            GuaranteedPush::QueuedFull => {
                entry.blocked = true;
                self.metrics.outbox_full.inc();
                self.inputs.push_back(Input::OutboxFull { subend });
                let tx = self.tx.clone();
                outbox.when_room(Box::new(move || {
                    let _ = tx.send(super::Command::Room { subend });
                }));
            }
        }
    }

    fn acked(&mut self, key: Key) {
        if let Some(ack) = self.publishes.acked(key) {
            self.answer_when_replicated(key, ack);
        }
    }

    /// Sends a waiting publisher its PUBLISH_ACK.
    pub(super) fn answer(&mut self, key: Key, ack: Ack<Waiter>) {
        let (pubend, publisher, seq) = key;
        let Ack { waiter, tick, synced } = ack;
        let ack = PublishAck {
            publisher: tidings_wire::PublisherId(publisher.0),
            seq,
            pubend: tidings_wire::PubendId(pubend.0),
            // A retry of a publish too old to be remembered (see `assigned`): logged, tick forgotten.
            tick: tidings_wire::Tick(tick.unwrap_or_default().0),
        };
        // Counted only with its tick known and at or below what the log reported synced.
        if synced {
            self.metrics.publishes_acked_synced.inc();
        }
        waiter.reply.push_frame(&Frame::PublishAck(ack));
        self.metrics.publishes_acked.inc();
        self.metrics.pubend_acked.inc(pubend.0, "publish");
        self.metrics.ack_seconds.observe(waiter.since.elapsed().as_secs_f64());
    }

    fn refused(&mut self, key: Key) {
        self.forget_proposal(key);
        let (pubend, publisher, seq) = key;
        // Refused by a log closing here (`replicas::depose`): appended, maybe held by the
        // group at its tick, so the tick is kept for a retry after the log reopens.
        let waiter = match self.hosted.contains(&pubend) {
            true => self.publishes.refused(key),
            false => self.publishes.unwait(key),
        };
        let Some(waiter) = waiter else { return };
        self.refusals.refused(publisher, seq, &waiter.reply);
        let reason = Notice::new(ReasonCode::StorageUnavailable, "the broker could not log the publish; retry later");
        let refused = PublishRefused { publisher: tidings_wire::PublisherId(publisher.0), seq, reason };
        waiter.reply.push_frame(&Frame::PublishRefused(refused));
        self.metrics.publishes_refused.inc();
    }
}

/// Payloads fewer than this are freed where they are released; more go to tokio's blocking
/// pool, so the driver (and every live message behind it) does not wait for the frees.
const FREE_INLINE: usize = 1024;

/// Frees released payloads, off the driver when there are many (see [`tidings_delivery::cache::Released`]).
fn free(released: tidings_delivery::cache::Released) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if released.len() >= FREE_INLINE => drop(runtime.spawn_blocking(move || drop(released))),
        _ => drop(released),
    }
}
