//! `proxy` (seed 002, experiments 4 and 5): the publisher on one broker, 1, 5, 7 and 10
//! subscribers on a second (`two-brokers.toml`), 2000 B: what the hop through a second broker
//! costs, as the seed measured a ZeroMQ proxy.

use std::time::Duration;

use super::seed002::{self, median_cell, Field, FloodChecks, FloodRow, NatsAt, Sites, RTN_NOTE, WINDOW};
use super::Tally;
use crate::network::Network;
use crate::peer::{anchors::Point, PeerServer};
use crate::seeds;
use crate::suite::prelude::*;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Subscriber counts on the second broker.
    pub subscribers: Vec<usize>,
    /// Message size, bytes.
    pub size: usize,
    /// Messages per point.
    pub count: u64,
    /// Topology file name under the topologies directory.
    pub topology: String,
}

impl Params {
    /// The seed's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let (subscribers, count) = match scale {
            Scale::Full => (vec![1, 5, 7, 10], 100_000),
            Scale::Quick => (vec![1, 5], 10_000),
        };
        Params { subscribers, size: 2000, count, topology: "two-brokers.toml".into() }
    }
}

/// The experiment.
pub struct Proxy(pub Params);

impl Experiment for Proxy {
    const ABOUT: About =
        About { name: "proxy", title: "1 publisher to N subscribers through a second broker", seeds: "seed 002" };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![
            ("topology", format!("`{}`: publisher at `phb`, subscribers at `shb`", self.0.topology)),
            ("subscribers on the second broker", list(&self.0.subscribers)),
            ("message size", format!("{} B", self.0.size)),
            ("messages per point", thousands(self.0.count as f64)),
            ("M (window of RTn)", WINDOW.to_string()),
            ("NATS", "a two-node cluster (route), publisher on node A, subscribers on node B".into()),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (self.0.subscribers.len() * ctx.reps * ctx.sides()) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let dir = ctx.scratch("proxy-net")?;
        let network =
            Network::up(&ctx.tidings, &ctx.topologies.join(&p.topology), &dir, Duration::from_secs(60)).await?;
        let (phb, shb) = (network.broker("phb")?, network.broker("shb")?);
        let mut table: Vec<FloodRow> = Vec::new();
        let mut checks = FloodChecks::default();
        let mut link = Tally::new("each message crossed the broker link once, whatever the subscribers behind it");
        // NATS's two-node cluster serves every point, as the tidings network does; each point and
        // repetition runs on NATS right after tidings.
        let nats_dir = ctx.scratch("proxy-nats")?;
        let cluster = match ctx.peers.tools() {
            Some(tools) => Some(tokio::task::block_in_place(|| PeerServer::cluster(tools, &nats_dir))?),
            None => None,
        };
        for &n in &p.subscribers {
            for rep in 1..=ctx.reps {
                let sites = Sites {
                    publisher: (phb.tcp.clone(), phb.admin_addr()?),
                    subscribers: vec![shb.tcp.clone(); n],
                    subscriber_admins: vec![shb.admin_addr()?],
                    all_admins: network.admins()?,
                };
                let point = (p.size, p.count, format!("bench.proxy.{n}.{rep}"));
                let m = seed002::measure(&sites, point, &mut checks, &format!("{n} subscribers")).await?;
                let once = m.link_messages == m.run.sent as f64;
                link.record(
                    once,
                    format!("{n} subscribers: {} link messages for {} sent", m.link_messages, m.run.sent),
                );
                seed002::rows(&mut table, p.size, rep, &m);
                ctx.step(format!("{n} subscribers: aggregate {} msg/s", thousands(m.run.aggregate_rate())));
                if let Some(cluster) = &cluster {
                    let (nats, at) =
                        ((ctx, format!("nats {n} subscribers")), NatsAt::Running(&cluster.urls[0], &cluster.urls[1]));
                    seed002::nats_rep(nats, &mut table, at, (p.size, n, p.count), (2, rep)).await?;
                }
            }
        }
        drop(network);
        drop(cluster);
        for &n in &p.subscribers {
            let point = Point { exp: "E4", label: "nats-cluster", size: p.size as u64, subs: n as u64, hops: 2 };
            seed002::anchor_rows(&mut table, ctx.peers.anchors.as_ref(), point);
        }
        let mut checks = checks.into_checks();
        checks.push(link.check());
        Outcome::typed(&table, self.figure(&table), self.body(&table), checks)
    }
}

impl Proxy {
    fn cell(&self, table: &[FloodRow], system: &str, n: usize, which: &str, column: Field) -> Option<f64> {
        median_cell(table, system, n, self.0.size, which, column)
    }

    /// The median over subscribers of their RTn medians at `n`.
    fn per_subscriber_rt(&self, table: &[FloodRow], n: usize) -> Option<f64> {
        let rt = |i: usize| self.cell(table, "tidings", n, &i.to_string(), |r| r.rt_median_msg_s);
        crate::stats::median_if_any(&(1..=n).filter_map(rt).collect::<Vec<_>>())
    }

