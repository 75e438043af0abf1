//! The local subends of one stream at a subscriber-hosting broker (gd-protocol §8.3). They
//! share the broker's one istream: subends that are caught up share one delivery pointer, so a
//! message costs one index walk (the matcher's) whatever the number of subends; only subends
//! that fell behind (full outbox, pending start, late start) keep a pointer of their own.
//!
//! Invariants: `delivered <= horizon - 1`; every lagging pointer is `<= delivered`; a subend is
//! in `lagging` iff it is blocked, pending, or still catching up.
//!
//! **Durable subends** (seed 004's persistent clients) are acknowledged by their checkpoint, not
//! by what was handed to their outbox: the shell feeds [`Input::SubendCheckpoint`] once the
//! application's acknowledgement is durable at this broker, and until then the stream's
//! acknowledgement upstream (and so the pubend's log) stays pinned at it. A durable subend whose
//! client is away is simply blocked; when it comes back it is attached again from where its
//! client acknowledged, and catches up alone, fetching what the cache lost a window at a time
//! ([`crate::Settings::catch_up_window`]). With [`crate::Settings::serve_orders`] on a stream
//! whose log is here, a durable subend catches up by serve orders instead (`super::serve`):
//! the shell reads the log for it outside the engine's turns.
//!
//! [`Input::SubendCheckpoint`]: crate::Input::SubendCheckpoint

use std::collections::BTreeMap;

use crate::cache::PayloadCache;
use crate::engine::types::Action;
use crate::engine::Ctx;
use crate::error::DeliveryError;
use crate::knowledge::{Know, Knowledge};
use crate::names::{Millis, PubendId, SubendId, Tick, TickRange};

/// Turns' worth of messages a rate-bound catch-up may save up (see [`Subends::turn_budget`]).
const SAVED_TURNS: u64 = 4;

#[path = "serve.rs"]
mod serve;
use serve::Orders;

#[derive(Clone, Copy, Debug)]
struct Member {
    /// σ; `None` while the subscription barrier runs.
    start: Option<Tick>,
    blocked: bool,
}

/// The subends of one stream.
#[derive(Clone, Debug, Default)]
pub(crate) struct Subends {
    /// The stream's start at this broker: the first confirmed σ (nothing below is held).
    start: Option<Tick>,
    /// Caught-up subends have handled every tick `<= delivered`.
    delivered: Tick,
    members: BTreeMap<SubendId, Member>,
    lagging: BTreeMap<SubendId, Tick>,
    /// Durable subends and the checkpoint each is acknowledged by.
    checkpoints: BTreeMap<SubendId, Tick>,
    /// A catch-up stopped at its budget ([`crate::Settings::catch_up_turn`] messages per
    /// input) and goes on at the stream's next timer, which is then due at once: a long replay
    /// takes turns with every other input instead of holding the broker.
    more: bool,
    /// Messages the catch-ups may replay now under [`crate::Settings::catch_up_rate`], and
    /// when they were last counted.
    tokens: u64,
    counted_at: Millis,
    /// Mutation `ack_durable_by_delivery` (set at attach): checkpoints do not count.
    ack_by_delivery: bool,
    /// Durable subends being served by the shell's cursor (`super::serve`).
    orders: Orders,
    scratch: Vec<SubendId>,
}

impl Subends {
    /// The stream's start here, once known.
    pub(crate) fn start(&self) -> Option<Tick> {
        self.start
    }

    /// Everything up to this tick was handed to `subend` or did not match it (`None` before
    /// its start is known).
    pub(crate) fn position(&self, subend: SubendId) -> Option<Tick> {
        self.members.get(&subend)?.start?;
        Some(self.lagging.get(&subend).copied().unwrap_or(self.delivered))
    }

    /// The lowest start attached `subend` can still be confirmed at: one past its pin (where
    /// the stream started, if an earlier confirmation started it above where the subend was
    /// attached), and before the stream starts at least one past its done prefix.
    pub(crate) fn start_floor(&self, subend: SubendId, know: &Knowledge) -> Option<Tick> {
        self.members.get(&subend)?;
        let pin = self.lagging.get(&subend).copied().unwrap_or(self.delivered);
        let pin = if self.start.is_none() { pin.max(know.done()) } else { pin };
        Some(pin.next())
    }

