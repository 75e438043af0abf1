//! What seed 002's three experiments (`sizes`, `fanout`, `proxy`) share: one measured point
//! with its checks, its CSV rows, and NATS's run of the same point through the peer harness.

use std::time::Duration;

use super::Tally;
use crate::flood::{Flood, FloodRun, FloodSpec};
use crate::metrics::{self, scrape_all, Snapshot};
use crate::peer::{nats, NatsTools, PeerRow};
use crate::stats::{load_average, lower_median, median, window_rates};
use crate::suite::Check;

/// Seed 002's M.
pub const WINDOW: usize = 100;

/// What the report says about reading RTn beside received / time.
pub const RTN_NOTE: &str = "Why the RTn medians sit far above *received / time*: the client hands \
    deliveries to the application one socket read at a time, and when the broker writes faster \
    than the subscriber's loop wakes up, one read holds hundreds of messages; the application then \
    takes them at memory speed, and most 100-message windows measure that speed rather than the \
    arrival rate. *Received / time* is the sustained rate; the RTn median is what the seed's \
    formula gives on these bursts, and the RTn trace shows them.";

/// CSV columns of the three experiments. For a row with `subscriber` = `all`,
/// `rt_median_msg_s` is the sum of the subscribers' RTn medians (the seed's "总和").
pub const COLUMNS: &[&str] = &[
    "system",
    "source",
    "subscribers",
    "size_b",
    "rep",
    "subscriber",
    "sent",
    "received",
    "lost",
    "st_median_msg_s",
    "rt_median_msg_s",
    "rt_median_mb_s",
    "received_msg_s",
    "received_mb_s",
    "per_sub_min_msg_s",
    "per_sub_median_msg_s",
    "per_sub_max_msg_s",
    "broker_drops",
    "load_before",
    "load_after",
];

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

/// The brokers a point runs on.
#[derive(Debug, Clone)]
pub struct Sites {
    /// The publisher's broker: client address and admin address.
    pub publisher: (String, String),
    /// Each subscriber's broker client address (one entry per subscriber).
    pub subscribers: Vec<String>,
    /// Admin addresses of the brokers that have subscribers.
    pub subscriber_admins: Vec<String>,
    /// Admin addresses of every broker of the setup.
    pub all_admins: Vec<String>,
}

/// The three properties every point must have.
pub struct FloodChecks {
    published: Tally,
    order: Tally,
    accounted: Tally,
}

impl Default for FloodChecks {
    fn default() -> FloodChecks {
        FloodChecks {
            published: Tally::new("the publisher's broker counted every message (messages in = sent)"),
            order: Tally::new("no subscriber got a duplicate or an out-of-order message"),
            accounted: Tally::new(
                "every delivery accounted: received = messages out at the subscribers' brokers, and \
                 sent × subscribers = received + drops (slow consumers and broker links)",
            ),
        }
    }
}

impl FloodChecks {
    /// The checks, to return in an outcome.
    pub fn into_checks(self) -> Vec<Check> {
        vec![self.published.check(), self.order.check(), self.accounted.check()]
    }
}

/// One measured point.
pub struct Measured {
    /// What the clients saw.
    pub run: FloodRun,
    /// Slow-consumer drops at every broker during the run.
    pub drops: f64,
    /// Data messages written on broker links, all brokers together.
    pub link_messages: f64,
    /// The machine's load average before and after the point.
    pub load: Load,
}

