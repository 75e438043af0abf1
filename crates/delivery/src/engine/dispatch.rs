//! [`Engine::handle`]: one handler per input; each finds the stream concerned, runs the
//! operation, then settles acknowledgements and the stream's next deadline.

use bytes::Bytes;

use crate::engine::log::Log;
use crate::engine::receive::DataIn;
use crate::engine::stream::{AckLease, Learned, Source, Stream};
use crate::engine::types::{Action, Input, Matcher, StreamRoute};
use crate::engine::{Ctx, Engine};
use crate::error::DeliveryError;
use crate::knowledge::Joined;
use crate::message::{Message, SilenceKind};
use crate::names::{BrokerId, CellId, Millis, PubendId, PublisherId, SubendId, Tick, TickRange};
use crate::store::{Recovered, StoreInput};

/// Which streams an operation may create.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Create {
    /// Only touch an existing stream.
    Never,
    /// Create a relay stream if there is none (routes and subends come before any data).
    Relay,
}

impl<M: Matcher> Engine<M> {
    /// Feeds one input at time `now`; actions to carry out are appended to `out`.
    pub fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Action>) {
        match input {
            Input::Publish { pubend, publisher, seq, payload } => {
                self.handle_publish(now, pubend, publisher, seq, payload, out)
            }
            Input::Received { from, from_cell, message } => self.handle_received(now, from, from_cell, message, out),
            Input::Route { pubend, route } => self.handle_route(now, pubend, route, out),
            Input::PeerRestarted { broker } => self.handle_peer_restarted(now, broker, out),
            Input::SubendAttach { pubend, subend, start, durable } => {
                self.handle_subend_attach(now, pubend, subend, (start, durable), out)
            }
            Input::SubendCheckpoint { pubend, subend, tick } => {
                self.with_stream(now, pubend, Create::Never, out, |stream, _| stream.subends.checkpoint(subend, tick))
            }
            Input::SubendStart { pubend, subend, start } => self.handle_subend_start(now, pubend, subend, start, out),
            Input::SubendDetach { pubend, subend } => self.handle_subend_detach(now, pubend, subend, out),
            Input::OutboxFull { subend } => self.handle_outbox_full(subend),
            Input::OutboxReady { subend } => self.handle_outbox_ready(now, subend, out),
            Input::Store(store) => self.handle_store(now, store, out),
            Input::EarlyRelease { pubend, up_to } => self.handle_early_release(now, pubend, up_to, out),
            Input::ConfirmSilence { pubend, up_to } => self.handle_confirm_silence(now, pubend, up_to, out),
            Input::CloseLog { pubend } => self.handle_close_log(now, pubend, out),
            Input::SubendServed { pubend, subend, order, through, done } => {
                self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
                    if stream.subends.served((pubend, subend, order), (through, done), &stream.know, ctx) {
                        stream.learn(&[], Learned::Requested, ctx);
                    }
                });
            }
            Input::Tick => self.handle_tick(now, out),
        }
    }

    /// Runs `operation` on `pubend`'s stream with a context, then settles it.
    fn with_stream(
        &mut self,
        now: Millis,
        pubend: PubendId,
        create: Create,
        out: &mut Vec<Action>,
        operation: impl FnOnce(&mut Stream, &mut Ctx<'_>),
    ) {
        if create == Create::Relay {
            self.streams.entry(pubend).or_insert_with(|| Stream::relay(pubend));
        }
        let Some(stream) = self.streams.get_mut(&pubend) else {
            self.counters.unknown_stream += 1;
            return;
        };
        if self.settings.ack_leases && stream.lease.is_none() {
            let synced = self.ack_leases.get(&pubend).copied().unwrap_or_default();
            stream.lease = Some(AckLease { synced, asked: synced });
        }
        // The tree moves only with the matcher's verdict epoch (a link, an advert): asked again
        // only then, not on every input.
        let epoch = self.matcher.epoch();
        if stream.tree_epoch != Some(epoch) {
            stream.tree_epoch = Some(epoch);
            stream.follow_tree(self.matcher.tree(pubend), !self.settings.mutations.take_f_from_any_tree);
        }
        let tree = stream.tree;
        let mut ctx = Ctx {
            now,
            pubend,
            tree,
            settings: &self.settings,
            confirmed: self.confirmed.get(&pubend).copied(),
            matcher: &self.matcher,
            out,
            counters: &mut self.counters,
        };
        stream.cache.want_from(stream.subends.wanted_from(), stream.subends.protect_from());
        operation(stream, &mut ctx);
        stream.settle(&mut ctx);
        stream.refresh_deadline(&ctx);
    }

    fn handle_publish(
        &mut self,
        now: Millis,
        pubend: PubendId,
        publisher: PublisherId,
        seq: u64,
        payload: Bytes,
        out: &mut Vec<Action>,
    ) {
        let hosted = self.streams.get(&pubend).is_some_and(|s| matches!(s.source, Source::Log(_)));
        if !hosted {
            out.push(Action::Rejected { error: DeliveryError::PubendNotOpen { pubend } });
            return;
        }
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            if let Source::Log(log) = &mut stream.source {
                log.publish(publisher, seq, payload, ctx);
            }
        });
        if self.settings.mutations.forward_before_store {
            let tick = Tick(u64::MAX - 1);
            self.handle_append_done(now, pubend, tick, out);
        }
    }

    fn handle_received(
        &mut self,
        now: Millis,
        from: BrokerId,
        from_cell: CellId,
        message: Message,
        out: &mut Vec<Action>,
    ) {
        let pubend = message.pubend();
        let any_tree = self.settings.mutations.take_f_from_any_tree;
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| match message {
            Message::Data { tick, final_from, final_to, requested_only, payload, tree, .. } => {
                // A D is true for everyone; its F brackets only for the subtree they were
                // judged for: from our upstream cell, under the tree we route by.
                let speaks = stream.speaks_for_us(from_cell);
                let bracketed = final_from < tick || final_to > tick;
                let (final_from, final_to) = if speaks && (tree == ctx.tree || any_tree) {
                    (final_from, final_to)
                } else {
                    if bracketed {
                        *if speaks { &mut ctx.counters.stale_tree_finals } else { &mut ctx.counters.foreign_finals } +=
                            1;
                    }
                    (tick, tick)
                };
                stream.on_data(DataIn { from, tick, final_from, final_to, requested_only, payload }, ctx)
            }
            Message::Silence { kind: SilenceKind::Final, .. } if !stream.speaks_for_us(from_cell) => {
                ctx.counters.foreign_finals += 1;
            }
            Message::Silence { kind: SilenceKind::Final, tree, .. } if tree != ctx.tree && !any_tree => {
                ctx.counters.stale_tree_finals += 1;
            }
            Message::Silence { ranges, kind, requested_only, .. } => {
                stream.on_silence(from, &ranges, kind, requested_only, ctx)
            }
            Message::Ack { ack_prefix, release_prefix, .. } => {
                stream.on_ack(from, from_cell, ack_prefix, release_prefix, ctx)
            }
            Message::Nack { ranges, .. } => stream.on_nack(from_cell, &ranges, ctx),
            Message::AckExpected { tick, .. } => stream.on_ack_expected(tick, ctx),
        });
    }

    fn handle_route(&mut self, now: Millis, pubend: PubendId, route: StreamRoute, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Relay, out, |stream, ctx| stream.route(route, ctx));
    }

    fn handle_peer_restarted(&mut self, now: Millis, broker: BrokerId, out: &mut Vec<Action>) {
        let pubends: Vec<PubendId> = self.streams.keys().copied().collect();
        for pubend in pubends {
            self.with_stream(now, pubend, Create::Never, out, |stream, _| stream.peer_restarted(broker, now));
        }
    }

    fn handle_subend_attach(
        &mut self,
        now: Millis,
        pubend: PubendId,
        subend: SubendId,
        (start, durable): (Option<Tick>, bool),
        out: &mut Vec<Action>,
    ) {
        self.subend_streams.entry(subend).or_default().insert(pubend);
        self.with_stream(now, pubend, Create::Relay, out, |stream, ctx| {
            stream.subends.attach(pubend, subend, start, durable, &stream.know, ctx);
            stream.started(ctx);
        });
    }

    fn handle_subend_start(
        &mut self,
        now: Millis,
        pubend: PubendId,
        subend: SubendId,
        start: Tick,
        out: &mut Vec<Action>,
    ) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            if !stream.subends.contains(subend) {
                ctx.out.push(Action::Rejected { error: DeliveryError::UnknownSubend { pubend, subend } });
                return;
            }
            stream.subends.confirm(pubend, subend, start, &stream.know, ctx);
            stream.started(ctx);
        });
    }

    fn handle_subend_detach(&mut self, now: Millis, pubend: PubendId, subend: SubendId, out: &mut Vec<Action>) {
        if let Some(pubends) = self.subend_streams.get_mut(&subend) {
            pubends.remove(&pubend);
            if pubends.is_empty() {
                self.subend_streams.remove(&subend);
            }
        }
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| stream.subends.detach(pubend, subend, ctx));
    }

    fn handle_outbox_full(&mut self, subend: SubendId) {
        for pubend in self.subend_streams.get(&subend).into_iter().flatten() {
            if let Some(stream) = self.streams.get_mut(pubend) {
                stream.subends.block(subend);
            }
        }
    }

    fn handle_outbox_ready(&mut self, now: Millis, subend: SubendId, out: &mut Vec<Action>) {
        let pubends: Vec<PubendId> = self.subend_streams.get(&subend).into_iter().flatten().copied().collect();
        for pubend in pubends {
            self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
                stream.subends.unblock(subend);
                stream.learn(&[], Learned::Requested, ctx);
            });
        }
    }

    fn handle_store(&mut self, now: Millis, input: StoreInput, out: &mut Vec<Action>) {
        match input {
            StoreInput::Opened { pubend, recovered } => self.handle_store_opened(now, pubend, recovered, out),
            StoreInput::AppendDone { pubend, synced_up_to } => self.handle_append_done(now, pubend, synced_up_to, out),
            StoreInput::AppendFailed { pubend, tick } => self.handle_append_failed(now, pubend, tick, out),
            StoreInput::LeaseFailed { pubend } => self.with_stream(now, pubend, Create::Never, out, |stream, _| {
                if let Source::Log(log) = &mut stream.source {
                    log.lease_failed();
                }
            }),
            StoreInput::ReadDone { pubend, range, records, lost } => {
                self.handle_read_done(now, pubend, range, (records, lost), out)
            }
            StoreInput::LeaseDone { pubend, lease } => self.handle_lease_done(now, pubend, lease, out),
            StoreInput::AckLeaseDone { pubend, lease } => self.handle_ack_lease_done(now, pubend, lease, out),
        }
    }

    /// The ack lease is durable up to `lease`: Acks held for it go out.
    fn handle_ack_lease_done(&mut self, now: Millis, pubend: PubendId, lease: Tick, out: &mut Vec<Action>) {
        let synced = self.ack_leases.entry(pubend).or_default();
        *synced = (*synced).max(lease);
        if !self.streams.contains_key(&pubend) {
            return;
        }
        self.with_stream(now, pubend, Create::Never, out, |stream, _| {
            if let Some(held) = stream.lease.as_mut() {
                held.synced = held.synced.max(lease);
                held.asked = held.asked.max(lease);
            }
        });
    }

    /// Appends are durable: their ticks are D now, sent first-time, delivered locally.
    fn handle_append_done(&mut self, now: Millis, pubend: PubendId, synced_up_to: Tick, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            let ticks = log.append_done(synced_up_to, &mut stream.know, &mut stream.cache, ctx);
            let mut pieces = log.advance_silence(&mut stream.know, ctx);
            pieces.extend(ticks.iter().map(|&tick| TickRange::single(tick)));
            stream.learn(&pieces, Learned::FirstTime(&ticks), ctx);
        });
    }

    /// The log could not take an append: its publisher is refused, the tick never becomes D.
    fn handle_append_failed(&mut self, now: Millis, pubend: PubendId, tick: Tick, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            log.append_failed(tick, ctx);
        });
    }

    /// Payloads read back from the log answer the curiosity that asked for them.
    fn handle_read_done(
        &mut self,
        now: Millis,
        pubend: PubendId,
        range: TickRange,
        (records, lost): (Vec<(Tick, Bytes)>, Vec<TickRange>),
        out: &mut Vec<Action>,
    ) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            log.read_done(range, records, &mut stream.cache, ctx);
            let mut joined = Joined::default();
            for &damaged in &lost {
                stream.know.damage(damaged, &mut joined);
            }
            ctx.counters.damaged_ticks += joined.new.iter().map(|r| r.to.0 - r.from.0 + 1).sum::<u64>();
            stream.learn(&[range], Learned::Requested, ctx);
        });
    }

    /// A durable lease lets silence advance.
    fn handle_lease_done(&mut self, now: Millis, pubend: PubendId, lease: Tick, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            log.lease_done(lease);
            let pieces = log.advance_silence(&mut stream.know, ctx);
            stream.learn(&pieces, Learned::FirstTime(&[]), ctx);
        });
    }

    /// The pubend's group confirmed this broker's lead up to `up_to`: silence may go that far.
    fn handle_confirm_silence(&mut self, now: Millis, pubend: PubendId, up_to: Tick, out: &mut Vec<Action>) {
        let confirmed = self.confirmed.entry(pubend).or_default();
        *confirmed = (*confirmed).max(up_to);
        if !self.streams.get(&pubend).is_some_and(|s| matches!(s.source, Source::Log(_))) {
            return;
        }
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            let pieces = log.advance_silence(&mut stream.know, ctx);
            stream.learn(&pieces, Learned::FirstTime(&[]), ctx);
        });
    }

    /// The pubend's log opened: the stream becomes the pubend (a relay stream created earlier
    /// by a route keeps its children).
    fn handle_store_opened(&mut self, now: Millis, pubend: PubendId, recovered: Recovered, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Relay, out, |stream, ctx| {
            let mut fresh = Stream::relay(pubend);
            // A log with a past belonged to a broker that ran before: the cells of its tree
            // then are unknown now, so the release waits (see `holds`).
            let past = recovered.lease > Tick(0) || recovered.release > Tick(0) || !recovered.logged.is_empty();
            if past {
                fresh.holds.restarted(recovered.release, ctx.now);
            }
            fresh.holds.absorb(std::mem::take(&mut stream.holds));
            let log = Log::open(recovered, &mut fresh.know, ctx.settings.mutations.no_lease_after_crash);
            fresh.source = Source::Log(Box::new(log));
            fresh.subends = std::mem::take(&mut stream.subends);
            let children: Vec<_> =
                std::mem::take(&mut stream.children).into_values().map(|child| child.link()).collect();
            *stream = fresh;
            stream.route(StreamRoute { upstream: None, children }, ctx);
        });
    }

    /// The pubend's log closes here (see [`Input::CloseLog`]): the reverse of
    /// `handle_store_opened`, the stream becomes a relay keeping its subends and children.
    fn handle_close_log(&mut self, now: Millis, pubend: PubendId, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            log.close(ctx);
            let mut relay = Stream::relay(pubend);
            relay.know = std::mem::take(&mut stream.know);
            relay.cache = std::mem::take(&mut stream.cache);
            relay.holds = std::mem::take(&mut stream.holds);
            relay.subends = std::mem::take(&mut stream.subends);
            // The new upstream is owed an Ack even if nothing moved since.
            relay.acked.force = true;
            let children: Vec<_> =
                std::mem::take(&mut stream.children).into_values().map(|child| child.link()).collect();
            *stream = relay;
            stream.route(StreamRoute { upstream: None, children }, ctx);
        });
    }

    fn handle_early_release(&mut self, now: Millis, pubend: PubendId, up_to: Tick, out: &mut Vec<Action>) {
        self.with_stream(now, pubend, Create::Never, out, |stream, ctx| {
            let Source::Log(log) = &mut stream.source else { return };
            log.early_release(up_to, ctx);
            let release = log.release;
            stream.know.advance_done(release);
            super::stream::free(stream.cache.drop_through(release), ctx);
        });
    }

    fn handle_tick(&mut self, now: Millis, out: &mut Vec<Action>) {
        let due: Vec<PubendId> =
            self.streams.iter().filter(|(_, s)| s.deadline.is_some_and(|d| d <= now)).map(|(&p, _)| p).collect();
        for pubend in due {
            self.with_stream(now, pubend, Create::Never, out, |stream, ctx| stream.on_timer(ctx));
        }
    }
}
