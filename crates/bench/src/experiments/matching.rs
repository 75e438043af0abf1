//! `matching` (seed 004, section 8.3): 22 brokers (`narada-22-sparse.toml`), five subscribers
//! on every broker, the publisher at n22 and the measuring subscriber at n10 (9 brokers on the
//! path); latency and throughput against publish rate, size and matching rate, and the traffic
//! on every link.

use super::narada::{self, Grid, NaradaChecks, NaradaRow, Traffic};
use crate::seeds;
use crate::suite::prelude::*;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Topology file.
    pub topology: String,
    /// The publisher's broker.
    pub publisher: String,
    /// The measuring subscriber's broker.
    pub measuring: String,
    /// The grid.
    pub grid: Grid,
}

impl Params {
    /// The seed's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let grid = match scale {
            Scale::Full => Grid::seed(&[100, 50, 25, 10], &[1.0, 10.0, 100.0, 500.0, 1000.0], &[30, 250, 500], 4.0),
            Scale::Quick => Grid::seed(&[100, 10], &[20.0, 200.0], &[30, 500], 1.5),
        };
        Params { topology: "narada-22-sparse.toml".into(), publisher: "n22".into(), measuring: "n10".into(), grid }
    }
}

/// The experiment.
pub struct Matching(pub Params);

impl Experiment for Matching {
    const ABOUT: About = About {
        name: "matching",
        title: "content-based routing over 22 brokers: latency against publish rate, size and matching rate",
        seeds: "seed 004",
    };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        vec![
            ("topology", format!("`{}`", p.topology)),
            ("publisher / measuring subscriber", format!("{} / {} (9 brokers on the path)", p.publisher, p.measuring)),
            ("subscribers on every broker", p.grid.per_broker.to_string()),
            ("events", "6 tag=value properties; matching decided by the 4th".into()),
            ("selector (every subscriber)", format!("`{}`", super::content::SELECTOR)),
            ("matching rates, %", list(&p.grid.matching)),
            ("publish rates, msg/s", list(&p.grid.rates)),
            ("payload sizes, B (plus ~60 B of properties)", list(&p.grid.sizes)),
            ("events per point", format!("{} s of publishing, at least {}", p.grid.seconds, p.grid.min_events)),
        ]
    }
    fn points(&self, _: &Context) -> u64 {
        self.0.grid.points() as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let mut table: Vec<NaradaRow> = Vec::new();
        let mut checks = NaradaChecks::default();
        let measuring = [p.measuring.as_str()];
        let traffic = narada::run(ctx, &p.topology, &p.publisher, &measuring, &p.grid, &mut table, &mut checks).await?;
        let mut figure = self.figure(&table);
        figure.panels.push(links_panel(&traffic));
        let mut body = self.body(&table);
        body.push_str(&links_table(&traffic));
        Outcome::typed(&table, figure, body, checks.into_checks())
    }
}

/// (rate, size, matching) -> `field` of the measuring subscriber's row.
fn value(table: &[NaradaRow], matching: u32, rate: f64, size: usize, field: Field) -> Option<f64> {
    table.iter().find(|r| r.matching_pct == matching && r.rate_msg_s == rate && r.size_b == size).and_then(field)
}

/// One figure of a row.
type Field = fn(&NaradaRow) -> Option<f64>;

