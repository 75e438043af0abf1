//! The typed rows of the flood experiments (`sizes`, `fanout`, `proxy`): one per subscriber
//! and one for all, per repetition, of tidings, NATS now or a committed anchor; and the cells
//! of the report's tables, computed from them.

use super::seed002::{Measured, WINDOW};
use crate::peer::anchors::Point;
use crate::peer::{Anchors, PeerRow};
use crate::stats::{lower_median, median, median_if_any, window_rates};

/// The load average before and after a point (`None` when unknown).
pub type Load = [Option<f64>; 2];

/// One subscriber's (or, `subscriber = "all"`, every subscriber's) figures in one repetition
/// of a flood point, tidings or NATS: the typed row behind the CSV, the plots and the report.
/// Rates in msg/s, MB = 10^6 bytes; `st_*`/`rt_*` are the seed's method (tidings only).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FloodRow {
    /// `tidings`, `nats` or `nats-anchor`.
    pub system: String,
    /// `this session` or `committed anchor`.
    pub source: String,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Payload bytes.
    pub size_b: usize,
    /// Repetition, from 1.
    pub rep: usize,
    /// `1`, `2`, ... or `all`.
    pub subscriber: String,
    /// Messages sent.
    pub sent: Option<f64>,
    /// Messages received (distinct, by number).
    pub received: Option<f64>,
    /// Messages lost.
    pub lost: Option<f64>,
    /// The seed's STn median.
    pub st_median_msg_s: Option<f64>,
    /// The seed's RTn median (summed over subscribers in `all`).
    pub rt_median_msg_s: Option<f64>,
    /// The same in MB/s.
    pub rt_median_mb_s: Option<f64>,
    /// Received / time (the peer harness's figure).
    pub received_msg_s: Option<f64>,
    /// The same in MB/s.
    pub received_mb_s: Option<f64>,
    /// Slowest subscriber's received / time.
    pub per_sub_min_msg_s: Option<f64>,
    /// Median subscriber's.
    pub per_sub_median_msg_s: Option<f64>,
    /// Fastest subscriber's.
    pub per_sub_max_msg_s: Option<f64>,
    /// Drops the brokers counted.
    pub broker_drops: Option<f64>,
    /// Load average before the point.
    pub load_before: Option<f64>,
    /// Load average after it.
    pub load_after: Option<f64>,
}

/// One figure of a [`FloodRow`].
pub type Field = fn(&FloodRow) -> Option<f64>;

/// Our rows for one point: one per subscriber, then `all`.
pub fn rows(table: &mut Vec<FloodRow>, size: usize, rep: usize, m: &Measured) {
    let run = &m.run;
    let mb = |rate: f64| Some(rate * size as f64 / 1e6);
    let st = lower_median(&window_rates(&run.send_times, WINDOW));
    let mean_rates: Vec<f64> = run.subscribers.iter().map(|s| s.mean_rate()).collect();
    let mut rt_sum = 0.0;
    let base = FloodRow {
        system: "tidings".into(),
        source: "this session".into(),
        subscribers: run.subscribers.len(),
        size_b: size,
        rep,
        sent: Some(run.sent as f64),
        st_median_msg_s: st,
        load_before: m.load[0],
        load_after: m.load[1],
        ..FloodRow::default()
    };
    for (i, s) in run.subscribers.iter().enumerate() {
        let rt = lower_median(&window_rates(&s.times, WINDOW)).unwrap_or(f64::NAN);
        rt_sum += rt;
        let rate = s.mean_rate();
        table.push(FloodRow {
            subscriber: (i + 1).to_string(),
            received: Some(s.tally.count as f64),
            lost: Some(run.sent.saturating_sub(s.tally.count) as f64),
            rt_median_msg_s: Some(rt),
            rt_median_mb_s: mb(rt),
            received_msg_s: Some(rate),
            received_mb_s: mb(rate),
            per_sub_min_msg_s: Some(rate),
            per_sub_median_msg_s: Some(rate),
            per_sub_max_msg_s: Some(rate),
            ..base.clone()
        });
    }
    let received: u64 = run.subscribers.iter().map(|s| s.tally.count).sum();
    let agg = run.aggregate_rate();
    let (lo, hi) =
        (mean_rates.iter().copied().fold(f64::INFINITY, f64::min), mean_rates.iter().copied().fold(0.0, f64::max));
    table.push(FloodRow {
        subscriber: "all".into(),
        received: Some(received as f64),
        lost: Some(run.lost() as f64),
        rt_median_msg_s: Some(rt_sum),
        rt_median_mb_s: mb(rt_sum),
        received_msg_s: Some(agg),
        received_mb_s: mb(agg),
        per_sub_min_msg_s: Some(lo),
        per_sub_median_msg_s: Some(median(&mean_rates)),
        per_sub_max_msg_s: Some(hi),
        broker_drops: Some(m.drops),
        ..base
    });
}