    /// The lowest tick a lagging subend reads next (`None`: none lags).
    pub(crate) fn wanted_from(&self) -> Option<Tick> {
        self.lagging.values().min().map(|pointer| pointer.next())
    }

    /// Whether a catch-up has more to replay now.
    pub(crate) fn has_more(&self) -> bool {
        self.more
    }

    /// When the catch-up's next turn is due: at once, or under a rate bound once a whole
    /// turn's worth of messages may go.
    pub(crate) fn more_at(&self, ctx: &Ctx<'_>) -> Option<Millis> {
        if !self.more {
            return None;
        }
        let (turn, per_ms) = bound(ctx);
        match per_ms == 0 || self.tokens >= turn {
            true => Some(ctx.now),
            // Counted from when the tokens were counted, not from now: live input in between
            // would otherwise push the turn back at every step, and a steady live stream kept
            // a bounded catch-up at a few thousand messages a second.
            false => Some(self.counted_at.after((turn - self.tokens).div_ceil(per_ms))),
        }
    }

    /// The messages a catch-up turn may replay now (counting what the rate bound let in).
    fn turn_budget(&mut self, ctx: &Ctx<'_>) -> u64 {
        let (turn, per_ms) = bound(ctx);
        if per_ms == 0 {
            return turn;
        }
        let elapsed = ctx.now.since(self.counted_at);
        self.counted_at = ctx.now;
        // Up to a few turns' worth saved up: a turn taken late (the timer's millisecond, a
        // burst of commands first) is made up by the next ones instead of lost.
        self.tokens = self.tokens.saturating_add(elapsed.saturating_mul(per_ms)).min(turn * SAVED_TURNS);
        self.tokens.min(turn)
    }

    /// Whether `subend` is attached.
    pub(crate) fn contains(&self, subend: SubendId) -> bool {
        self.members.contains_key(&subend)
    }

    /// Payloads above this tick must stay cached (not yet delivered to caught-up subends).
    pub(crate) fn protect_from(&self) -> Tick {
        if self.members.is_empty() {
            Tick(u64::MAX)
        } else {
            self.delivered.next()
        }
    }

    /// Everything every subend handled: the SHB side of the ack prefix.
    pub(crate) fn ack(&self) -> Option<Tick> {
        if self.members.is_empty() {
            return None;
        }
        let checkpoints = self.checkpoints.values().filter(|_| !self.ack_by_delivery);
        let lagging = self.lagging.values().chain(checkpoints).min().copied();
        Some(lagging.map_or(self.delivered, |lag| lag.min(self.delivered)))
    }

    /// A subend joins. A pending one (no σ yet) pins the acknowledgements where the stream is.
    ///
    /// A durable one may join below where the stream is (a durable subscription restored after
    /// a restart, or its client back after an absence: `start` is one past its checkpoint) and
    /// is then replayed from there; attaching one that is attached already rewinds it.
    pub(crate) fn attach(
        &mut self,
        pubend: PubendId,
        subend: SubendId,
        start: Option<Tick>,
        durable: bool,
        know: &Knowledge,
        ctx: &mut Ctx<'_>,
    ) {
        self.ack_by_delivery = ctx.settings.mutations.ack_durable_by_delivery;
        // Rewound (attached again): what its running order would still serve is replayed anew.
        self.cancel(pubend, subend, ctx);
        self.members.insert(subend, Member { start: None, blocked: false });
        self.lagging.insert(subend, self.delivered);
        if let (true, Some(start)) = (durable, start) {
            self.resume(subend, start, know);
            return;
        }
        self.checkpoints.remove(&subend);
        if durable {
            // Pending: pinned by its lagging pointer until confirmed, then by its checkpoint.
            self.checkpoints.insert(subend, self.delivered);
        }
        if let Some(start) = start {
            self.confirm(pubend, subend, start, know, ctx);
        }
    }

