//! Where a local subscription starts on a stream: the start a pubend's broker answers for a
//! barrier ([`next_tick`]) and, once the barrier is confirmed, the rule the broker's driver and
//! the simulator both apply before telling anyone the start ([`confirmed_start`]).
//!
//! A barrier's start σ for a pubend is the pubend's next tick as its broker answered one round
//! of routing. Rounds overlap: a barrier confirmed later may carry a σ taken earlier, below
//! the σ with which an earlier barrier already started the stream here; the stream then
//! acknowledged everything below that upstream, and the pubend may have released it. Fed as
//! is, such a σ was refused by the core and the subscriber told a gap it had never been owed
//! (the full census's seeds 35 and 403 of 2026-11-28, 319 on the schedules after it).
//!
//! Raising σ to the stream's floor keeps the promise a start makes, that every message
//! published after the subscription was confirmed is delivered: the floor is one past a tick
//! the stream already had (an earlier σ, itself a next tick answered before this
//! confirmation, or a tick delivered here), so every tick the pubend gives from now on is at
//! or above it.

use tidings_delivery::{Engine, Matcher, Millis, PubendId, StreamRoute, StreamView, SubendId, Tick};

/// How far before its confirmation a subscription starts on a pubend that its barrier did not
/// reach (the pubend did not exist yet, or its home was unreachable): ticks are the home's
/// clock, so this is the clock skew between brokers that is tolerated.
pub const LATE_PUBEND_MARGIN_MS: u64 = 5_000;

/// The start a pubend's broker answers for its pubend in a round of routing (and confirms a
/// subscription it has no network for with): the tick the next publish gets at the earliest,
/// as the pubend's stream in the core knows it (`view`; `None` before the log is open: tick 1).
/// The broker and the simulator answer from the same stream, so a simulated barrier carries
/// the start the broker would have given.
pub fn next_tick(view: Option<StreamView<'_>>) -> Tick {
    view.and_then(|view| view.next_tick()).unwrap_or(Tick(1))
}

/// The start of `subend` on `pubend` given the barrier's `sigma` (or a late start): never
/// below [`Engine::start_floor`], which also keeps a broker restarted since from promising
/// ticks its earlier life acknowledged upstream (its ack lease).
pub fn confirmed_start<M: Matcher>(engine: &Engine<M>, pubend: PubendId, subend: SubendId, sigma: Tick) -> Tick {
    engine.start_floor(pubend, subend).map_or(sigma, |floor| sigma.max(floor))
}

/// The start of a subscription confirmed at `at` (this broker's clock) on a pubend its barrier
/// did not report: [`LATE_PUBEND_MARGIN_MS`] before the confirmation, as ticks. A broker that
/// started at `empty_since` on an empty data directory has no ack leases
/// ([`Engine::start_floor`]) to keep it above what an earlier life may have acknowledged
/// upstream, so it starts no lower than its own start time: that life ended before it, on
/// clocks that agree within the time a restart takes. Nothing from before this broker existed
/// is owed to a subscription made here. The broker's driver and the simulator both start late
/// pubends with it, then raise the result to [`confirmed_start`].
pub fn late_start<M: Matcher>(engine: &Engine<M>, at: Millis, empty_since: Option<Millis>) -> Tick {
    let settings = engine.settings();
    let late = Tick(settings.ticks(at.0.saturating_sub(LATE_PUBEND_MARGIN_MS)).max(1));
    empty_since.map_or(late, |since| late.max(Tick(settings.ticks(since.0))))
}

/// Whether a subscription may start late on a pubend its barrier did not report, given the
/// pubend's route here (`None`: no route fed). Only when the pubend's home is in view (the
/// route has an upstream): the barrier then passed its home before the pubend existed, and the
/// summaries there already route toward this broker. A home out of view never saw the
/// subscription's summary: what it publishes until the summary reaches it is answered as
/// silence toward this broker and released, so a start taken from the clock would promise
/// messages that are already gone (the simulator's census, full mode, seed 333 of 2026-12-01).
/// Such a pubend waits for a barrier that reaches its home, whose answer is the start.
pub fn may_start_late(route: Option<&StreamRoute>) -> bool {
    route.is_some_and(|route| route.upstream.is_some())
}
