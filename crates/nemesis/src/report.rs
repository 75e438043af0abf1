//! What a nemesis run writes: `nemesis.csv` (one row per schedule), `subscribers.csv` (one row
//! per subscriber of each schedule: its counts), `recovery.csv` (per fault
//! kind, the time from a fault's end to each affected subscriber's next delivery: count,
//! median, max) and `summary.md` (the totals, every failing schedule with its replay command).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::run::Outcome;
use super::schedule::Schedule;
use super::NemesisArgs;
use crate::table::{median, Table};

/// One schedule's row of `nemesis.csv`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// The schedule's seed.
    pub seed: u64,
    /// The topology's name.
    pub topology: String,
    /// Whether kills dropped unsynced writes.
    pub power_loss: bool,
    /// How many faults.
    pub faults: usize,
    /// The faults, `;`-separated.
    pub fault_list: String,
    /// Acknowledged publishes.
    pub acked: usize,
    /// Delivery lines over all subscribers.
    pub delivered: usize,
    /// Expected and lost with no gap notice, over all subscribers.
    pub lost_silent: usize,
    /// Expected and lost inside a gap notice.
    pub lost_in_gap: usize,
    /// Repeated deliveries.
    pub duplicated: usize,
    /// Deliveries out of order (or at another tick than acknowledged).
    pub reordered: usize,
    /// Median recovery over the schedule's faults and affected subscribers, ms.
    pub recovery_median_ms: Option<f64>,
    /// Largest recovery, ms.
    pub recovery_max_ms: Option<f64>,
    /// The guarantee broken, a fault not made, or the schedule not run.
    pub failed: bool,
    /// What failed, per subscriber (or the error).
    pub why: String,
    /// Streams stuck at the end (`crate::stuck`), `;`-separated.
    pub stuck: String,
    /// Per fault kind, every recovery time (ms); not a CSV column.
    #[serde(skip)]
    pub recoveries: Vec<(&'static str, f64)>,
    /// Per subscriber, its `subscribers.csv` row; not a CSV column.
    #[serde(skip)]
    pub subscribers: Vec<Vec<String>>,
}

impl Row {
    /// The row of schedule `s`'s outcome.
    pub fn new(topology: &str, s: &Schedule, outcome: &anyhow::Result<Outcome>) -> Row {
        let faults: Vec<String> = s.faults.iter().map(ToString::to_string).collect();
        let mut row = Row {
            seed: s.seed,
            topology: topology.to_string(),
            power_loss: s.power_loss,
            faults: faults.len(),
            fault_list: faults.join("; "),
            ..Row::default()
        };
        let o = match outcome {
            Ok(o) => o,
            Err(e) => {
                (row.failed, row.why) = (true, format!("did not run: {e:#}"));
                return row;
            }
        };
        row.acked = o.acked;
        let mut why = Vec::new();
        for ((name, durable, v), sub) in o.verdicts.iter().zip(&s.subscribers) {
            row.subscribers.push(
                [s.seed.to_string(), name.clone(), sub.broker.clone(), sub.selector.clone().unwrap_or_default()]
                    .into_iter()
                    .chain(
                        [v.expected, v.delivered, v.lost_silent, v.lost_in_gap, v.duplicated, v.redelivered]
                            .map(|n| n.to_string()),
                    )
                    .chain([v.reordered + v.wrong_tick, v.unacked, v.gaps].map(|n| n.to_string()))
                    .chain([v.failed(*durable).to_string()])
                    .collect(),
            );
            row.delivered += v.delivered;
            row.lost_silent += v.lost_silent;
            row.lost_in_gap += v.lost_in_gap;
            row.duplicated += v.duplicated;
            row.reordered += v.reordered + v.wrong_tick;
            if v.failed(*durable) {
                why.push(format!("{name}: {}", v.describe()));
            }
        }
        why.extend(
            o.faults.iter().filter_map(|d| d.error.as_ref().map(|e| format!("fault {} not made: {e}", d.fault))),
        );
        if !o.failed_publishers.is_empty() {
            why.push(format!("(publishers not fully acknowledged in time: {})", o.failed_publishers.join(", ")));
        }
        row.stuck = o.stuck.join("; ");
        row.failed = o.failed();
        row.why = why.join(" | ");
        row.recoveries = o.recoveries.iter().map(|(k, ms)| (k.name(), *ms)).collect();
        let all: Vec<f64> = row.recoveries.iter().map(|(_, ms)| *ms).collect();
        if !all.is_empty() {
            row.recovery_median_ms = Some(median(&all));
            row.recovery_max_ms = all.iter().copied().reduce(f64::max);
        }
        row
    }
}