impl Matching {
    fn figure(&self, table: &[NaradaRow]) -> Figure {
        let g = &self.0.grid;
        let (largest, fastest) =
            (g.sizes.iter().copied().max().unwrap_or(0), g.rates.iter().copied().fold(0.0, f64::max));
        let color = |i: usize| [figure::TIDINGS, figure::TIDINGS_ALT, figure::NATS_ANCHOR, 5][i % 4];
        let mut by_rate = Vec::new();
        let mut by_size = Vec::new();
        for (i, &m) in g.matching.iter().enumerate() {
            let pts =
                g.rates.iter().filter_map(|&r| value(table, m, r, largest, |r| r.mean_ms).map(|v| (r, v))).collect();
            by_rate.push(Series::new(format!("tidings {m}%"), Mark::Line, color(i), pts));
            let pts = g
                .sizes
                .iter()
                .filter_map(|&s| value(table, m, fastest, s, |r| r.mean_ms).map(|v| (s as f64, v)))
                .collect();
            by_size.push(Series::new(format!("tidings {m}%"), Mark::Line, color(i), pts));
            let seed: Vec<(f64, f64)> =
                seeds::SEED_004_POINTS.iter().filter(|p| p.matching == m).map(|p| (p.rate, p.mean_ms)).collect();
            if !seed.is_empty() {
                by_rate.push(Series::new(format!("seed 004 {m}% (quoted points)"), Mark::Points, color(i), seed));
            }
        }
        let received = |s| -> Vec<(f64, f64)> {
            g.rates.iter().filter_map(|&r| value(table, 100, r, s, |r| r.throughput_msg_s).map(|v| (r, v))).collect()
        };
        let quoted = seeds::SEED_004_THROUGHPUT.iter().map(|&(r, _, t)| (r, t)).collect();
        let throughput: Vec<Series> = g
            .sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| Series::new(format!("tidings {s} B"), Mark::Line, color(i), received(s)))
            .chain([Series::new("seed 004 (quoted points)", Mark::Points, figure::SEED, quoted)])
            .collect();
        let ms = || Axis::log("mean latency (ms)");
        let rate = || Axis::log("publish rate (msg/s)");
        let received = "throughput at the measuring subscriber, 100% matching";
        Figure {
            title: "22 brokers, 9 on the path: latency by matching rate (seed 004)".into(),
            panels: vec![
                Panel::new(format!("{largest} B"), rate(), ms(), by_rate),
                Panel::new(format!("{fastest} msg/s"), Axis::linear("payload size (B)"), ms(), by_size),
                Panel::new(received, rate(), Axis::log("received (msg/s)"), throughput),
            ],
        }
    }

    fn body(&self, table: &[NaradaRow]) -> String {
        let g = &self.0.grid;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Latency is one-way at the measuring subscriber (publisher and subscriber share a clock, as \
             in the seed); variance in ms²; throughput = events received ÷ time from the first publish \
             to the last receipt. Seed 004 quotes, per matching rate, its lowest and highest mean \
             latency (SPARC Ultra-5 machines, JDK 1.2, 10 hops):\n"
        );
        md_head(
            &mut out,
            &["matching", "seed 004 low", "seed 004 high", "tidings, same rate and size (nearest point)"],
        );
        for &m in &g.matching {
            let quoted: Vec<_> = seeds::SEED_004_POINTS.iter().filter(|p| p.matching == m).collect();
            let fmt = |p: &seeds::NaradaPoint| {
                format!("{:.2} ms at {} msg/s, {} B (variance {} ms²)", p.mean_ms, p.rate, p.size, p.variance_ms2)
            };
            let ours: Vec<String> = quoted
                .iter()
                .filter_map(|p| {
                    let rate = nearest(&g.rates, p.rate);
                    let size = nearest(&g.sizes.iter().map(|&s| s as f64).collect::<Vec<_>>(), p.size as f64) as usize;
                    value(table, m, rate, size, |r| r.mean_ms).map(|v| format!("{v:.2} ms at {rate} msg/s, {size} B"))
                })
                .collect();
            let (low, high) = (quoted.first().map(|p| fmt(p)), quoted.last().map(|p| fmt(p)));
            md_row(&mut out, [format!("{m}%"), low.unwrap_or_default(), high.unwrap_or_default(), ours.join("; ")]);
        }
        out.push('\n');
        let c = |v: Option<f64>, unit: &str| format!("{} {unit}", v.map(num).unwrap_or_default());
        md_table(
            &mut out,
            table,
            &[
                ("matching", &|r| format!("{}%", r.matching_pct)),
                ("rate", &|r| num(r.rate_msg_s)),
                ("size", &|r| format!("{} B", r.size_b)),
                ("mean", &|r| c(r.mean_ms, "ms")),
                ("variance", &|r| c(r.variance_ms2, "ms²")),
                ("min", &|r| c(r.min_ms, "ms")),
                ("max", &|r| c(r.max_ms, "ms")),
                ("received", &|r| format!("{} of {}", r.received, r.matched)),
                ("throughput", &|r| c(r.throughput_msg_s, "msg/s")),
            ],
        );
        let _ =
            writeln!(out, "\nSeed 004's best throughput at the measuring subscriber was {} msg/s.", thousands(480.76));
        out
    }
}