    fn figure(&self, table: &[FloodRow]) -> Figure {
        let ns = &self.0.subscribers;
        let line = |system: &str, column: Field| -> Vec<(f64, f64)> {
            ns.iter().filter_map(|&n| self.cell(table, system, n, "all", column).map(|v| (n as f64, v))).collect()
        };
        let rt: Vec<(f64, f64)> =
            ns.iter().filter_map(|&n| self.per_subscriber_rt(table, n).map(|v| (n as f64, v))).collect();
        let seed = |f: fn(&seeds::RateRange) -> Option<(f64, f64)>| {
            seeds::SEED_002_PROXY.iter().filter_map(|r| f(r).map(|(lo, hi)| (r.subscribers as f64, lo, hi))).collect()
        };
        let x = || Axis::linear("subscribers on the second broker");
        let y = || Axis::log("throughput (msg/s)");
        let median_sub: Field = |r| r.per_sub_median_msg_s;
        let (ours, theirs) = (line("tidings", median_sub), line("nats", median_sub));
        let per_subscriber = vec![
            Series::new("tidings RTn median", Mark::Line, figure::TIDINGS, rt),
            Series::new("tidings received / time (median sub)", Mark::Points, figure::TIDINGS_ALT, ours),
            Series::new("NATS cluster, received / time (median sub)", Mark::Line, figure::NATS, theirs),
            Series::ranges("seed 002 via ZeroMQ proxy", figure::SEED, seed(|r| Some(r.per_subscriber))),
        ];
        // (legend, mark, colour, system, column) of each line over the subscriber counts.
        let all: [(&str, Mark, usize, &str, Field); 4] = [
            ("tidings, sum of RTn medians", Mark::Line, figure::TIDINGS, "tidings", |r| r.rt_median_msg_s),
            ("tidings received / time", Mark::Points, figure::TIDINGS_ALT, "tidings", |r| r.received_msg_s),
            ("NATS cluster, received / time", Mark::Line, figure::NATS, "nats", |r| r.received_msg_s),
            ("NATS cluster, committed anchor", Mark::Dashed, figure::NATS_ANCHOR, "nats-anchor", |r| r.received_msg_s),
        ];
        let drawn =
            all.map(|(label, mark, color, system, column)| Series::new(label, mark, color, line(system, column)));
        let mut all = drawn.to_vec();
        all.push(Series::ranges("seed 002 via ZeroMQ proxy", figure::SEED, seed(|r| r.aggregate)));
        Figure {
            title: "Through a second broker, 2000 B (seed 002)".into(),
            panels: vec![
                Panel::new("per subscriber", x(), y(), per_subscriber),
                Panel::new("all subscribers", x(), y(), all),
            ],
        }
    }

    fn body(&self, table: &[FloodRow]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Per subscriber: the median over subscribers of each one's RTn median (M = {WINDOW}); all: the \
             sum of the RTn medians. *Received / time* is the peer harness's figure, the one NATS \
             (two-node cluster) is measured with.\n"
        );
        let size = self.0.size;
        let _ = writeln!(
            out,
            "Beside NATS, both measured the peer harness's way (received ÷ time, all subscribers), \
             msg/s, median [min-max] of the repetitions (`!`: spread over 25 %):\n"
        );
        md_head(&mut out, &["subscribers", "tidings", "NATS", "tidings / NATS", "NATS, committed anchor"]);
        for &n in &self.0.subscribers {
            let received =
                |system| seed002::range_cell(&seed002::values(table, system, n, size, "all", |r| r.received_msg_s));
            let anchor = seed002::nats_cell(table, "nats-anchor", n, size, |r| r.received_msg_s);
            md_row(
                &mut out,
                [n.to_string(), received("tidings"), received("nats"), seed002::ratio_cell(table, n, size), anchor],
            );
        }
        let _ = writeln!(
            out,
            "\nThe seed's method beside the seed's figures, tidings only (RTn medians: **not comparable \
             with NATS**, whose harness records no per-message times; see below):\n"
        );
        md_head(
            &mut out,
            &["subscribers", "tidings RTn per sub", "tidings RTn all", "seed 002 per sub", "seed 002 all"],
        );
        let fmt = |v: Option<f64>| v.map(thousands).unwrap_or_else(|| "n/a".into());
        for &n in &self.0.subscribers {
            let seed = seeds::SEED_002_PROXY.iter().find(|r| r.subscribers == n);
            let range = |r: Option<(f64, f64)>| {
                r.map(|(lo, hi)| format!("{} - {}", thousands(lo), thousands(hi))).unwrap_or_else(|| "-".into())
            };
            let ours = [
                fmt(self.per_subscriber_rt(table, n)),
                fmt(self.cell(table, "tidings", n, "all", |r| r.rt_median_msg_s)),
            ];
            let seed = [range(seed.map(|r| r.per_subscriber)), range(seed.and_then(|r| r.aggregate))];
            md_row(&mut out, [n.to_string()].into_iter().chain(ours).chain(seed));
        }
        let _ = writeln!(out, "\nSeed 002's figures are ranges read off its plots (msg/s); it used one ZeroMQ XSUB/XPUB proxy on a 35 MB/s LAN.");
        let _ = writeln!(out, "\n{RTN_NOTE}");
        out
    }
}
