//! `sizes` (seed 002, experiment 2): one publisher, one subscriber, message sizes 1000 to
//! 10000 B, 100,000 messages each; STn and RTn medians in msg/s and MB/s.

use super::seed002::{self, median_cell, Field, FloodChecks, FloodRow, NatsAt, Sites, RTN_NOTE, WINDOW};
use crate::peer::anchors::Point;
use crate::seeds;
use crate::suite::prelude::*;
use crate::target::Target;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Message sizes, bytes.
    pub sizes: Vec<usize>,
    /// Messages per size.
    pub count: u64,
}

impl Params {
    /// The seed's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        match scale {
            Scale::Full => Params { sizes: (1..=10).map(|k| k * 1000).collect(), count: 100_000 },
            Scale::Quick => Params { sizes: vec![1000, 5000, 10000], count: 10_000 },
        }
    }
}

/// The experiment.
pub struct Sizes(pub Params);

impl Experiment for Sizes {
    const ABOUT: About = About {
        name: "sizes",
        title: "1 publisher to 1 subscriber, throughput against message size",
        seeds: "seed 002",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![
            ("message sizes, B", list(&self.0.sizes)),
            ("messages per size", thousands(self.0.count as f64)),
            ("M (window of STn, RTn)", WINDOW.to_string()),
            ("median", "the seed's: sort, take the N/2-th, the smaller of two middle values".into()),
            ("broker", "one `tidings broker`, default settings, started fresh for every point".into()),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (self.0.sizes.len() * ctx.reps * ctx.sides()) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let mut table: Vec<FloodRow> = Vec::new();
        let mut checks = FloodChecks::default();
        for &size in &p.sizes {
            for rep in 1..=ctx.reps {
                let target = Target::spawn(&ctx.tidings, &[])?;
                let sites = Sites::one_broker(&target, 1)?;
                let point = (size, p.count, "bench.sizes".into());
                let m = seed002::measure(&sites, point, &mut checks, &format!("{size} B")).await?;
                seed002::rows(&mut table, size, rep, &m);
                let rt = median_cell(&table, "tidings", 1, size, "1", |r| r.rt_median_msg_s).unwrap_or(0.0);
                ctx.step(format!("{size} B: RTn median {} msg/s", thousands(rt)));
                // NATS right after, on a fresh server, at the same point and repetition.
                let nats = (ctx, format!("nats {size} B"));
                seed002::nats_rep(nats, &mut table, NatsAt::Fresh, (size, 1, p.count), (1, rep)).await?;
            }
        }
        for &size in &p.sizes {
            let point = Point { exp: "E1", label: "nats", size: size as u64, subs: 1, hops: 1 };
            seed002::anchor_rows(&mut table, ctx.peers.anchors.as_ref(), point);
        }
        Outcome::typed(&table, self.figure(&table), self.body(&table), checks.into_checks())
    }
}

impl Sizes {
    fn series(&self, table: &[FloodRow], system: &str, which: &str, column: Field) -> Vec<(f64, f64)> {
        let sizes = self.0.sizes.iter();
        sizes.filter_map(|&s| median_cell(table, system, 1, s, which, column).map(|v| (s as f64, v))).collect()
    }

