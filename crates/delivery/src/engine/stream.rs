//! One pubend's stream at one broker: the istream (or, at the pubend's broker, the pubend's own
//! knowledge), its ostreams per downstream cell, its local subends, and where it comes from.
//! This file holds what every role shares: learning knowledge, answering, acks and routes.

use std::collections::BTreeMap;

use crate::cache::PayloadCache;
use crate::engine::holds::Holds;
use crate::engine::log::Log;
use crate::engine::ostream::{Ostream, View};
use crate::engine::subends::Subends;
use crate::engine::types::{Action, ChildLink, StreamRoute};
use crate::engine::upstream::Upstream;
use crate::engine::Ctx;
use crate::knowledge::Knowledge;
use crate::message::Message;
use crate::names::{BrokerId, CellId, Millis, PubendId, Tick, TickRange, TreeTag};
use crate::ranges::RangeMap;

/// Where the stream's knowledge comes from.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// This broker hosts the pubend: knowledge comes from its log.
    Log(Box<Log>),
    /// Knowledge comes from an upstream cell.
    Upstream(Box<Upstream>),
}

/// How knowledge reached the stream.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Learned<'a> {
    /// First-time knowledge; the listed D ticks are new.
    FirstTime(&'a [Tick]),
    /// A retransmission answering curiosity, a payload read back from the log, or no news at
    /// all (an outbox with room, a start, the timer): a catch-up's turn.
    Requested,
}

/// What this stream last acknowledged upstream.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Acked {
    pub(crate) ack: Tick,
    pub(crate) release: Tick,
    pub(crate) sent_at: Option<Millis>,
    /// An Ack is owed even if nothing moved (a new upstream, or it restarted).
    pub(crate) force: bool,
}

/// How far this broker may acknowledge the stream upstream: what its store remembers
/// ([`crate::StoreAction::AckLease`]), and the most it asked for.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AckLease {
    pub(crate) synced: Tick,
    pub(crate) asked: Tick,
}

impl AckLease {
    /// The Ack to send for `(ack, release)`: within the durable lease, asking for a higher one
    /// when it falls short (the Ack then waits for [`crate::StoreInput::AckLeaseDone`]).
    fn bound(
        lease: &mut Option<AckLease>,
        pubend: PubendId,
        (ack, release): (Tick, Tick),
        ctx: &mut Ctx<'_>,
    ) -> (Tick, Tick) {
        let Some(lease) = lease else { return (ack, release) };
        if ack > lease.asked {
            ctx.out.push(Action::Store(crate::store::StoreAction::AckLease { pubend, up_to: ack }));
            lease.asked = ack;
        }
        let ack = ack.min(lease.synced);
        (ack, release.min(ack))
    }
}

/// One pubend's stream at this broker.
#[derive(Clone, Debug)]
pub(crate) struct Stream {
    pub(crate) pubend: PubendId,
    pub(crate) know: Knowledge,
    pub(crate) cache: PayloadCache,
    pub(crate) children: BTreeMap<CellId, Ostream>,
    /// Cells that left the tree (and, at a restarted pubend, the ones it cannot know yet).
    pub(crate) holds: Holds,
    pub(crate) subends: Subends,
    pub(crate) source: Source,
    pub(crate) acked: Acked,
    /// The aggregate moved past what was last reported (waiting out APT/RPT).
    pub(crate) ack_pending: bool,
    /// Since when the stream has had no child and no subend (holds aside: see `settle`).
    pub(crate) idle_since: Option<Millis>,
    pub(crate) deadline: Option<Millis>,
    /// The tree the matcher judged this pubend under at the last operation (see
    /// [`Stream::follow_tree`]).
    pub(crate) tree: TreeTag,
    /// The matcher's verdict epoch when `tree` was last asked.
    pub(crate) tree_epoch: Option<u64>,
    /// F the upstream told under `tree` (see [`View::fresh`]), kept above what this broker
    /// acknowledged upstream.
    pub(crate) fresh: RangeMap<()>,
    /// The ack lease (`None` with [`crate::Settings::ack_leases`] off).
    pub(crate) lease: Option<AckLease>,
}

