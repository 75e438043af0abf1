//! The routing core of tidings: which brokers a message travels to, along which links.
//!
//! Pure and deterministic: no tokio, sockets, clocks, threads, random sources or file I/O.
//! Time comes in as [`Millis`], randomness as a seed, and every map whose order can reach an
//! output is a `BTreeMap`, so a simulated run is a function of its seed.
//!
//! Map of the crate, in reading order:
//! - [`topology`] parses and validates topology files (brokers, cells, links) for the launcher.
//! - [`Router`] (in `router/`) is one broker's state machine: feed it [`Input`]s with
//!   [`Router::handle`], carry out the [`Action`]s, and ask [`Router::route`] per data message.
//! - `link_state`: adverts of up links flooded to every broker, and the graph they give.
//! - `tree`: one shortest-path tree over cells per publishing cell, with fixed tie-breaks.
//! - `summary`: per-link, per-tree interest summaries and the deltas that keep them in sync.
//! - `rendezvous`: the pinned hash that picks one link of a bundle per pubend.
//! - `liveness`: heartbeat timing, missed-heartbeat verdicts and reconnect backoff.
//! - [`filter`]: the [`Filter`] trait routing is generic over, and covering.
//!
//! Why messages arrive exactly once: a message travels down one tree; every hop carries the
//! [`ViewId`] it was routed under and a receiver with another view drops it, so even while
//! routes change no message mixes two trees. In each cell exactly one broker (the entry) acts
//! for the cell, and sideways copies are never forwarded sideways again.

pub mod filter;
pub mod topology;

mod error;
mod link_state;
mod liveness;
mod message;
mod names;
mod rendezvous;
mod router;
mod summary;
mod tree;

pub use error::{CloseReason, RouteError};
pub use filter::Filter;
pub use link_state::{AdvertisedLink, LinkStateAdvert};
pub use liveness::{LivenessSettings, ReconnectBackoff};
pub use message::{Arrival, DataHeader, DataSend, DropReason, Forwarding, Hop, LocalDelivery, PeerMessage};
pub use names::{BrokerName, CellName, Incarnation, Millis, PubendId, TreeId, ViewId};
pub use router::{
    Action, ChildSnapshot, Input, LinkSnapshot, Router, RouterMetrics, RouterSettings, RouterSnapshot, ScopeSnapshot,
    TreeSnapshot,
};
pub use summary::{Scope, SummaryDelta};
pub use topology::Topology;