/// Writes the three files to `args.out`; returns the summary's text.
pub fn write(args: &NemesisArgs, rows: &[Row]) -> anyhow::Result<String> {
    std::fs::write(args.out.join("nemesis.csv"), Table::typed(rows)?.to_csv())?;
    let mut subs = Table::new(&[
        "seed",
        "subscriber",
        "broker",
        "selector",
        "expected",
        "delivered",
        "lost_silent",
        "lost_in_gap",
        "duplicated",
        "redelivered",
        "reordered",
        "unacked",
        "gap_notices",
        "failed",
    ]);
    for row in rows.iter().flat_map(|r| &r.subscribers) {
        subs.push(row.clone())?;
    }
    std::fs::write(args.out.join("subscribers.csv"), subs.to_csv())?;
    let mut by_kind: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (kind, ms) in rows.iter().flat_map(|r| &r.recoveries) {
        by_kind.entry(kind).or_default().push(*ms);
    }
    let mut recovery = Table::new(&["fault", "affected", "median_ms", "max_ms"]);
    for (kind, ms) in &by_kind {
        let max = ms.iter().copied().fold(0.0, f64::max);
        recovery.push(vec![
            kind.to_string(),
            ms.len().to_string(),
            format!("{:.0}", median(ms)),
            format!("{max:.0}"),
        ])?;
    }
    std::fs::write(args.out.join("recovery.csv"), recovery.to_csv())?;
    let failed: Vec<&Row> = rows.iter().filter(|r| r.failed).collect();
    let sum = |f: fn(&Row) -> usize| rows.iter().map(f).sum::<usize>();
    let mut text = String::new();
    let clients = if args.client_faults { ", with client faults" } else { "" };
    let compact = args.compact_bytes.map(|b| format!(", compaction every {b} bytes of entries")).unwrap_or_default();
    let cells = [("publishers", &args.publishers_cell), ("subscribers", &args.subscribers_cell)]
        .iter()
        .filter_map(|(who, cell)| cell.as_ref().map(|c| format!(", {who} in cell {c}")))
        .collect::<String>();
    let _ = writeln!(text, "# nemesis: {}{cells}{clients}{compact}\n", args.topology.display());
    let _ = writeln!(
        text,
        "{} schedules of {} s (seeds {}..={}), {} faults: {} acknowledged publishes, {} deliveries; lost silently {}, \
         lost in a gap {}, duplicated {}, reordered {}. {} schedules failed.\n",
        rows.len(),
        args.duration.as_secs_f64(),
        args.seed,
        args.seed.wrapping_add(rows.len().saturating_sub(1) as u64),
        sum(|r| r.faults),
        sum(|r| r.acked),
        sum(|r| r.delivered),
        sum(|r| r.lost_silent),
        sum(|r| r.lost_in_gap),
        sum(|r| r.duplicated),
        sum(|r| r.reordered),
        failed.len()
    );
    let _ = writeln!(text, "Recovery, from a fault's end (or, when faults overlapped, the last heal of that outage before the delivery) to an affected subscriber's next delivery:\n");
    let _ = writeln!(text, "| fault | affected | median ms | max ms |\n| --- | ---: | ---: | ---: |");
    for row in recovery.rows() {
        let _ = writeln!(text, "| {} |", row.join(" | "));
    }
    for r in failed {
        let stuck = match r.stuck.is_empty() {
            true => String::new(),
            false => format!("\n- streams stuck at the end: {}", r.stuck),
        };
        let _ = writeln!(
            text,
            "\n## FAILED seed {}\n\n- faults: {}\n- {}{stuck}\n- replay: `{}`",
            r.seed,
            r.fault_list,
            r.why,
            args.replay(r.seed)
        );
    }
    std::fs::write(args.out.join("summary.md"), &text)?;
    Ok(text)
}

/// Copies a failing schedule's files (the tools' lines and logs, the brokers' logs, states and
/// metrics at the end, the fault log) to `keep`.
pub fn keep(dir: &Path, keep: &Path) {
    if std::fs::create_dir_all(keep).is_err() {
        return;
    }
    for from in [dir.to_path_buf(), dir.join("net")] {
        for entry in std::fs::read_dir(&from).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "jsonl" || e == "log" || e == "toml" || e == "json" || e == "txt")
            {
                let name = entry.file_name().to_string_lossy().into_owned();
                let name = if from == dir { name } else { format!("net-{name}") };
                let _ = std::fs::copy(&path, keep.join(name));
            }
        }
    }
}