impl Stream {
    /// A stream fed from upstream, knowing nothing yet.
    pub(crate) fn relay(pubend: PubendId) -> Self {
        Self {
            pubend,
            know: Knowledge::new(),
            cache: PayloadCache::default(),
            children: BTreeMap::new(),
            holds: Holds::default(),
            subends: Subends::default(),
            source: Source::Upstream(Box::default()),
            acked: Acked::default(),
            ack_pending: false,
            idle_since: None,
            deadline: None,
            tree: TreeTag(0),
            tree_epoch: None,
            fresh: RangeMap::new(),
            lease: None,
        }
    }

    /// Called before every operation with the matcher's tree for the pubend. At a relay, a
    /// move makes what the istream holds above each cell's ack suspect for that cell
    /// ([`Ostream::tree_moved`]): the F in it was judged upstream under the old tree, so it is
    /// neither told nor given as an answer, but fetched upstream again (simulator seed 940,
    /// pubend crashes: a relay answered a fetch for a cell that had just joined below its
    /// child with F it had taken under the old tree).
    pub(crate) fn follow_tree(&mut self, tree: TreeTag, suspect_on_move: bool) {
        if self.tree == tree {
            return;
        }
        self.tree = tree;
        self.fresh = RangeMap::new();
        if suspect_on_move && matches!(self.source, Source::Upstream(_)) {
            let known = self.know.highest_known();
            for child in self.children.values_mut() {
                child.tree_moved(known);
            }
        }
    }

    fn lost(&self) -> Option<TickRange> {
        match &self.source {
            Source::Log(log) => log.lost,
            Source::Upstream(_) => None,
        }
    }

    /// The stream as its ostreams read it, and the ostreams (borrowed apart, so a walk can
    /// read the istream while it changes an ostream).
    pub(crate) fn split(&mut self) -> (View<'_>, &mut BTreeMap<CellId, Ostream>) {
        let authoritative = matches!(self.source, Source::Log(_));
        let lost = self.lost();
        let view = View {
            pubend: self.pubend,
            know: &self.know,
            cache: &self.cache,
            lost,
            authoritative,
            acked_upstream: self.acked.ack,
            fresh: &self.fresh,
        };
        (view, &mut self.children)
    }

    /// New final knowledge over `pieces` (and, for a first-time Data, its tick): answer the
    /// curiosity it resolves, walk every ostream, deliver to subends, fetch missing payloads.
    ///
    /// A retransmission (`Learned::Requested`) is relayed only to ostreams curious for it: the
    /// others are not walked now, and pick the ticks up in order with the next first-time
    /// knowledge (or their own nack).
    pub(crate) fn learn(&mut self, pieces: &[TickRange], learned: Learned<'_>, ctx: &mut Ctx<'_>) {
        let (view, children) = self.split();
        for child in children.values_mut() {
            let mut curious = false;
            for &piece in pieces {
                if child.is_curious(piece) {
                    curious = true;
                    child.answer_curious(piece, &view, ctx);
                }
            }
            if let Learned::Requested = learned {
                // A retransmission matters to a child that asked for it, or whose walk waits
                // for one of its payloads.
                let refilled = child.stalled.is_some_and(|s| pieces.iter().any(|p| p.from <= s.tick && s.tick <= p.to));
                if !curious && !refilled {
                    continue;
                }
            }
            child.walk(&view, ctx);
            if let Learned::FirstTime(ticks) = learned {
                for &tick in ticks {
                    child.first_time(tick, &view, ctx);
                }
            }
        }
        let mut fetch = Vec::new();
        let turn = matches!(learned, Learned::Requested);
        let serve = ctx.settings.serve_orders && matches!(self.source, Source::Log(_));
        self.subends.advance(self.pubend, &self.know, &self.cache, ctx, (&mut fetch, turn, serve));
        if !fetch.is_empty() {
            self.fetch(&fetch, ctx);
        }
        self.fetch_stalled(ctx);
    }

