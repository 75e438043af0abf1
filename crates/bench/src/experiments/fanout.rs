//! `fanout` (seed 002, experiment 3): one publisher, ten subscribers, 2000 B; RTn per
//! subscriber and all together.

use super::seed002::{self, median_cell, Field, FloodChecks, FloodRow, NatsAt, Sites, RTN_NOTE, WINDOW};
use crate::peer::anchors::Point;
use crate::seeds::{self, RateRange};
use crate::stats::{block_medians, window_rates};
use crate::suite::prelude::*;
use crate::suite::text::thousands;
use crate::target::Target;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Subscribers.
    pub subscribers: usize,
    /// Message size, bytes.
    pub size: usize,
    /// Messages.
    pub count: u64,
}

impl Params {
    /// The seed's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let count = match scale {
            Scale::Full => 100_000,
            Scale::Quick => 10_000,
        };
        Params { subscribers: 10, size: 2000, count }
    }
}

/// The experiment.
pub struct Fanout(pub Params);

impl Experiment for Fanout {
    const ABOUT: About = About { name: "fanout", title: "1 publisher to 10 subscribers", seeds: "seed 002" };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![
            ("subscribers (each its own connection)", self.0.subscribers.to_string()),
            ("message size", format!("{} B", self.0.size)),
            ("messages", thousands(self.0.count as f64)),
            ("M (window of RTn)", WINDOW.to_string()),
            ("broker", "one `tidings broker`, default settings, fresh for every repetition".into()),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (ctx.reps * ctx.sides()) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let mut table: Vec<FloodRow> = Vec::new();
        let mut checks = FloodChecks::default();
        let mut traces = Traces::new();
        for rep in 1..=ctx.reps {
            let target = Target::spawn(&ctx.tidings, &[])?;
            let sites = Sites::one_broker(&target, p.subscribers)?;
            let point = (p.size, p.count, "bench.fanout".into());
            let m = seed002::measure(&sites, point, &mut checks, &format!("rep {rep}")).await?;
            seed002::rows(&mut table, p.size, rep, &m);
            let block = (p.count as usize / 50).max(WINDOW);
            traces = m.run.subscribers.iter().map(|s| block_medians(&window_rates(&s.times, WINDOW), block)).collect();
            ctx.step(format!("rep {rep}: aggregate {} msg/s", thousands(m.run.aggregate_rate())));
            // NATS right after, on a fresh server, at the same repetition.
            let (nats, point) = ((ctx, format!("nats rep {rep}")), (p.size, p.subscribers, p.count));
            seed002::nats_rep(nats, &mut table, NatsAt::Fresh, point, (1, rep)).await?;
        }
        let point = Point { exp: "E2", label: "nats", size: p.size as u64, subs: p.subscribers as u64, hops: 1 };
        seed002::anchor_rows(&mut table, ctx.peers.anchors.as_ref(), point);
        Outcome::typed(&table, self.figure(&table, &traces), self.body(&table), checks.into_checks())
    }
}

/// RTn block medians of each subscriber in the last repetition, for the plot.
type Traces = Vec<Vec<(usize, f64)>>;

impl Fanout {
    fn cell(&self, table: &[FloodRow], system: &str, which: &str, column: Field) -> Option<f64> {
        median_cell(table, system, self.0.subscribers, self.0.size, which, column)
    }

    fn figure(&self, table: &[FloodRow], traces: &Traces) -> Figure {
        let range = seeds::SEED_002_FANOUT_10;
        // The first and the last subscriber: all ten drawn over each other hide one another.
        let shown = [(0, figure::TIDINGS), (traces.len().saturating_sub(1), figure::TIDINGS_ALT)];
        let mut over_n: Vec<Series> = shown
            .iter()
            .filter_map(|&(i, color)| {
                let t = traces.get(i)?;
                let label = format!("tidings RTn, subscriber {} (medians of blocks of n)", i + 1);
                Some(Series::new(label, Mark::Line, color, t.iter().map(|&(n, v)| (n as f64, v)).collect()))
            })
            .collect();
        let last = traces.iter().flatten().map(|&(n, _)| n as f64).fold(0.0, f64::max);
        for (bound, label) in
            [(range.per_subscriber.0, "seed 002: 500-3000 msg/s per subscriber"), (range.per_subscriber.1, "")]
        {
            over_n.push(Series::new(label, Mark::Dashed, figure::SEED, vec![(0.0, bound), (last, bound)]));
        }
        let subs: Vec<f64> = (1..=self.0.subscribers).map(|i| i as f64).collect();
        let per_sub = |system: &str, column: Field| {
            subs.iter().filter_map(|&i| self.cell(table, system, &format!("{i}"), column).map(|v| (i, v))).collect()
        };
        let flat = |v: Option<f64>| v.map(|v| subs.iter().map(|&i| (i, v)).collect()).unwrap_or_default();
        let median_sub = |system| flat(self.cell(table, system, "all", |r| r.per_sub_median_msg_s));
        let received = per_sub("tidings", |r| r.received_msg_s);
        let per_subscriber = vec![
            Series::new("tidings RTn median", Mark::Line, figure::TIDINGS, per_sub("tidings", |r| r.rt_median_msg_s)),
            Series::new("tidings received / time", Mark::Points, figure::TIDINGS_ALT, received),
            Series::new("NATS median subscriber, received / time", Mark::Dashed, figure::NATS, median_sub("nats")),
            Series::new(
                "NATS median subscriber, committed anchor",
                Mark::Dashed,
                figure::NATS_ANCHOR,
                median_sub("nats-anchor"),
            ),
            Series::ranges(
                "seed 002 per-subscriber range",
                figure::SEED,
                subs.iter().map(|&i| (i, range.per_subscriber.0, range.per_subscriber.1)).collect(),
            ),
        ];
        let y = || Axis::log("throughput (msg/s)");
        Figure {
            title: "1 → 10 subscribers, 2000 B (seed 002)".into(),
            panels: vec![
                Panel::new("RTn while message n passes", Axis::linear("message number n"), y(), over_n),
                Panel::new("per subscriber", Axis::linear("subscriber"), y(), per_subscriber),
            ],
        }
    }

