//! A deterministic simulator of whole tidings broker networks: the production routing core
//! (`tidings-route`, with `tidings-matching`'s filters) on many brokers over a virtual clock
//! and a seeded, faulty network. Every run is a function of its seed.
//!
//! Map, in reading order:
//! - [`scenario`]: one run — converge, chaos with checks after every step, heal, check.
//! - [`net`]: the network: in-order links with per-frame delays, loud and silent cuts,
//!   partitions, crashes and restarts (soft state lost), stalls, subscription churn; `data`
//!   is its data path and `channel` its connections.
//! - [`check`]: ground truth and the invariants (at-most-once always; no-interest branches and
//!   exactly-once whenever the network is quiet; trees at checkpoints).
//! - [`barrier`]: the subscription-barrier property, judged at every confirmation.
//! - [`sweep`]: many seeds, shrinking a failure, the one-line replay command.
//! - [`topology`]: random networks and the seed networks under the repository's
//!   `topologies/`; [`topics`]: what clients publish and subscribe to; [`rng`]: SplitMix64.
//! - [`layer`]: the extension point for a second protocol layer; [`gd`]: guaranteed delivery
//!   (the `tidings-delivery` engine on every broker, invariants I1-I5 at every step).
//!
//! Extension point (the guaranteed-delivery core): implement [`layer::Layer`] — per-broker soft
//! state built by `start` over a durable `Store` (which `crash` trims to what was synced), and
//! `handle(node, store, now, input, &mut out)` + `next_deadline(node)` like any pure core.
//! The simulator hands a layer its own frames (on a channel that loses, duplicates, reorders
//! and delays them), every [`tidings_route::GdAction`] of its broker's router, and ticks;
//! a layer sends frames and feeds its router inputs (track pubends, answer tick requests).
//! [`net::Net`] and [`scenario::run`] are generic over the layer; [`layer::NoLayer`] runs
//! routing alone. Invariants of the layer (I1-I5) would be checked from `Net::nodes[..].layer`
//! after each step, next to the routing checks.
//!
//! What the network does to routing's own frames: delays them (in order per link, as TCP),
//! loses everything in flight on a cut or crash, and reorders freely across links. It does not
//! lose, duplicate or reorder frames inside one live connection: routing's summaries are
//! deltas over an in-order stream by design, and TCP does not do that either.

pub mod barrier;
mod channel;
pub mod check;
mod data;
pub mod gd;
pub mod layer;
pub mod net;
pub mod replica;
pub mod rng;
pub mod scenario;
pub mod sweep;
pub mod topics;
pub mod topology;

pub use layer::{Layer, NoLayer};
pub use net::Net;
pub use rng::Rng;
pub use scenario::{run, Coverage, Failure, Plan};
