//! The pubend at its publisher-hosting broker (gd-protocol §2.3, §8.1): tick assignment under a
//! durable lease, log before send, silence up to `safe_now`, reads to answer nacks, release.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::cache::PayloadCache;
use crate::engine::types::Action;
use crate::engine::Ctx;
use crate::knowledge::{Joined, Know, Knowledge};
use crate::names::{Millis, PublisherId, Tick, TickRange};
use crate::ranges::RangeMap;
use crate::store::{Recovered, StoreAction};

/// A message whose tick is assigned but whose append is not yet durable.
#[derive(Clone, Debug)]
struct PendingRecord {
    payload: Bytes,
    publisher: PublisherId,
    seq: u64,
}

/// The pubend's log-facing state.
///
/// Invariants: every tick `<= synced` that was assigned is durable; `pending` holds exactly the
/// assigned ticks above `synced`; F is asserted only up to `safe_now <= lease` (T1, T3), and for
/// a replicated pubend no further than its group confirmed this broker's lead
/// ([`crate::Input::ConfirmSilence`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Log {
    last_tick: Tick,
    lease: Tick,
    lease_asked: Option<Tick>,
    synced: Tick,
    pending: BTreeMap<Tick, PendingRecord>,
    publishers: BTreeMap<PublisherId, u64>,
    /// Publishes whose append failed: a retry of one is a new publish, not a repeat.
    failed: BTreeSet<(PublisherId, u64)>,
    /// Knowledge holds every non-D tick up to here as F.
    silence_to: Tick,
    /// The release prefix last given to the store.
    pub(crate) release: Tick,
    release_sent_at: Option<Millis>,
    /// Ticks released early, answered as lost.
    pub(crate) lost: Option<TickRange>,
    /// Reads in flight, and when they were asked (a repeat within the window is absorbed).
    reading: RangeMap<Millis>,
}

impl Log {
    /// The log as recovered from the store: logged ticks are D (payloads are read on demand),
    /// and no tick up to `max(lease, highest logged)` is ever assigned again (T1).
    pub(crate) fn open(mut recovered: Recovered, know: &mut Knowledge, no_lease: bool) -> Self {
        if no_lease {
            recovered.lease = Tick(0);
        }
        know.advance_done(recovered.release);
        let mut joined = Joined::default();
        for &tick in &recovered.logged {
            know.join(TickRange::single(tick), Know::Data, &mut joined);
        }
        // Damaged ticks are L before any silence is asserted, and silence only fills Q (see
        // `advance_silence`), so they are answered as lost, never claimed as F.
        for &range in &recovered.lost {
            know.join(range, Know::Lost, &mut joined);
        }
        let highest = recovered.logged.last().copied().unwrap_or(Tick(0));
        let highest_lost = recovered.lost.iter().map(|r| r.to).max().unwrap_or(Tick(0));
        let last_tick = recovered.lease.max(highest).max(highest_lost).max(recovered.release);
        Self {
            last_tick,
            lease: recovered.lease,
            synced: last_tick,
            publishers: recovered.publishers.into_iter().collect(),
            silence_to: recovered.release,
            release: recovered.release,
            ..Self::default()
        }
    }

    fn now_tick(&self, ctx: &Ctx<'_>) -> Tick {
        Tick(ctx.settings.ticks(ctx.now.0).max(1))
    }

    /// T3: the highest tick the pubend may call F now.
    fn safe_now(&self, ctx: &Ctx<'_>) -> Tick {
        if ctx.settings.mutations.claim_f_for_q {
            return self.now_tick(ctx).prev();
        }
        let unlogged = self.pending.keys().next().map_or(Tick(u64::MAX), |t| t.prev());
        // A publish in this same millisecond may still take `now_tick`: F stops below it.
        let confirmed = ctx.confirmed.unwrap_or(Tick(u64::MAX));
        self.now_tick(ctx).prev().min(unlogged).min(self.lease).min(confirmed)
    }

    /// Asserts F over the ticks that became safe; returns the new pieces.
    pub(crate) fn advance_silence(&mut self, know: &mut Knowledge, ctx: &mut Ctx<'_>) -> Vec<TickRange> {
        self.raise_lease(ctx);
        let safe = self.safe_now(ctx);
        let mut joined = Joined::default();
        if let Some(range) = TickRange::new(self.silence_to.next(), safe) {
            // Only unknown ticks become F: a D stays D, and an L (damaged on disk) stays L.
            let mut unknown = Vec::new();
            know.unknown(range, &mut unknown);
            for piece in unknown {
                know.join(piece, Know::Final, &mut joined);
            }
            self.silence_to = safe;
        }
        joined.new
    }

