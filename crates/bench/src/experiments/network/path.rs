//! Latency at a fixed rate from one publisher to subscribers at several brokers of a network,
//! all measured on the same messages: through one and two brokers (`two-brokers.toml`), and
//! along the 9-broker path of `narada-22-sparse.toml`. The workload is `hops`'s
//! ([`Population`]), with every event matching.

use std::time::Duration;

use super::NetRow;
use super::{Checks, Key, Params, TIDINGS};
use crate::experiments::content::{Kind, PointSpec, Population};
use crate::network::Network as BrokerNetwork;
use crate::stats::quantile;
use crate::suite::Context;

/// Who publishes and who is measured, and the part of the table their rows go to.
pub(super) struct Route<'a> {
    /// `latency` or `path`.
    pub(super) part: &'static str,
    /// The publisher's broker.
    pub(super) publisher: &'a str,
    /// The brokers of the measuring subscribers, one each.
    pub(super) measuring: &'a [String],
}

/// Publishes `ctx.reps` times at `p.rate` from the route's publisher to one subscriber at each
/// of its measuring brokers; adds their latencies as rows of the route's part.
pub(super) async fn measure(
    ctx: &Context,
    net: &BrokerNetwork,
    route: Route<'_>,
    p: &Params,
    table: &mut Vec<NetRow>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let Route { part, publisher, measuring } = route;
    let addrs: Vec<String> =
        measuring.iter().map(|m| net.broker(m).map(|b| b.tcp.clone())).collect::<anyhow::Result<_>>()?;
    let events = ctx.reps as u64 * p.latency_count();
    let mut population =
        Population::connect(&net.broker(publisher)?.tcp, &addrs, &[], events, Kind::BestEffort).await?;
    for rep in 1..=ctx.reps {
        let spec = PointSpec { matching: 100, rate: p.rate, size: p.size, count: p.latency_count() };
        let r = population.point(spec, Duration::from_secs(5)).await?;
        for (name, sample) in measuring.iter().zip(&r.measuring) {
            let brokers = net.topology.brokers_on_path(publisher, name).unwrap_or(0);
            let lat = &sample.latencies_us;
            let received = lat.len() as u64;
            let at = format!("{part} at {name} ({brokers} brokers on the path), rep {rep}");
            let exact = received == r.published && r.inexact.is_empty();
            checks.delivered.record(exact, format!("{at}: {received} of {} (by number)", r.published));
            let key = Key::new(part, TIDINGS, name.clone(), brokers, rep);
            key.put(table, "sent", r.published as f64);
            key.put(table, "received", received as f64);
            key.put(table, "achieved_msg_s", r.achieved_rate);
            if !lat.is_empty() {
                let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64;
                for (quantity, q) in [("p50_us", 0.5), ("p99_us", 0.99)] {
                    key.put(table, quantity, quantile(lat, q).map_or(f64::NAN, |v| v as f64));
                }
                key.put(table, "mean_us", mean);
            }
        }
        ctx.step(format!("{part}, rep {rep}"));
    }
    population.close().await;
    Ok(())
}

/// The long path: a fresh network of `p.path`'s topology.
pub(super) async fn long(
    ctx: &Context,
    p: &Params,
    table: &mut Vec<NetRow>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let (topology, publisher, measuring) = &p.path;
    let dir = ctx.scratch("network-path")?;
    let net = BrokerNetwork::up(&ctx.tidings, &ctx.topologies.join(topology), &dir, Duration::from_secs(120)).await?;
    measure(ctx, &net, Route { part: "path", publisher, measuring }, p, table, checks).await
}
