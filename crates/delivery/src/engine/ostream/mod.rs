//! An ostream: what this broker has told one downstream cell about one pubend, and what that
//! cell asked for (gd-protocol §5, §8.2). The filter edge is applied tick by tick as the
//! istream's knowledge is walked; F ticks are told lazily (on the next Data, or after FPT).
//! Answers to nacks are in `answer`.

mod answer;

pub(crate) use answer::Upstreamed;

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::cache::PayloadCache;
use crate::engine::types::{Action, ChildLink, Verdict};
use crate::engine::Ctx;
use crate::knowledge::{Know, Knowledge};
use crate::message::{Message, SilenceKind};
use crate::names::{BrokerId, CellId, Millis, PubendId, Tick, TickRange, TreeTag};
use crate::ranges::RangeMap;

/// The upstream side of a filter edge, as an ostream reads it.
pub(crate) struct View<'a> {
    pub(crate) pubend: PubendId,
    pub(crate) know: &'a Knowledge,
    pub(crate) cache: &'a PayloadCache,
    /// At the pubend: ticks released early (answered as lost).
    pub(crate) lost: Option<TickRange>,
    /// True at the pubend: the done prefix there is authoritative for every ostream.
    pub(crate) authoritative: bool,
    /// At a relay, the ack prefix it sent upstream: ticks at or below it cannot be fetched
    /// again (the upstream takes such a nack as a stale one, and may have released them).
    pub(crate) acked_upstream: Tick,
    /// At a relay, ticks the upstream told F under the current tree since it last moved: F
    /// judged for this broker's whole subtree as it is now, so an answer for every cell,
    /// suspect or not.
    pub(crate) fresh: &'a RangeMap<()>,
}

/// AckExpected state (pubend only).
#[derive(Clone, Copy, Debug)]
struct AckExpected {
    since: Millis,
    interval_ms: u64,
}

/// One downstream cell's ostream.
///
/// Invariants: every tick `<= told` was told to the cell, or lies in the untold F run
/// `[lazy_from, told]`, or is acknowledged; `above` holds D ticks told above `told`; every D
/// tick told is `<= last_data`; `filtered` holds the D ticks of the untold F run with their
/// payloads (judged F by the filter edge at `lazy_epoch`, so judged again if the summaries
/// moved before the run is told).
#[derive(Clone, Debug)]
pub(crate) struct Ostream {
    pub(crate) cell: CellId,
    /// The ack prefix this ostream was created with: at a relay, ticks at or below it that the
    /// istream folded away were never told through this ostream, so they are not answered
    /// from the done prefix but fetched upstream.
    origin: Tick,
    /// The highest ack the cell itself sent, and when it last moved.
    reported: Tick,
    reported_at: Millis,
    /// At a relay, a cell that joined (or rejoined) the tree while the istream already held
    /// knowledge it was not told: that knowledge was filtered for the old tree, so its F ticks
    /// may hide messages this cell wants. They are not told; the cell's nacks for them are fetched
    /// upstream and the answers passed through; the ostream holds the acks at the cell's own
    /// until the cell acknowledges past here.
    suspect: Option<TickRange>,
    to: BrokerId,
    via: Option<BrokerId>,
    told: Tick,
    lazy_from: Option<Tick>,
    /// The matcher's epoch when the untold F run began.
    lazy_epoch: u64,
    /// D ticks of the untold F run, judged F by the filter edge, each with its payload: the
    /// run is judged again whenever the summaries may have moved (every routing timer tick
    /// among them), and without the payload (released from the cache once the F tick counted
    /// as acknowledged) a tick had to be taken as passing, which cut the run, stalled the
    /// stream on a log read and drew a nack from downstream twice a second (remote median
    /// latency 60-80 ms in `bench overhead`). The run lasts until the next Data or FPT.
    filtered: Vec<(Tick, Bytes)>,
    above: BTreeSet<Tick>,
    last_data: Tick,
    ack: Tick,
    release: Tick,
    /// C marks: when each range was last asked for.
    curious: RangeMap<Millis>,
    /// Ticks at or below the cell's ack that it asked for again and this broker fetched
    /// upstream, with when: the cell's entry fetches them for a member that came back needing
    /// them (a mate restarted with a durable subscription resuming below what the entry,
    /// restarted too, acknowledged without it). The upstream's answer is passed through on
    /// these marks, which the cell's acks (past them already) do not clear. Without them the
    /// answers were dropped here, the mate's stream stopped for good, and a plain subscriber
    /// there behind the same stream lost the rest of it silently (nemesis seed 684).
    refetch: RangeMap<Millis>,
    last_told_at: Millis,
    ack_expected: Option<AckExpected>,
    /// The D tick the walk stopped at because its payload is not cached. The stream fetches it
    /// (`Stream::fetch_stalled`): the cell cannot be counted on to nack it, since it may know
    /// nothing of a gap (what it holds may already reach past the tick, or nothing follows it).
    pub(crate) stalled: Option<Stalled>,
}

