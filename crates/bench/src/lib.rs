//! The experiment suite behind `tidings bench`: the seeds' experiments rerun against real broker
//! processes through the client library, with the brokers' metrics read back, written as CSV,
//! plots (PNG and SVG) and a Markdown report.
//!
//! # Where to start reading
//!
//! - [`suite`]: the frame. An [`Experiment`](suite::Experiment) runs against a
//!   [`Context`](suite::Context) and returns an [`Outcome`](suite::Outcome): a
//!   [`Table`](suite::table::Table) (CSV), a [`Figure`](suite::figure::Figure) (PNG, SVG), a
//!   Markdown body and [`Check`](suite::Check)s; the [`runner`](suite::runner) writes them and
//!   `report.md`.
//! - [`experiments`]: one module per seed experiment (`subscribers`, `sizes`, `fanout`,
//!   `proxy`, `matching`, `hops`), with the seeds' own figures in [`seeds`], and `network`
//!   (issue 4: what broker links cost, and faults).
//! - The measurement engines: [`latency`] (fixed rate, many subscribers), [`flood`] (seed
//!   002's STn/RTn method), [`experiments::content`] (seed 004's tag=value events).
//! - What experiments run against: [`target`] (one broker), [`network`] (`tidings net up`),
//!   [`metrics`] (Prometheus text), [`peer`] (NATS through the peer harness, or its committed
//!   anchors), [`topology`] (the seed topology files), [`paths`] (where the shipped topologies
//!   and peer harness are).
//! - `tidings-nemesis` (its own crate): random, seeded fault schedules over real processes,
//!   every acknowledged publish checked against every subscriber's output (`tidings bench
//!   nemesis`), by the [`guarantee`] checker the failures experiment shares; both drive the
//!   command-line [`tools`] as client processes. That crate also holds the layer under both
//!   ([`network`], [`tools`], [`metrics`], [`topology`], [`paths`], [`parse`], the CSV
//!   [`table`](suite::table)), re-exported here under the same names.
//! - [`cli`]: the `tidings bench` command line (the `tidings` binary only forwards to it).
//!
//! # Layers
//!
//! The modules are layered, and `.ci/circles.py` keeps them so: [`cli`] on top, imported by no
//! other module; under it [`experiments`], which does not import `cli`; under those the rooms
//! they share: the frame [`suite`] (tables, figures, report), the engines, [`stats`], [`cpu`],
//! [`peer`]; under all of them the modules re-exported from `tidings-nemesis`, which cannot
//! import anything of this crate.
//!
//! This crate drives brokers from outside, through their client port, admin port and process;
//! it does not link the broker, and of the routing core it takes only the topology parser the
//! launcher uses.

pub mod acked;
pub mod busy;
pub mod catchup;
pub mod cell;
pub mod children;
pub mod cli;
pub mod cpu;
pub mod engine;
pub mod experiments;
pub mod flood;
pub mod latency;
pub mod mqtt;
pub mod peer;
pub mod queue;
pub mod request;
pub mod security;
pub mod seeds;
pub mod snmp;
pub mod stats;
pub mod suite;
pub mod takeover;
pub mod target;
pub mod throughput;

// The layer the experiments share with the nemesis lives in `tidings-nemesis` (so the nemesis
// need not depend on the bench); under the same names here, so the experiments read as before.
pub use tidings_nemesis::{guarantee, metrics, network, parse, paths, tools, topology};