    /// A durable subend (re)starts after `start - 1`, which may be below what the stream
    /// delivered; below the done prefix it gets a gap notice when it catches up.
    fn resume(&mut self, subend: SubendId, start: Tick, know: &Knowledge) {
        if self.start.is_none() {
            self.start = Some(start);
            self.delivered = start.prev().max(know.done());
            for pointer in self.lagging.values_mut() {
                *pointer = (*pointer).max(self.delivered);
            }
        }
        if let Some(member) = self.members.get_mut(&subend) {
            member.start = Some(start);
        }
        // Back after an absence, it stays pinned where its acknowledgements were made durable.
        let checkpoint = self.checkpoints.get(&subend).map_or(start.prev(), |&c| c.min(start.prev()));
        self.checkpoints.insert(subend, checkpoint);
        self.lagging.insert(subend, start.prev().min(self.delivered));
    }

    /// The application behind durable `subend` acknowledged everything up to `tick`, durably
    /// at this broker: the stream may acknowledge it upstream.
    pub(crate) fn checkpoint(&mut self, subend: SubendId, tick: Tick) {
        if let Some(checkpoint) = self.checkpoints.get_mut(&subend) {
            *checkpoint = (*checkpoint).max(tick);
        }
    }

    /// The barrier confirmed σ for `subend`. A σ below what the stream already acknowledged
    /// cannot be served from there: the subend starts after the done prefix, and the ticks
    /// between are told to it as a gap notice first, never skipped silently (a plain
    /// subscription set up again after its broker's crash lost them without a word: nemesis
    /// finding D).
    pub(crate) fn confirm(
        &mut self,
        pubend: PubendId,
        subend: SubendId,
        start: Tick,
        know: &Knowledge,
        ctx: &mut Ctx<'_>,
    ) {
        if self.start.is_none() {
            self.start = Some(start);
            // The done prefix is not moved here: at a relay, children may still need ticks
            // below σ (the stream settles it to the minimum over children and subends).
            self.delivered = start.prev().max(know.done());
            for pointer in self.lagging.values_mut() {
                *pointer = (*pointer).max(self.delivered);
            }
        }
        let Some(member) = self.members.get_mut(&subend) else { return };
        member.start = Some(start);
        self.cancel(pubend, subend, ctx);
        if let Some(checkpoint) = self.checkpoints.get_mut(&subend) {
            *checkpoint = start.prev();
        }
        let floor = self.lagging.get(&subend).copied().unwrap_or(self.delivered);
        if start.prev() < floor {
            let error = DeliveryError::StartBelowDone { subend, start, done: floor };
            ctx.out.push(Action::Rejected { error });
            ctx.out.push(Action::GapNotice { subend, pubend, range: TickRange { from: start, to: floor } });
        }
        self.lagging.insert(subend, start.prev().max(floor).min(self.delivered));
    }

    /// A subend leaves.
    pub(crate) fn detach(&mut self, pubend: PubendId, subend: SubendId, ctx: &mut Ctx<'_>) {
        self.cancel(pubend, subend, ctx);
        self.members.remove(&subend);
        self.lagging.remove(&subend);
        self.checkpoints.remove(&subend);
    }

    /// The subend's outbox is full: it stops at what it has.
    pub(crate) fn block(&mut self, subend: SubendId) {
        if let Some(member) = self.members.get_mut(&subend) {
            member.blocked = true;
            self.lagging.entry(subend).or_insert(self.delivered);
        }
    }

    /// The subend's outbox has room again.
    pub(crate) fn unblock(&mut self, subend: SubendId) {
        if let Some(member) = self.members.get_mut(&subend) {
            member.blocked = false;
        }
    }

