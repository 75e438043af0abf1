//! Knowledge arriving from upstream at an intermediate or subscriber-hosting broker: Data and
//! Silence are joined into the istream, then relayed through the filter edges.

use bytes::Bytes;

use crate::cache::PayloadCache;
use crate::engine::ostream::Upstreamed;
use crate::engine::stream::{Learned, Source, Stream};
use crate::engine::Ctx;
use crate::knowledge::{Joined, Know, Knowledge};
use crate::message::SilenceKind;
use crate::names::{BrokerId, Tick, TickRange};

/// One Data message, as received.
pub(crate) struct DataIn {
    pub(crate) from: BrokerId,
    pub(crate) tick: Tick,
    pub(crate) final_from: Tick,
    pub(crate) final_to: Tick,
    pub(crate) requested_only: bool,
    pub(crate) payload: Bytes,
}

impl Stream {
    /// Passes a retransmission on to the children curious about it inside their suspect ranges.
    fn pass_through(&mut self, answer: &Upstreamed<'_>, ctx: &mut Ctx<'_>) {
        let (view, children) = self.split();
        for child in children.values_mut() {
            child.pass_through(answer, &view, ctx);
        }
    }

    /// Data from upstream. A first-time Data for a tick already final here is a duplicate and
    /// is dropped, except that it still answers curiosity (and refills an evicted payload).
    pub(crate) fn on_data(&mut self, data: DataIn, ctx: &mut Ctx<'_>) {
        let curiosity = self.curiosity_start();
        let Source::Upstream(up) = &mut self.source else { return };
        let DataIn { from, tick, final_from, final_to, requested_only, payload } = data;
        if final_from > tick || final_to < tick {
            ctx.counters.malformed += 1;
            return;
        }
        up.heard(from, final_to, ctx.now);
        let old_high = self.know.highest_known();
        let mut joined = Joined::default();
        if let Some(before) = TickRange::new(final_from, tick.prev()) {
            self.know.join(before, Know::Final, &mut joined);
            self.fresh.insert(before, ());
        }
        self.know.join(TickRange::single(tick), Know::Data, &mut joined);
        if let Some(after) = TickRange::new(tick.next(), final_to) {
            self.know.join(after, Know::Final, &mut joined);
            self.fresh.insert(after, ());
        }
        ctx.counters.conflicts += u64::from(joined.conflicts);
        let new_data = joined.new.iter().any(|piece| piece.from <= tick && tick <= piece.to);
        let mut pieces = joined.new;
        if tick > self.know.done() && self.know.get(tick) == Some(Know::Data) && !self.cache.contains(tick) {
            self.cache.insert(tick, payload.clone(), ctx.settings.payload_cache_bytes, self.subends.protect_from());
            if !new_data {
                pieces.push(TickRange::single(tick));
            }
        }
        up.resolve(&pieces, ctx.now);
        if let Some(start) = curiosity {
            up.new_gaps(&self.know, old_high, start, ctx.now);
        }
        if requested_only {
            let finals: Vec<TickRange> =
                [TickRange::new(final_from, tick.prev()), TickRange::new(tick.next(), final_to)]
                    .into_iter()
                    .flatten()
                    .collect();
            let answer = Upstreamed { ranges: &finals, lost: false, data: Some((tick, &payload)) };
            self.pass_through(&answer, ctx);
            self.learn(&pieces, Learned::Requested, ctx);
        } else {
            if !new_data {
                ctx.counters.duplicates_dropped += 1;
            }
            let ticks = [tick];
            let first = if new_data { &ticks[..] } else { &[] };
            self.learn(&pieces, Learned::FirstTime(first), ctx);
        }
    }

    /// Silence (F or L) from upstream. First-time silence is told on at once to every ostream
    /// whose walk it extends (the upstream already rate-limits it).
    pub(crate) fn on_silence(
        &mut self,
        from: BrokerId,
        ranges: &[TickRange],
        kind: SilenceKind,
        requested_only: bool,
        ctx: &mut Ctx<'_>,
    ) {
        let curiosity = self.curiosity_start();
        let Source::Upstream(up) = &mut self.source else { return };
        let Some(high) = ranges.iter().map(|r| r.to).max() else { return };
        up.heard(from, high, ctx.now);
        let old_high = self.know.highest_known();
        let value = match kind {
            SilenceKind::Final => Know::Final,
            SilenceKind::Lost => Know::Lost,
        };
        let mut joined = Joined::default();
        for &range in ranges {
            self.know.join(range, value, &mut joined);
            if value == Know::Final {
                self.fresh.insert(range, ());
            }
            if value == Know::Lost {
                damage_uncached(&mut self.know, &self.cache, range, &mut joined, ctx);
            }
        }
        ctx.counters.conflicts += u64::from(joined.conflicts);
        up.resolve(&joined.new, ctx.now);
        if let Some(start) = curiosity {
            up.new_gaps(&self.know, old_high, start, ctx.now);
        }
        if requested_only {
            let answer = Upstreamed { ranges, lost: kind == SilenceKind::Lost, data: None };
            self.pass_through(&answer, ctx);
            self.learn(&joined.new, Learned::Requested, ctx);
            return;
        }
        self.learn(&joined.new, Learned::FirstTime(&[]), ctx);
        let (view, children) = self.split();
        for child in children.values_mut() {
            child.flush(&view, ctx);
        }
    }
}

/// L from upstream over ticks known D here whose payload this broker does not hold: the
/// record was found damaged at the pubend and can never be supplied, so they become L
/// (gap notices) instead of being nacked forever. A payload still cached here is served.
fn damage_uncached(
    know: &mut Knowledge,
    cache: &PayloadCache,
    range: TickRange,
    joined: &mut Joined,
    ctx: &mut Ctx<'_>,
) {
    let data: Vec<TickRange> = know.runs(range).filter(|run| run.value == Know::Data).map(|run| run.range).collect();
    for run in data {
        for tick in run.from.0..=run.to.0 {
            if !cache.contains(Tick(tick)) {
                let before = joined.new.len();
                know.damage(TickRange::single(Tick(tick)), joined);
                ctx.counters.damaged_ticks += (joined.new.len() - before) as u64;
            }
        }
    }
}
