//! Answers to curiosity: a nack, or C marks that new knowledge resolves, answered from the
//! istream as requested-only retransmissions; what cannot be answered here is returned as
//! missing (the stream fetches it upstream or from the log).

use crate::engine::reply::Reply;
use crate::engine::types::Verdict;
use crate::engine::Ctx;
use crate::knowledge::Know;
use crate::names::{Millis, Tick, TickRange};
use crate::ranges::RangeMap;

use super::{Ostream, View};

impl Ostream {
    /// Answers `range` from the istream (a retransmission: requested-only); pieces that cannot
    /// be answered here (Q, or D without a cached payload) go to `missing`. Answered ticks lose
    /// their C marks.
    pub(crate) fn answer(
        &mut self,
        range: TickRange,
        view: &View<'_>,
        ctx: &mut Ctx<'_>,
        missing: &mut Vec<TickRange>,
    ) {
        let mut reply = Reply::new(view.pubend, true);
        let first_missing = missing.len();
        let mut cursor = self.answer_below_done(range, view, &mut reply, missing);
        if let Some(rest) = TickRange::new(cursor, range.to) {
            for run in view.know.runs(rest) {
                if run.range.from > cursor {
                    missing.push(TickRange { from: cursor, to: run.range.from.prev() });
                }
                self.answer_run(run.range, run.value, view, ctx, &mut reply, missing);
                cursor = run.range.to.next();
            }
            if cursor <= rest.to {
                missing.push(TickRange { from: cursor, to: rest.to });
            }
        }
        for &tick in &reply.data_ticks {
            self.last_data = self.last_data.max(tick);
            if tick > self.told {
                self.above.insert(tick);
            }
        }
        self.keep_curious_only(range, &missing[first_missing..]);
        for message in reply.finish() {
            ctx.counters.retransmitted += 1;
            self.send_message(ctx, message);
        }
    }

    /// The part of `range` at or below the done prefix; returns the first tick above it.
    fn answer_below_done(
        &self,
        range: TickRange,
        view: &View<'_>,
        reply: &mut Reply,
        missing: &mut Vec<TickRange>,
    ) -> Tick {
        let done = view.know.done();
        if range.from > done {
            return range.from;
        }
        // At or below what the cell itself acknowledged: a stale nack (it was reordered behind
        // the ack); the cell holds these ticks, so nothing is said about them.
        let below = TickRange { from: range.from.max(self.reported.next()), to: range.to.min(done) };
        let unknown_to = if view.authoritative { Tick(0) } else { self.origin.min(below.to) };
        if let Some(unknown) = TickRange::new(below.from, unknown_to) {
            missing.push(unknown);
        }
        if let Some(known) = TickRange::new(below.from.max(unknown_to.next()), below.to) {
            // Done here is final for the tree it was judged under. The suspect part (the tree
            // moved since, `tree_moved`) that this broker has not acknowledged upstream is
            // fetched there; what it acknowledged cannot be asked again (the upstream takes
            // such a nack as a stale one, and may have released it), so that F stands.
            let (held, fetchable) = match TickRange::new(view.acked_upstream.next().max(known.from), known.to) {
                Some(above) if !view.authoritative => (TickRange::new(known.from, above.from.prev()), Some(above)),
                _ => (Some(known), None),
            };
            if let Some(held) = held {
                answer_done(held, view.lost, reply);
            }
            if let Some(fetchable) = fetchable {
                self.split_suspect(fetchable, view, missing, |piece| answer_done(piece, view.lost, reply));
            }
        }
        range.to.min(done).next()
    }

    /// After answering `range`: its C marks stay only on the pieces still missing.
    fn keep_curious_only(&mut self, range: TickRange, missing: &[TickRange]) {
        let mut removed = Vec::new();
        self.curious.remove(range, &mut removed);
        for piece in missing {
            for run in &removed {
                if let Some(overlap) = TickRange::new(piece.from.max(run.range.from), piece.to.min(run.range.to)) {
                    self.curious.insert(overlap, run.value);
                }
            }
        }
    }

    fn answer_run(
        &self,
        range: TickRange,
        value: Know,
        view: &View<'_>,
        ctx: &Ctx<'_>,
        reply: &mut Reply,
        missing: &mut Vec<TickRange>,
    ) {
        match value {
            // F learned through this broker's own filter edge is no answer for a cell that
            // joined since: it is fetched upstream (and passed through, see `pass_through`).
            Know::Final => self.split_suspect(range, view, missing, |piece| reply.final_range(piece)),
            Know::Lost => reply.lost_range(range),
            Know::Data => {
                for tick in (range.from.0..=range.to.0).map(Tick) {
                    match view.cache.get(tick) {
                        None => missing.push(TickRange::single(tick)),
                        Some(payload) if ctx.matcher.child(view.pubend, self.cell, payload) == Verdict::Final => {
                            reply.final_range(TickRange::single(tick))
                        }
                        Some(payload) => reply.data(tick, payload.clone()),
                    }
                }
            }
        }
    }