    fn body(&self, table: &[FloodRow]) -> String {
        let RateRange { per_subscriber: (lo, hi), aggregate, .. } = seeds::SEED_002_FANOUT_10;
        let (agg_lo, agg_hi) = aggregate.unwrap_or((f64::NAN, f64::NAN));
        let cell = |system: &str, which: &str, column: Field| {
            self.cell(table, system, which, column).map(thousands).unwrap_or_else(|| "n/a".into())
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "RTn = M / (In − In−M) per subscriber (M = {WINDOW}); per subscriber the seed's median, all \
             together their sum (the seed adds its subscribers up). *Received / time* is the peer \
             harness's figure, the one NATS is measured with.\n"
        );
        let (n, size) = (self.0.subscribers, self.0.size);
        let _ = writeln!(
            out,
            "Beside NATS, both the peer harness's way; all subscribers: median [min-max] of the \
             repetitions (`!`: spread over 25 %), tidings / NATS {}.\n",
            seed002::ratio_cell(table, n, size)
        );
        md_head(&mut out, &["", "per subscriber (min / median / max)", "all subscribers"]);
        for (system, name) in [("tidings", "tidings"), ("nats", "NATS"), ("nats-anchor", "NATS, committed anchor")] {
            let all = match system {
                "nats-anchor" => seed002::nats_cell(table, system, n, size, |r| r.received_msg_s),
                _ => seed002::range_cell(&seed002::values(table, system, n, size, "all", |r| r.received_msg_s)),
            };
            let per_sub: [Field; 3] = [|r| r.per_sub_min_msg_s, |r| r.per_sub_median_msg_s, |r| r.per_sub_max_msg_s];
            let per_sub = per_sub.map(|c| cell(system, "all", c)).join(" / ");
            let all = format!("{all} msg/s ({} MB/s)", cell(system, "all", |r| r.received_mb_s));
            md_row(&mut out, [format!("{name}, received / time"), format!("{per_sub} msg/s"), all]);
        }
        let (per_sub, all) = ((lo, hi, 1, 6), (agg_lo, agg_hi, 10, 46));
        let range =
            |(lo, hi, mb_lo, mb_hi)| format!("{} - {} msg/s ({mb_lo} - {mb_hi} MB/s)", thousands(lo), thousands(hi));
        md_row(&mut out, ["seed 002 (its LAN, ZeroMQ)".to_string(), range(per_sub), range(all)]);
        let rts: Vec<f64> = (1..=self.0.subscribers)
            .filter_map(|i| self.cell(table, "tidings", &i.to_string(), |r| r.rt_median_msg_s))
            .collect();
        let (min, max) = (rts.iter().copied().fold(f64::INFINITY, f64::min), rts.iter().copied().fold(0.0, f64::max));
        let [min, median, max] = [min, crate::stats::median(&rts), max].map(thousands);
        let (all, all_mb) =
            (cell("tidings", "all", |r| r.rt_median_msg_s), cell("tidings", "all", |r| r.rt_median_mb_s));
        let _ = writeln!(
            out,
            "\nThe seed's method, tidings only (**not comparable with NATS**, whose harness records no \
             per-message times; see below): RTn median per subscriber {min} / {median} / {max} msg/s (min / \
             median / max), all {all} msg/s ({all_mb} MB/s)."
        );
        let _ = writeln!(out, "\nThe seed's sum hit its 35 MB/s network; on loopback the CPUs are the limit.");
        let _ = writeln!(out, "\n{RTN_NOTE}");
        out
    }
}