    /// Fetches the payloads children's walks stopped at (the pubend reads its log, a relay
    /// nacks upstream), a window of missing payloads at a time, again after the nack interval
    /// while still stopped. Before, the walk waited for the cell to nack; a cell that knew of
    /// no gap (its own knowledge already reached past the tick, from before a restart of the
    /// pubend emptied its cache) never did, and the stream stalled for good (simulator seed
    /// 647, pubend crashes).
    pub(crate) fn fetch_stalled(&mut self, ctx: &mut Ctx<'_>) {
        let interval = ctx.settings.nack_repetition_min_ms;
        let highest = self.know.highest_known();
        let mut fetch = Vec::new();
        for child in self.children.values_mut() {
            let Some(stalled) = &mut child.stalled else { continue };
            if stalled.fetched_at.is_some_and(|at| ctx.now < at.after(interval)) {
                continue;
            }
            stalled.fetched_at = Some(ctx.now);
            let window = crate::engine::subends::window(
                stalled.tick,
                highest,
                &self.know,
                &self.cache,
                ctx.settings.catch_up_window,
            );
            if !fetch.contains(&window) {
                fetch.push(window);
            }
        }
        if !fetch.is_empty() {
            self.fetch(&fetch, ctx);
        }
    }

    /// Asks for ticks this broker cannot answer: upstream with a nack, or from the log.
    pub(crate) fn fetch(&mut self, missing: &[TickRange], ctx: &mut Ctx<'_>) {
        match &mut self.source {
            // What a full nack leaves out is asked again by whoever wants it (the children's
            // repetitions, or this broker's own curiosity).
            Source::Upstream(up) => {
                up.nack(self.pubend, missing, ctx);
            }
            Source::Log(log) => log.read(missing, &self.know, ctx),
        }
    }

    /// A nack from downstream cell `cell`.
    pub(crate) fn on_nack(&mut self, cell: CellId, ranges: &[TickRange], ctx: &mut Ctx<'_>) {
        let (view, children) = self.split();
        let Some(child) = children.get_mut(&cell) else { return };
        let mut missing = Vec::new();
        child.on_nack(ranges, &view, ctx, &mut missing);
        if !missing.is_empty() {
            self.fetch(&missing, ctx);
        }
    }

    /// An ack from downstream cell `cell`.
    pub(crate) fn on_ack(&mut self, from: BrokerId, cell: CellId, ack: Tick, release: Tick, ctx: &mut Ctx<'_>) {
        let (now, interval) = (ctx.now, ctx.settings.ack_expected_ms);
        match self.children.get_mut(&cell) {
            Some(child) if child.link().broker == from => {
                child.on_ack(ack, release, now, interval);
            }
            // Another broker of the cell speaks for its own subtree only: its ack counts for the
            // ostream held for it, if any (it is not behind the entry this route names).
            _ => self.holds.on_ack((cell, from), ack, release, now, interval),
        }
    }