/// What the walk does after one D tick.
enum Step {
    /// Go on to the next tick.
    On,
    /// Stop: the payload is not here.
    Stop,
    /// The untold F run was judged again and cut back: walk again from `told`.
    Again,
}

/// Where a walk stopped for want of a payload, and when it was last fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stalled {
    /// The D tick whose payload is missing.
    pub(crate) tick: Tick,
    /// When the stream last fetched it (`None`: not yet).
    pub(crate) fetched_at: Option<Millis>,
}

impl Ostream {
    /// A fresh ostream; `start` is what the stream already acknowledged upstream (or released),
    /// so a new child never pulls the aggregate back.
    /// `known` is the highest tick the istream already holds at a relay (`start` at the pubend,
    /// whose knowledge is the truth for every cell).
    pub(crate) fn new(link: ChildLink, start: Tick, known: Tick, now: Millis) -> Self {
        let suspect = TickRange::new(start.next(), known);
        Self {
            cell: link.cell,
            origin: start,
            reported: Tick(0),
            reported_at: now,
            suspect,
            to: link.broker,
            via: link.via,
            told: start.max(known),
            lazy_from: None,
            lazy_epoch: 0,
            filtered: Vec::new(),
            above: BTreeSet::new(),
            last_data: Tick(0),
            ack: start,
            release: start,
            curious: RangeMap::new(),
            refetch: RangeMap::new(),
            last_told_at: now,
            ack_expected: None,
            stalled: None,
        }
    }

    /// The entry broker changed inside the same cell: the ostream (acks, curiosity) survives.
    /// A different entry broker holds different state: it is treated like a restarted one.
    pub(crate) fn relink(&mut self, link: ChildLink) {
        if link.broker != self.to {
            self.peer_restarted();
        }
        self.to = link.broker;
        self.via = link.via;
    }

    /// How the cell is reached.
    pub(crate) fn link(&self) -> ChildLink {
        ChildLink { cell: self.cell, broker: self.to, via: self.via }
    }

    /// The cell's entry broker restarted with empty state: its old acks no longer say what it
    /// holds, its curiosity is gone, and everything above its ack prefix is told again.
    pub(crate) fn peer_restarted(&mut self) {
        self.reported = Tick(0);
        self.curious = RangeMap::new();
        self.refetch = RangeMap::new();
        if self.told > self.ack {
            self.told = self.ack;
            self.clear_lazy();
            self.above.clear();
        }
    }

    /// Turns on AckExpected probing (the pubend's ostreams).
    pub(crate) fn probe_acks(&mut self, now: Millis, interval_ms: u64) {
        self.ack_expected = Some(AckExpected { since: now, interval_ms });
    }

    /// The ack prefix, extended over ticks that are F for this cell (an F counts as acknowledged
    /// at once, so a link that never matches does not pin the log).
    pub(crate) fn effective_ack(&self) -> Tick {
        if self.suspect.is_some() {
            self.ack
        } else if self.ack >= self.last_data {
            self.ack.max(self.told)
        } else {
            self.ack
        }
    }

    /// The release prefix, extended like [`Self::effective_ack`].
    pub(crate) fn effective_release(&self) -> Tick {
        if self.suspect.is_some() {
            self.release
        } else if self.release >= self.last_data {
            self.release.max(self.told)
        } else {
            self.release
        }
    }

    /// The highest tick told or being told.
    pub(crate) fn told_max(&self) -> Tick {
        self.told.max(self.last_data)
    }

    /// Sends `message` to the cell's entry broker.
    /// Every message downstream goes through here, so every F is stamped with the tree it was
    /// judged under: the stream's now (a tree move bumps the verdict epoch, so an F run judged
    /// under an older tree is judged again before it is told).
    pub(crate) fn send_message(&mut self, ctx: &mut Ctx<'_>, mut message: Message) {
        message.stamp_tree(ctx.tree);
        self.last_told_at = ctx.now;
        ctx.out.push(Action::Send { to: self.to, via: self.via, message });
    }