/// Connects, probes, runs one point, and records its checks under the name `at`.
pub async fn measure(sites: &Sites, spec: FloodSpec, checks: &mut FloodChecks, at: &str) -> anyhow::Result<Measured> {
    let load_before = load_average();
    let flood = Flood::connect(spec, Duration::from_secs(30)).await?;
    let before = scrape_all(sites.all_admins.clone()).await?;
    let publisher_before = scrape_all(vec![sites.publisher.1.clone()]).await?;
    let subscriber_before = scrape_all(sites.subscriber_admins.clone()).await?;
    let run = flood.run().await?;
    let after = scrape_all(sites.all_admins.clone()).await?;
    let publisher_after = scrape_all(vec![sites.publisher.1.clone()]).await?;
    let subscriber_after = scrape_all(sites.subscriber_admins.clone()).await?;
    let delta =
        |a: &[Snapshot], b: &[Snapshot], name: &str| -> f64 { a.iter().zip(b).map(|(a, b)| a.delta(b, name)).sum() };
    let counted = delta(&publisher_after, &publisher_before, metrics::MESSAGES_IN);
    checks.published.record(counted == run.sent as f64, format!("{at}: counted {counted} of {}", run.sent));
    let (dups, disorder): (u64, u64) =
        run.subscribers.iter().fold((0, 0), |(d, o), s| (d + s.duplicates, o + s.out_of_order));
    checks.order.record(dups == 0 && disorder == 0, format!("{at}: {dups} duplicates, {disorder} out of order"));
    // A message dropped on the link to the subscribers' broker is lost to every subscriber
    // behind it (the setups here have at most that one link).
    let remote = sites.subscribers.iter().filter(|a| **a != sites.publisher.0).count() as f64;
    let drops = delta(&after, &before, metrics::DROPS) + remote * delta(&after, &before, metrics::LINK_DROPS);
    let out = delta(&subscriber_after, &subscriber_before, metrics::MESSAGES_OUT);
    let received: u64 = run.subscribers.iter().map(|s| s.count).sum();
    let expected = run.sent * run.subscribers.len() as u64;
    let ended = run.subscribers.iter().filter(|s| s.ended.is_some()).count();
    let held = ended == 0 && received as f64 == out && expected as f64 == received as f64 + drops;
    checks.accounted.record(
        held,
        format!("{at}: sent×subs {expected}, received {received}, out {out}, drops {drops}, streams ended {ended}"),
    );
    let link_messages = delta(&after, &before, metrics::LINK_MESSAGES_OUT);
    Ok(Measured { run, drops, link_messages, load: [load_before, load_average()] })
}

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
            received: Some(s.count as f64),
            lost: Some(run.sent.saturating_sub(s.count) as f64),
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
    let received: u64 = run.subscribers.iter().map(|s| s.count).sum();
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

/// Where NATS runs for one repetition.
pub enum NatsAt<'a> {
    /// A fresh single `nats-server`, started for this repetition (as tidings gets a fresh
    /// broker) and stopped after it.
    Fresh,
    /// Servers already running (publisher's URL, subscribers' URL), as a tidings network that
    /// serves every point.
    Running(&'a str, &'a str),
}

/// One repetition of the peer harness's throughput mode at one point, with the drain wait
/// tidings gets ([`DRAIN`]).
pub async fn nats_point(
    tools: &NatsTools,
    scratch: &std::path::Path,
    at: NatsAt<'_>,
    (size, subs, count): (usize, usize, u64),
    hops: u64,
) -> anyhow::Result<Vec<PeerRow>> {
    let mut run = nats::PeerRun {
        mode: nats::Mode::Throughput,
        exp: "flood".into(),
        publisher: String::new(),
        subscriber: String::new(),
        size,
        subs,
        rate: 0,
        reps: 1,
        duration: Duration::from_secs(60),
        max: count,
        drain: DRAIN,
        hops,
    };
    let running = match at {
        NatsAt::Fresh => None,
        NatsAt::Running(publisher, subscriber) => Some((publisher.to_string(), subscriber.to_string())),
    };
    let (tools, scratch) = (tools.clone(), scratch.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let server = match running {
            Some(urls) => {
                (run.publisher, run.subscriber) = urls;
                None
            }
            None => {
                let server = crate::peer::NatsServer::single(&tools, &scratch)?;
                (run.publisher, run.subscriber) = (server.urls[0].clone(), server.urls[0].clone());
                Some(server)
            }
        };
        let rows = nats::run(&tools, &run, &scratch);
        drop(server);
        rows
    })
    .await?
}

/// One repetition of NATS at a point ([`nats_point`]), added to `table` as repetition `rep`
/// with the load average around it.
pub async fn nats_rep(
    table: &mut Vec<FloodRow>,
    (tools, scratch): (&NatsTools, &std::path::Path),
    at: NatsAt<'_>,
    point: (usize, usize, u64),
    (hops, rep): (u64, usize),
) -> anyhow::Result<()> {
    let load_before = load_average();
    let rows = nats_point(tools, scratch, at, point, hops).await?;
    peer_rows(table, ("nats", "this session"), point.0, (rep, [load_before, load_average()]), &rows);
    Ok(())
}

