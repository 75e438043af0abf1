//! `failures` (seed 001 §4.2, figure 6): guaranteed delivery in the Gryphon network of
//! `gryphon-fig3.toml` while the b1-s1 link is cut, b1 crashes and p1 (the pubends' broker)
//! crashes, each after a stall of what is about to fail, as the seed did so that the failure
//! loses data in flight. Four pubends at p1 publish 25 msg/s of 100 B each; guaranteed
//! subscribers at s1 and s2. The output is the seed's time series (latency at s1 and s2, nacks
//! and nack range at s1 and b1..b4, the publishers' acknowledgements), and the run fails if any
//! acknowledged publish was lost, repeated or reordered at a subscriber, or if a subscriber did
//! not recover after a fault.
//!
//! By default the publishers' cell has three brokers (`gryphon-fig3-replicated.toml`: p1, p2,
//! p3) holding each pubend's log as a Raft group (issue 40), and the publishers are given all
//! three: p1's crash is answered by a takeover, and the run also fails if the publishers did not
//! go on at a mate before p1 was back. `--unreplicated` runs the seed's own network, where they
//! wait for p1. Each repetition runs tidings then NATS; the publishers' crash is summed up
//! repetition by repetition ([`summary`]).

mod faults;
mod held;
mod nats;
mod plot;
mod recovery;
mod report;
mod run;
mod sampler;
mod series;
mod summary;
mod verify;

use std::path::PathBuf;
use std::time::Duration;

use crate::suite::{About, Context, Experiment, Outcome, Scale};

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// The topology file.
    pub topology: String,
    /// The pubends' broker.
    pub publisher_at: String,
    /// Every broker of the publishers' cell, theirs first: the publishers' server list.
    pub cell: Vec<String>,
    /// Every broker's `[storage] replicas` (`None`: the seed's network, p1 alone in its cell).
    pub replicas: Option<usize>,
    /// Guaranteed publishers (one pubend each).
    pub publishers: usize,
    /// Each publisher's rate, msg/s.
    pub rate: f64,
    /// Payload bytes.
    pub size: usize,
    /// Brokers with a guaranteed subscriber.
    pub subscribers: Vec<String>,
    /// Brokers whose nack counters are sampled.
    pub watched: Vec<String>,
    /// The brokers' liveness profile (`[guaranteed] liveness`).
    pub liveness: String,
    /// Publishing before the first fault.
    pub warmup: Duration,
    /// The stall before each failure.
    pub stall: Duration,
    /// How long the link stays cut.
    pub cut: Duration,
    /// How long a crashed broker stays down before it is restarted on its data directory.
    pub down: Duration,
    /// Quiet time after each fault.
    pub between: Duration,
    /// Bin of the time series and period of the metric scrapes.
    pub bin: Duration,
    /// How long the clients may take to finish after the schedule (each).
    pub drain: Duration,
    /// The latency baseline is taken over this long before each stall.
    pub baseline: Duration,
}

impl Params {
    /// The seed's setup, or the quick version (faults of 2 s).
    pub fn new(scale: Scale) -> Params {
        let s = Duration::from_secs;
        let (warmup, stall, fault, between, baseline) = match scale {
            Scale::Full => (s(10), Duration::from_millis(2500), s(10), s(20), s(5)),
            Scale::Quick => (s(3), s(1), s(2), s(5), s(2)),
        };
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Params {
            topology: "gryphon-fig3-replicated.toml".into(),
            publisher_at: "p1".into(),
            cell: names(&["p1", "p2", "p3"]),
            replicas: Some(3),
            publishers: 4,
            rate: 25.0,
            size: 100,
            subscribers: names(&["s1", "s2"]),
            watched: names(&["s1", "s2", "b1", "b2", "b3", "b4"]),
            liveness: "seed001".into(),
            warmup,
            stall,
            cut: fault,
            down: fault,
            between,
            bin: Duration::from_millis(100),
            drain: s(30),
            baseline,
        }
    }

    /// The seed's own network: p1 alone in its cell, nothing to take its pubends over.
    pub fn unreplicated(&mut self) {
        self.topology = "gryphon-fig3.toml".into();
        self.cell = vec![self.publisher_at.clone()];
        self.replicas = None;
    }

    /// How long the fault schedule (and so the publishing) lasts.
    pub fn schedule(&self) -> Duration {
        self.warmup + (self.stall + self.cut.max(self.down) + self.between) * faults::steps().len() as u32
    }
}

/// The experiment.
pub struct Failures(pub Params);

impl Experiment for Failures {
    const ABOUT: About = About {
        name: "failures",
        title: "guaranteed delivery through a link cut and broker crashes",
        seeds: "seed 001, §4.2 and figure 6",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let secs = |d: Duration| format!("{} s", d.as_secs_f64());
        vec![
            ("network", format!("`{}`, started by `tidings net up --faults`", p.topology)),
            ("publishers", format!("{} guaranteed pubends at {}, {} msg/s of {} B each, given `--server {}`", p.publishers, p.publisher_at, p.rate, p.size, p.cell.join(","))),
            ("replication", match p.replicas {
                Some(n) => format!("`[storage] replicas = {n}`: each pubend's log a Raft group on {}", p.cell.join(", ")),
                None => format!("none: {} alone in its cell", p.publisher_at),
            }),
            ("subscribers", format!("guaranteed, at {}, to `failures.>`", p.subscribers.join(" and "))),
            ("liveness", format!("`[guaranteed] liveness = \"{}\"`: GCT 200 ms, NRT 600 ms, AET 10 s, DCT infinite", p.liveness)),
            ("faults", format!("after {}: b1-s1 link stalled then cut for {}; b1 stalled then SIGKILLed, restarted on its data after {}; p1 the same", secs(p.warmup), secs(p.cut), secs(p.down))),
            ("stall before each failure", secs(p.stall)),
            ("quiet time after each fault", secs(p.between)),
            ("time series", format!("{} ms bins; nacks from `/metrics` of {} every bin", p.bin.as_millis(), p.watched.join(", "))),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (2 * ctx.reps * (1 + ctx.peers.tools().is_some() as usize)) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut reps = Vec::new();
        for rep in 1..=ctx.reps {
            let r = run::run(ctx, &self.0, &logs(ctx, rep)).await?;
            let peer = match ctx.peers.tools() {
                Some(tools) => Some(nats::run(ctx, tools, &self.0, &logs(ctx, rep)).await),
                None => None,
            };
            reps.push((r, peer));
        }
        let (outcome, takeover) = report::outcome(&self.0, &reps)?;
        std::fs::write(ctx.out.join("failures-takeover.csv"), takeover.to_csv())?;
        Ok(outcome)
    }
}

/// Where the logs of repetition `rep` are kept: `failures-logs/` for the first, as before
/// repetitions, `failures-logs/repN/` for the others.
fn logs(ctx: &Context, rep: usize) -> PathBuf {
    match rep {
        1 => ctx.out.join("failures-logs"),
        n => ctx.out.join("failures-logs").join(format!("rep{n}")),
    }
}