    /// Tells the untold F run now, judged again first if the summaries moved since it began
    /// ([`Self::rejudge`]); when a tick of it now passes the filter, the run is cut short there
    /// and the walk goes on from that tick (it is sent as Data, and the F before it with it).
    pub(crate) fn flush(&mut self, view: &View<'_>, ctx: &mut Ctx<'_>) {
        if self.rejudge(view, ctx) {
            self.walk(view, ctx);
        }
        self.tell_lazy(ctx, view.pubend);
    }

    /// Sends the untold F run as a Silence.
    fn tell_lazy(&mut self, ctx: &mut Ctx<'_>, pubend: PubendId) {
        if let Some(from) = self.lazy_from.take() {
            self.filtered.clear();
            let ranges = vec![TickRange { from, to: self.told }];
            self.send_message(
                ctx,
                Message::Silence { pubend, ranges, kind: SilenceKind::Final, requested_only: false, tree: TreeTag(0) },
            );
        }
    }

    /// Starts the untold F run at `from` if none is open (its epoch is the matcher's now).
    fn open_lazy(&mut self, from: Tick, ctx: &Ctx<'_>) {
        if self.lazy_from.is_none() {
            self.lazy_from = Some(from);
            self.lazy_epoch = ctx.matcher.epoch();
        }
    }

    fn clear_lazy(&mut self) {
        self.lazy_from = None;
        self.filtered.clear();
    }

    /// Before the untold F run is told: if the matcher's epoch moved since it began, its D
    /// ticks are judged again. A tick judged F lazily, before a subscriber's interest reached
    /// this broker's summaries (a cell that just moved below this child, say), is otherwise
    /// told F after the interest is known, and the subscriber never gets it (simulator seed
    /// 813, faults). Returns true when one now passes (or its payload is gone): the run is cut
    /// back to just below it and the caller walks on from there. Each tick is judged at most
    /// twice more this way, and only when the summaries moved.
    fn rejudge(&mut self, view: &View<'_>, ctx: &mut Ctx<'_>) -> bool {
        let Some(from) = self.lazy_from else { return false };
        let epoch = ctx.matcher.epoch();
        if epoch == self.lazy_epoch {
            return false;
        }
        self.lazy_epoch = epoch;
        let passes = |payload: &Bytes| ctx.matcher.child(view.pubend, self.cell, payload) != Verdict::Final;
        let Some(first) = self.filtered.iter().find(|(_, payload)| passes(payload)).map(|(tick, _)| *tick) else {
            return false;
        };
        ctx.counters.rejudged += 1;
        self.told = first.prev();
        self.filtered.retain(|&(t, _)| t < first);
        if from >= first {
            self.lazy_from = None;
        }
        true
    }

    /// Walks the istream forward from `told` over final ticks: D ticks that pass the filter
    /// are sent (first time), the rest join the lazy F run. Stops at the first Q tick, or at a
    /// D whose payload is not cached (noted in `stalled`: the stream fetches it).
    pub(crate) fn walk(&mut self, view: &View<'_>, ctx: &mut Ctx<'_>) {
        let stalled = self.stalled.take();
        self.walk_on(view, ctx);
        // Still stopped at the same tick: keep when it was fetched.
        if let (Some(old), Some(new)) = (stalled, &mut self.stalled) {
            if old.tick == new.tick {
                new.fetched_at = old.fetched_at;
            }
        }
    }