    fn raise_lease(&mut self, ctx: &mut Ctx<'_>) {
        let now = self.now_tick(ctx).0;
        let chunk = ctx.settings.ticks(ctx.settings.lease_chunk_ms);
        if self.lease_asked.is_none() && self.lease.0 < now.saturating_add(chunk / 2) {
            let up_to = Tick(now.saturating_add(chunk));
            self.lease_asked = Some(up_to);
            ctx.out.push(Action::Store(StoreAction::LeaseRaise { pubend: ctx.pubend, up_to }));
        }
    }

    /// The store made the lease durable.
    pub(crate) fn lease_done(&mut self, lease: Tick) {
        self.lease = self.lease.max(lease);
        if self.lease_asked.is_some_and(|asked| asked <= lease) {
            self.lease_asked = None;
        }
    }

    /// The lease could not be raised: it is asked for again at the next silence interval (a
    /// lease asked and never answered would stop silence at the old lease for good, and with
    /// it every delivery above: a full disk that later had room again left the stream stuck).
    pub(crate) fn lease_failed(&mut self) {
        self.lease_asked = None;
    }

    /// T4 then T2: a repeat of `(publisher, seq)` is dropped; a new message gets
    /// `max(now, last + 1)` and is appended; it leaves the broker only once durable.
    pub(crate) fn publish(&mut self, publisher: PublisherId, seq: u64, payload: Bytes, ctx: &mut Ctx<'_>) {
        let retry_of_failed = self.failed.remove(&(publisher, seq));
        if !retry_of_failed && self.publishers.get(&publisher).is_some_and(|&last| seq <= last) {
            ctx.counters.duplicate_publishes += 1;
            if self.pending.values().all(|p| p.publisher != publisher) {
                ctx.out.push(Action::PublishAcked { pubend: ctx.pubend, publisher, seq });
            }
            return;
        }
        let last = self.publishers.entry(publisher).or_insert(seq);
        *last = (*last).max(seq);
        let tick = self.now_tick(ctx).max(self.last_tick.next());
        self.last_tick = tick;
        let record = payload.clone();
        self.pending.insert(tick, PendingRecord { payload, publisher, seq });
        ctx.out.push(Action::Store(StoreAction::Append { pubend: ctx.pubend, tick, record, publisher, seq }));
    }