/// Peer-harness throughput rows (NATS now, `nats`, or a committed anchor, `nats-anchor`) as
/// `all` rows of `system`.
pub fn peer_rows(
    table: &mut Vec<FloodRow>,
    (system, source): (&str, &str),
    size: usize,
    (first_rep, load): (usize, Load),
    rows: &[PeerRow],
) {
    for (i, r) in rows.iter().enumerate() {
        table.push(FloodRow {
            system: system.into(),
            source: source.into(),
            subscribers: r.num("subs").unwrap_or(0.0) as usize,
            size_b: size,
            rep: first_rep + i,
            subscriber: "all".into(),
            sent: r.num("sent"),
            received: r.num("recv_total"),
            lost: r.num("lost"),
            received_msg_s: r.num("agg_recv_msgs_s"),
            received_mb_s: r.num("agg_recv_MB_s"),
            per_sub_min_msg_s: r.num("per_sub_min_msgs_s"),
            per_sub_median_msg_s: r.num("per_sub_median_msgs_s"),
            per_sub_max_msg_s: r.num("per_sub_max_msgs_s"),
            load_before: load[0],
            load_after: load[1],
            ..FloodRow::default()
        });
    }
}

/// The committed anchors' rows of `point` (`nats-anchor`), when the anchors were found: what
/// every flood experiment shows beside NATS measured now.
pub fn anchor_rows(table: &mut Vec<FloodRow>, anchors: Option<&Anchors>, point: Point<'_>) {
    if let Some(anchors) = anchors {
        let rows = anchors.throughput(point);
        peer_rows(table, ("nats-anchor", "committed anchor"), point.size as usize, (1, [None, None]), &rows);
    }
}

/// `system`'s (`nats` or `nats-anchor`) `column` at a point as text, with the share it lost
/// when it lost any.
pub fn nats_cell(table: &[FloodRow], system: &str, subscribers: usize, size: usize, column: Field) -> String {
    let cell = |c: Field| median_cell(table, system, subscribers, size, "all", c);
    match cell(column) {
        None => "n/a".into(),
        Some(v) => match (cell(|r| r.lost), cell(|r| r.sent)) {
            (Some(lost), Some(sent)) if lost > 0.0 && sent > 0.0 => {
                let share = 100.0 * lost / (sent * subscribers as f64);
                format!("{} ({share:.0}% lost)", crate::suite::text::thousands(v))
            }
            _ => crate::suite::text::thousands(v),
        },
    }
}

/// `median [min-max]` of repetitions' `values` ([`values`]), `!` when the spread passes 25 %;
/// `n/a` without any.
pub fn range_cell(values: &[f64]) -> String {
    if values.is_empty() {
        return "n/a".into();
    }
    crate::stats::Spread::of(values).show(crate::suite::text::thousands)
}

/// Median of ours over median of NATS's `received_msg_s` at one point, `n/a` when either is missing.
pub fn ratio_cell(table: &[FloodRow], subscribers: usize, size: usize) -> String {
    let ours = median_cell(table, "tidings", subscribers, size, "all", |r| r.received_msg_s);
    let theirs = median_cell(table, "nats", subscribers, size, "all", |r| r.received_msg_s);
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    }
}

/// Every repetition's `field` in the rows of `system` with `subscribers` and `size` for
/// subscriber `which` (`all` or a number).
pub fn values(
    table: &[FloodRow],
    system: &str,
    subscribers: usize,
    size: usize,
    which: &str,
    field: Field,
) -> Vec<f64> {
    table
        .iter()
        .filter(|r| r.system == system && r.subscribers == subscribers && r.size_b == size && r.subscriber == which)
        .filter_map(field)
        .filter(|v| v.is_finite())
        .collect()
}

/// The median over repetitions of `column` in the rows of `system` with `subscribers` and
/// `size` for subscriber `which` (`all` or a number).
pub fn median_cell(
    table: &[FloodRow],
    system: &str,
    subscribers: usize,
    size: usize,
    which: &str,
    column: Field,
) -> Option<f64> {
    median_if_any(&values(table, system, subscribers, size, which, column))
}
