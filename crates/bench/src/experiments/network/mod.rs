//! `network` (issue 4's measurements): what a broker link costs and how the network behaves
//! under load and faults. Throughput of 2000 B messages through two brokers
//! (`two-brokers.toml`) against one, with every process's CPU time per message; latency at
//! 1000 msg/s through one and two brokers and along the 9-broker path of
//! `narada-22-sparse.toml`; the longest gap in deliveries when the bundle broker carrying
//! traffic in `gryphon-fig3.toml` crashes or stalls; the cost of a subscription at a linked
//! broker. NATS (one node against a two-node cluster) beside it, measured now or anchored.

mod cpu;
mod fault;
mod figure;
mod nats;
mod path;
mod present;
mod tput;

use crate::suite::prelude::*;
use std::time::Duration;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Payload bytes (the peer harness's E4).
    pub size: usize,
    /// Throughput: publishing time per run...
    pub duration: Duration,
    /// ...or at most this many messages.
    pub max_messages: u64,
    /// Latency: publish rate, msg/s.
    pub rate: f64,
    /// Latency: publishing time per repetition.
    pub latency_duration: Duration,
    /// The two-broker topology (publisher's broker `phb`, subscribers' broker `shb`).
    pub two: String,
    /// The long path: topology, publisher's broker, measuring subscribers' brokers.
    pub path: (String, String, Vec<String>),
    /// The fault topology: publisher's broker, subscriber's broker, the bundle brokers between.
    pub fault: (String, String, String, Vec<String>),
    /// How long deliveries are watched after a fault.
    pub fault_window: Duration,
    /// Subscriptions made at the linked broker (in batches of 500).
    pub subscriptions: usize,
}

impl Params {
    /// Issue 4's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let (duration, latency_duration, fault_window, subscriptions) = match scale {
            Scale::Full => (Duration::from_secs(5), Duration::from_secs(5), Duration::from_secs(5), 2000),
            Scale::Quick => (Duration::from_secs(1), Duration::from_secs(1), Duration::from_secs(3), 500),
        };
        let measuring = ["n22", "n1", "n7", "n10"].map(String::from).to_vec();
        Params {
            size: 2000,
            duration,
            max_messages: 1_000_000,
            rate: 1000.0,
            latency_duration,
            two: "two-brokers.toml".into(),
            path: ("narada-22-sparse.toml".into(), "n22".into(), measuring),
            fault: ("gryphon-fig3.toml".into(), "p1".into(), "s1".into(), vec!["b1".into(), "b2".into()]),
            fault_window,
            subscriptions,
        }
    }

    fn latency_count(&self) -> u64 {
        (self.rate * self.latency_duration.as_secs_f64()).round() as u64
    }
}

/// The experiment.
pub struct Network(pub Params);

impl Experiment for Network {
    const ABOUT: About = About {
        name: "network",
        title: "throughput, latency and faults through broker links",
        seeds: "seed 001's networks",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let (secs, max, two) = (p.duration.as_secs_f64(), thousands(p.max_messages as f64), &p.two);
        let (rate, latency_secs) = (p.rate, p.latency_duration.as_secs_f64());
        let ((fault_net, publisher, subscriber, bundle), window) = (&p.fault, p.fault_window.as_secs_f64());
        let bundle = bundle.join(" or ");
        vec![
            ("message size", format!("{} B", p.size)),
            (
                "throughput",
                format!(
                    "1 subscriber, as fast as the client publishes for {secs} s (at most {max} messages); one broker \
                     and `{two}` (publisher at phb, subscriber at shb) in turn, repetitions interleaved"
                ),
            ),
            ("latency", format!("{rate} msg/s for {latency_secs} s, 1 subscriber per broker measured")),
            ("long path", format!("`{}`, publisher at {}, subscribers at {}", p.path.0, p.path.1, list(&p.path.2))),
            (
                "faults",
                format!(
                    "`{fault_net}`, publisher at {publisher} every 1 ms, subscriber at {subscriber}; SIGKILL, then \
                     (fresh network) SIGSTOP, of the bundle broker ({bundle}) carrying traffic; deliveries watched \
                     for {window} s"
                ),
            ),
            (
                "subscriptions at a linked broker",
                format!("{} (batches of 500), at shb and at one broker", p.subscriptions),
            ),
            ("NATS", "one node against a two-node cluster (route), through the peer harness, as its E4".into()),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        let reps = ctx.reps as u64;
        // NATS: 2 throughput runs per repetition, 2 latency points.
        let nats = if ctx.peers.tools().is_some() { 2 * reps + 2 } else { 0 };
        // Throughput runs (2 per repetition), latency and path repetitions, 2 faults, subscriptions.
        4 * reps + 3 + nats
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut table: Vec<NetRow> = Vec::new();
        let mut checks = Checks::default();
        // Throughput repetitions run tidings then NATS, repetition by repetition.
        let servers = nats::start(ctx)?;
        tput::tidings(ctx, &self.0, &mut table, &mut checks, servers.as_ref()).await?;
        if let Some(servers) = servers {
            nats::finish(ctx, &self.0, servers, &mut table).await?;
        }
        nats::anchored(ctx, &self.0, &mut table)?;
        path::long(ctx, &self.0, &mut table, &mut checks).await?;
        fault::run(ctx, &self.0, &mut table, &mut checks).await?;
        Outcome::typed(&table, present::figure(&table), present::body(&self.0, &table), checks.into_checks())
    }
}

super::checks! {
    /// The internal checks.
    pub(super) struct Checks {
        accounted: "nothing lost on tidings in the throughput runs, or every loss counted (sent = received + \
                    link, slow-consumer and route drops)",
        link: "the flood never cut the phb→shb link (no link closed or re-established, the link up at both ends)",
        delivered: "every measured subscriber received every message at 1000 msg/s",
        resumed: "deliveries resumed after each fault (the network re-converged around it)",
        fault_losses: "every message lost at a fault is accounted: in the fault window (the one run of losses \
                       from the fault to the next delivery) or counted as dropped by a surviving broker",
    }
}

/// One measured quantity: the typed row behind the CSV, the plot and the report (one quantity
/// a row, since the parts measure different things).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct NetRow {
    /// `throughput`, `latency`, `path`, `reconvergence` or `subscribe`.
    pub part: String,
    /// `tidings`, `nats` or `nats-anchor`.
    pub system: String,
    /// `this session` or `committed anchor`.
    pub source: String,
    /// What ran: `one broker`, `two brokers`, a broker's name, a fault...
    pub setup: String,
    /// Brokers between publisher and subscriber.
    pub brokers: usize,
    /// Repetition (in `subscribe`, the batch of 500 subscriptions).
    pub rep: usize,
    /// What was measured (`received_msg_s`, `p50_us`, ...).
    pub quantity: String,
    /// Its value.
    pub value: f64,
}

