//! What seed 002's three experiments (`sizes`, `fanout`, `proxy`) share: one measured point
//! with its checks, its CSV rows, and NATS's run of the same point through the peer harness.

use std::time::Duration;

pub use super::flood_rows::{
    anchor_rows, median_cell, nats_cell, peer_rows, range_cell, ratio_cell, rows, values, Field, FloodRow, Load,
};
use crate::flood::{Flood, FloodRun, FloodSpec};
use crate::metrics::{self, scrape_all, Snapshot};
use crate::peer::nats;
use crate::stats::load_average;
use crate::suite::Context;
use crate::target::Target;

/// Seed 002's M.
pub const WINDOW: usize = 100;

/// What the report says about reading RTn beside received / time.
pub const RTN_NOTE: &str = "Why the RTn medians sit far above *received / time*: the client hands \
    deliveries to the application one socket read at a time, and when the broker writes faster \
    than the subscriber's loop wakes up, one read holds hundreds of messages; the application then \
    takes them at memory speed, and most 100-message windows measure that speed rather than the \
    arrival rate. *Received / time* is the sustained rate; the RTn median is what the seed's \
    formula gives on these bursts, and the RTn trace shows them.";

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

impl Sites {
    /// The publisher and `subscribers` subscribers on one broker (`sizes`, `fanout`).
    pub fn one_broker(target: &Target, subscribers: usize) -> anyhow::Result<Sites> {
        let admin = target.admin.clone().ok_or_else(|| anyhow::anyhow!("broker without admin"))?;
        Ok(Sites {
            publisher: (target.tcp.clone(), admin.clone()),
            subscribers: vec![target.tcp.clone(); subscribers],
            subscriber_admins: vec![admin.clone()],
            all_admins: vec![admin],
        })
    }
}

super::checks! {
    /// The three properties every point must have.
    pub struct FloodChecks {
        published: "the publisher's broker counted every message (messages in = sent)",
        order: "no subscriber got a duplicate or an out-of-order message",
        accounted: "every delivery accounted: received = messages out at the subscribers' brokers, and \
                    sent × subscribers = received + drops (slow consumers and broker links)",
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

/// Connects, probes, floods `count` messages of `size` bytes on `topic` from the publisher to
/// every subscriber of `sites`, and records the point's checks under the name `at`.
pub async fn measure(
    sites: &Sites,
    (size, count, topic): (usize, u64, String),
    checks: &mut FloodChecks,
    at: &str,
) -> anyhow::Result<Measured> {
    let spec = FloodSpec {
        publisher: sites.publisher.0.clone(),
        subscribers: sites.subscribers.clone(),
        size,
        count,
        topic,
        idle: Duration::from_secs(3),
        drain: DRAIN,
    };
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
        run.subscribers.iter().fold((0, 0), |(d, o), s| (d + s.tally.duplicates, o + s.tally.out_of_order));
    checks.order.record(dups == 0 && disorder == 0, format!("{at}: {dups} duplicates, {disorder} out of order"));
    // A message dropped on the link to the subscribers' broker is lost to every subscriber
    // behind it (the setups here have at most that one link).
    let remote = sites.subscribers.iter().filter(|a| **a != sites.publisher.0).count() as f64;
    let drops = delta(&after, &before, metrics::DROPS) + remote * delta(&after, &before, metrics::LINK_DROPS);
    let out = delta(&subscriber_after, &subscriber_before, metrics::MESSAGES_OUT);
    let received: u64 = run.subscribers.iter().map(|s| s.tally.count).sum();
    let expected = run.sent * run.subscribers.len() as u64;
    let ended = run.subscribers.iter().filter(|s| s.tally.ended.is_some()).count();
    let held = ended == 0 && received as f64 == out && expected as f64 == received as f64 + drops;
    let what =
        format!("{at}: sent×subs {expected}, received {received}, out {out}, drops {drops}, streams ended {ended}");
    checks.accounted.record(held, what);
    let link_messages = delta(&after, &before, metrics::LINK_MESSAGES_OUT);
    Ok(Measured { run, drops, link_messages, load: [load_before, load_average()] })
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

/// When NATS is measured in this session, one repetition of the peer harness's throughput
/// mode at the point (`size`, `subs`, `count`), with the drain wait tidings gets ([`DRAIN`]),
/// added to `table` as repetition `rep` with the load average around it, right after tidings'
/// (and a progress step called `label`).
pub async fn nats_rep(
    (ctx, label): (&Context, String),
    table: &mut Vec<FloodRow>,
    at: NatsAt<'_>,
    (size, subs, count): (usize, usize, u64),
    (hops, rep): (u64, usize),
) -> anyhow::Result<()> {
    let Some(tools) = ctx.peers.tools() else { return Ok(()) };
    let scratch = ctx.scratch("flood-nats")?;
    let (publisher, subscriber) = match at {
        NatsAt::Fresh => (String::new(), String::new()),
        NatsAt::Running(publisher, subscriber) => (publisher.to_string(), subscriber.to_string()),
    };
    let run = nats::PeerRun {
        exp: "flood".into(),
        publisher,
        subscriber,
        size,
        subs,
        reps: 1,
        duration: Duration::from_secs(60),
        max: count,
        drain: DRAIN,
        hops,
        ..nats::PeerRun::default()
    };
    let load_before = load_average();
    let rows = nats::run_async(tools, run, &scratch).await?;
    peer_rows(table, ("nats", "this session"), size, (rep, [load_before, load_average()]), &rows);
    ctx.step(label);
    Ok(())
}

/// The longest wait for stragglers after a flood, tidings and NATS alike (and 3 s without
/// progress, the harness's and [`FloodSpec::idle`] in every flood experiment).
pub const DRAIN: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flood::Received;
    use crate::suite::table::Table;

    #[test]
    fn rows_give_seed_rates_per_subscriber_and_their_sum() {
        // 300 messages, one every 1 ms: STn = RTn = 100 / 0.1 s = 1000 msg/s.
        let times: Vec<f64> = (0..300).map(|n| n as f64 * 0.001).collect();
        let shifted: Vec<f64> = times.iter().map(|t| t + 0.001).collect();
        let run = FloodRun {
            sent: 300,
            send_times: times,
            subscribers: vec![Received::of_times(shifted.clone()), Received::of_times(shifted)],
        };
        let mut table = Vec::new();
        rows(&mut table, 1000, 1, &Measured { run, drops: 0.0, link_messages: 0.0, load: [None, None] });
        assert_eq!(table.len(), 3);
        assert_eq!(Table::typed(&table).unwrap().rows().len(), 3);
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
