//! The plot of `network`: throughput and CPU per message through one and two brokers,
//! latency by brokers on the path, and the gap a fault leaves.

use super::present::path_points;
use super::NetRow;
use super::{median, ANCHOR, NATS, TIDINGS};
use crate::suite::figure::{self, Axis, Figure, Mark, Panel, Series};

/// `(x, median)` at one and two brokers, where there is one.
fn by_brokers(table: &[NetRow], part: &str, system: &str, quantity: &str) -> Vec<(f64, f64)> {
    [1, 2].into_iter().filter_map(|b| median(table, part, system, b, quantity).map(|v| (b as f64, v))).collect()
}

/// CPU µs per message of the brokers alone (all processes but the clients).
fn brokers_cpu(table: &[NetRow], system: &str) -> Vec<(f64, f64)> {
    let all = by_brokers(table, "throughput", system, "cpu_us_per_msg.total");
    let clients = by_brokers(table, "throughput", system, "cpu_us_per_msg.clients");
    all.iter().zip(&clients).map(|(&(x, a), &(_, c))| (x, a - c)).collect()
}

/// The fault rows in table order: (setup, [(quantity, value)]).
pub(super) fn faults(table: &[NetRow]) -> Vec<(String, Vec<(String, f64)>)> {
    let mut out: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    for r in table.iter().filter(|r| r.part == "reconvergence") {
        let (setup, quantity, value) = (&r.setup, &r.quantity, r.value);
        match out.iter_mut().find(|(s, _)| s == setup) {
            Some((_, values)) => values.push((quantity.clone(), value)),
            None => out.push((setup.clone(), vec![(quantity.clone(), value)])),
        }
    }
    out
}

/// The four panels.
pub(super) fn figure(table: &[NetRow]) -> Figure {
    let tput = |system, quantity| by_brokers(table, "throughput", system, quantity);
    let brokers = || Axis::linear("brokers between publisher and subscriber");
    let anchor = tput(ANCHOR, "received_msg_s");
    let lines = vec![
        Series::new("tidings", Mark::Line, figure::TIDINGS, tput(TIDINGS, "received_msg_s")),
        Series::new("NATS (one node; cluster)", Mark::Line, figure::NATS, tput(NATS, "received_msg_s")),
        Series::new("NATS cluster, committed anchor", Mark::Dashed, figure::NATS_ANCHOR, anchor),
    ];
    let throughput = Panel::new("throughput, 2000 B, 1 subscriber", brokers(), Axis::linear("received (msg/s)"), lines);
    let lines = vec![
        Series::new("tidings, all", Mark::Line, figure::TIDINGS, tput(TIDINGS, "cpu_us_per_msg.total")),
        Series::new("tidings, brokers", Mark::Dashed, figure::TIDINGS, brokers_cpu(table, TIDINGS)),
        Series::new("tidings, clients", Mark::Points, figure::TIDINGS_ALT, tput(TIDINGS, "cpu_us_per_msg.clients")),
        Series::new("NATS, all", Mark::Line, figure::NATS, tput(NATS, "cpu_us_per_msg.total")),
    ];
    let y = Axis::linear("CPU per message received (µs)");
    let cpu = Panel::new("CPU per message, all processes", brokers(), y, lines);
    Figure { title: "Through broker links, 2000 B".into(), panels: vec![throughput, cpu, latency(table), gaps(table)] }
}

fn latency(table: &[NetRow]) -> Panel {
    let measuring: Vec<String> = table.iter().filter(|r| r.part == "path").map(|r| r.setup.clone()).collect();
    let path = |q: &str| -> Vec<(f64, f64)> {
        let mut points: Vec<(f64, f64)> = path_points(table, &measuring)
            .into_iter()
            .filter_map(|(_, b)| median(table, "path", TIDINGS, b, q).map(|v| (b as f64, v)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points.dedup_by(|a, b| a.0 == b.0);
        points
    };
    let at = |system| by_brokers(table, "latency", system, "p50_us");
    let lines = vec![
        Series::new("tidings p50, narada-22-sparse", Mark::Line, figure::TIDINGS, path("p50_us")),
        Series::new("tidings p99, narada-22-sparse", Mark::Dashed, figure::TIDINGS, path("p99_us")),
        Series::new("tidings p50, two-brokers", Mark::Points, figure::TIDINGS_ALT, at(TIDINGS)),
        Series::new("NATS cluster p50", Mark::Line, figure::NATS, at(NATS)),
        Series::new("NATS cluster p50, committed anchor", Mark::Dashed, figure::NATS_ANCHOR, at(ANCHOR)),
    ];
    let x = Axis::linear("brokers on the path (publisher's and subscriber's included)");
    Panel::new("latency at 1000 msg/s, by brokers on the path", x, Axis::log("latency (µs)"), lines)
}

fn gaps(table: &[NetRow]) -> Panel {
    let bars: Vec<(f64, f64, f64)> = faults(table)
        .iter()
        .enumerate()
        .filter_map(|(i, (_, values))| {
            let gap = values.iter().find(|(q, _)| q == "longest_gap_ms")?.1;
            Some(((i + 1) as f64, 0.0, gap))
        })
        .collect();
    let x = Axis::linear("fault of the carrying bundle broker: 1 = SIGKILL, 2 = SIGSTOP");
    let lines = vec![Series::ranges("tidings, gryphon-fig3, 1 msg/ms", figure::TIDINGS, bars)];
    Panel::new("re-convergence: longest gap at s1", x, Axis::linear("longest gap in deliveries (ms)"), lines)
}