    /// Delivers, in tick order, every D the doubt horizon passed to the caught-up subends whose
    /// filter it passes, then, on a `turn`, lets lagging subends catch up. Ticks whose payload
    /// is missing (evicted while a subend lagged) are appended to `fetch`.
    ///
    /// Catch-up runs only on turns (the stream's timer, an outbox with room again, payloads
    /// read back or retransmitted, a start), never on live traffic: when every input replayed a
    /// turn, each live publish waited for one turn of a catch-up at each of its steps (its
    /// append, its delivery), and a live subscriber's p99 rose from 2.4 to 16-28 ms during a
    /// 1,000,000-message catch-up (`bench catch-up`). Live input only marks the catch-up as
    /// due, so the driver gives it its turn between commands.
    pub(crate) fn advance(
        &mut self,
        pubend: PubendId,
        know: &Knowledge,
        cache: &PayloadCache,
        ctx: &mut Ctx<'_>,
        (fetch, turn, serve): (&mut Vec<TickRange>, bool, bool),
    ) {
        if self.start.is_none() {
            return;
        }
        if self.members.is_empty() {
            // No subscription here: what became final below the horizon was for nobody, and
            // its F ticks were judged upstream without any interest of this broker. The walk
            // moves past it, so a subscription made later is confirmed above it or told the
            // ticks between as a gap, never handed them as silence (nemesis seed 502 with
            // client faults: a plain subscriber cut while alone at its broker came back to a
            // start below ticks settled meanwhile, and missed 138 publishes without a word).
            self.delivered = self.delivered.max(know.horizon_from(self.delivered.next()).prev());
            return;
        }
        let horizon = match ctx.settings.mutations.deliver_past_horizon {
            false => know.horizon_from(self.delivered.next()),
            true => know.highest_known().next(),
        };
        if let Some(range) = TickRange::new(self.delivered.next(), horizon.prev()) {
            // Every tick below the horizon is final, so the runs cover the range without holes.
            for run in know.runs(range) {
                if let Err(missing) = self.deliver_run(pubend, run.range, run.value, cache, ctx) {
                    // Not cached (a restart emptied the cache, or it was evicted): fetched.
                    fetch.push(window(missing, range.to, know, cache, ctx.settings.catch_up_window));
                    break;
                }
            }
        }
        match turn {
            true => self.catch_up(pubend, know, cache, ctx, (fetch, serve)),
            false => self.more |= self.lagging.keys().any(|s| self.ready(*s) && self.orders.running(*s).is_none()),
        }
    }

    /// Whether `subend` can catch up now: attached, started and not blocked.
    fn ready(&self, subend: SubendId) -> bool {
        self.members.get(&subend).is_some_and(|m| !m.blocked && m.start.is_some())
    }

    fn deliver_run(
        &mut self,
        pubend: PubendId,
        range: TickRange,
        value: Know,
        cache: &PayloadCache,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), Tick> {
        match value {
            Know::Final => {}
            Know::Lost => {
                for (&subend, member) in &self.members {
                    if !self.lagging.contains_key(&subend) {
                        gap_notice(subend, member, pubend, range, ctx);
                    }
                }
            }
            Know::Data => {
                for tick in (range.from.0..=range.to.0).map(Tick) {
                    let Some(payload) = cache.get(tick) else { return Err(tick) };
                    self.scratch.clear();
                    ctx.matcher.subends(pubend, payload, &mut self.scratch);
                    for &subend in &self.scratch {
                        let member = self.members.get(&subend);
                        if member.is_some_and(|m| m.start.is_some_and(|s| s <= tick))
                            && !self.lagging.contains_key(&subend)
                        {
                            ctx.out.push(Action::Deliver { subend, pubend, tick, payload: payload.clone() });
                        }
                    }
                    self.delivered = tick;
                }
            }
        }
        self.delivered = range.to;
        Ok(())
    }

    /// Lagging, unblocked, started subends replay what the caught-up ones already got.
    fn catch_up(
        &mut self,
        pubend: PubendId,
        know: &Knowledge,
        cache: &PayloadCache,
        ctx: &mut Ctx<'_>,
        (fetch, serve): (&mut Vec<TickRange>, bool),
    ) {
        // A subend being served waits for its cursor, not for turns.
        let ready = self.lagging.keys().filter(|s| self.ready(**s) && self.orders.running(**s).is_none());
        let ready: Vec<SubendId> = ready.copied().collect();
        let mut budget = self.turn_budget(ctx);
        let granted = budget;
        self.more = false;
        for subend in ready {
            let (Some(&member), Some(&pointer)) = (self.members.get(&subend), self.lagging.get(&subend)) else {
                continue;
            };
            if serve && self.checkpoints.contains_key(&subend) && !self.orders.declined(subend) {
                self.serve(subend, member, pointer, pubend, know, ctx);
                continue;
            }
            if budget == 0 {
                self.more = true;
                break;
            }
            let reached =
                replay(subend, member, (pointer, self.delivered), pubend, know, cache, ctx, fetch, &mut budget);
            self.more |= budget == 0 && reached < self.delivered;
            self.moved(subend, reached);
        }
        if bound(ctx).1 > 0 {
            self.tokens -= granted - budget;
        }
    }
}