    /// AckExpected from upstream: answer with an Ack if everything below `tick` is acknowledged
    /// here; otherwise ask the laggards downstream, and nack what this broker's subends miss.
    pub(crate) fn on_ack_expected(&mut self, tick: Tick, ctx: &mut Ctx<'_>) {
        let (ack, release) = self.aggregate().unwrap_or((self.acked.ack, self.acked.release));
        if ack < tick {
            for child in self.children.values_mut() {
                if child.effective_ack() < tick {
                    let message = Message::AckExpected { pubend: self.pubend, tick };
                    child.send_message(ctx, message);
                }
            }
            if let (Some(start), Source::Upstream(up)) = (self.subends.start(), &mut self.source) {
                if let Some(range) = TickRange::new(self.know.horizon().max(start), tick) {
                    let mut unknown = Vec::new();
                    self.know.unknown(range, &mut unknown);
                    if !unknown.is_empty() {
                        up.want_now(self.pubend, &unknown, ctx);
                    }
                }
            }
        }
        if let Source::Upstream(up) = &self.source {
            let (ack, release) = AckLease::bound(&mut self.lease, self.pubend, (ack, release.min(ack)), ctx);
            up.send(Message::Ack { pubend: self.pubend, ack_prefix: ack, release_prefix: release }, ctx);
            self.acked = Acked {
                ack: ack.max(self.acked.ack),
                release: release.max(self.acked.release),
                sent_at: Some(ctx.now),
                force: false,
            };
        }
    }

    /// Min over ostreams (F counting as acknowledged), subends and holds; `None` with none.
    pub(crate) fn aggregate(&self) -> Option<(Tick, Tick)> {
        let mut ack: Option<Tick> = self.subends.ack();
        let mut release = ack;
        for child in self.children.values() {
            ack = Some(ack.map_or(child.effective_ack(), |a| a.min(child.effective_ack())));
            release = Some(release.map_or(child.effective_release(), |r| r.min(child.effective_release())));
        }
        if let Some((held_ack, held_release)) = self.holds.floor() {
            ack = Some(ack.map_or(held_ack, |a| a.min(held_ack)));
            release = Some(release.map_or(held_release, |r| r.min(held_release)));
        }
        ack.zip(release).map(|(a, r)| (a, r.min(a)))
    }

    /// Mutation `ack_before_every_ostream`: the max instead of the min.
    fn aggregate_any(&self) -> Option<(Tick, Tick)> {
        let mut ack: Option<Tick> = self.subends.ack();
        for child in self.children.values() {
            ack = Some(ack.map_or(child.effective_ack(), |a| a.max(child.effective_ack())));
        }
        ack.map(|a| (a, a))
    }

    /// After every input: propagate acknowledgements (rate-limited), fold acknowledged ticks
    /// into the done prefix, and release the pubend's log.
    pub(crate) fn settle(&mut self, ctx: &mut Ctx<'_>) {
        self.holds.expire(ctx.now, ctx.settings.departed_retention_ms);
        self.fresh.clear_through(self.acked.ack);
        // Idle counts from when the last child or subend left, holds or not: a hold waits the
        // retention itself, and a second full wait after it expires would pin the log twice
        // as long as the retention says.
        if !self.children.is_empty() || self.subends.ack().is_some() {
            self.idle_since = None;
        } else {
            self.idle_since.get_or_insert(ctx.now);
        }
        let aggregate = match ctx.settings.mutations.ack_before_every_ostream {
            false => self.aggregate(),
            true => self.aggregate_any(),
        };
        let aggregate = match aggregate {
            Some(aggregate) => aggregate,
            None => self.idle_aggregate(ctx),
        };
        self.ack_pending = aggregate.0 > self.acked.ack || aggregate.1 > self.acked.release || self.acked.force;
        let (ack, release) = aggregate;
        match &mut self.source {
            Source::Upstream(up) => {
                let done = ack.min(self.subends.ack().unwrap_or(ack));
                self.know.advance_done(done);
                free(self.cache.drop_through(done), ctx);
                up.forget_through(done);
                let moved = ack > self.acked.ack || release > self.acked.release || self.acked.force;
                let due = self.acked.sent_at.is_none_or(|at| ctx.now >= at.after(ctx.settings.ack_propagation_ms));
                if moved && due {
                    let (ack, release) = (ack.max(self.acked.ack), release.max(self.acked.release));
                    let (ack, release) = AckLease::bound(&mut self.lease, self.pubend, (ack, release), ctx);
                    if ack > self.acked.ack || release > self.acked.release || self.acked.force {
                        up.send(Message::Ack { pubend: self.pubend, ack_prefix: ack, release_prefix: release }, ctx);
                        self.acked = Acked { ack, release, sent_at: Some(ctx.now), force: false };
                    }
                }
            }
            Source::Log(log) => {
                if log.release_to(release, ctx) {
                    self.know.advance_done(log.release);
                    free(self.cache.drop_through(log.release), ctx);
                }
                self.ack_pending = release > log.release;
                self.acked.ack = ack;
                self.acked.release = release;
            }
        }
    }

