//! `persistent` (seed 004 §8.3.4, figures 8.3.6 and 8.3.7): the matching experiment on
//! `narada-22-sparse.toml` at 50 % matching with persistent clients: five durable subscribers
//! on every broker and measuring ones at n7 and n10, the publisher at n22 publishing with
//! guaranteed delivery (acknowledged once its broker has the event on disk). Beside each
//! point, the same point with best-effort subscribers and publishes, interleaved point by
//! point in the same network, so the figure shows what persistence costs and nothing else.

use super::content::{Kind, PointSpec};
use super::narada::{Grid, Narada, NaradaChecks, NaradaRow, Traffic};
use crate::stats::Spread;
use crate::suite::prelude::*;
use crate::suite::text::list;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Topology file.
    pub topology: String,
    /// The publisher's broker.
    pub publisher: String,
    /// The measuring subscribers' brokers (the seed's nodes 7 and 10).
    pub measuring: Vec<String>,
    /// The grid (one matching rate, as the seed's figures).
    pub grid: Grid,
}

impl Params {
    /// The seed's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let grid = match scale {
            Scale::Full => Grid::seed(&[50], &[10.0, 100.0, 500.0, 1000.0], &[50, 250, 500], 4.0),
            Scale::Quick => Grid::seed(&[50], &[20.0, 200.0], &[100], 1.5),
        };
        Params {
            topology: "narada-22-sparse.toml".into(),
            publisher: "n22".into(),
            measuring: vec!["n7".into(), "n10".into()],
            grid,
        }
    }
}

/// One point of one kind at one measuring subscriber.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PersistentRow {
    /// `durable` or `best effort`.
    pub delivery: String,
    /// Repetition, from 1.
    pub rep: usize,
    /// Guaranteed publishes acknowledged (durable points only).
    pub acked: Option<u64>,
    /// The point, as the matching experiment records it.
    #[serde(flatten)]
    pub point: NaradaRow,
}

/// The experiment.
pub struct Persistent(pub Params);