    fn walk_on(&mut self, view: &View<'_>, ctx: &mut Ctx<'_>) {
        let done = view.know.done().max(self.suspect.map_or(Tick(0), |s| s.to));
        if done > self.told {
            self.told = done;
            self.clear_lazy();
            self.above = self.above.split_off(&done.next());
        }
        let highest = view.know.highest_known();
        let Some(range) = TickRange::new(self.told.next(), highest) else { return };
        for run in view.know.runs(range) {
            if run.range.from != self.told.next() {
                return;
            }
            match run.value {
                Know::Final => {
                    self.open_lazy(run.range.from, ctx);
                    self.told = run.range.to;
                }
                Know::Lost => {
                    if self.rejudge(view, ctx) {
                        return self.walk_on(view, ctx);
                    }
                    self.tell_lazy(ctx, view.pubend);
                    let ranges = vec![run.range];
                    self.send_message(
                        ctx,
                        Message::Silence {
                            pubend: view.pubend,
                            ranges,
                            kind: SilenceKind::Lost,
                            requested_only: false,
                            tree: TreeTag(0),
                        },
                    );
                    self.told = run.range.to;
                    // Like data, a loss must be acknowledged for real: were this Silence lost,
                    // a later nack below the release would be answered F, hiding the loss.
                    self.last_data = self.last_data.max(run.range.to);
                }
                Know::Data => {
                    for tick in run.range.from.0..=run.range.to.0 {
                        match self.walk_data(Tick(tick), view, ctx) {
                            Step::On => {}
                            Step::Stop => return,
                            // Rejudged: the run was cut back below `tick`; walk again from there.
                            Step::Again => return self.walk_on(view, ctx),
                        }
                    }
                }
            }
        }
    }

    fn walk_data(&mut self, tick: Tick, view: &View<'_>, ctx: &mut Ctx<'_>) -> Step {
        if self.above.contains(&tick) {
            if self.rejudge(view, ctx) {
                return Step::Again;
            }
            self.above.remove(&tick);
            self.tell_lazy(ctx, view.pubend);
            self.told = tick;
            return Step::On;
        }
        let Some(payload) = view.cache.get(tick) else {
            if self.stalled.is_none_or(|s| s.tick != tick) {
                self.stalled = Some(Stalled { tick, fetched_at: None });
            }
            return Step::Stop;
        };
        // The epoch is read before the judgment: a shell may change the summaries between the
        // two, and the run must carry the oldest epoch it was judged at.
        let epoch = if self.lazy_from.is_none() { ctx.matcher.epoch() } else { self.lazy_epoch };
        if ctx.matcher.child(view.pubend, self.cell, payload) == Verdict::Final {
            if self.lazy_from.is_none() {
                (self.lazy_from, self.lazy_epoch) = (Some(tick), epoch);
            }
            self.filtered.push((tick, payload.clone()));
        } else {
            if self.rejudge(view, ctx) {
                return Step::Again;
            }
            self.filtered.clear();
            let final_from = self.lazy_from.take().unwrap_or(tick);
            self.send_data(ctx, view.pubend, (final_from, tick), payload.clone());
        }
        self.told = tick;
        Step::On
    }

    /// A first-time D tick that the walk could not reach (a gap lies below it): sent at once if
    /// it passes the filter, bracketed only by silence this broker actually knows (S1).
    pub(crate) fn first_time(&mut self, tick: Tick, view: &View<'_>, ctx: &mut Ctx<'_>) {
        if tick <= self.told || self.above.contains(&tick) {
            return;
        }
        let Some(payload) = view.cache.get(tick) else { return };
        if ctx.matcher.child(view.pubend, self.cell, payload) == Verdict::Final {
            return;
        }
        let final_from = self.silence_before(tick, view, ctx);
        self.above.insert(tick);
        self.send_data(ctx, view.pubend, (final_from, tick), payload.clone());
    }

    /// Sends first-time Data for `tick`, closing the silence from `final_from`.
    fn send_data(&mut self, ctx: &mut Ctx<'_>, pubend: PubendId, (final_from, tick): (Tick, Tick), payload: Bytes) {
        self.last_data = self.last_data.max(tick);
        let message = Message::Data {
            pubend,
            tick,
            final_from,
            final_to: tick,
            requested_only: false,
            tree: TreeTag(0),
            payload,
        };
        self.send_message(ctx, message);
    }

    /// The first tick of the run of ticks just below `tick` that are F for this cell and not yet
    /// told otherwise (`tick` itself if there is none).
    fn silence_before(&self, tick: Tick, view: &View<'_>, ctx: &Ctx<'_>) -> Tick {
        let mut from = tick;
        let Some(range) = TickRange::new(self.told.next(), tick.prev()) else { return from };
        for run in view.know.runs_rev(range) {
            if run.range.to.next() != from {
                break;
            }
            match run.value {
                Know::Final => from = run.range.from,
                Know::Lost => break,
                Know::Data => {
                    for below in (run.range.from.0..=run.range.to.0).rev().map(Tick) {
                        let filtered = !self.above.contains(&below)
                            && view
                                .cache
                                .get(below)
                                .is_some_and(|p| ctx.matcher.child(view.pubend, self.cell, p) == Verdict::Final);
                        if !filtered {
                            return from;
                        }
                        from = below;
                    }
                }
            }
        }
        from
    }