/// Where a row belongs: everything but the quantity and its value.
#[derive(Debug, Clone)]
pub(super) struct Key {
    part: &'static str,
    system: &'static str,
    setup: String,
    brokers: usize,
    rep: usize,
}

impl Key {
    fn new(part: &'static str, system: &'static str, setup: impl Into<String>, brokers: usize, rep: usize) -> Key {
        Key { part, system, setup: setup.into(), brokers, rep }
    }

    /// Adds one row.
    fn put(&self, table: &mut Vec<NetRow>, quantity: &str, value: f64) {
        let source = if self.system == ANCHOR { "committed anchor" } else { "this session" };
        table.push(NetRow {
            part: self.part.into(),
            system: self.system.into(),
            source: source.into(),
            setup: self.setup.clone(),
            brokers: self.brokers,
            rep: self.rep,
            quantity: quantity.into(),
            value,
        });
    }
}

/// Systems, as the `system` column names them.
const TIDINGS: &str = "tidings";
const NATS: &str = "nats";
const ANCHOR: &str = "nats-anchor";

/// The median over repetitions of `quantity` in `part` for `system` with `brokers`.
fn median(table: &[NetRow], part: &str, system: &str, brokers: usize, quantity: &str) -> Option<f64> {
    let rows = table.iter().filter(|r| r.part == part && r.system == system && r.brokers == brokers);
    let values: Vec<f64> = rows.filter(|r| r.quantity == quantity).map(|r| r.value).filter(|v| v.is_finite()).collect();
    crate::stats::median_if_any(&values)
}

/// A measured figure as text, `n/a` when it is missing.
fn show(value: Option<f64>, unit: fn(f64) -> String) -> String {
    value.map(unit).unwrap_or_else(|| "n/a".into())
}

/// A latency cell: `micros` of the value.
fn us(value: Option<f64>) -> String {
    show(value, micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_are_taken_over_repetitions_of_one_point() {
        let mut t = Vec::new();
        for (rep, v) in [(1, 10.0), (2, 30.0), (3, 20.0)] {
            Key::new("throughput", TIDINGS, "two brokers", 2, rep).put(&mut t, "received_msg_s", v);
        }
        Key::new("throughput", NATS, "cluster", 2, 1).put(&mut t, "received_msg_s", 99.0);
        Key::new("throughput", ANCHOR, "cluster", 2, 1).put(&mut t, "received_msg_s", 98.0);
        assert_eq!(median(&t, "throughput", TIDINGS, 2, "received_msg_s"), Some(20.0));
        assert_eq!(median(&t, "throughput", TIDINGS, 1, "received_msg_s"), None);
        assert_eq!(t[4].source, "committed anchor");
        assert_eq!(crate::suite::table::Table::typed(&t).unwrap().rows().len(), 5);
        assert_eq!(us(None), "n/a");
    }

    #[test]
    fn quick_runs_are_short() {
        let p = Params::new(Scale::Quick);
        assert!(p.duration <= Duration::from_secs(1) && p.latency_count() <= 1000);
    }
}