impl Experiment for Persistent {
    const ABOUT: About = About {
        name: "persistent",
        title: "persistent clients over 22 brokers: durable subscribers against best effort",
        seeds: "seed 004, §8.3.4 and figures 8.3.6, 8.3.7",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        vec![
            ("topology", format!("`{}`", p.topology)),
            ("publisher / measuring subscribers", format!("{} / {}", p.publisher, p.measuring.join(" and "))),
            ("subscribers on every broker", format!("{} of each kind", p.grid.per_broker)),
            (
                "durable",
                "each subscriber its own durable name; publishes guaranteed, acknowledged after the sync at the publisher's broker"
                    .into(),
            ),
            ("best effort", "the same subscribers and events, best-effort subscriptions and publishes".into()),
            ("selector (every subscriber)", format!("`{}`", super::content::SELECTOR)),
            ("matching rates, %", list(&p.grid.matching)),
            ("publish rates, msg/s", list(&p.grid.rates)),
            ("payload sizes, B (plus ~60 B of properties)", list(&p.grid.sizes)),
            ("events per point", format!("{} s of publishing, at least {}", p.grid.seconds, p.grid.min_events)),
            ("order", "both kinds stay connected; each point runs both, the order alternating by repetition".into()),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (self.0.grid.points() * 2 * ctx.reps) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let (table, checks) = measure(ctx, p).await?;
        Outcome::typed(&table, figure(p, &table), body(p, &table), checks.into_checks())
    }
}

/// Both populations on one network, every point of the grid `ctx.reps` times, the kinds
/// interleaved.
async fn measure(ctx: &Context, p: &Params) -> anyhow::Result<(Vec<PersistentRow>, NaradaChecks)> {
    let g = &p.grid;
    let net = Narada::up(ctx, &p.topology, &p.publisher).await?;
    let measuring: Vec<&str> = p.measuring.iter().map(String::as_str).collect();
    let events = ctx.reps as u64 * g.total_events();
    let mut best_effort = net.population(&measuring, g.per_broker, events, Kind::BestEffort).await?;
    let mut durable = net.population(&measuring, g.per_broker, events, Kind::Durable).await?;
    ctx.step("both populations connected");
    let (mut table, mut checks, mut traffic) = (Vec::new(), NaradaChecks::default(), Traffic::default());
    for rep in 1..=ctx.reps {
        for &matching in &g.matching {
            for &size in &g.sizes {
                for &rate in &g.rates {
                    let mut order = [(Kind::BestEffort, &mut best_effort), (Kind::Durable, &mut durable)];
                    if rep % 2 == 0 {
                        order.reverse();
                    }
                    for (kind, population) in order {
                        let spec = PointSpec { matching, rate, size, count: g.events(rate) };
                        let (rows, acked) = net.point(population, spec, &measuring, &mut checks, &mut traffic).await?;
                        for point in rows {
                            let acked = acked.map(|(acked, _)| acked);
                            table.push(PersistentRow { delivery: kind.label().into(), rep, acked, point });
                        }
                        ctx.step(format!("rep {rep}: {} {size} B {rate} msg/s", kind.label()));
                    }
                }
            }
        }
    }
    best_effort.close().await;
    durable.close().await;
    Ok((table, checks))
}

/// The per-repetition mean latencies of one (kind, subscriber, size, rate), ms.
fn means(table: &[PersistentRow], kind: Kind, sub: &str, size: usize, rate: f64) -> Vec<f64> {
    table
        .iter()
        .filter(|r| r.delivery == kind.label() && r.point.subscriber == sub)
        .filter(|r| r.point.size_b == size && r.point.rate_msg_s == rate)
        .filter_map(|r| r.point.mean_ms)
        .collect()
}

/// The median over repetitions of the mean latency, if any repetition had one.
fn median_mean(table: &[PersistentRow], kind: Kind, sub: &str, size: usize, rate: f64) -> Option<f64> {
    crate::stats::median_if_any(&means(table, kind, sub, size, rate))
}

fn figure(p: &Params, table: &[PersistentRow]) -> Figure {
    let g = &p.grid;
    let (largest, fastest) = (g.sizes.iter().copied().max().unwrap_or(0), g.rates.iter().copied().fold(0.0, f64::max));
    let colors = [figure::TIDINGS, figure::TIDINGS_ALT, figure::NATS_ANCHOR, 5];
    let mut by_rate = Vec::new();
    let mut by_size = Vec::new();
    let lines = p.measuring.iter().flat_map(|s| [(s, Kind::Durable), (s, Kind::BestEffort)]);
    for (i, (sub, kind)) in lines.enumerate() {
        let label = format!("{sub}, {}", kind.label());
        let pts = g.rates.iter().filter_map(|&r| median_mean(table, kind, sub, largest, r).map(|v| (r, v))).collect();
        by_rate.push(Series::new(label.clone(), Mark::Line, colors[i % 4], pts));
        let pts =
            g.sizes.iter().filter_map(|&s| median_mean(table, kind, sub, s, fastest).map(|v| (s as f64, v))).collect();
        by_size.push(Series::new(label, Mark::Line, colors[i % 4], pts));
    }
    let ms = || Axis::log("mean latency (ms), median of repetitions");
    Figure {
        title: "persistent clients, 22 brokers, 50% matching (seed 004 figures 8.3.6-8.3.7)".into(),
        panels: vec![
            Panel::new(format!("{largest} B"), Axis::log("publish rate (msg/s)"), ms(), by_rate),
            Panel::new(format!("{fastest} msg/s"), Axis::linear("payload size (B)"), ms(), by_size),
        ],
    }
}

fn body(p: &Params, table: &[PersistentRow]) -> String {
    let g = &p.grid;
    let mut out = String::new();
    let path = |sub: &str| table.iter().find(|r| r.point.subscriber == sub).map_or(0, |r| r.point.brokers_on_path);
    let [(first, first_path), (second, second_path)] =
        [0, 1].map(|i| p.measuring.get(i).map_or(("", 0), |s| (s.as_str(), path(s))));
    let _ = writeln!(
        out,
        "Latency is one-way from each event's scheduled send time to its delivery at the measuring \
         subscriber (one clock). {first} is {first_path} brokers from the publisher, {second} is {second_path}. Each \
         cell is the median over repetitions of the point's mean latency, with the range of the repetitions; the \
         ratio is durable over best effort.\n"
    );
    md_head(&mut out, &["subscriber", "size", "rate", "durable mean (ms)", "best effort mean (ms)", "ratio"]);
    for sub in &p.measuring {
        for &size in &g.sizes {
            for &rate in &g.rates {
                let d = Spread::of(&means(table, Kind::Durable, sub, size, rate));
                let b = Spread::of(&means(table, Kind::BestEffort, sub, size, rate));
                let ratio = if b.median > 0.0 { format!("{:.2}", d.median / b.median) } else { "n/a".into() };
                let (d, b) = (d.show(|v| format!("{v:.2}")), b.show(|v| format!("{v:.2}")));
                md_row(&mut out, [sub.clone(), format!("{size} B"), format!("{} msg/s", num(rate)), d, b, ratio]);
            }
        }
    }
    let _ = writeln!(
        out,
        "\nThe seed's persistent clients had their events written to a stable store at the publisher's \
         node and replicated once (node 7) or twice (node 10) before delivery. Here the publisher's \
         broker logs each guaranteed event and acknowledges it after the sync; the durable subscribers' \
         brokers keep their subscriptions and checkpoints on disk. tidings does not replicate the \
         pubend log to other brokers: the second replication of the seed has no counterpart, and n10's \
         figure is the one-replica cost seen nine brokers away."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_over_the_matching_rows_only() {
        let row = |delivery: &str, rep: usize, sub: &str, mean: f64| PersistentRow {
            delivery: delivery.into(),
            rep,
            acked: None,
            point: NaradaRow {
                subscriber: sub.into(),
                size_b: 50,
                rate_msg_s: 10.0,
                mean_ms: Some(mean),
                ..NaradaRow::default()
            },
        };
        let t = [
            row("durable", 1, "n7", 3.0),
            row("durable", 2, "n7", 5.0),
            row("durable", 3, "n7", 4.0),
            row("best effort", 1, "n7", 1.0),
            row("durable", 1, "n10", 9.0),
        ];
        assert_eq!(median_mean(&t, Kind::Durable, "n7", 50, 10.0), Some(4.0));
        assert_eq!(median_mean(&t, Kind::BestEffort, "n7", 50, 10.0), Some(1.0));
        assert_eq!(median_mean(&t, Kind::Durable, "n7", 250, 10.0), None);
    }
}