    /// A nack from the cell: marks C over the ticks it has not acknowledged and answers what the
    /// istream can; the rest is appended to `missing`.
    pub(crate) fn on_nack(
        &mut self,
        ranges: &[TickRange],
        view: &View<'_>,
        ctx: &mut Ctx<'_>,
        missing: &mut Vec<TickRange>,
    ) {
        // A nack wholly below the cell's own ack long after that ack moved is not a reordered
        // one: the entry broker lost what it acknowledged (it restarted, and no link handshake
        // told this broker). It is treated as restarted, so its nacks are answered.
        let long_ago = ctx.now >= self.reported_at.after(ctx.settings.nack_repetition_max_ms);
        if long_ago && ranges.iter().any(|range| range.to <= self.reported) {
            self.peer_restarted();
        }
        for &range in ranges {
            // Curiosity is kept only above the ack prefix, but everything asked is answered: a
            // fresh ostream (after a restart here) may start above what the cell really holds.
            if let Some(marked) = TickRange::new(range.from.max(self.ack.next()), range.to) {
                self.curious.insert(marked, ctx.now);
            }
            // Ticks folded away before this ostream existed are fetched upstream (see
            // `answer_below_done`); their marks route the answer back (`pass_through`).
            let below_origin = TickRange::new(range.from.max(self.reported.next()), range.to.min(self.origin));
            if let Some(marked) = below_origin.filter(|_| !view.authoritative) {
                self.curious.insert(marked, ctx.now);
            }
            let first = missing.len();
            self.answer(range, view, ctx, missing);
            let missed = missing[first..].to_vec();
            self.mark_refetched(&missed, view, (ctx.now, ctx.settings.nack_repetition_max_ms));
        }
    }

    /// Marks what the cell asked for at or below its own ack that goes upstream now
    /// (`refetch`), so the answer comes through; marks older than the longest nack repetition
    /// are dropped first (the cell asks again if it still wants them).
    fn mark_refetched(&mut self, missing: &[TickRange], view: &View<'_>, (now, ttl_ms): (Millis, u64)) {
        if view.authoritative {
            return;
        }
        if let (Some(first), Some(last)) = (self.refetch.first_tick(), self.refetch.last_tick()) {
            let all = TickRange { from: first, to: last };
            let stale: Vec<TickRange> =
                self.refetch.runs(all).filter(|run| now.since(run.value) > ttl_ms).map(|run| run.range).collect();
            for range in stale {
                self.refetch.remove(range, &mut Vec::new());
            }
        }
        for piece in missing {
            if let Some(acked) = TickRange::new(piece.from, piece.to.min(self.ack)) {
                self.refetch.insert(acked, now);
            }
        }
    }

    /// New knowledge or a payload arrived over `range`: answer the C marks it resolves.
    pub(crate) fn answer_curious(&mut self, range: TickRange, view: &View<'_>, ctx: &mut Ctx<'_>) {
        let marked: Vec<TickRange> = self.curious.runs(range).map(|run| run.range).collect();
        let mut missing = Vec::new();
        for piece in marked {
            self.answer(piece, view, ctx, &mut missing);
        }
    }
}

impl Ostream {
    /// Splits the final ticks of `range` into those that may be told to this cell (handed to
    /// `tell`, in order) and those that may not (`missing`, fetched upstream): inside the
    /// suspect range, except what the upstream confirmed F under the current tree since it
    /// last moved (`View::fresh`).
    fn split_suspect(
        &self,
        range: TickRange,
        view: &View<'_>,
        missing: &mut Vec<TickRange>,
        mut tell: impl FnMut(TickRange),
    ) {
        let Some(hull) = self.suspect.and_then(|s| TickRange::new(range.from.max(s.from), range.to.min(s.to))) else {
            tell(range);
            return;
        };
        if let Some(before) = TickRange::new(range.from, hull.from.prev()) {
            tell(before);
        }
        let mut cursor = hull.from;
        for run in view.fresh.runs(hull) {
            let fresh = TickRange { from: run.range.from.max(hull.from), to: run.range.to.min(hull.to) };
            if let Some(gap) = TickRange::new(cursor, fresh.from.prev()) {
                missing.push(gap);
            }
            tell(fresh);
            cursor = fresh.to.next();
        }
        if let Some(gap) = TickRange::new(cursor, hull.to) {
            missing.push(gap);
        }
        if let Some(after) = TickRange::new(hull.to.next(), range.to) {
            tell(after);
        }
    }

