//! The tidings broker: the async shell around the pure cores.
//!
//! Sockets, timers and tasks live here; what a frame means is decided by [`session`] and
//! [`dispatch`] using the `wire` and `matching` crates. Start at [`server::start`], which
//! binds the listeners of a [`config::Config`] and spawns [`tcp`], [`udp`] and [`admin`].
//! Each subscriber connection drains a bounded [`outbox`], so a slow subscriber costs only
//! itself.
//!
//! Links to other brokers live in [`cluster`]: the link listener and diallers, the peer frame
//! codec, per-link bounded queues, and the route core (`tidings-route`) that decides where each
//! message goes. A published message is delivered locally by [`dispatch`] and offered to
//! [`cluster::Cluster::forward`]; a message from a peer goes the same two ways. Links speak the
//! binary peer frames of `tidings_wire::peer` and authenticate with the network's shared key
//! ([`cluster::auth`]). [`storage`] is the broker's locked data directory (its incarnation).
//! [`guaranteed`] serves guaranteed publishes and subscriptions: one driver task owns the
//! delivery core and the pubend log (under `<data dir>/pubends`).
//!
//! The modules are layered, and `.ci/circles.py` keeps them so: [`server`] alone is on top. It
//! builds the [`context::Context`] the session layer shares (sessions, [`tcp`], [`udp`],
//! [`admin`]) around the [`broker_core::BrokerCore`] every client protocol's sessions call
//! (subscribe, publish, acknowledge, durable), and the [`cluster::LinkContext`] the links share.
//! The cluster tells what guaranteed delivery must hear of as [`cluster::Event`]s on the
//! driver's inbox, handed to it at construction, and knows nothing of [`guaranteed`].

pub mod admin;
pub mod admission;
pub mod broker_core;
pub mod budget;
pub mod cluster;
pub mod config;
pub mod connz;
pub mod context;
pub mod dispatch;
pub mod exposition;
pub mod guaranteed;
use tidings_node::hush;
pub mod live;
pub mod liveness;
pub mod login;
pub mod membership;
pub mod metrics;
pub mod mqtt;
pub mod outbox;
pub mod process_metrics;
pub mod queue_groups;
mod read_buffer;
pub mod reserved;
pub mod retained;
pub mod security;
pub mod server;
pub mod session;
mod slice;
pub mod storage;
pub mod tcp;
pub mod tls;
pub mod udp;
mod udp_expiry;
mod udp_token;
pub mod web;

pub use config::{Config, OverflowPolicy, DEFAULT_ADMIN_PORT, DEFAULT_PORT};
pub use server::{start, BoundAddresses, Running, StartError};
