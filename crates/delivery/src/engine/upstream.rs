//! The upstream side of a stream at an intermediate or subscriber-hosting broker: where acks
//! and nacks go, nack consolidation, and the curiosity this broker originates for its subends
//! (gaps, GCT, NRT with backoff, DCT) — gd-protocol §8.2–§8.4.

use crate::engine::types::{Action, UpstreamCell};
use crate::engine::Ctx;
use crate::knowledge::Knowledge;
use crate::message::Message;
use crate::names::{BrokerId, CellId, Millis, PubendId, Tick, TickRange};
use crate::nrt::NackTimer;
use crate::ranges::RangeMap;

/// Most ranges (each at most `max_nack_span_ticks`) in one nack. A hole of years of ticks (a
/// stream restarted far from where it was) is asked for a bounded piece at a time rather than
/// as billions of ranges in one message.
const MAX_NACK_CHUNKS: usize = 256;

/// Curiosity this broker holds for its own subends, per Q range.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Want {
    /// When the gap was seen.
    since: Millis,
    /// When it was last nacked (`None`: waiting out GCT).
    nacked_at: Option<Millis>,
    /// Repetitions so far (0 after the first nack).
    repeats: u8,
    /// Left out of a nack that was full (`MAX_NACK_CHUNKS`), or asked again after a heal: not a
    /// repetition that went unanswered, so it is asked with the next window, as soon as an
    /// answer shows the upstream is serving ([`Upstream::pull`]), or after the base interval.
    deferred: bool,
}

impl Want {
    fn new(since: Millis, nacked_at: Option<Millis>) -> Want {
        Want { since, nacked_at, repeats: 0, deferred: false }
    }
}

/// Upstream state of one stream. All soft.
#[derive(Clone, Debug, Default)]
pub(crate) struct Upstream {
    cell: Option<UpstreamCell>,
    /// The broker that last sent us data for this pubend (acks and nacks go there), and when.
    last_sender: Option<BrokerId>,
    last_heard: Millis,
    /// U: ticks nacked upstream and when; a younger mark absorbs a new nack (consolidation).
    asked: RangeMap<Millis>,
    wants: RangeMap<Want>,
    timer: NackTimer,
    /// The highest tick heard of and when, to estimate the pubend's clock (DCT).
    latest: Option<(Tick, Millis)>,
    dct_checked: Millis,
    /// An answer arrived: the deferred wants are asked now (a backlog is pulled one window per
    /// round trip, not one per nack repetition interval).
    pull: bool,
}

impl Upstream {
    /// Sends `message` to the broker that last sent us the stream, else to every broker of the
    /// upstream cell. A sender silent for the longest nack interval may no longer count this
    /// broker as its child (routes moved the cell's entry): the whole cell is asked then.
    pub(crate) fn send(&self, message: Message, ctx: &mut Ctx<'_>) {
        let fresh = ctx.now < self.last_heard.after(ctx.settings.nack_repetition_max_ms);
        if let Some(to) = self.last_sender.filter(|_| fresh) {
            ctx.out.push(Action::Send { to, via: None, message });
            return;
        }
        if let Some(cell) = &self.cell {
            for &to in &cell.brokers {
                ctx.out.push(Action::Send { to, via: None, message: message.clone() });
            }
        }
    }

    /// Knowledge arrived from `from`, reaching `high`.
    pub(crate) fn heard(&mut self, from: BrokerId, high: Tick, now: Millis) {
        if self.cell.as_ref().is_some_and(|cell| cell.brokers.contains(&from)) {
            self.last_sender = Some(from);
            self.last_heard = now;
        }
        if self.latest.is_none_or(|(tick, _)| high > tick) {
            self.latest = Some((high, now));
        }
    }

