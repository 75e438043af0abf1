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

use tidings_delivery::{Engine, Matcher, PubendId, StreamView, SubendId, Tick};

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