    /// Applies a new route: only what moved is reset. Ostreams are kept per downstream cell (an
    /// entry-broker change keeps the acks, and re-tells what the new entry may lack); a new upstream cell voids consolidation
    /// marks and receives every outstanding nack at once.
    pub(crate) fn route(&mut self, route: StreamRoute, ctx: &mut Ctx<'_>) {
        let links: BTreeMap<CellId, ChildLink> = route.children.iter().map(|link| (link.cell, *link)).collect();
        let leaving: Vec<CellId> = self.children.keys().filter(|cell| !links.contains_key(cell)).copied().collect();
        for cell in leaving {
            if let Some(child) = self.children.remove(&cell) {
                self.holds.leave(child, ctx.now);
            }
        }
        let (start, known) = match &self.source {
            Source::Log(log) => (log.release, log.release),
            Source::Upstream(_) => {
                let start = self.acked.ack.max(self.know.done());
                (start, self.know.highest_known())
            }
        };
        for (cell, link) in links {
            if let Some(child) = self.children.get_mut(&cell) {
                if child.link().broker == link.broker {
                    child.relink(link);
                    continue;
                }
                // Another entry broker of the same cell: the old entry's subscribers are not
                // behind the new one (nor are the new one's behind the old), so the old ostream
                // is held and the new entry gets the one held for it, or a fresh one.
                if let Some(old) = self.children.remove(&cell) {
                    self.holds.leave(old, ctx.now);
                }
            }
            let child = match self.holds.rejoin(cell, link.broker) {
                Some(mut held) => {
                    held.relink(link);
                    if matches!(self.source, Source::Upstream(_)) {
                        held.rejoined(known);
                    }
                    held
                }
                None => {
                    let mut child = Ostream::new(link, start, known, ctx.now);
                    if matches!(self.source, Source::Log(_)) {
                        child.probe_acks(ctx.now, ctx.settings.ack_expected_ms);
                    }
                    child
                }
            };
            self.children.insert(cell, child);
        }
        if let Source::Upstream(up) = &mut self.source {
            if up.reroute(route.upstream, ctx.now) {
                self.acked.force = true;
                let mut outstanding = Vec::new();
                up.outstanding(&mut outstanding);
                for child in self.children.values() {
                    child.curious_ranges(&mut outstanding);
                }
                outstanding.sort();
                if !outstanding.is_empty() {
                    up.nack(self.pubend, &outstanding, ctx);
                }
            }
        }
        self.learn(&[], Learned::FirstTime(&[]), ctx);
    }