/// Messages each link direction carried at each matching rate, beside the events published
/// (the same number at every matching rate: the grid is the same).
fn links_panel(traffic: &[Traffic]) -> Panel {
    let colors = [figure::TIDINGS, figure::TIDINGS_ALT, figure::NATS_ANCHOR, 5];
    let mut series = Vec::new();
    for (i, t) in traffic.iter().enumerate() {
        let points = t.links.values().enumerate().map(|(k, &v)| ((k + 1) as f64, v)).collect();
        series.push(Series::new(format!("{}% matching: carried", t.matching), Mark::Points, colors[i % 4], points));
    }
    let most = traffic.iter().map(|t| t.published).max().unwrap_or(0) as f64;
    let last = traffic.iter().map(|t| t.links.len()).max().unwrap_or(1) as f64;
    series.push(Series::new("events published", Mark::Dashed, figure::SEED, vec![(1.0, most), (last, most)]));
    let x = Axis::linear("link direction (sorted by name)");
    Panel::new("messages carried per link direction, all points", x, Axis::linear("data messages"), series)
}

/// The report's view of link traffic: carrying links, what they carried, idle ones.
fn links_table(traffic: &[Traffic]) -> String {
    let mut out = String::from(
        "\nMessages carried on the broker links, summed over every point of a matching rate (the \
         brokers' `tidings_link_messages_out_total`, per link direction):\n\n",
    );
    let head = ["matching", "events published", "matching events", "directions that carried messages"];
    md_head(&mut out, &[&head[..], &["messages each carried", "directions that carried none"]].concat());
    for t in traffic {
        let carrying: Vec<f64> = t.links.values().copied().filter(|&v| v > 0.0).collect();
        let lo = carrying.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = carrying.iter().copied().fold(0.0, f64::max);
        let each = match carrying.len() {
            0 => "-".to_string(),
            _ if lo == hi => thousands(lo),
            _ => format!("{} - {}", thousands(lo), thousands(hi)),
        };
        let (published, matched) = (thousands(t.published as f64), thousands(t.matched as f64));
        let idle = (t.links.len() - carrying.len()).to_string();
        md_row(&mut out, [format!("{}%", t.matching), published, matched, carrying.len().to_string(), each, idle]);
    }
    out.push_str(
        "\nEvery broker has subscribers with the same selector, so each link of the publisher's tree \
         should carry exactly the matching events, once each, and no link anything else: the \
         non-matching events never leave the publisher's broker.\n",
    );
    out
}

/// The grid value nearest to `target` (on a log scale).
fn nearest(values: &[f64], target: f64) -> f64 {
    values.iter().copied().fold(f64::NAN, |best, v| {
        if best.is_nan() || (v.ln() - target.ln()).abs() < (best.ln() - target.ln()).abs() {
            v
        } else {
            best
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_grid_point_is_found_on_a_log_scale() {
        assert_eq!(nearest(&[1.0, 10.0, 100.0, 1000.0], 952.0), 1000.0);
        assert_eq!(nearest(&[1.0, 10.0, 100.0], 20.0), 10.0);
        assert_eq!(nearest(&[30.0, 250.0, 500.0], 450.0), 500.0);
    }
}
