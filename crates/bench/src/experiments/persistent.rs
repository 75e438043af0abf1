//! `persistent` (seed 004 §8.3.4, figures 8.3.6 and 8.3.7): the matching experiment at 50 %
//! matching with persistent clients, on `narada-22-replicated.toml` (seed 004's 22 brokers
//! with the publisher's broker n22 and the measuring subscriber's broker n10 each in a cell of
//! three). Five subscribers of each population on every broker, measuring ones at n7 and at
//! n10's cell, three populations interleaved point by point in the same network:
//! - best effort, published at n22;
//! - durable subscribers with guaranteed publishes at n22u, a lone broker linked as C22 is,
//!   whose pubend log is on its disk alone (`replicas = 1`: tidings before replication);
//! - the same at n22, whose log is a Raft group on the three brokers of its cell (the seed's
//!   single replication, measured at n7 and at n10b), and at n10, whose cell stores its durable
//!   subscriptions' messages too (`[durable] store = "cell"`: the seed's double replication).
//!
//! So the figure shows what persistence and each replication cost, and nothing else.

use super::content::{Kind, PointSpec};
use super::narada::{Grid, Narada, NaradaChecks, NaradaRow, Traffic};
use crate::stats::Spread;
use crate::suite::prelude::*;
use crate::suite::text::list;

/// What stands behind a measuring subscriber's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Best-effort subscriptions and publishes.
    BestEffort,
    /// Durable, the publisher's pubend log on one broker (`[storage] replicas = 1`).
    Unreplicated,
    /// Durable, the publisher's log replicated in its cell: the seed's single replication.
    Single,
    /// [`Case::Single`] with the subscriber's cell storing its messages too (`[durable] store
    /// = "cell"`): the seed's double replication.
    Double,
}

impl Case {
    /// Every case, in the order the report's columns show them.
    pub const ALL: [Case; 4] = [Case::BestEffort, Case::Unreplicated, Case::Single, Case::Double];

    /// How the CSV and the report name it.
    pub fn label(self) -> &'static str {
        match self {
            Case::BestEffort => "best effort",
            Case::Unreplicated => "replicas = 1",
            Case::Single => "single replication",
            Case::Double => "double replication",
        }
    }
}

/// One measuring subscriber: its broker, the case its rows are, and the place it stands for
/// (n10's cell mate n10b stands for n10: the same nine brokers from the publisher).
#[derive(Debug, Clone)]
pub struct Measured {
    /// Its broker.
    pub broker: String,
    /// The case.
    pub case: Case,
    /// The seed's node it stands for.
    pub place: String,
}

/// One population: how it subscribes and publishes, where its publisher is, who measures.
#[derive(Debug, Clone)]
pub struct Lane {
    /// Best effort or durable (each durable population its own topic and names).
    pub kind: Kind,
    /// The publisher's broker.
    pub publisher: String,
    /// The measuring subscribers.
    pub measuring: Vec<Measured>,
}

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Topology file.
    pub topology: String,
    /// The populations.
    pub lanes: Vec<Lane>,
    /// The seed's measuring nodes, in the report's order.
    pub places: Vec<String>,
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
        let at = |broker: &str, case: Case, place: &str| Measured { broker: broker.into(), case, place: place.into() };
        let lane = |kind: Kind, publisher: &str, measuring: Vec<Measured>| Lane {
            kind,
            publisher: publisher.into(),
            measuring,
        };
        let lanes = vec![
            lane(Kind::BestEffort, "n22", vec![at("n7", Case::BestEffort, "n7"), at("n10", Case::BestEffort, "n10")]),
            lane(
                Kind::Durable,
                "n22u",
                vec![at("n7", Case::Unreplicated, "n7"), at("n10b", Case::Unreplicated, "n10")],
            ),
            lane(
                Kind::Replicated,
                "n22",
                vec![at("n7", Case::Single, "n7"), at("n10b", Case::Single, "n10"), at("n10", Case::Double, "n10")],
            ),
        ];
        Params { topology: "narada-22-replicated.toml".into(), lanes, places: vec!["n7".into(), "n10".into()], grid }
    }

    /// The measuring subscriber of `case` at `place`, if the run has one.
    fn measured(&self, case: Case, place: &str) -> Option<&Measured> {
        self.lanes.iter().flat_map(|l| &l.measuring).find(|m| m.case == case && m.place == place)
    }
}

