//! The publishers' broker crash, repetition by repetition, tidings beside NATS: the worst
//! publish-to-delivery latency at the subscribers and how long the crash held the publishers
//! up, with the medians and ranges over the repetitions. Issue 40 asks for it: with each
//! pubend's log replicated in the publishers' cell, the crash is answered by a takeover.

use super::faults::PUBLISHERS_CRASH;
use super::held::held;
use super::run::Run;
use super::Params;
use crate::stats::Spread;
use crate::suite::prelude::*;

/// One system's run of one repetition, through the publishers' broker crash.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub(super) struct Row {
    /// The repetition, from 1.
    pub rep: usize,
    /// `tidings` or `NATS`.
    pub system: String,
    /// The largest publish-to-delivery latency at any subscriber from the stall to the next
    /// fault or the end (ms).
    pub worst_latency_ms: Option<f64>,
    /// The longest time a publisher went without an acknowledgement (ms).
    pub publishers_held_ms: Option<f64>,
    /// The same, of the publisher held up least (ms): at least the stall if every publisher
    /// was at the broker that crashed.
    pub least_held_ms: Option<f64>,
    /// From the kill to every publisher's next acknowledgement (ms).
    pub resumed_after_kill_ms: Option<f64>,
    /// How long the crashed broker was down (ms).
    pub down_ms: f64,
    /// Whether every publisher went on before the broker was back (a takeover).
    pub before_restart: bool,
    /// Whether every publisher was at the crashed broker when it stalled.
    pub held_by_the_stall: bool,
}

/// The row of `run` (`None` when its fault log has no publishers' crash).
pub(super) fn row(p: &Params, rep: usize, system: &str, run: &Run) -> Option<Row> {
    let k = run.windows.iter().position(|w| w.label == PUBLISHERS_CRASH)?;
    let w = &run.windows[k];
    let worst = (0..run.subscribers.len()).filter_map(|i| run.recovery(p, k, i).worst_ms).reduce(f64::max);
    let h = held(w, &run.acks, run.until_ms(p, k));
    let row = Row {
        rep,
        system: system.to_string(),
        worst_latency_ms: worst,
        publishers_held_ms: h.longest_gap_ms,
        least_held_ms: h.least_gap_ms,
        resumed_after_kill_ms: h.resumed_ms,
        down_ms: w.ended_ms.saturating_sub(w.failed_ms) as f64,
        before_restart: h.before_the_end(w),
        held_by_the_stall: h.held_by_the_stall(w),
    };
    Some(row)
}

/// The Markdown of `rows`: one line per repetition and system, then per system the median
/// and range over the repetitions.
pub(super) fn section(p: &Params, rows: &[Row], body: &mut String) {
    let (brokers, cell, servers) = (p.cell.len(), p.cell.join(", "), p.cell.join(","));
    let answer = match p.replicas {
        Some(n) => format!(
            "each pubend's log is replicated on the {brokers} brokers of the publishers' cell ({cell}, `[storage] \
             replicas = {n}`), and the publishers are given all of them (`--server {servers}`): when p1 dies a mate \
             takes their pubends over and they go on there"
        ),
        None => "p1 is alone in its cell (`--unreplicated`): the publishers wait until it is back".to_string(),
    };
    let _ = writeln!(
        body,
        "\n### The publishers' broker crash\n\nIn this run {answer}. Worst latency: the largest publish-to-delivery \
         latency at either subscriber from p1's stall to the end of the run; held up: the longest time one publisher \
         went without an acknowledgement across the crash (the stall before the kill included, as for NATS's n1); \
         resumed: from the SIGKILL to when every publisher had an acknowledgement again; before restart: whether that \
         came before p1 was back. A publisher at p1 waits out its stall at least, so the publisher held up least tells \
         whether they all were there (`least_held_ms` in `failures-takeover.csv`, which has the rows).\n"
    );
    let show = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0}"));
    md_table(
        body,
        rows,
        &[
            ("repetition", &|r| r.rep.to_string()),
            ("system", &|r| r.system.clone()),
            ("worst latency (ms)", &|r| show(r.worst_latency_ms)),
            ("publishers held up (ms)", &|r| show(r.publishers_held_ms)),
            ("... the least held (ms)", &|r| show(r.least_held_ms)),
            ("resumed after the kill (ms)", &|r| show(r.resumed_after_kill_ms)),
            ("p1 down (ms)", &|r| show(Some(r.down_ms))),
            ("before restart", &|r| if r.before_restart { "yes" } else { "no" }.to_string()),
        ],
    );
    let systems: Vec<&str> = rows.iter().fold(Vec::new(), |mut v, r| {
        if !v.contains(&r.system.as_str()) {
            v.push(&r.system);
        }
        v
    });
    body.push('\n');
    let by_system = systems.into_iter().map(|s| (s, rows.iter().filter(|r| r.system == s).collect::<Vec<&Row>>()));
    let spread = |mine: &[&Row], f: fn(&Row) -> Option<f64>| {
        let values: Vec<f64> = mine.iter().filter_map(|r| f(r)).collect();
        match values.len() == mine.len() {
            true => Spread::of(&values).show(|v| format!("{v:.0}")),
            false => format!("never in {} of {}", mine.len() - values.len(), mine.len()),
        }
    };
    md_table(
        body,
        by_system,
        &[
            ("system", &|(s, _)| s.to_string()),
            ("repetitions", &|(_, mine)| mine.len().to_string()),
            ("worst latency, median [range] (ms)", &|(_, mine)| spread(mine, |r| r.worst_latency_ms)),
            ("publishers held up, median [range] (ms)", &|(_, mine)| spread(mine, |r| r.publishers_held_ms)),
            ("resumed after the kill, median [range] (ms)", &|(_, mine)| spread(mine, |r| r.resumed_after_kill_ms)),
        ],
    );
}

/// `rows` as `failures-takeover.csv`.
pub(super) fn table(rows: &[Row]) -> anyhow::Result<Table> {
    Table::typed(rows)
}