/// The longest wait for stragglers after a flood, tidings and NATS alike (and 3 s without
/// progress, the harness's and [`FloodSpec::idle`] in every flood experiment).
pub const DRAIN: Duration = Duration::from_secs(60);

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

/// `system`'s (`nats` or `nats-anchor`) `column` at a point as text, with the share it lost
/// when it lost any.
pub fn nats_cell(table: &[FloodRow], system: &str, subscribers: usize, size: usize, column: Field) -> String {
    let cell = |c: Field| median_cell(table, system, subscribers, size, "all", c);
    match cell(column) {
        None => "n/a".into(),
        Some(v) => match (cell(|r| r.lost), cell(|r| r.sent)) {
            (Some(lost), Some(sent)) if lost > 0.0 && sent > 0.0 => {
                let share = 100.0 * lost / (sent * subscribers as f64);
                format!("{} ({share:.0}% lost)", super::thousands(v))
            }
            _ => super::thousands(v),
        },
    }
}

/// `median [min-max]` of repetitions' `values` ([`values`]), `!` when the spread passes 25 %;
/// `n/a` without any.
pub fn range_cell(values: &[f64]) -> String {
    if values.is_empty() {
        return "n/a".into();
    }
    crate::stats::Spread::of(values).show(super::thousands)
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
    let values = values(table, system, subscribers, size, which, column);
    (!values.is_empty()).then(|| median(&values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flood::Received;
    use crate::suite::table::Table;

    #[test]
    fn every_column_is_a_field_of_the_typed_rows() {
        let fields = serde_json::to_value(FloodRow::default()).unwrap();
        assert_eq!(fields.as_object().unwrap().len(), COLUMNS.len(), "a field is missing from the columns");
        assert_eq!(crate::suite::table::Table::of(COLUMNS, &[FloodRow::default()]).unwrap().rows().len(), 1);
    }

    fn received(times: Vec<f64>) -> Received {
        Received {
            count: times.iter().filter(|t| t.is_finite()).count() as u64,
            times,
            missed: 0,
            out_of_order: 0,
            duplicates: 0,
            ended: None,
        }
    }

    #[test]
    fn rows_give_seed_rates_per_subscriber_and_their_sum() {
        // 300 messages, one every 1 ms: STn = RTn = 100 / 0.1 s = 1000 msg/s.
        let times: Vec<f64> = (0..300).map(|n| n as f64 * 0.001).collect();
        let shifted: Vec<f64> = times.iter().map(|t| t + 0.001).collect();
        let run = FloodRun {
            sent: 300,
            send_times: times,
            publish_secs: 0.3,
            subscribers: vec![received(shifted.clone()), received(shifted)],
        };
        let mut table = Vec::new();
        rows(&mut table, 1000, 1, &Measured { run, drops: 0.0, link_messages: 0.0, load: [None, None] });
        assert_eq!(table.len(), 3);
        assert_eq!(Table::of(COLUMNS, &table).unwrap().rows().len(), 3);
        let rt = median_cell(&table, "tidings", 2, 1000, "1", |r| r.rt_median_msg_s).unwrap();
        assert!((rt - 1000.0).abs() < 1.0, "{rt}");
        let st = median_cell(&table, "tidings", 2, 1000, "all", |r| r.st_median_msg_s).unwrap();
        assert!((st - 1000.0).abs() < 1.0, "{st}");
        let sum = median_cell(&table, "tidings", 2, 1000, "all", |r| r.rt_median_msg_s).unwrap();
        assert!((sum - 2000.0).abs() < 2.0, "{sum}");
        assert_eq!(median_cell(&table, "tidings", 2, 1000, "all", |r| r.rt_median_mb_s), Some(2.0));
    }

    #[test]
    fn peer_rows_land_in_the_all_row() {
        let rows_in =
            crate::peer::parse_csv("subs,sent,recv_total,lost,agg_recv_msgs_s,agg_recv_MB_s\n10,5,50,0,1000,2\n");
        let mut table = Vec::new();
        peer_rows(&mut table, ("nats", "this session"), 2000, (1, [None, None]), &rows_in);
        assert_eq!(median_cell(&table, "nats", 10, 2000, "all", |r| r.received_msg_s), Some(1000.0));
    }
}