/// One point of one case at one measuring subscriber.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PersistentRow {
    /// `durable` or `best effort`.
    pub delivery: String,
    /// Repetition, from 1.
    pub rep: usize,
    /// Guaranteed publishes acknowledged (durable points only).
    pub acked: Option<u64>,
    /// `best effort`, `replicas = 1`, `single replication` or `double replication`.
    pub case: String,
    /// The publisher's broker.
    pub publisher: String,
    /// The point, as the matching experiment records it.
    #[serde(flatten)]
    pub point: NaradaRow,
}

/// The experiment.
pub struct Persistent(pub Params);

impl Experiment for Persistent {
    const ABOUT: About = About {
        name: "persistent",
        title: "persistent clients over seed 004's 22 brokers: best effort, durable, single and double replication",
        seeds: "seed 004, §8.3.4 and figures 8.3.6, 8.3.7",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let lanes = p.lanes.iter().map(|l| {
            let who = l.measuring.iter().map(|m| format!("{} ({})", m.broker, m.case.label())).collect::<Vec<_>>();
            format!("{} from {}, measured at {}", l.kind.label(), l.publisher, who.join(", "))
        });
        vec![
            (
                "topology",
                format!(
                    "`{}`: cells C22 = n22, n22b, n22c and C10 = n10, n10b, n10c; n22u linked as C22 is",
                    p.topology
                ),
            ),
            ("populations", lanes.collect::<Vec<_>>().join("; ")),
            ("subscribers on every broker", format!("{} of each population", p.grid.per_broker)),
            (
                "durable",
                "each subscriber its own durable name; publishes guaranteed, acknowledged once the publisher's \
                 log synced them (at n22u: its own disk; at n22: two of C22's three brokers)"
                    .into(),
            ),
            (
                "double replication",
                "n10 (and n10c) `[durable] store = \"cell\"`: a relay republishes into a pubend replicated on C10"
                    .into(),
            ),
            ("selector (every subscriber)", format!("`{}`", super::content::SELECTOR)),
            ("matching rates, %", list(&p.grid.matching)),
            ("publish rates, msg/s", list(&p.grid.rates)),
            ("payload sizes, B (plus ~60 B of properties)", list(&p.grid.sizes)),
            ("events per point", format!("{} s of publishing, at least {}", p.grid.seconds, p.grid.min_events)),
            (
                "order",
                "all populations stay connected; a warm-up point each (20 events, not measured), then each point \
                 runs each population, the order rotating by repetition"
                    .into(),
            ),
        ]
    }
    fn points(&self, ctx: &Context) -> u64 {
        (self.0.grid.points() * self.0.lanes.len() * ctx.reps) as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let (table, checks) = measure(ctx, p).await?;
        Outcome::typed(&table, figure(p, &table), body(p, &table), checks.into_checks())
    }
}

/// Every population on one network, every point of the grid `ctx.reps` times, the
/// populations interleaved.
async fn measure(ctx: &Context, p: &Params) -> anyhow::Result<(Vec<PersistentRow>, NaradaChecks)> {
    let g = &p.grid;
    let net = Narada::up(ctx, &p.topology).await?;
    let warm_up = PointSpec { matching: 50, rate: 50.0, size: 100, count: 20 };
    // Events are numbered across points, the warm-up's too: a number past `events` is foreign.
    let events = ctx.reps as u64 * g.total_events() + warm_up.count;
    let mut placed = Vec::new();
    for lane in &p.lanes {
        let measuring: Vec<&str> = lane.measuring.iter().map(|m| m.broker.as_str()).collect();
        placed.push((lane, net.population(&lane.publisher, &measuring, g.per_broker, events, lane.kind).await?));
    }
    ctx.step("every population connected");
    let (mut table, mut checks, mut traffic) = (Vec::new(), NaradaChecks::default(), Traffic::default());
    // A pubend's replica group, and each relay's pubend in C10, start at their first publish
    // (an election, the groups' first syncs): one point per population, checked but not
    // measured, so the first measured point does not carry them.
    for (lane, population) in &mut placed {
        let measuring: Vec<&str> = lane.measuring.iter().map(|m| m.broker.as_str()).collect();
        net.point(population, warm_up, &measuring, &mut checks, &mut traffic).await?;
    }
    ctx.step("every population warmed up");
    for rep in 1..=ctx.reps {
        for &matching in &g.matching {
            for &size in &g.sizes {
                for &rate in &g.rates {
                    let mut order: Vec<&mut _> = placed.iter_mut().collect();
                    order.rotate_left(rep % p.lanes.len().max(1));
                    for (lane, population) in order {
                        let spec = PointSpec { matching, rate, size, count: g.events(rate) };
                        let measuring: Vec<&str> = lane.measuring.iter().map(|m| m.broker.as_str()).collect();
                        let (rows, acked) = net.point(population, spec, &measuring, &mut checks, &mut traffic).await?;
                        for (point, m) in rows.into_iter().zip(&lane.measuring) {
                            table.push(PersistentRow {
                                delivery: if lane.kind.durable() { "durable" } else { "best effort" }.into(),
                                rep,
                                acked: acked.map(|(acked, _)| acked),
                                case: m.case.label().into(),
                                publisher: lane.publisher.clone(),
                                point,
                            });
                        }
                        ctx.step(format!("rep {rep}: {} {size} B {rate} msg/s", lane.kind.label()));
                    }
                }
            }
        }
    }
    for (_, placed) in placed {
        placed.population.close().await;
    }
    Ok((table, checks))
}