    /// Appends up to `synced_up_to` are durable: their ticks become D, their publishers are
    /// acknowledged. Returns the new D ticks (to send first-time).
    pub(crate) fn append_done(
        &mut self,
        synced_up_to: Tick,
        know: &mut Knowledge,
        cache: &mut PayloadCache,
        ctx: &mut Ctx<'_>,
    ) -> Vec<Tick> {
        self.synced = self.synced.max(synced_up_to);
        let mut ticks = Vec::new();
        let mut joined = Joined::default();
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > synced_up_to {
                break;
            }
            let (tick, record) = entry.remove_entry();
            know.join(TickRange::single(tick), Know::Data, &mut joined);
            cache.insert(tick, record.payload, ctx.settings.payload_cache_bytes, Tick(u64::MAX));
            ctx.out.push(Action::PublishAcked { pubend: ctx.pubend, publisher: record.publisher, seq: record.seq });
            ticks.push(tick);
        }
        ticks
    }

    /// The store could not log the append of `tick`: the tick never becomes D (silence may
    /// later claim it as F, as for any unassigned tick), its publisher is refused, and a retry
    /// of the same `(publisher, seq)` is taken as a new publish rather than a repeat.
    pub(crate) fn append_failed(&mut self, tick: Tick, ctx: &mut Ctx<'_>) {
        let Some(record) = self.pending.remove(&tick) else { return };
        self.failed.insert((record.publisher, record.seq));
        ctx.out.push(Action::PublishRefused { pubend: ctx.pubend, publisher: record.publisher, seq: record.seq });
    }

    /// The log closes here ([`crate::Input::CloseLog`]): every publish still pending is refused,
    /// so its publisher retries where the pubend lives now.
    pub(crate) fn close(&mut self, ctx: &mut Ctx<'_>) {
        for (_, record) in std::mem::take(&mut self.pending) {
            ctx.out.push(Action::PublishRefused { pubend: ctx.pubend, publisher: record.publisher, seq: record.seq });
        }
    }

    /// What a restart would find in this log: the lease, the release, the D ticks of `know`
    /// above the release and the appends still pending (they may yet land), the publishers,
    /// and the lost ticks. A closed log reopens from it (`crate::Engine::log_holds`).
    pub(crate) fn holds(&self, know: &Knowledge) -> Recovered {
        let above = TickRange { from: self.release.next(), to: Tick(u64::MAX) };
        let mut logged = Vec::new();
        let mut lost = Vec::new();
        for run in know.runs(above) {
            match run.value {
                Know::Data => logged.extend((run.range.from.0..=run.range.to.0).map(Tick)),
                Know::Lost => lost.push(run.range),
                Know::Final => {}
            }
        }
        logged.extend(self.pending.keys().copied());
        logged.sort();
        logged.dedup();
        Recovered {
            lease: self.lease,
            release: self.release,
            logged,
            publishers: self.publishers.iter().map(|(&p, &seq)| (p, seq)).collect(),
            lost,
        }
    }

    /// The tick the next publish will get at the earliest: a subscription confirmed now with
    /// this start sees every message published after it (gd-protocol §11.5).
    pub(crate) fn next_tick(&self) -> Tick {
        // Above every tick already told F too: a publish gets at least the clock, which is past
        // the silence.
        self.last_tick.next().max(self.silence_to.next())
    }

    /// Reads the D ticks among `missing` whose payloads are not cached, except ranges already
    /// being read (asked within the nack window).
    pub(crate) fn read(&mut self, missing: &[TickRange], know: &Knowledge, ctx: &mut Ctx<'_>) {
        let window = ctx.settings.nack_repetition_min_ms;
        for &range in missing {
            let wanted = know.runs(range).any(|run| run.value == Know::Data);
            let recent = self.reading.runs(range).any(|run| ctx.now < run.value.after(window));
            if wanted && !recent {
                self.reading.insert(range, ctx.now);
                ctx.out.push(Action::Store(StoreAction::ReadRange { pubend: ctx.pubend, range }));
            }
        }
    }

    /// A read finished: its payloads are cached again.
    pub(crate) fn read_done(
        &mut self,
        range: TickRange,
        records: Vec<(Tick, Bytes)>,
        cache: &mut PayloadCache,
        ctx: &Ctx<'_>,
    ) {
        self.reading.remove(range, &mut Vec::new());
        for (tick, record) in records {
            cache.insert(tick, record, ctx.settings.payload_cache_bytes, Tick(u64::MAX));
        }
    }

    /// Releases the log up to `release` (the minimum over the tree), at most once per RPT.
    pub(crate) fn release_to(&mut self, release: Tick, ctx: &mut Ctx<'_>) -> bool {
        let release = release.min(self.silence_to.max(self.synced.min(self.last_tick)));
        let due = self.release_sent_at.is_none_or(|at| ctx.now >= at.after(ctx.settings.release_propagation_ms));
        if release <= self.release || !due {
            return false;
        }
        self.release = release;
        self.release_sent_at = Some(ctx.now);
        self.reading.clear_through(release);
        ctx.out.push(Action::Store(StoreAction::ReleasePrefix { pubend: ctx.pubend, tick: release }));
        true
    }

    /// An administrative early release: records up to `up_to` go; nacks for them get L.
    pub(crate) fn early_release(&mut self, up_to: Tick, ctx: &mut Ctx<'_>) {
        let up_to = up_to.min(self.silence_to);
        if up_to <= self.release {
            return;
        }
        self.lost = TickRange::new(self.release.next(), up_to);
        self.release = up_to;
        self.release_sent_at = Some(ctx.now);
        ctx.out.push(Action::Store(StoreAction::ReleasePrefix { pubend: ctx.pubend, tick: up_to }));
    }

    /// When the pubend next has silence to assert or a release to send.
    pub(crate) fn deadline(&self, pending_release: bool, ctx: &Ctx<'_>) -> Option<Millis> {
        let release =
            self.release_sent_at.filter(|_| pending_release).map(|at| at.after(ctx.settings.release_propagation_ms));
        let silence = Some(ctx.now.after(ctx.settings.silence_ms));
        [release, silence].into_iter().flatten().min()
    }
}