    /// Timers of the stream's ostreams and of its source.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>) {
        if let Source::Log(log) = &mut self.source {
            let pieces = log.advance_silence(&mut self.know, ctx);
            self.learn(&pieces, Learned::FirstTime(&[]), ctx);
        }
        if self.subends.has_more() {
            // A catch-up's next turn.
            self.learn(&[], Learned::Requested, ctx);
        }
        let (view, children) = self.split();
        for child in children.values_mut() {
            child.on_timer(&view, ctx);
        }
        self.fetch_stalled(ctx);
        if let Source::Upstream(up) = &mut self.source {
            up.on_timer(self.pubend, &self.know, self.subends.start(), ctx);
        }
    }

    /// Recomputes when [`Self::on_timer`] is next needed.
    pub(crate) fn refresh_deadline(&mut self, ctx: &Ctx<'_>) {
        let children = self.children.values().filter_map(|child| child.deadline(ctx)).min();
        let pending_ack = self.ack_pending;
        let source = match &self.source {
            Source::Log(log) => log.deadline(pending_ack, ctx),
            Source::Upstream(up) => {
                let acks =
                    self.acked.sent_at.filter(|_| pending_ack).map(|at| at.after(ctx.settings.ack_propagation_ms));
                [up.deadline(self.subends.start().is_some(), ctx), acks].into_iter().flatten().min()
            }
        };
        let holds = self.holds.deadline(ctx.settings.departed_retention_ms);
        let idle = self.idle_since.zip(ctx.settings.departed_retention_ms).map(|(since, ms)| since.after(ms));
        let idle = idle.filter(|&at| at > ctx.now);
        let more = self.subends.more_at(ctx);
        self.deadline = [children, source, holds, idle, more].into_iter().flatten().min();
    }

    /// Approximate bytes of state (knowledge runs, cached payloads, curiosity).
    pub(crate) fn approx_bytes(&self) -> usize {
        let upstream = match &self.source {
            Source::Upstream(up) => up.run_count() * 32,
            Source::Log(_) => 0,
        };
        self.know.approx_bytes() + self.cache.bytes() + upstream + std::mem::size_of::<Self>()
    }
}

impl Stream {
    /// Whether F from a broker of `cell` speaks for this broker's subtree (see
    /// `Upstream::speaks_for_us`); at the pubend nothing comes from upstream.
    pub(crate) fn speaks_for_us(&self, cell: CellId) -> bool {
        match &self.source {
            Source::Upstream(up) => up.speaks_for_us(cell),
            Source::Log(_) => true,
        }
    }
}

impl Stream {
    /// A peer restarted: reset what we assumed about it, downstream and upstream.
    pub(crate) fn peer_restarted(&mut self, broker: crate::names::BrokerId, now: Millis) {
        for child in self.children.values_mut() {
            if child.link().broker == broker {
                self.holds.entry_restarted(child.clone(), now);
                child.peer_restarted();
            }
        }
        self.holds.broker_restarted(broker, now);
        if let Source::Upstream(up) = &mut self.source {
            up.forget_sender(broker, now);
            // Its fresh ostream towards us waits for our ack before it counts us.
            self.acked.force |= up.is_upstream(broker);
        }
    }

    /// From where this broker is itself curious about gaps: its subends' start; at a relay
    /// with children but no subend yet, above what it acknowledged. Curiosity is the subends'
    /// in the seed, and children's nacks usually reach a relay first; but a child that has no
    /// subscriber and no child of its own (a cell mate that is a leaf of the tree) never nacks,
    /// and a hole in the relay's istream would then hold every ack below it forever. Only holes
    /// above knowledge the relay already had: a relay restarted empty (or a stream just begun)
    /// does not ask for the whole history below the first tick it hears of (real ticks are
    /// microseconds since 1970); what its children need there, they ask for.
    pub(crate) fn curiosity_start(&self) -> Option<Tick> {
        let relay = !self.children.is_empty() && self.know.highest_known() > Tick(0);
        self.subends.start().or_else(|| relay.then(|| self.acked.ack.next()))
    }

    /// A subend's start became known: the stream's gaps since the start are now curiosity.
    pub(crate) fn started(&mut self, ctx: &mut Ctx<'_>) {
        if let (Some(start), Source::Upstream(up)) = (self.subends.start(), &mut self.source) {
            up.new_gaps(&self.know, start.prev(), start, ctx.now);
        }
        self.learn(&[], Learned::Requested, ctx);
    }
}

/// Hands payloads a release took out of the cache to the shell to free ([`Action::Free`]).
pub(crate) fn free(released: crate::cache::Released, ctx: &mut Ctx<'_>) {
    if !released.is_empty() {
        ctx.out.push(Action::Free(released));
    }
}