/// A catch-up turn's size, and the rate bound in messages per millisecond (0: none).
fn bound(ctx: &Ctx<'_>) -> (u64, u64) {
    (ctx.settings.catch_up_turn.max(1), ctx.settings.catch_up_rate.div_ceil(1000))
}

/// Replays `(pointer, until]` to one subend; returns how far it got.
#[allow(clippy::too_many_arguments)]
fn replay(
    subend: SubendId,
    member: Member,
    (pointer, until): (Tick, Tick),
    pubend: PubendId,
    know: &Knowledge,
    cache: &PayloadCache,
    ctx: &mut Ctx<'_>,
    fetch: &mut Vec<TickRange>,
    budget: &mut u64,
) -> Tick {
    // Below the done prefix nothing is held any more: a subend that was behind it (a durable
    // one back after its log was released early) is told exactly which ticks it lost.
    if let Some(lost) = TickRange::new(pointer.next(), know.done().min(until)) {
        gap_notice(subend, &member, pubend, lost, ctx);
    }
    let Some(range) = TickRange::new(pointer.next().max(know.done().next()), until) else { return until.max(pointer) };
    let mut reached = range.from.prev();
    for run in know.runs(range) {
        match run.value {
            Know::Final => {}
            Know::Lost => gap_notice(subend, &member, pubend, run.range, ctx),
            Know::Data => {
                for tick in (run.range.from.0..=run.range.to.0).map(Tick) {
                    if *budget == 0 {
                        return reached;
                    }
                    let Some(payload) = cache.get(tick) else {
                        fetch.push(window(tick, until, know, cache, ctx.settings.catch_up_window));
                        return reached;
                    };
                    *budget -= 1;
                    if member.start.is_some_and(|s| s <= tick) && ctx.matcher.subend(pubend, subend, payload) {
                        ctx.out.push(Action::Deliver { subend, pubend, tick, payload: payload.clone() });
                    }
                    reached = tick;
                }
            }
        }
        reached = run.range.to;
    }
    until
}

/// The ticks to fetch for a subend that found `from`'s payload missing: from there through the
/// next `messages` D ticks whose payload is missing too (one range: the F ticks between are
/// answered as ranges, cheaply), so a backlog is pulled a window at a time.
///
/// The cached ticks of each run are walked alongside, not looked up tick by tick: with a
/// cache of a few hundred thousand payloads, a lookup per tick of every window was 5 % of the
/// broker's CPU during `bench catch-up` (a profile of the catch-up).
pub(crate) fn window(from: Tick, until: Tick, know: &Knowledge, cache: &PayloadCache, messages: u64) -> TickRange {
    let mut to = from;
    let (mut counted, mut scanned) = (0, 0);
    let messages = messages.max(1);
    let Some(range) = TickRange::new(from, until) else { return TickRange::single(from) };
    'runs: for run in know.runs(range) {
        if run.value != Know::Data {
            continue;
        }
        let mut cached = cache.ticks_in(run.range).peekable();
        for tick in (run.range.from.0..=run.range.to.0).map(Tick) {
            scanned += 1;
            if counted >= messages || scanned > 4 * messages {
                break 'runs;
            }
            if cached.next_if_eq(&tick).is_none() {
                to = tick;
                counted += 1;
            }
        }
    }
    TickRange { from, to }
}

fn gap_notice(subend: SubendId, member: &Member, pubend: PubendId, range: TickRange, ctx: &mut Ctx<'_>) {
    let Some(start) = member.start else { return };
    if let Some(range) = TickRange::new(range.from.max(start), range.to) {
        ctx.out.push(Action::GapNotice { subend, pubend, range });
    }
}

#[cfg(test)]
#[path = "subends_tests.rs"]
mod tests;