    /// Nacks `ranges` upstream, except ticks asked for within the consolidation window. The
    /// ranges may come in any order and overlap; the nack sent is sorted and disjoint. Returns
    /// the first tick left out because the nack was full, if any.
    pub(crate) fn nack(&mut self, pubend: PubendId, ranges: &[TickRange], ctx: &mut Ctx<'_>) -> Option<Tick> {
        let window = ctx.settings.nack_repetition_min_ms;
        let mut ranges = ranges.to_vec();
        TickRange::normalize(&mut ranges);
        let mut fresh = Vec::new();
        for &range in &ranges {
            let mut cursor = range.from;
            for run in self.asked.runs(range) {
                if ctx.now < run.value.after(window) && !ctx.settings.mutations.skip_nack_consolidation {
                    if let Some(piece) = TickRange::new(cursor, run.range.from.prev()) {
                        fresh.push(piece);
                    }
                    ctx.counters.nack_ticks_absorbed += run.range.len();
                    cursor = run.range.to.next();
                }
            }
            if let Some(piece) = TickRange::new(cursor, range.to) {
                fresh.push(piece);
            }
        }
        if fresh.is_empty() || self.cell.is_none() {
            return None;
        }
        let span = ctx.settings.max_nack_span_ticks.max(1);
        let mut chunks = Vec::with_capacity(fresh.len());
        let mut cut = None;
        'ranges: for range in fresh {
            let mut from = range.from.0;
            while from <= range.to.0 {
                if chunks.len() == MAX_NACK_CHUNKS {
                    // The rest stays wanted (not asked): the next window asks for it.
                    cut = Some(Tick(from));
                    break 'ranges;
                }
                let to = from.saturating_add(span - 1).min(range.to.0);
                let chunk = TickRange { from: Tick(from), to: Tick(to) };
                self.asked.insert(chunk, ctx.now);
                ctx.counters.nack_ticks_sent += chunk.len();
                chunks.push(chunk);
                from = match to.checked_add(1) {
                    Some(next) => next,
                    None => break,
                };
            }
        }
        ctx.counters.nacks_sent += 1;
        self.send(Message::Nack { pubend, ranges: chunks }, ctx);
        cut
    }

    /// Ticks became final: they are no longer wanted; a range nacked once and now fully answered
    /// gives a round-trip sample (Karn's rule).
    pub(crate) fn resolve(&mut self, pieces: &[TickRange], now: Millis) {
        if self.wants.is_empty() && self.asked.is_empty() {
            return;
        }
        let mut removed = Vec::new();
        for &piece in pieces {
            self.wants.remove(piece, &mut removed);
            self.asked.remove(piece, &mut Vec::new());
        }
        // Any answer to a nack: the upstream serves again; the next window goes at once.
        self.pull |= removed.iter().any(|run| run.value.nacked_at.is_some());
        let mut sampled = None;
        for run in removed {
            if let (Some(at), 0, false) = (run.value.nacked_at, run.value.repeats, run.value.deferred) {
                if sampled != Some(at) {
                    sampled = Some(at);
                    self.timer.sample(now.since(at));
                }
            }
        }
    }

    /// Knowledge grew from `old_high` to the stream's highest tick: the Q ticks in between are
    /// new gaps (GCT starts now).
    pub(crate) fn new_gaps(&mut self, know: &Knowledge, old_high: Tick, start: Tick, now: Millis) {
        let from = old_high.next().max(start).max(know.done().next());
        let Some(range) = TickRange::new(from, know.highest_known()) else { return };
        let mut gaps = Vec::new();
        know.unknown(range, &mut gaps);
        let mut filled = Vec::new();
        for gap in gaps {
            self.wants.fill(gap, Want::new(now, None), &mut filled);
        }
    }

    /// Marks `ranges` (Q ticks) as wanted and nacks them now (AckExpected, DCT).
    pub(crate) fn want_now(&mut self, pubend: PubendId, ranges: &[TickRange], ctx: &mut Ctx<'_>) {
        for &range in ranges {
            self.wants.insert(range, Want::new(ctx.now, Some(ctx.now)));
        }
        let cut = self.nack(pubend, ranges, ctx);
        self.defer_from(cut, ctx.now);
    }

    /// Wants at and above `cut` (left out of a full nack) wait for the next window.
    fn defer_from(&mut self, cut: Option<Tick>, now: Millis) {
        let (Some(cut), Some(last)) = (cut, self.wants.last_tick()) else { return };
        let left: Vec<(TickRange, Want)> = self
            .wants
            .runs(TickRange { from: cut, to: last })
            .filter_map(|run| {
                let range = TickRange::new(run.range.from.max(cut), run.range.to)?;
                Some((range, Want { nacked_at: Some(now), repeats: 0, deferred: true, ..run.value }))
            })
            .collect();
        for (range, want) in left {
            self.wants.insert(range, want);
        }
    }

    /// GCT and NRT expiries, and the periodic DCT check.
    pub(crate) fn on_timer(&mut self, pubend: PubendId, know: &Knowledge, start: Option<Tick>, ctx: &mut Ctx<'_>) {
        let mut due = Vec::new();
        if let (Some(first), Some(last)) = (self.wants.first_tick(), self.wants.last_tick()) {
            for run in self.wants.runs(TickRange { from: first, to: last }) {
                if ctx.now >= self.want_due(run.value, ctx) {
                    // With no upstream nothing is sent (`nack` returns at once): a repetition
                    // nobody could hear does not grow the backoff the heal then has to wait out.
                    let repeated = run.value.nacked_at.is_some() && !run.value.deferred;
                    let repeats = match repeated {
                        true if self.cell.is_some() => run.value.repeats.saturating_add(1),
                        true => run.value.repeats,
                        false => 0,
                    };
                    let want = Want { nacked_at: Some(ctx.now), repeats, deferred: false, ..run.value };
                    due.push((run.range, want));
                }
            }
        }
        self.pull = false;
        for &(range, want) in &due {
            self.wants.insert(range, want);
        }
        let ranges: Vec<TickRange> = due.iter().map(|&(range, _)| range).collect();
        if !ranges.is_empty() {
            let cut = self.nack(pubend, &ranges, ctx);
            self.defer_from(cut, ctx.now);
        }
        if let (Some(dct), Some(start)) = (ctx.settings.delay_curiosity_ms, start) {
            if ctx.now >= self.dct_checked.after(dct / 4) {
                self.dct_checked = ctx.now;
                self.check_delay(pubend, know, start, dct, ctx);
            }
        }
    }

    fn want_due(&self, want: Want, ctx: &Ctx<'_>) -> Millis {
        match want.nacked_at {
            None => want.since.after(ctx.settings.gap_curiosity_ms),
            Some(at) if want.deferred && self.pull => at,
            Some(at) => at.after(self.timer.interval_ms(ctx.settings, want.repeats)),
        }
    }

    /// DCT: Q ticks that trail the estimated pubend clock by more than DCT are nacked even when
    /// no later message revealed them (the tail-loss guard).
    fn check_delay(&mut self, pubend: PubendId, know: &Knowledge, start: Tick, dct: u64, ctx: &mut Ctx<'_>) {
        let Some((tick, at)) = self.latest else { return };
        let estimate = tick.0.saturating_add(ctx.settings.ticks(ctx.now.since(at)));
        let limit = Tick(estimate.saturating_sub(ctx.settings.ticks(dct)));
        let from = know.horizon().max(start);
        let Some(range) = TickRange::new(from, limit) else { return };
        let mut unknown = Vec::new();
        know.unknown(range, &mut unknown);
        let mut fresh = Vec::new();
        for piece in unknown {
            self.wants.absent(piece, &mut fresh);
        }
        if !fresh.is_empty() {
            self.want_now(pubend, &fresh, ctx);
        }
    }

    /// When [`Self::on_timer`] has something to do.
    pub(crate) fn deadline(&self, has_start: bool, ctx: &Ctx<'_>) -> Option<Millis> {
        let wants = match (self.wants.first_tick(), self.wants.last_tick()) {
            (Some(first), Some(last)) => {
                self.wants.runs(TickRange { from: first, to: last }).map(|run| self.want_due(run.value, ctx)).min()
            }
            _ => None,
        };
        let dct = ctx
            .settings
            .delay_curiosity_ms
            .filter(|_| has_start && self.latest.is_some())
            .map(|dct| self.dct_checked.after(dct / 4));
        [wants, dct].into_iter().flatten().min()
    }

    /// Drops curiosity at or below the done prefix.
    pub(crate) fn forget_through(&mut self, tick: Tick) {
        self.wants.clear_through(tick);
        self.asked.clear_through(tick);
    }

    /// The routing layer gave a new upstream. Returns whether it moved — another cell, or the
    /// broker that sent us the stream is no longer among the cell's linked brokers: then
    /// consolidation marks are void and outstanding curiosity must be re-sent to the new one.
    pub(crate) fn reroute(&mut self, cell: Option<UpstreamCell>, now: Millis) -> bool {
        let same_cell = self.cell.as_ref().map(|c| c.cell) == cell.as_ref().map(|c| c.cell);
        let same_brokers = self.cell.as_ref().map(|c| &c.brokers) == cell.as_ref().map(|c| &c.brokers);
        let sender_kept =
            self.last_sender.is_none_or(|sender| cell.as_ref().is_some_and(|c| c.brokers.contains(&sender)));
        let moved = !same_cell || !sender_kept || (self.last_sender.is_none() && !same_brokers);
        if moved {
            self.last_sender = None;
            self.asked = RangeMap::new();
            if cell.is_some() {
                // The caller nacks the outstanding ranges now, to the new upstream.
                self.restart_backoff(now);
            }
        }
        self.cell = cell;
        moved
    }

    /// `broker` restarted: if it was our sender, send to the whole cell until one sends again.
    /// If it is upstream, what it was asked died with it: the outstanding ranges are asked
    /// again at the base interval, not after the backoff they grew while it was down.
    pub(crate) fn forget_sender(&mut self, broker: BrokerId, now: Millis) {
        if self.last_sender == Some(broker) {
            self.last_sender = None;
        }
        if self.is_upstream(broker) {
            self.restart_backoff(now);
        }
    }

    /// Every range already nacked is asked afresh from `now`, as a deferred window (the caller
    /// sends the first one). Repetitions back off so a slow upstream is not flooded; but after
    /// a heal (a new way upstream, a restarted upstream broker) the backoff measures an outage
    /// that is over, and waiting it out (up to `nack_repetition_max_ms`) left subscribers idle
    /// for seconds after every link was back (issue 38).
    fn restart_backoff(&mut self, now: Millis) {
        let (Some(first), Some(last)) = (self.wants.first_tick(), self.wants.last_tick()) else { return };
        let nacked: Vec<(TickRange, Want)> = self
            .wants
            .runs(TickRange { from: first, to: last })
            .filter(|run| run.value.nacked_at.is_some())
            .map(|run| (run.range, Want { nacked_at: Some(now), repeats: 0, deferred: true, ..run.value }))
            .collect();
        for (range, want) in nacked {
            self.wants.insert(range, want);
        }
    }

    /// Whether F told by a broker of `cell` speaks for this broker's subtree: only the current
    /// upstream cell judges our filter edge. F is relative to the subtree it was judged for; a
    /// broker that fed this stream under an older route (a former entry of our own cell, now
    /// a mate child, or the old parent cell) judged it for another subtree, and its F may hide
    /// messages the subscribers behind us now want. With no upstream known, nothing is refused.
    pub(crate) fn speaks_for_us(&self, cell: CellId) -> bool {
        self.cell.as_ref().is_none_or(|upstream| upstream.cell == cell)
    }

    /// Whether `broker` is one of the upstream cell's linked brokers.
    pub(crate) fn is_upstream(&self, broker: BrokerId) -> bool {
        self.cell.as_ref().is_some_and(|cell| cell.brokers.contains(&broker))
    }

    /// Ranges this broker itself has nacked and still waits for.
    pub(crate) fn outstanding(&self, out: &mut Vec<TickRange>) {
        if let (Some(first), Some(last)) = (self.wants.first_tick(), self.wants.last_tick()) {
            out.extend(
                self.wants
                    .runs(TickRange { from: first, to: last })
                    .filter(|run| run.value.nacked_at.is_some())
                    .map(|run| run.range),
            );
        }
    }

    /// The first `max` ranges this broker wants for itself (nacked, or waiting out the gap
    /// curiosity threshold), and whether more follow: what `/state` shows as its nacks.
    pub(crate) fn wanted(&self, max: usize) -> (Vec<TickRange>, bool) {
        self.wants.first_spans(max)
    }

    /// Runs held by the curiosity maps (for memory reports).
    pub(crate) fn run_count(&self) -> usize {
        self.wants.run_count() + self.asked.run_count()
    }
}