    fn figure(&self, table: &[FloodRow]) -> Figure {
        let x = || Axis::linear("message size (B)");
        let panel = |title: &str, unit: &str, rt: Field, st: Option<Field>, peer: Field| {
            // (legend, mark, colour, system, subscriber row, column): what every panel draws.
            let mut series: Vec<Series> = [
                ("tidings RTn median (seed method)", Mark::Line, figure::TIDINGS, "tidings", "1", rt),
                ("tidings received / time (peer method)", Mark::Points, figure::TIDINGS_ALT, "tidings", "1", peer),
                ("NATS received / time (peer method)", Mark::Line, figure::NATS, "nats", "all", peer),
                ("NATS, committed anchor", Mark::Dashed, figure::NATS_ANCHOR, "nats-anchor", "all", peer),
            ]
            .into_iter()
            .map(|(label, mark, color, system, which, column)| {
                Series::new(label, mark, color, self.series(table, system, which, column))
            })
            .collect();
            if let Some(st) = st {
                let points = self.series(table, "tidings", "all", st);
                series.insert(1, Series::new("tidings STn median", Mark::Line, 5, points));
            }
            Panel::new(title, x(), Axis::log(unit), series)
        };
        let mut bytes =
            panel("bandwidth", "throughput (MB/s, payload)", |r| r.rt_median_mb_s, None, |r| r.received_mb_s);
        let ceiling = self.0.sizes.iter().map(|&s| (s as f64, seeds::SEED_002_CEILING_MB_S)).collect();
        bytes.series.push(Series::new("seed 002: its network ceiling, 35 MB/s", Mark::Dashed, figure::SEED, ceiling));
        let messages = panel(
            "messages",
            "throughput (msg/s)",
            |r| r.rt_median_msg_s,
            Some(|r| r.st_median_msg_s),
            |r| r.received_msg_s,
        );
        Figure { title: "1 → 1 throughput vs message size (seed 002)".into(), panels: vec![messages, bytes] }
    }

    fn body(&self, table: &[FloodRow]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "STn = M / (On − On−M) with On the time the n-th publish call returned, RTn = M / (In − In−M) \
             with In the time the subscriber's application received message n (M = {WINDOW}); the table \
             gives the seed's median of each series. *Received / time* is the peer harness's figure \
             (messages received ÷ time from the first publish to the last receipt), the one NATS is \
             measured with: the harness records no per-message times, so NATS has no STn/RTn. A \
             publish call returns once the message is in the client's write buffer (as `zmq_send` \
             does), so STn is the rate at which that buffer takes messages, held back only when \
             it is full.\n"
        );
        let _ = writeln!(
            out,
            "Beside NATS, both measured the peer harness's way (received ÷ time), msg/s, median \
             [min-max] of the repetitions (`!`: spread over 25 %):\n"
        );
        md_head(&mut out, &["size", "tidings", "NATS", "tidings / NATS", "NATS MB/s", "NATS, committed anchor"]);
        let cell = |v: Option<f64>| v.map(thousands).unwrap_or_else(|| "n/a".into());
        let mb = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "n/a".into());
        for &size in &self.0.sizes {
            let nats = |c: Field| median_cell(table, "nats", 1, size, "all", c);
            let received = |system: &str, which: &str| {
                seed002::range_cell(&seed002::values(table, system, 1, size, which, |r| r.received_msg_s))
            };
            let row = [format!("{size} B"), received("tidings", "1"), received("nats", "all")];
            let anchor = seed002::nats_cell(table, "nats-anchor", 1, size, |r| r.received_msg_s);
            md_row(
                &mut out,
                row.into_iter().chain([seed002::ratio_cell(table, 1, size), mb(nats(|r| r.received_mb_s)), anchor]),
            );
        }
        let _ = writeln!(
            out,
            "\nThe seed's method, tidings only (STn and RTn medians: **not comparable with NATS**, whose \
             harness records no per-message times, and the RTn median measures the bursts a socket \
             read hands over, above the loopback limit; see below):\n"
        );
        md_head(&mut out, &["size", "STn median", "RTn median", "RTn median MB/s"]);
        for &size in &self.0.sizes {
            let ours = |which: &str, c: Field| median_cell(table, "tidings", 1, size, which, c);
            let (st, rt) = (cell(ours("all", |r| r.st_median_msg_s)), cell(ours("1", |r| r.rt_median_msg_s)));
            md_row(&mut out, [format!("{size} B"), st, rt, mb(ours("1", |r| r.rt_median_mb_s))]);
        }
        let _ = writeln!(
            out,
            "\nSeed 002 kept no values for this figure; it reports that the receiving rate rose to \
             its network's ceiling of about {} MB/s (1 Gb/s NIC, ZeroMQ 3.2.2, Core 2 Duo VM) and \
             stayed there. Loopback has no such ceiling (22 Gbit/s measured by iperf3, \
             `bench/peers/results/`), so here the brokers and clients' CPU is the limit.",
            seeds::SEED_002_CEILING_MB_S
        );
        let _ = writeln!(out, "\n{RTN_NOTE}");
        out
    }
}
