//! Guaranteed delivery in the simulator: a production `tidings_delivery` engine beside every
//! router, on the same virtual clock, network and crash model, with the invariants of
//! gd-protocol §10 judged at every step.
//!
//! Map: [`layer`] drives one broker's engine and store (the [`crate::Layer`] implementation;
//! `actions` carries out and judges what the engine asks, `relay` carries its frames);
//! [`disk`] is its data directory: the real pubend log (`tidings-store`, stepped) on an
//! in-memory file system, crashed as a process crash, a power loss or an empty restart, and
//! `recovery` judges what the reopened log recovered; store actions, reads and completions
//! cross with the broker's own journal code (`tidings_node::journal`);
//! [`matcher`] answers the engine's filter questions as the broker knows them (child edges
//! from its router's vouched summaries, by the broker's `tidings_node::edges`, subends from
//! the broker's own local index, `tidings_node::local`);
//! [`world`] is the ground truth (durable log per pubend = Expected) and the checks;
//! [`run`] is one run: workload, chaos, healing, the final exactly-once check (its routes are
//! fed by `routes`, its steps drawn by `chaos`, its bundles thinned by `bundles` in
//! [`Mode::CELLS`]); `measure` holds the nack-consolidation measurement. `durable` is the
//! durable subscribers' shell at their broker: their checkpoints are the broker's own
//! bookkeeping (`tidings_node::durables`: batched writes one at a time, written at once when a
//! client leaves, fed to the core only once durable, moved over unmatched ticks, re-attached
//! after a restart in the broker's order); `shb` is the driver's side of them (clients away
//! and back, crashes of their broker at any moment). A barrier's start is what the broker
//! answers too (`tidings_node::starts`: the stream's next tick, raised to its floor), and a
//! pubend the barrier did not report starts as at the broker: from the clock when its home is
//! in view, with an empty directory's floor; otherwise at a later barrier.
//!
//! Still modelled, with why: the durable store is the world's checkpoint map (it survives
//! crashes as the broker's redb file does; its writes land after a seeded delay and never
//! fail, so the shared retry path is unit-tested in `tidings-node`, not run here); a durable
//! subscriber's start is stored at once when its barrier confirms (the broker writes it with
//! the next batch and, after a crash before that, restarts the stream from the
//! subscription's creation time, a wall-clock rule the simulator does not have); names,
//! claims and the client's outbox and acknowledgements are seeded delays, not sessions.

mod actions;
mod bundles;
mod chaos;
mod cursor;
pub mod disk;
mod durable;
pub mod layer;
pub mod matcher;
mod measure;
mod recovery;
mod relay;
mod routes;
pub mod run;
mod shb;
#[cfg(test)]
mod tests;
pub mod world;

pub use measure::measure_blackout;
pub use run::{run_gd, run_gd_with, Mode, CLOCK_SPREAD_MS};
pub use world::Stats;

use tidings_delivery::Settings;

/// The engines' settings in the simulator: the protocol's timers scaled to the simulated
/// network (frames take up to 60 ms, heartbeats 100 ms), so repair happens within a run.
pub fn settings() -> Settings {
    Settings {
        gap_curiosity_ms: 20,
        nack_repetition_initial_ms: 80,
        nack_repetition_min_ms: 40,
        nack_repetition_max_ms: 2000,
        ack_expected_ms: 200,
        ack_expected_max_ms: 2000,
        delay_curiosity_ms: Some(300),
        silence_ms: 50,
        ack_propagation_ms: 20,
        release_propagation_ms: 50,
        requested_forgetting_ms: 150,
        lease_chunk_ms: 500,
        // Longer than any partition of a run (faults heal at the end), well inside SETTLE_MS.
        departed_retention_ms: Some(5_000),
        // The simulated disk keeps them (`Disk::ack_leases`), as the broker's durable store.
        ack_leases: true,
        // The broker serves catch-ups by a cursor; `cursor` models it.
        serve_orders: true,
        ..Settings::default()
    }
}