/// The per-repetition mean latencies of one (case, subscriber, size, rate), ms.
fn means(table: &[PersistentRow], case: Case, sub: &str, size: usize, rate: f64) -> Vec<f64> {
    table
        .iter()
        .filter(|r| r.case == case.label() && r.point.subscriber == sub)
        .filter(|r| r.point.size_b == size && r.point.rate_msg_s == rate)
        .filter_map(|r| r.point.mean_ms)
        .collect()
}

/// The median over repetitions of the mean latency, if any repetition had one.
fn median_mean(table: &[PersistentRow], case: Case, sub: &str, size: usize, rate: f64) -> Option<f64> {
    crate::stats::median_if_any(&means(table, case, sub, size, rate))
}

fn figure(p: &Params, table: &[PersistentRow]) -> Figure {
    let g = &p.grid;
    let (largest, fastest) = (g.sizes.iter().copied().max().unwrap_or(0), g.rates.iter().copied().fold(0.0, f64::max));
    let mut by_rate = Vec::new();
    let mut by_size = Vec::new();
    for (i, m) in p.lanes.iter().flat_map(|l| &l.measuring).enumerate() {
        let (label, sub, case) = (format!("{}: {}", m.broker, m.case.label()), &m.broker, m.case);
        let pts = g.rates.iter().filter_map(|&r| median_mean(table, case, sub, largest, r).map(|v| (r, v))).collect();
        by_rate.push(Series::new(label.clone(), Mark::Line, i, pts));
        let pts =
            g.sizes.iter().filter_map(|&s| median_mean(table, case, sub, s, fastest).map(|v| (s as f64, v))).collect();
        by_size.push(Series::new(label, Mark::Line, i, pts));
    }
    let ms = || Axis::log("mean latency (ms), median of repetitions");
    Figure {
        title:
            "persistent clients, 22 brokers, 50% matching, single and double replication (seed 004 figures 8.3.6-8.3.7)"
                .into(),
        panels: vec![
            Panel::new(format!("{largest} B"), Axis::log("publish rate (msg/s)"), ms(), by_rate),
            Panel::new(format!("{fastest} msg/s"), Axis::linear("payload size (B)"), ms(), by_size),
        ],
    }
}

/// The median over the grid's points of `later` minus `earlier` (each the median of its
/// repetitions) at `place`, ms.
fn cost(p: &Params, table: &[PersistentRow], place: &str, earlier: Case, later: Case) -> Option<f64> {
    let (a, b) = (p.measured(earlier, place)?, p.measured(later, place)?);
    let mut diffs = Vec::new();
    for &size in &p.grid.sizes {
        for &rate in &p.grid.rates {
            let at = |m: &Measured| median_mean(table, m.case, &m.broker, size, rate);
            if let (Some(x), Some(y)) = (at(a), at(b)) {
                diffs.push(y - x);
            }
        }
    }
    crate::stats::median_if_any(&diffs)
}