    /// The part of `range` whose answers from upstream are passed through to this cell: at or
    /// below the origin, and the suspect range.
    fn fetched(&self, range: TickRange) -> Option<TickRange> {
        let to = self.origin.max(self.suspect.map_or(Tick(0), |s| s.to));
        TickRange::new(range.from, range.to.min(to))
    }

    /// The cell came back into the tree (its ostream was held): what the istream learned above
    /// what it was told was filtered for a tree without it, so it becomes suspect.
    pub(crate) fn rejoined(&mut self, known: Tick) {
        if let Some(fresh) = TickRange::new(self.told.next(), known) {
            let from = self.suspect.map_or(fresh.from, |s| s.from.min(fresh.from));
            self.suspect = Some(TickRange { from, to: known });
        }
    }

    /// The pubend's tree moved at this relay: F the istream holds above what the cell
    /// acknowledged was judged upstream for this broker's subtree in the old tree, which may
    /// lack subscribers now behind the cell, so it becomes suspect like a joining cell's
    /// (told or not: a cell that gained a child below it fetches through us what it was told).
    pub(crate) fn tree_moved(&mut self, known: Tick) {
        if let Some(held) = TickRange::new(self.ack.next(), known) {
            let (from, to) = match self.suspect {
                Some(s) => (s.from.min(held.from), s.to.max(known)),
                None => (held.from, known),
            };
            self.suspect = Some(TickRange { from, to });
        }
    }

    /// A retransmission from upstream covers ticks this cell is curious about that this broker
    /// fetched for it: inside its suspect range (the upstream's answer is filtered for this
    /// broker's cell, which now includes the cell, while this broker's own F proves nothing) or
    /// at or below its origin (folded here before the ostream existed). It is passed on as is.
    /// Ticks at or below the cell's ack that it asked for again (`refetch`) are passed on too.
    pub(crate) fn pass_through(&mut self, answer: &Upstreamed<'_>, view: &View<'_>, ctx: &mut Ctx<'_>) {
        if self.curious.is_empty() && self.refetch.is_empty() {
            return;
        }
        // One set of marks: a tick may be both curious (below the origin) and refetched.
        let mut marks = RangeMap::new();
        for &range in answer.ranges {
            if let Some(fetched) = self.fetched(range) {
                self.curious.runs(fetched).for_each(|run| marks.insert(run.range, ()));
            }
            self.refetch.runs(range).for_each(|run| marks.insert(run.range, ()));
        }
        let mut ranges: Vec<TickRange> = match (marks.first_tick(), marks.last_tick()) {
            (Some(from), Some(to)) => marks.runs(TickRange { from, to }).map(|run| run.range).collect(),
            _ => Vec::new(),
        };
        let mut reply = Reply::new(view.pubend, true);
        if let Some((tick, payload)) = answer.data {
            let single = TickRange::single(tick);
            let refetched = self.refetch.get(tick).is_some();
            self.refetch.remove(single, &mut Vec::new());
            if refetched || (self.fetched(single).is_some() && self.is_curious(single)) {
                if ctx.matcher.child(view.pubend, self.cell, payload) == Verdict::Final {
                    ranges.push(single);
                } else {
                    self.last_data = self.last_data.max(tick);
                    reply.data(tick, payload.clone());
                }
                self.curious.remove(single, &mut Vec::new());
            }
        }
        ranges.sort();
        for &range in &ranges {
            self.curious.remove(range, &mut Vec::new());
            self.refetch.remove(range, &mut Vec::new());
            match answer.lost {
                true => reply.lost_range(range),
                false => reply.final_range(range),
            }
        }
        for message in reply.finish() {
            ctx.counters.retransmitted += 1;
            self.send_message(ctx, message);
        }
    }
}

/// A retransmission as it came from upstream.
pub(crate) struct Upstreamed<'a> {
    /// Ticks it says are F (or L when `lost`).
    pub(crate) ranges: &'a [TickRange],
    /// Whether `ranges` are L.
    pub(crate) lost: bool,
    /// Its D tick, if a Data.
    pub(crate) data: Option<(Tick, &'a bytes::Bytes)>,
}

/// Ticks at or below the done prefix: final and acknowledged; lost where released early.
fn answer_done(range: TickRange, lost: Option<TickRange>, reply: &mut Reply) {
    let Some(lost) = lost else {
        reply.final_range(range);
        return;
    };
    if let Some(before) = TickRange::new(range.from, range.to.min(lost.from.prev())) {
        if lost.from > Tick(0) {
            reply.final_range(before);
        }
    }
    if let Some(inside) = TickRange::new(range.from.max(lost.from), range.to.min(lost.to)) {
        reply.lost_range(inside);
    }
    if let Some(after) = TickRange::new(range.from.max(lost.to.next()), range.to) {
        reply.final_range(after);
    }
}