    /// Whether the cell is curious about any tick of `range`.
    pub(crate) fn is_curious(&self, range: TickRange) -> bool {
        !self.curious.is_empty() && self.curious.runs(range).next().is_some()
    }

    /// C ranges held (to re-send upstream when the upstream changes).
    pub(crate) fn curious_ranges(&self, out: &mut Vec<TickRange>) {
        if let Some(first) = self.curious.first_tick() {
            let to = self.curious.last_tick().unwrap_or(first);
            out.extend(self.curious.runs(TickRange { from: first, to }).map(|run| run.range));
        }
    }

    /// The first `max` ranges the cell asked for that are not answered yet, and whether more
    /// follow: what `/state` shows as that cell's nacks.
    pub(crate) fn asked(&self, max: usize) -> (Vec<TickRange>, bool) {
        self.curious.first_spans(max)
    }

    /// An Ack from the cell. Returns whether the ack prefix advanced.
    pub(crate) fn on_ack(&mut self, ack: Tick, release: Tick, now: Millis, base_interval_ms: u64) -> bool {
        self.release = self.release.max(release.min(ack));
        if ack > self.reported {
            self.reported = ack;
            self.reported_at = now;
        }
        if ack <= self.ack {
            return false;
        }
        self.ack = ack;
        if self.suspect.is_some_and(|suspect| ack >= suspect.to) {
            self.suspect = None;
        }
        if ack >= self.told {
            self.told = ack;
            self.clear_lazy();
        } else if self.lazy_from.is_some_and(|from| from <= ack) {
            self.lazy_from = Some(ack.next());
            self.filtered.retain(|&(t, _)| t > ack);
        }
        self.above = self.above.split_off(&ack.next());
        self.curious.clear_through(ack);
        if let Some(probe) = &mut self.ack_expected {
            *probe = AckExpected { since: now, interval_ms: base_interval_ms };
        }
        true
    }

    /// Timers: flush lazy silence after FPT, forget old C marks, probe with AckExpected.
    pub(crate) fn on_timer(&mut self, view: &View<'_>, ctx: &mut Ctx<'_>) {
        let (now, pubend) = (ctx.now, view.pubend);
        if self.lazy_from.is_some() && now >= self.last_told_at.after(ctx.settings.silence_ms) {
            self.flush(view, ctx);
        }
        let forget = ctx.settings.requested_forgetting_ms;
        if let Some(first) = self.curious.first_tick() {
            let to = self.curious.last_tick().unwrap_or(first);
            let old: Vec<TickRange> = self
                .curious
                .runs(TickRange { from: first, to })
                .filter(|run| now >= run.value.after(forget))
                .map(|run| run.range)
                .collect();
            let mut removed = Vec::new();
            for range in old {
                self.curious.remove(range, &mut removed);
            }
        }
        if let Some(probe) = self.ack_expected {
            let tick = self.told_max();
            if tick > self.effective_ack() && now >= probe.since.after(probe.interval_ms) {
                self.send_message(ctx, Message::AckExpected { pubend, tick });
                let interval_ms = (probe.interval_ms * 2).min(ctx.settings.ack_expected_max_ms);
                self.ack_expected = Some(AckExpected { since: now, interval_ms });
            }
        }
    }

    /// When [`Self::on_timer`] has something to do.
    pub(crate) fn deadline(&self, ctx: &Ctx<'_>) -> Option<Millis> {
        let settings = ctx.settings;
        let flush = self.lazy_from.map(|_| self.last_told_at.after(settings.silence_ms));
        let forget = self.curious_oldest().map(|at| at.after(settings.requested_forgetting_ms));
        let probe =
            self.ack_expected.filter(|_| self.told_max() > self.effective_ack()).map(|p| p.since.after(p.interval_ms));
        // A stalled walk is fetched for again after the nack interval (the fetch may be lost).
        let stalled =
            self.stalled.map(|s| s.fetched_at.map_or(ctx.now, |at| at.after(settings.nack_repetition_min_ms)));
        [flush, forget, probe, stalled].into_iter().flatten().min()
    }

    fn curious_oldest(&self) -> Option<Millis> {
        let first = self.curious.first_tick()?;
        let to = self.curious.last_tick().unwrap_or(first);
        self.curious.runs(TickRange { from: first, to }).map(|run| run.value).min()
    }
}
