//! tidings through one broker and through two (`two-brokers.toml`): throughput runs
//! interleaved (one, two, one, two, ...) so that drift in the machine's load hits both alike,
//! with each process's CPU time per message and the link's counters; then, on the same two
//! brokers, latency at one and two brokers and the cost of subscribing at the linked broker.

use std::time::{Duration, Instant};

use tidings_client::Client;

use super::cpu;
use super::NetRow;
use super::{path, Checks, Key, Params, TIDINGS};
use crate::cpu::{CpuSample, Process};
use crate::metrics::{self, scrape_all, Snapshot};
use crate::network::Network as BrokerNetwork;
use crate::suite::text::thousands;
use crate::suite::Context;
use crate::target::Target;
use crate::throughput::{self, ThroughputSpec};

/// One side of the comparison.
struct Setup {
    label: &'static str,
    brokers: usize,
    /// The publisher's broker.
    target: Target,
    /// The subscriber's broker, when not the publisher's.
    subscribe_at: Option<String>,
    /// Admin addresses of the brokers in the setup.
    admins: Vec<String>,
    /// Processes whose CPU time is read, with the clients (this process) last.
    processes: Vec<(&'static str, Process)>,
}

/// Runs the tidings side: throughput, then latency, then subscriptions.
pub(super) async fn tidings(
    ctx: &Context,
    p: &Params,
    table: &mut Vec<NetRow>,
    checks: &mut Checks,
    nats: Option<&super::nats::Servers>,
) -> anyhow::Result<()> {
    let single = Target::spawn(&ctx.tidings, &[])?;
    let one = Setup {
        label: "one broker",
        brokers: 1,
        subscribe_at: None,
        admins: vec![single.admin.clone().ok_or_else(|| anyhow::anyhow!("broker without admin"))?],
        processes: vec![
            ("broker", Process::Pid(single.pid().ok_or_else(|| anyhow::anyhow!("broker without pid"))?)),
            ("clients", Process::This),
        ],
        target: single,
    };
    let dir = ctx.scratch("network-two")?;
    let net = BrokerNetwork::up(&ctx.tidings, &ctx.topologies.join(&p.two), &dir, Duration::from_secs(60)).await?;
    let (phb, shb) = (net.broker("phb")?, net.broker("shb")?);
    let two = Setup {
        label: "two brokers",
        brokers: 2,
        target: Target::external(phb.tcp.clone()),
        subscribe_at: Some(shb.tcp.clone()),
        admins: vec![phb.admin_addr()?, shb.admin_addr()?],
        processes: vec![
            ("phb", Process::Pid(phb.process_id()?)),
            ("shb", Process::Pid(shb.process_id()?)),
            ("clients", Process::This),
        ],
    };
    for rep in 1..=ctx.reps {
        for setup in [&one, &two] {
            flood(ctx, p, setup, rep, table, checks).await?;
        }
        if let Some(servers) = nats {
            super::nats::throughput_rep(ctx, p, servers, rep, table).await?;
        }
    }
    let measuring = [phb.name.clone(), shb.name.clone()];
    let route = path::Route { part: "latency", publisher: &phb.name, measuring: &measuring };
    path::measure(ctx, &net, route, p, table, checks).await?;
    let at = [(one.label, 1, one.target.tcp.clone()), ("at shb, linked to phb", 2, shb.tcp.clone())];
    subscriptions(p, &at, table).await?;
    ctx.step("subscriptions");
    Ok(())
}

/// One throughput run, its CPU time per message and its checks.
async fn flood(
    ctx: &Context,
    p: &Params,
    setup: &Setup,
    rep: usize,
    table: &mut Vec<NetRow>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let spec = ThroughputSpec {
        size: p.size,
        subscribers: 1,
        duration: p.duration,
        max_messages: p.max_messages,
        drain: Duration::from_secs(20),
        topic: format!("bench.network.{rep}"),
        subscribe_at: setup.subscribe_at.clone(),
        ..ThroughputSpec::default()
    };
    let before = scrape_all(setup.admins.clone()).await?;
    let cpu = CpuSample::take(&setup.processes);
    let r = throughput::run(&setup.target, &spec).await?;
    let spent = CpuSample::take(&setup.processes).since(&cpu);
    let after = scrape_all(setup.admins.clone()).await?;
    let delta = |name: &str| -> f64 { after.iter().zip(&before).map(|(a, b)| a.delta(b, name)).sum() };
    let link_drops = delta(metrics::LINK_DROPS);
    let drops = delta(metrics::DROPS) + link_drops + delta(metrics::ROUTE_DROPS);
    let at = format!("{}, rep {rep}", setup.label);
    let what = format!("{at}: sent {}, lost {}, counted drops {drops} (of which link {link_drops})", r.sent, r.lost);
    checks.accounted.record(r.lost as f64 == drops, what);
    if setup.brokers == 2 {
        let (held, detail) = link_held(&before, &after);
        checks.link.record(held, format!("{at}: {detail}"));
    }
    let received = r.accounting.received;
    let key = Key::new("throughput", TIDINGS, setup.label, setup.brokers, rep);
    for (quantity, value) in [
        ("sent", r.sent as f64),
        ("received", received as f64),
        ("lost", r.lost as f64),
        ("counted_drops", drops),
        ("link_drops", link_drops),
        ("received_msg_s", r.received_rate),
        ("publish_msg_s", r.publish_rate),
    ] {
        key.put(table, quantity, value);
    }
    cpu::put(&key, table, &spent, received);
    ctx.step(format!("{at}: {} msg/s", thousands(r.received_rate)));
    Ok(())
}

/// Whether the link between the two brokers stayed up between two scrapes (one per broker).
fn link_held(before: &[Snapshot], after: &[Snapshot]) -> (bool, String) {
    if !after.iter().all(|s| s.has(metrics::LINKS_UP)) {
        return (false, format!("the brokers export no `{}`", metrics::LINKS_UP));
    }
    let delta = |name: &str| -> f64 { after.iter().zip(before).map(|(a, b)| a.delta(b, name)).sum() };
    let (established, closed) = (delta(metrics::LINKS_ESTABLISHED), delta(metrics::LINKS_CLOSED));
    let up: Vec<f64> = after.iter().map(|s| s.sum(metrics::LINKS_UP)).collect();
    let held = established == 0.0 && closed == 0.0 && up.iter().all(|&u| u == 1.0);
    (held, format!("links closed {closed}, re-established {established}, up at each end {up:?}"))
}

/// Subscribes `p.subscriptions` times at each address, in batches of 500; µs per subscription
/// of each batch (the subscription is acknowledged by the broker the client is connected to).
async fn subscriptions(
    p: &Params,
    at: &[(&'static str, usize, String)],
    table: &mut Vec<NetRow>,
) -> anyhow::Result<()> {
    const BATCH: usize = 500;
    for (setup, brokers, addr) in at {
        let client = Client::builder(addr.as_str()).name("bench-subscriptions").no_reconnect().connect().await?;
        let mut held = Vec::with_capacity(p.subscriptions);
        for batch in 0..p.subscriptions.div_ceil(BATCH) {
            let n = BATCH.min(p.subscriptions - batch * BATCH);
            let start = Instant::now();
            for i in 0..n {
                held.push(client.subscribe(&format!("bench.sub.{batch}.{i}.>")).await?);
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
            Key::new("subscribe", TIDINGS, *setup, *brokers, batch + 1).put(table, "us_per_subscription", us);
        }
        drop(held);
        let _ = client.close().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_that_was_closed_or_is_down_did_not_hold() {
        let snap = |up: u32, established: u32, closed: u32| {
            Snapshot::parse(&format!(
                "{} {up}\n{} {established}\n{}{{why=\"lost\"}} {closed}\n",
                metrics::LINKS_UP,
                metrics::LINKS_ESTABLISHED,
                metrics::LINKS_CLOSED
            ))
        };
        let before = [snap(1, 1, 0), snap(1, 1, 0)];
        assert!(link_held(&before, &[snap(1, 1, 0), snap(1, 1, 0)]).0);
        assert!(!link_held(&before, &[snap(1, 2, 1), snap(1, 2, 1)]).0, "cut and re-established");
        assert!(!link_held(&before, &[snap(0, 1, 0), snap(1, 1, 0)]).0, "down at one end");
        assert!(!link_held(&before, &[Snapshot::default(), Snapshot::default()]).0, "no metrics");
    }
}
