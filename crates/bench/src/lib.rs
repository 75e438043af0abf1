//! The measurements behind `tidings bench`, with the methodology of the peer harness in
//! `../shared/peers/` so that figures compare with NATS's as ratios.
//!
//! [`throughput`] publishes one buffer as fast as the client accepts it and counts what every
//! subscriber received; [`latency`] publishes on a fixed schedule and records end-to-end latency
//! of every delivery. Both run the publisher and all subscribers in this process, each
//! subscriber on its own connection, against a broker in another process ([`target`]).

pub mod latency;
pub mod stats;
pub mod target;
pub mod throughput;
