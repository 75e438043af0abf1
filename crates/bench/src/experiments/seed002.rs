//! What seed 002's three experiments (`sizes`, `fanout`, `proxy`) share: one measured point
//! with its checks, its CSV rows, and NATS's run of the same point through the peer harness.

use std::time::Duration;

use super::Tally;
use crate::flood::{Flood, FloodRun, FloodSpec};
use crate::metrics::{self, scrape_all, Snapshot};
use crate::peer::{nats, NatsTools, PeerRow};
use crate::stats::{load_average, lower_median, median, window_rates};
use crate::suite::table::{num, Table};
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

/// The load average before and after a point, as cells (empty when unknown).
pub type Load = [Option<f64>; 2];

fn load_cells(load: Load) -> [String; 2] {
    load.map(|l| l.map(|l| format!("{l:.2}")).unwrap_or_default())
}

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
pub fn rows(table: &mut Table, size: usize, rep: usize, m: &Measured) -> anyhow::Result<()> {
    let run = &m.run;
    let n = run.subscribers.len();
    let mb = |rate: f64| num(rate * size as f64 / 1e6);
    let st = lower_median(&window_rates(&run.send_times, WINDOW)).unwrap_or(f64::NAN);
    let mean_rates: Vec<f64> = run.subscribers.iter().map(|s| s.mean_rate()).collect();
    let mut rt_sum = 0.0;
    let base = |subscriber: String| {
        vec!["tidings".into(), "this session".into(), n.to_string(), size.to_string(), rep.to_string(), subscriber]
    };
    for (i, s) in run.subscribers.iter().enumerate() {
        let rt = lower_median(&window_rates(&s.times, WINDOW)).unwrap_or(f64::NAN);
        rt_sum += rt;
        let mut row = base((i + 1).to_string());
        let lost = run.sent.saturating_sub(s.count);
        row.extend([run.sent.to_string(), s.count.to_string(), lost.to_string(), num(st), num(rt), mb(rt)]);
        let rate = s.mean_rate();
        row.extend([num(rate), mb(rate), num(rate), num(rate), num(rate), String::new()]);
        row.extend(load_cells(m.load));
        table.push(row)?;
    }
    let received: u64 = run.subscribers.iter().map(|s| s.count).sum();
    let agg = run.aggregate_rate();
    let (lo, hi) =
        (mean_rates.iter().copied().fold(f64::INFINITY, f64::min), mean_rates.iter().copied().fold(0.0, f64::max));
    let mut row = base("all".into());
    row.extend([run.sent.to_string(), received.to_string(), run.lost().to_string(), num(st), num(rt_sum), mb(rt_sum)]);
    row.extend([num(agg), mb(agg), num(lo), num(median(&mean_rates)), num(hi), num(m.drops)]);
    row.extend(load_cells(m.load));
    table.push(row)
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
    table: &mut Table,
    (tools, scratch): (&NatsTools, &std::path::Path),
    at: NatsAt<'_>,
    point: (usize, usize, u64),
    (hops, rep): (u64, usize),
) -> anyhow::Result<()> {
    let load_before = load_average();
    let rows = nats_point(tools, scratch, at, point, hops).await?;
    peer_rows(table, ("nats", "this session"), point.0, (rep, [load_before, load_average()]), &rows)
}

/// The longest wait for stragglers after a flood, tidings and NATS alike (and 3 s without
/// progress, the harness's and [`FloodSpec::idle`] in every flood experiment).
pub const DRAIN: Duration = Duration::from_secs(60);

/// Peer-harness throughput rows (NATS now, `nats`, or a committed anchor, `nats-anchor`) as
/// `all` rows of `system`.
pub fn peer_rows(
    table: &mut Table,
    (system, source): (&str, &str),
    size: usize,
    (first_rep, load): (usize, Load),
    rows: &[PeerRow],
) -> anyhow::Result<()> {
    for (i, r) in rows.iter().enumerate() {
        let f = |c: &str| r.num(c).map(num).unwrap_or_default();
        let subs = r.num("subs").unwrap_or(0.0);
        let [before, after] = load_cells(load);
        table.push(vec![
            system.into(),
            source.into(),
            num(subs),
            size.to_string(),
            (first_rep + i).to_string(),
            "all".into(),
            f("sent"),
            f("recv_total"),
            f("lost"),
            String::new(),
            String::new(),
            String::new(),
            f("agg_recv_msgs_s"),
            f("agg_recv_MB_s"),
            f("per_sub_min_msgs_s"),
            f("per_sub_median_msgs_s"),
            f("per_sub_max_msgs_s"),
            String::new(),
            before,
            after,
        ])?;
    }
    Ok(())
}

