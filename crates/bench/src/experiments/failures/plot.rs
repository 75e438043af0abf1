//! The plot of `failures`, after seed 001's figure 6: latency at each subscriber over time,
//! and nacks sent and nack range at s1 and the intermediate brokers, with every fault's stall,
//! failure and end marked by a vertical bar; and the publishers' acknowledgements over time,
//! where the gap a crash of their broker leaves (a takeover's, or a restart's) shows.

use super::faults::Window;
use super::series::{LatencyBin, NackBin, Series};
use crate::suite::figure::{Axis, Figure, Mark, Panel, Series as Line, SEED};

/// Palette entries of the brokers' lines: every one but the fault markers' ([`SEED`]).
const COLORS: [usize; 7] = [0, 1, 2, 3, 5, 6, 7];

/// Thin vertical lines at the fault instants, spanning `low..=high`.
fn markers(windows: &[Window], t0_ms: u64, (low, high): (f64, f64)) -> Line {
    let x = |ms: u64| ms.saturating_sub(t0_ms) as f64 / 1e3;
    let ranges = windows.iter().flat_map(|w| [w.stalled_ms, w.failed_ms, w.ended_ms]).map(|t| (x(t), low, high));
    Line::events("faults (stall, fail, end)", SEED, ranges.collect())
}

fn time() -> Axis {
    Axis::linear("time since publishing began (s)")
}

/// The largest y of `lines`, at least 1.
fn top(lines: &[Line]) -> f64 {
    lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(1.0, f64::max)
}

/// Latency (p50 and max) at one subscriber.
fn latency_panel(series: &Series, i: usize, windows: &[Window], t0_ms: u64) -> Panel {
    let (name, bins) = &series.latency[i];
    let pick = |f: fn(&LatencyBin) -> Option<f64>| -> Vec<(f64, f64)> {
        series.t_s.iter().zip(bins).filter_map(|(t, b)| f(b).map(|v| (*t, v))).collect()
    };
    let mut lines = vec![
        // Points, not lines: a line would bridge the bins without deliveries of an outage.
        Line::new("p50", Mark::Points, 0, pick(|b| b.p50_ms)),
        Line::new("max", Mark::Points, 2, pick(|b| b.max_ms)),
    ];
    // Log scale: milliseconds in steady state and seconds in an outage, both readable.
    lines.push(markers(windows, t0_ms, (0.1, top(&lines))));
    Panel::new(format!("latency at {name}, per bin"), time(), Axis::log("latency (ms)"), lines)
}

/// One nack quantity at every watched broker, a line each.
fn nack_lines(series: &Series, f: fn(&NackBin) -> f64) -> Vec<Line> {
    series
        .nacks
        .iter()
        .enumerate()
        .map(|(c, (name, bins))| {
            // The bins with nacks only: the series is zero nearly everywhere.
            let points = series.t_s.iter().zip(bins).map(|(t, b)| (*t, f(b))).filter(|(_, v)| *v > 0.0).collect();
            Line::new(name.clone(), Mark::Points, COLORS[c % COLORS.len()], points)
        })
        .collect()
}

/// A latency panel per subscriber of `series` (a peer's run, beside ours).
pub(super) fn latency_panels(series: &Series, windows: &[Window], t0_ms: u64) -> Vec<Panel> {
    (0..series.latency.len()).map(|i| latency_panel(series, i, windows, t0_ms)).collect()
}

/// The acknowledgements the publishers took per bin (`who` names the system).
pub(super) fn acks_panel(who: &str, series: &Series, windows: &[Window], t0_ms: u64) -> Panel {
    let points = series.t_s.iter().zip(&series.acks).map(|(t, a)| (*t, *a as f64)).collect();
    let mut lines = vec![Line::new("acknowledgements", Mark::Points, 0, points)];
    lines.push(markers(windows, t0_ms, (0.0, top(&lines))));
    Panel::new(format!("{who}: publishers' acknowledgements, per bin"), time(), Axis::linear("acknowledgements"), lines)
}

/// The four panels; `network` is the topology file's name.
pub(super) fn figure(network: &str, series: &Series, windows: &[Window], t0_ms: u64) -> Figure {
    let mut panels: Vec<Panel> = (0..series.latency.len()).map(|i| latency_panel(series, i, windows, t0_ms)).collect();
    for (title, unit, f) in [
        ("nacks sent, per bin", "nacks", (|b: &NackBin| b.nacks) as fn(&NackBin) -> f64),
        ("nack range sent, per bin", "nacked ticks (ms)", |b: &NackBin| b.range_ms),
    ] {
        let mut lines = nack_lines(series, f);
        lines.push(markers(windows, t0_ms, (0.0, top(&lines))));
        panels.push(Panel::new(title, time(), Axis::linear(unit), lines));
    }
    let network = network.trim_end_matches(".toml");
    Figure { title: format!("guaranteed delivery through faults, {network} (seed 001, figure 6)"), panels }
}
