//! What `overhead` shows: the medians over repetitions of each broker's CPU and of the local
//! and remote latency, by mode and subscriber count, as a figure (seed 001's figures 4 and 5
//! side by side) and as the report's table, with the guaranteed-minus-best-effort difference.

use super::nats::{CORE, JETSTREAM};
use super::rows::{mode, Row};
use super::Params;
use crate::stats::median_if_any;
use crate::suite::figure::{NATS, NATS_ANCHOR, TIDINGS, TIDINGS_ALT};
use crate::suite::prelude::*;

/// Every mode with its colour, each durable one after its cheap one: tidings' best effort
/// and guaranteed, then NATS core and JetStream (measured with `--nats`).
const MODES: [(&str, usize); 4] =
    [("best-effort", TIDINGS_ALT), ("guaranteed", TIDINGS), (CORE, NATS_ANCHOR), (JETSTREAM, NATS)];

/// The median over repetitions of `value` for one mode at `n` subscribers.
fn med(rows: &[Row], mode: &str, n: usize, value: impl Fn(&Row) -> f64) -> Option<f64> {
    med_of(rows, mode, n, |r| Some(value(r)))
}

/// The median of a figure some rows do not have (`None` when none of the point's rows has it).
fn med_of(rows: &[Row], mode: &str, n: usize, value: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    median_if_any(&rows.iter().filter(|r| r.mode == mode && r.subscribers == n).filter_map(value).collect::<Vec<_>>())
}

/// The modes the rows hold, in [`MODES`] order.
fn modes(rows: &[Row]) -> Vec<(&'static str, usize)> {
    MODES.into_iter().filter(|(m, _)| rows.iter().any(|r| r.mode == *m)).collect()
}

/// Subscriber counts measured, ascending.
fn counts(rows: &[Row]) -> Vec<usize> {
    let mut n: Vec<usize> = rows.iter().map(|r| r.subscribers).collect();
    n.sort_unstable();
    n.dedup();
    n
}

/// One series per mode of `value` against subscribers; `dashed` for the second of a panel.
fn series(rows: &[Row], what: &str, dashed: bool, value: impl Fn(&Row) -> f64 + Copy) -> Vec<Series> {
    modes(rows)
        .into_iter()
        .map(|(m, color)| {
            let points = counts(rows).into_iter().filter_map(|n| Some((n as f64, med(rows, m, n, value)?))).collect();
            let mark = if dashed { Mark::Dashed } else { Mark::Line };
            Series::new(format!("{what}, {m}"), mark, color, points)
        })
        .collect()
}

/// CPU of each broker, and median latency local and remote, against subscribers.
pub(super) fn figure(rows: &[Row]) -> Figure {
    let x = || Axis::log("subscribers at shb");
    let mut cpu = series(rows, "shb", false, |r| r.shb_cpu_pct);
    cpu.extend(series(rows, "phb", true, |r| r.phb_cpu_pct));
    let mut latency = series(rows, "remote", false, |r| ms(r.remote_p50_us));
    latency.extend(series(rows, "local", true, |r| ms(r.local_p50_us)));
    Figure {
        title: "guaranteed delivery against best effort, two brokers (seed 001 §4.1)".into(),
        panels: vec![
            Panel::new("CPU of each broker", x(), Axis::linear("CPU (% of one core)"), cpu),
            Panel::new("median latency", x(), Axis::log("latency (ms)"), latency),
        ],
    }
}

/// The report table's figures, in its column order: each broker's CPU (the publisher's, then
/// its log writer's share of it), then latency local and remote (p50, p99, ms).
const FIGURES: [fn(&Row) -> Option<f64>; 7] = [
    |r| Some(r.phb_cpu_pct),
    |r| r.phb_log_writer_cpu_pct,
    |r| Some(r.shb_cpu_pct),
    |r| Some(ms(r.local_p50_us)),
    |r| Some(ms(r.local_p99_us)),
    |r| Some(ms(r.remote_p50_us)),
    |r| Some(ms(r.remote_p99_us)),
];

/// Microseconds as milliseconds.
fn ms(us: u64) -> f64 {
    us as f64 / 1e3
}

/// The report's text: a table of medians with the differences, and what the seed found.
pub(super) fn body(p: &Params, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Medians over repetitions (each row of the CSV is one repetition). CPU in % of one core over the \
         publishing (*of which log writer*: the publisher's broker's pubend log writer thread, its writes and \
         syncs); latency from the scheduled send time to the subscriber's receipt, ms.\n"
    );
    let cpu = ["phb CPU", "of which log writer", "shb CPU"];
    let latency = ["local p50", "local p99", "remote p50", "remote p99"];
    md_head(&mut out, &[&["subscribers", "mode"][..], &cpu, &latency, &["reps"]].concat());
    let present = modes(rows);
    for n in counts(rows) {
        for &(g, _) in &present {
            let m = |v: fn(&Row) -> Option<f64>| med_of(rows, g, n, v).map_or("n/a".into(), |v| format!("{v:.1}"));
            let reps = rows.iter().filter(|r| r.mode == g && r.subscribers == n).count();
            md_row(
                &mut out,
                [n.to_string(), g.to_string()].into_iter().chain(FIGURES.map(m)).chain([reps.to_string()]),
            );
        }
        for (cheap, durable, label) in [(mode(false), mode(true), "tidings"), (CORE, JETSTREAM, "NATS")] {
            let diff = |v: fn(&Row) -> Option<f64>| match (med_of(rows, durable, n, v), med_of(rows, cheap, n, v)) {
                (Some(a), Some(b)) => format!("{:+.1}", a - b),
                _ => "n/a".into(),
            };
            if med(rows, durable, n, |r| r.phb_cpu_pct).is_none() {
                continue;
            }
            let what = format!("{label}: {durable} - {cheap}");
            md_row(&mut out, [n.to_string(), what].into_iter().chain(FIGURES.map(diff)).chain([String::new()]));
        }
    }
    let (groups, share, local) = (p.groups, p.rate / p.groups as f64, p.local);
    let _ = writeln!(
        out,
        "\nThe seed (Gryphon, 2000 msg/s of 250 B, 2 msg/s per subscriber, up to 16,000 subscribers): the guaranteed \
         protocol cost under 4% more CPU at the subscribers' broker, constant with the subscribers, and about 8% more \
         at the publisher's broker (the logging); about 100 ms more latency, local and remote alike, from the logging. \
         Here each subscriber takes one of {groups} topics ({share} msg/s); the {local} local subscribers take topics \
         0..{local} (so the local figures rest on fewer deliveries: see `local_samples` in the CSV). Both brokers and \
         every client share this \
         machine's cores, so the CPU figures include their contention. With `--nats`, NATS runs the same traffic \
         on a fresh two-node cluster right after tidings in each repetition: core NATS, and JetStream with an R1 \
         file stream on the publisher's node syncing every write (`sync_interval: always`), acknowledged \
         publishes (256 in flight) and a durable pull consumer per subscriber acknowledging each message; for \
         NATS, phb and shb are its two nodes and the CPU is read over the publishing as for tidings."
    );
    out
}
