//! The tidings broker: the async shell around the pure cores.
//!
//! Sockets, timers and tasks live here; what a frame means is decided by [`session`] and
//! [`dispatch`] using the `wire` and `matching` crates. Start at [`server::start`], which
//! binds the listeners of a [`config::Config`] and spawns [`tcp`], [`udp`] and [`admin`].
//! Each subscriber connection drains a bounded [`outbox`], so a slow subscriber costs only
//! itself.

pub mod admin;
pub mod config;
pub mod dispatch;
pub mod metrics;
pub mod outbox;
pub mod server;
pub mod session;
pub mod tcp;
pub mod udp;

pub use config::{Config, OverflowPolicy, DEFAULT_ADMIN_PORT, DEFAULT_PORT};
pub use server::{start, BoundAddresses, Running, StartError};