/// `system`'s (`nats` or `nats-anchor`) `column` at a point as text, with the share it lost
/// when it lost any.
pub fn nats_cell(table: &Table, system: &str, subscribers: usize, size: usize, column: &str) -> String {
    let cell = |c: &str| median_cell(table, system, subscribers, size, "all", c);
    match cell(column) {
        None => "n/a".into(),
        Some(v) => match (cell("lost"), cell("sent")) {
            (Some(lost), Some(sent)) if lost > 0.0 && sent > 0.0 => {
                let share = 100.0 * lost / (sent * subscribers as f64);
                format!("{} ({share:.0}% lost)", super::thousands(v))
            }
            _ => super::thousands(v),
        },
    }
}

/// `median [min-max]` over repetitions of `column` (as [`median_cell`] selects rows), `!`
/// when the spread passes 25 %; `n/a` without rows.
pub fn range_cell(table: &Table, system: &str, subscribers: usize, size: usize, which: &str, column: &str) -> String {
    let values = values(table, system, subscribers, size, which, column);
    if values.is_empty() {
        return "n/a".into();
    }
    crate::stats::Spread::of(&values).show(super::thousands)
}

/// Median of ours over median of NATS's `received_msg_s` at one point, `n/a` when either is missing.
pub fn ratio_cell(table: &Table, subscribers: usize, size: usize) -> String {
    let ours = median_cell(table, "tidings", subscribers, size, "all", "received_msg_s");
    let theirs = median_cell(table, "nats", subscribers, size, "all", "received_msg_s");
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    }
}

fn values(table: &Table, system: &str, subscribers: usize, size: usize, which: &str, column: &str) -> Vec<f64> {
    table
        .rows()
        .iter()
        .filter(|r| {
            table.cell(r, "system") == Some(system)
                && table.cell(r, "subscribers") == Some(&subscribers.to_string())
                && table.cell(r, "size_b") == Some(&size.to_string())
                && table.cell(r, "subscriber") == Some(which)
        })
        .filter_map(|r| table.cell(r, column).and_then(|v| v.parse().ok()))
        .collect()
}

/// The median over repetitions of `column` in the rows of `system` with `subscribers` and
/// `size` for subscriber `which` (`all` or a number).
pub fn median_cell(
    table: &Table,
    system: &str,
    subscribers: usize,
    size: usize,
    which: &str,
    column: &str,
) -> Option<f64> {
    let values = values(table, system, subscribers, size, which, column);
    (!values.is_empty()).then(|| median(&values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flood::Received;

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
        let mut table = Table::new(COLUMNS);
        rows(&mut table, 1000, 1, &Measured { run, drops: 0.0, link_messages: 0.0, load: [None, None] }).unwrap();
        assert_eq!(table.rows().len(), 3);
        let rt = median_cell(&table, "tidings", 2, 1000, "1", "rt_median_msg_s").unwrap();
        assert!((rt - 1000.0).abs() < 1.0, "{rt}");
        let st = median_cell(&table, "tidings", 2, 1000, "all", "st_median_msg_s").unwrap();
        assert!((st - 1000.0).abs() < 1.0, "{st}");
        let sum = median_cell(&table, "tidings", 2, 1000, "all", "rt_median_msg_s").unwrap();
        assert!((sum - 2000.0).abs() < 2.0, "{sum}");
        assert_eq!(median_cell(&table, "tidings", 2, 1000, "all", "rt_median_mb_s"), Some(2.0));
    }

    #[test]
    fn peer_rows_land_in_the_all_row() {
        let rows_in =
            crate::peer::parse_csv("subs,sent,recv_total,lost,agg_recv_msgs_s,agg_recv_MB_s\n10,5,50,0,1000,2\n");
        let mut table = Table::new(COLUMNS);
        peer_rows(&mut table, ("nats", "this session"), 2000, (1, [None, None]), &rows_in).unwrap();
        assert_eq!(median_cell(&table, "nats", 10, 2000, "all", "received_msg_s"), Some(1000.0));
    }
}
