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
//! - [`nemesis`]: random, seeded fault schedules over real processes, every acknowledged
//!   publish checked against every subscriber's output (`tidings bench nemesis`), by the
//!   [`guarantee`] checker the failures experiment shares; both drive the command-line
//!   [`tools`] as client processes.
//! - [`cli`]: the `tidings bench` command line (the `tidings` binary only forwards to it).
//!
//! # Layers
//!
//! The modules are layered, and `.ci/circles.py` keeps them so: [`cli`] on top, imported by no
//! other module; under it [`experiments`] and [`nemesis`], which import neither each other nor
//! `cli`; under those the rooms they share: the frame [`suite`] (tables, figures, report), the
//! engines, [`stats`], [`cpu`], [`peer`], [`network`], [`tools`], [`guarantee`], [`parse`].
//!
//! This crate drives brokers from outside, through their client port, admin port and process;
//! it does not link the broker, and of the routing core it takes only the topology parser the
//! launcher uses (the nemesis takes only the simulator's seeded generator and the matching
//! crate's selector evaluation).

pub mod acked;
pub mod catchup;
pub mod cli;
pub mod cpu;
pub mod engine;
pub mod experiments;
pub mod flood;
pub mod guarantee;
pub mod latency;
pub mod metrics;
pub mod nemesis;
pub mod network;
pub mod parse;
pub mod paths;
pub mod peer;
pub mod queue;
pub mod request;
pub mod seeds;
pub mod snmp;
pub mod stats;
pub mod suite;
pub mod target;
pub mod throughput;
pub mod tools;
pub mod topology;
