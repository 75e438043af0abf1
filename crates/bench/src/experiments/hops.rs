//! `hops` (seed 004, section 8.4): latency against the number of brokers between publisher and
//! subscriber: measuring subscribers 1, 2 and 4 brokers from the publisher on
//! `narada-22-dense.toml`, and 9 on `narada-22-sparse.toml`; matching 50 % and 10 %.

use super::narada::{self, Grid, NaradaChecks, NaradaRow};
use crate::suite::prelude::*;
use crate::suite::text::list;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// The dense topology and its measuring brokers.
    pub dense: (String, Vec<String>),
    /// The sparse topology and its measuring brokers.
    pub sparse: (String, Vec<String>),
    /// The publisher's broker (in both).
    pub publisher: String,
    /// The grid.
    pub grid: Grid,
}

impl Params {
    /// The seed's parameters, or the quick version.
    pub fn new(scale: Scale) -> Params {
        let grid = match scale {
            Scale::Full => Grid::seed(&[50, 10], &[10.0, 100.0, 500.0, 1000.0], &[30, 250, 500], 4.0),
            Scale::Quick => Grid::seed(&[50], &[20.0, 200.0], &[500], 1.5),
        };
        Params {
            dense: ("narada-22-dense.toml".into(), vec!["n22".into(), "n1".into(), "n10".into()]),
            sparse: ("narada-22-sparse.toml".into(), vec!["n10".into()]),
            publisher: "n22".into(),
            grid,
        }
    }
}

/// The experiment.
pub struct Hops(pub Params);

impl Experiment for Hops {
    const ABOUT: About = About { name: "hops", title: "latency against brokers on the path", seeds: "seed 004" };
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let ((dense, at_dense), (sparse, at_sparse)) = (&p.dense, &p.sparse);
        let (at_dense, at_sparse) = (list(at_dense), list(at_sparse));
        vec![
            ("networks", format!("`{dense}` (measuring at {at_dense}), `{sparse}` (measuring at {at_sparse})")),
            ("publisher", p.publisher.clone()),
            ("subscribers on every broker", p.grid.per_broker.to_string()),
            ("matching rates, %", list(&p.grid.matching)),
            ("publish rates, msg/s", list(&p.grid.rates)),
            ("payload sizes, B", list(&p.grid.sizes)),
            ("events per point", format!("{} s of publishing, at least {}", p.grid.seconds, p.grid.min_events)),
        ]
    }
    fn points(&self, _: &Context) -> u64 {
        2 * self.0.grid.points() as u64
    }
    async fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let p = &self.0;
        let mut table: Vec<NaradaRow> = Vec::new();
        let mut checks = NaradaChecks::default();
        for (topology, measuring) in [&p.dense, &p.sparse] {
            let measuring: Vec<&str> = measuring.iter().map(String::as_str).collect();
            // The link traffic is `matching`'s to show; here the routed check covers it.
            narada::run(ctx, topology, &p.publisher, &measuring, &p.grid, &mut table, &mut checks).await?;
        }
        let (figure, body) = (self.figure(&table), self.body(&table));
        Outcome::typed(&table, figure, body, checks.into_checks())
    }
}

/// "1 broker", "4 brokers".
fn brokers(n: usize) -> String {
    if n == 1 {
        "1 broker".into()
    } else {
        format!("{n} brokers")
    }
}

fn mean(table: &[NaradaRow], path: usize, matching: u32, rate: f64, size: usize) -> Option<f64> {
    table
        .iter()
        .find(|r| r.brokers_on_path == path && r.matching_pct == matching && r.rate_msg_s == rate && r.size_b == size)
        .and_then(|r| r.mean_ms)
}

impl Hops {
    fn paths(table: &[NaradaRow]) -> Vec<usize> {
        let mut paths: Vec<usize> = table.iter().map(|r| r.brokers_on_path).collect();
        paths.sort_unstable();
        paths.dedup();
        paths
    }

    fn figure(&self, table: &[NaradaRow]) -> Figure {
        let g = &self.0.grid;
        let size = g.sizes.iter().copied().max().unwrap_or(0);
        let colors = [figure::TIDINGS, figure::TIDINGS_ALT, figure::NATS_ANCHOR, 5, 6, 7];
        let paths = Self::paths(table);
        let mut by_path = Vec::new();
        for (i, (&m, &rate)) in g.matching.iter().flat_map(|m| g.rates.iter().map(move |r| (m, r))).enumerate() {
            let pts = paths.iter().filter_map(|&p| mean(table, p, m, rate, size).map(|v| (p as f64, v))).collect();
            by_path.push(Series::new(format!("{m}%, {rate} msg/s"), Mark::Line, colors[i % colors.len()], pts));
        }
        let m = g.matching.first().copied().unwrap_or(50);
        let by_rate = paths
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let pts = g.rates.iter().filter_map(|&r| mean(table, p, m, r, size).map(|v| (r, v))).collect();
                Series::new(format!("{} on the path", brokers(p)), Mark::Line, colors[i % colors.len()], pts)
            })
            .collect();
        let ms = || Axis::log("mean latency (ms)");
        let x = Axis::linear("brokers on the path (publisher's and subscriber's included)");
        Figure {
            title: format!("Latency vs brokers on the path, {size} B (seed 004, 8.4)"),
            panels: vec![
                Panel::new("by brokers on the path", x, ms(), by_path),
                Panel::new(format!("{m}% matching, by publish rate"), Axis::log("publish rate (msg/s)"), ms(), by_rate),
            ],
        }
    }

    fn body(&self, table: &[NaradaRow]) -> String {
        let g = &self.0.grid;
        let paths = Self::paths(table);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Mean latency (ms) at each measuring subscriber. Seed 004 shows these as figures 8.4.2-8.4.7 \
             without values; its text says latency falls as the brokers on the path fall (9, 4, 2, 1), \
             with the same shape against rate and size.\n"
        );
        let head: Vec<String> = ["matching", "rate", "size"]
            .map(String::from)
            .into_iter()
            .chain(paths.iter().map(|&p| brokers(p)))
            .collect();
        md_head(&mut out, &head.iter().map(String::as_str).collect::<Vec<_>>());
        for &m in &g.matching {
            for &size in &g.sizes {
                for &rate in &g.rates {
                    let cells: Vec<String> = paths
                        .iter()
                        .map(|&p| {
                            mean(table, p, m, rate, size).map(|v| format!("{v:.2}")).unwrap_or_else(|| "n/a".into())
                        })
                        .collect();
                    md_row(
                        &mut out,
                        [format!("{m}%"), format!("{rate} msg/s"), format!("{size} B")].into_iter().chain(cells),
                    );
                }
            }
        }
        out
    }
}