fn body(p: &Params, table: &[PersistentRow]) -> String {
    let g = &p.grid;
    let mut out = String::new();
    let path = |sub: &str| table.iter().find(|r| r.point.subscriber == sub).map_or(0, |r| r.point.brokers_on_path);
    let whom: Vec<String> = p
        .lanes
        .iter()
        .flat_map(|l| &l.measuring)
        .map(|m| {
            format!(
                "{} ({}, {} brokers from {})",
                m.broker,
                m.case.label(),
                path(&m.broker),
                if m.case == Case::Unreplicated { "n22u" } else { "n22" }
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "Latency is one-way from each event's scheduled send time to its delivery at the measuring \
         subscriber (one clock): {}. Each cell is the median over repetitions of the point's mean \
         latency, with the range of the repetitions; n10's columns are read at n10 (best effort, double \
         replication) and at its cell mate n10b (replicas = 1, single replication).\n",
        whom.join("; ")
    );
    let mut head = vec!["place", "size", "rate"];
    head.extend(Case::ALL.iter().map(|c| c.label()));
    md_head(&mut out, &head);
    for place in &p.places {
        for &size in &g.sizes {
            for &rate in &g.rates {
                let mut row = vec![place.clone(), format!("{size} B"), format!("{} msg/s", num(rate))];
                for case in Case::ALL {
                    row.push(p.measured(case, place).map_or("-".into(), |m| {
                        Spread::of(&means(table, case, &m.broker, size, rate)).show(|v| format!("{v:.2}"))
                    }));
                }
                md_row(&mut out, row);
            }
        }
    }
    let ms = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:+.2} ms"));
    let _ = writeln!(
        out,
        "\nThe seed's persistent clients had their events written to a stable store at the publisher's \
         node and replicated once (node 7) or twice (node 10) before delivery. Here both replications \
         exist. The publisher's pubend log at n22 is a Raft group on the three brokers of its cell C22: a \
         guaranteed publish is acknowledged once two of them synced it, and the log outlives any one \
         broker's disk (single replication, measured at n7 and n10b). At n10 the durable subscriptions \
         are stored in their own cell as well (`[durable] store = \"cell\"`): a relay republishes each \
         matching event into a pubend replicated on C10's three brokers, and the subscriber reads from \
         there, so its catch-up survives the publishers' cell being unreachable (double replication). \
         replicas = 1 is a second durable population published at n22u, a lone broker linked as C22 is \
         (the same paths), whose log is on its own disk alone, as before replication. Events are delivered as soon as the publisher's broker has logged \
         them, before the quorum's acknowledgement, so the first replication costs latency only through \
         the work it adds; the second sits on the path (relay, quorum, reader). Median over the grid's \
         points of the difference of medians: single replication minus replicas = 1 {} at n7 and {} at \
         n10; double minus single {} at n10; replicas = 1 minus best effort {} at n7.",
        ms(cost(p, table, "n7", Case::Unreplicated, Case::Single)),
        ms(cost(p, table, "n10", Case::Unreplicated, Case::Single)),
        ms(cost(p, table, "n10", Case::Single, Case::Double)),
        ms(cost(p, table, "n7", Case::BestEffort, Case::Unreplicated)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: Case, rep: usize, sub: &str, size: usize, mean: f64) -> PersistentRow {
        PersistentRow {
            delivery: if case == Case::BestEffort { "best effort" } else { "durable" }.into(),
            rep,
            acked: None,
            case: case.label().into(),
            publisher: "n22".into(),
            point: NaradaRow {
                subscriber: sub.into(),
                size_b: size,
                rate_msg_s: 10.0,
                mean_ms: Some(mean),
                ..NaradaRow::default()
            },
        }
    }

    #[test]
    fn the_median_is_over_the_matching_rows_only() {
        let t = [
            row(Case::Single, 1, "n7", 50, 3.0),
            row(Case::Single, 2, "n7", 50, 5.0),
            row(Case::Single, 3, "n7", 50, 4.0),
            row(Case::BestEffort, 1, "n7", 50, 1.0),
            row(Case::Unreplicated, 1, "n7", 50, 2.0),
            row(Case::Single, 1, "n10", 50, 9.0),
        ];
        assert_eq!(median_mean(&t, Case::Single, "n7", 50, 10.0), Some(4.0));
        assert_eq!(median_mean(&t, Case::BestEffort, "n7", 50, 10.0), Some(1.0));
        assert_eq!(median_mean(&t, Case::Unreplicated, "n7", 50, 10.0), Some(2.0));
        assert_eq!(median_mean(&t, Case::Single, "n7", 250, 10.0), None);
    }

    #[test]
    fn every_case_has_a_subscriber_and_costs_compare_one_place() {
        let mut p = Params::new(Scale::Quick);
        for case in Case::ALL {
            assert!(p.measured(case, "n10").is_some(), "{case:?}");
        }
        assert!(p.measured(Case::Double, "n7").is_none());
        assert_eq!(p.measured(Case::Single, "n10").map(|m| m.broker.as_str()), Some("n10b"));
        p.grid.sizes = vec![50];
        p.grid.rates = vec![10.0];
        let t = [row(Case::Single, 1, "n10b", 50, 3.0), row(Case::Double, 1, "n10", 50, 4.5)];
        assert_eq!(cost(&p, &t, "n10", Case::Single, Case::Double), Some(1.5));
        assert_eq!(cost(&p, &t, "n7", Case::Single, Case::Double), None);
    }
}
