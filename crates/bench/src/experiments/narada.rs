//! What `matching` and `hops` share: start a seed 004 network, put five subscribers on every
//! broker and measuring subscribers where asked, run a grid of (matching rate, size, publish
//! rate) points, and check each point against the brokers' metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use super::content::{Kind, PointResult, PointSpec, Population, Sample};
use crate::metrics::{self, scrape_all, Snapshot};
use crate::network::Network;
use crate::suite::Context;

use crate::metrics::{GD_PUBEND_RECEIVED, GD_PUBEND_SENT, LINK_MESSAGES_IN, LINK_MESSAGES_OUT as LINK_MESSAGES};

/// The grid of one run.
#[derive(Debug, Clone)]
pub struct Grid {
    /// Matching rates, percent.
    pub matching: Vec<u32>,
    /// Publish rates, msg/s.
    pub rates: Vec<f64>,
    /// Sizes, bytes.
    pub sizes: Vec<usize>,
    /// Publishing per point...
    pub seconds: f64,
    /// ...but at least this many events.
    pub min_events: u64,
    /// Subscribers on every broker besides the measuring ones.
    pub per_broker: usize,
}

impl Grid {
    /// A grid with seed 004's population (five subscribers on every broker) and at least 20
    /// events per point: `seconds` of publishing at each of `rates`.
    pub fn seed(matching: &[u32], rates: &[f64], sizes: &[usize], seconds: f64) -> Grid {
        Grid {
            matching: matching.to_vec(),
            rates: rates.to_vec(),
            sizes: sizes.to_vec(),
            seconds,
            min_events: 20,
            per_broker: 5,
        }
    }

    /// Events in a point at `rate`.
    pub fn events(&self, rate: f64) -> u64 {
        ((rate * self.seconds).round() as u64).max(self.min_events)
    }

    /// Events in every point of the grid together.
    pub fn total_events(&self) -> u64 {
        self.matching.len() as u64 * self.sizes.len() as u64 * self.rates.iter().map(|&r| self.events(r)).sum::<u64>()
    }

    /// Points in the grid.
    pub fn points(&self) -> usize {
        self.matching.len() * self.rates.len() * self.sizes.len()
    }
}

super::checks! {
    /// The checks every point makes.
    pub struct NaradaChecks {
        exact: "every subscriber received exactly the matching events (compared by number), each once",
        selector: "no delivery failed the subscriber's selector",
        published: "the publisher's broker counted every event (best effort) or acknowledged every one (guaranteed)",
        routed: "no event entered a branch without interest: every link carried 0 or exactly the \
                 matching events, all links together the matching events × (brokers − 1), and each \
                 link's receiver read what its sender wrote (guaranteed: every broker but the \
                 publisher's received exactly the matching events, and nothing was retransmitted)",
    }
}

/// Messages carried on each link direction, summed over the points of one matching rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traffic {
    /// Matching rate, percent.
    pub matching: u32,
    /// Events published.
    pub published: u64,
    /// Of which matching.
    pub matched: u64,
    /// "from→to" to data messages written on that link.
    pub links: BTreeMap<String, f64>,
}

/// Adds the link messages written between two scrapes (in the order of `names`) to `traffic`.
fn add_links(traffic: &mut Traffic, names: &[String], before: &[Snapshot], after: &[Snapshot]) {
    for ((name, b), a) in names.iter().zip(before).zip(after) {
        let earlier = b.by_label(LINK_MESSAGES, "peer");
        for (peer, value) in a.by_label(LINK_MESSAGES, "peer") {
            let carried = value - earlier.get(&peer).copied().unwrap_or(0.0);
            *traffic.links.entry(format!("{name}→{peer}")).or_insert(0.0) += carried;
        }
    }
}

/// A seed 004 network, up, with what each point's checks read from it.
pub struct Narada {
    network: Network,
    admins: Vec<String>,
    names: Vec<String>,
    /// The topology's name.
    pub name: String,
}

/// A population connected to a [`Narada`] network, with its publisher's broker (the checks
/// read that broker's counters, and the path lengths count from it).
pub struct Placed {
    /// The clients.
    pub population: Population,
    /// The publisher's broker.
    pub publisher: String,
    publisher_index: usize,
}

impl Narada {
    /// Starts the network of `topology`.
    pub async fn up(ctx: &Context, topology: &str) -> anyhow::Result<Narada> {
        let dir = ctx.scratch(&format!("net-{topology}"))?;
        let file = ctx.topologies.join(topology);
        let shape: Vec<String> = ctx.links.net_up_args().iter().map(|a| a.to_string()).collect();
        let network = Network::up_with(&ctx.tidings, &file, &dir, Duration::from_secs(120), &shape).await?;
        let admins = network.admins()?;
        let name = network.topology.name.clone();
        let names = network.brokers.iter().map(|b| b.name.clone()).collect();
        Ok(Narada { network, admins, names, name })
    }

    /// Connects a population: measuring subscribers at `measuring`, `per_broker` on every
    /// broker, the publisher at `publisher`.
    pub async fn population(
        &self,
        publisher: &str,
        measuring: &[&str],
        per_broker: usize,
        events: u64,
        kind: Kind,
    ) -> anyhow::Result<Placed> {
        let n = &self.network;
        let publisher_index =
            self.names.iter().position(|b| b == publisher).ok_or_else(|| anyhow::anyhow!("no broker {publisher}"))?;
        let measuring: Vec<String> =
            measuring.iter().map(|m| n.broker(m).map(|b| b.tcp.clone())).collect::<anyhow::Result<_>>()?;
        let others: Vec<String> = n.brokers.iter().flat_map(|b| vec![b.tcp.clone(); per_broker]).collect();
        let population = Population::connect(&n.broker(publisher)?.tcp, &measuring, &others, events, kind).await?;
        Ok(Placed { population, publisher: publisher.to_string(), publisher_index })
    }

    /// Runs one point of `population` and checks it against the brokers' metrics: every
    /// subscriber got exactly the matching events; the publisher's broker counted (best
    /// effort) or acknowledged (durable) every event; no link carried an unwanted one. Adds the
    /// link traffic to `traffic`; returns the measuring subscribers' rows and, for a durable
    /// population, the publishes acknowledged and failed.
    pub async fn point(
        &self,
        placed: &mut Placed,
        spec: PointSpec,
        measuring: &[&str],
        checks: &mut NaradaChecks,
        traffic: &mut Traffic,
    ) -> anyhow::Result<(Vec<NaradaRow>, Option<(u64, u64)>)> {
        let (population, publisher) = (&mut placed.population, placed.publisher_index);
        let before = self.settled().await?;
        let r = population.point(spec, Duration::from_secs(5)).await?;
        let after = self.settled().await?;
        let kind = population.kind().label();
        let at = format!("{} {kind} {}% {} B {} msg/s", self.name, spec.matching, spec.size, spec.rate);
        let (n, inexact) = (r.inexact.len(), r.inexact.join("; "));
        let what = format!("{at}: {n} subscribers did not get exactly the {} matching events: {inexact}", r.matched);
        checks.exact.record(r.inexact.is_empty(), what);
        checks.selector.record(r.wrong == 0, format!("{at}: {} deliveries failed the selector", r.wrong));
        match r.acked {
            Some((acked, failed)) => checks.published.record(
                acked == r.published && failed == 0,
                format!("{at}: {acked} of {} guaranteed publishes acknowledged, {failed} failed", r.published),
            ),
            None => {
                let counted = after[publisher].delta(&before[publisher], metrics::MESSAGES_IN);
                let what = format!("{at}: counted {counted} of {}", r.published);
                checks.published.record(counted == r.published as f64, what)
            }
        }
        add_links(traffic, &self.names, &before, &after);
        (traffic.published, traffic.matched) = (traffic.published + r.published, traffic.matched + r.matched);
        let routed = match r.acked {
            Some(_) => guaranteed_links(&before, &after, r.matched, publisher),
            None => links(&before, &after, r.matched, self.names.len())
                .and_then(|()| cross_check(&self.names, &before, &after, false)),
        };
        checks.routed.record(routed.is_ok(), format!("{at}: {}", routed.err().unwrap_or_default()));
        let topology = &self.network.topology;
        let rows = measuring
            .iter()
            .zip(&r.measuring)
            .map(|(sub, sample)| {
                let path = topology.brokers_on_path(&placed.publisher, sub).unwrap_or(0);
                row(&self.name, &spec, &r, (sub, path), sample)
            })
            .collect();
        Ok((rows, r.acked))
    }
}

/// Runs `grid` on the network of `topology` with measuring subscribers at `measuring`; adds one
/// row per point and measuring subscriber; returns the link traffic of each matching rate.
pub async fn run(
    ctx: &Context,
    topology: &str,
    publisher: &str,
    measuring: &[&str],
    grid: &Grid,
    table: &mut Vec<NaradaRow>,
    checks: &mut NaradaChecks,
) -> anyhow::Result<Vec<Traffic>> {
    let net = Narada::up(ctx, topology).await?;
    let events = grid.total_events();
    let mut population = net.population(publisher, measuring, grid.per_broker, events, Kind::BestEffort).await?;
    let mut traffic = Vec::new();
    for &matching in &grid.matching {
        let mut t = Traffic { matching, ..Traffic::default() };
        for &size in &grid.sizes {
            for &rate in &grid.rates {
                let spec = PointSpec { matching, rate, size, count: grid.events(rate) };
                table.extend(net.point(&mut population, spec, measuring, checks, &mut t).await?.0);
                ctx.step(format!("{} {matching}% {size} B {rate} msg/s", net.name));
            }
        }
        traffic.push(t);
    }
    population.population.close().await;
    Ok(traffic)
}

/// Checks per-link traffic: each link carried 0 or `matched` messages, and all of them
/// `matched × (brokers − 1)` (a tree that reaches every broker, each with interest, once).
pub fn links(before: &[Snapshot], after: &[Snapshot], matched: u64, brokers: usize) -> Result<(), String> {
    if !after.iter().any(|s| s.has(LINK_MESSAGES)) {
        return Err(format!("the brokers export no per-link counter `{LINK_MESSAGES}`"));
    }
    let mut total = 0.0;
    for (b, a) in before.iter().zip(after) {
        for sample in a.samples.iter().filter(|s| s.name == LINK_MESSAGES) {
            let earlier =
                b.samples.iter().find(|s| s.name == sample.name && s.labels == sample.labels).map_or(0.0, |s| s.value);
            let carried = sample.value - earlier;
            if carried != 0.0 && carried != matched as f64 {
                return Err(format!("link {:?} carried {carried} messages, not 0 or {matched}", sample.labels));
            }
            total += carried;
        }
    }
    let expected = matched as f64 * brokers.saturating_sub(1) as f64;
    if total == expected {
        Ok(())
    } else {
        Err(format!("links carried {total} messages in all, not {expected}"))
    }
}

/// The guaranteed counterpart of [`links`]: guaranteed data does not count as link messages
/// but per pubend and kind. Every broker but the publisher's received exactly `matched` data
/// messages (each matching event once, nothing else), all brokers together sent as many as
/// they received, and nothing was retransmitted (loopback loses nothing, so a retransmission
/// would mean a nack for something never lost).
pub fn guaranteed_links(before: &[Snapshot], after: &[Snapshot], matched: u64, publisher: usize) -> Result<(), String> {
    let kind = |s: &[Snapshot], i: usize, name: &str, kind: &str| {
        s[i].by_label(name, "kind").get(kind).copied().unwrap_or(0.0)
    };
    let grew = |i: usize, name: &str, k: &str| kind(after, i, name, k) - kind(before, i, name, k);
    let (mut sent, mut received) = (0.0, 0.0);
    for i in 0..after.len() {
        let got = grew(i, GD_PUBEND_RECEIVED, "data");
        let want = if i == publisher { 0.0 } else { matched as f64 };
        if got != want {
            return Err(format!("broker {} received {got} guaranteed data messages, not {want}", i + 1));
        }
        let again = grew(i, GD_PUBEND_SENT, "retransmit");
        if again != 0.0 {
            return Err(format!("broker {} retransmitted {again} guaranteed messages", i + 1));
        }
        (sent, received) = (sent + grew(i, GD_PUBEND_SENT, "data"), received + got);
    }
    if sent == received {
        Ok(())
    } else {
        Err(format!("the brokers sent {sent} guaranteed data messages and received {received}"))
    }
}

impl Narada {
    /// Every broker's counters once nothing is in flight on a link (each link's sender wrote
    /// what its receiver read), or after 10 s: over links shaped like a WAN (`--links wan`) a
    /// message of the last point can still be on its way when the next point's counters are
    /// read, and the link checks would count it in the wrong point.
    async fn settled(&self) -> anyhow::Result<Vec<Snapshot>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let now = scrape_all(self.admins.clone()).await?;
            if cross_check(&self.names, &now, &now, true).is_ok() || std::time::Instant::now() >= deadline {
                return Ok(now);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Every link's sender and receiver agree: what broker a wrote to b (`LINK_MESSAGES_OUT` at a,
/// peer b) is what b read from a (`LINK_MESSAGES_IN` at b, peer a), so a check that reads the
/// senders' counters cannot pass on messages that never arrived.
/// With `totals`, the counters themselves are compared rather than their growth from `before`
/// (nothing in flight since the links came up).
pub fn cross_check(names: &[String], before: &[Snapshot], after: &[Snapshot], totals: bool) -> Result<(), String> {
    let delta = |i: usize, name: &str| -> BTreeMap<String, f64> {
        let earlier = if totals { BTreeMap::new() } else { before[i].by_label(name, "peer") };
        let later = after[i].by_label(name, "peer");
        later.into_iter().map(|(peer, v)| (peer.clone(), v - earlier.get(&peer).copied().unwrap_or(0.0))).collect()
    };
    for (a, from) in names.iter().enumerate() {
        for (peer, wrote) in delta(a, LINK_MESSAGES) {
            let Some(b) = names.iter().position(|n| *n == peer) else { continue };
            let read = delta(b, LINK_MESSAGES_IN).get(from).copied().unwrap_or(0.0);
            if read != wrote {
                return Err(format!("{from} wrote {wrote} messages to {peer}, which read {read} from {from}"));
            }
        }
    }
    Ok(())
}

/// One point at one measuring subscriber: the typed row behind the CSV, the plots and the
/// report. Latency in ms from the intended send time.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NaradaRow {
    /// Topology name.
    pub topology: String,
    /// Matching rate, percent.
    pub matching_pct: u32,
    /// Publish rate asked for.
    pub rate_msg_s: f64,
    /// Publish rate achieved.
    pub achieved_msg_s: f64,
    /// Payload bytes.
    pub size_b: usize,
    /// The measuring subscriber's broker.
    pub subscriber: String,
    /// Brokers between publisher and subscriber.
    pub brokers_on_path: usize,
    /// Events published.
    pub published: u64,
    /// Of which matching.
    pub matched: u64,
    /// Events the measuring subscriber received.
    pub received: usize,
    /// Mean latency.
    pub mean_ms: Option<f64>,
    /// Its variance.
    pub variance_ms2: Option<f64>,
    /// Minimum.
    pub min_ms: Option<f64>,
    /// Maximum.
    pub max_ms: Option<f64>,
    /// Events received / time from the first publish to the last receipt.
    pub throughput_msg_s: Option<f64>,
}

/// The row of the measuring subscriber `sub`, `path` brokers from the publisher, at the point
/// `spec` of the network `topology` (`r`: what the point measured).
fn row(topology: &str, spec: &PointSpec, r: &PointResult, (sub, path): (&str, usize), s: &Sample) -> NaradaRow {
    let ms: Vec<f64> = s.latencies_us.iter().map(|&us| us as f64 / 1000.0).collect();
    let n = ms.len() as f64;
    let mean = (n > 0.0).then(|| ms.iter().sum::<f64>() / n);
    let variance = mean.map(|mean| ms.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n);
    let secs = s.last_us.saturating_sub(r.start_us) as f64 / 1e6;
    NaradaRow {
        topology: topology.into(),
        matching_pct: spec.matching,
        rate_msg_s: spec.rate,
        achieved_msg_s: r.achieved_rate,
        size_b: spec.size,
        subscriber: sub.into(),
        brokers_on_path: path,
        published: spec.count,
        matched: r.matched,
        received: ms.len(),
        mean_ms: mean,
        variance_ms2: variance,
        min_ms: ms.iter().copied().reduce(f64::min),
        max_ms: ms.iter().copied().reduce(f64::max),
        throughput_msg_s: (secs > 0.0).then(|| n / secs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(values: &[(&str, f64)]) -> Snapshot {
        Snapshot::parse(
            &values.iter().map(|(l, v)| format!("{LINK_MESSAGES}{{link=\"{l}\"}} {v}\n")).collect::<String>(),
        )
    }

    #[test]
    fn links_that_carry_all_or_nothing_pass() {
        let before = vec![snap(&[("a", 0.0), ("b", 5.0)]), snap(&[("c", 0.0)])];
        let after = vec![snap(&[("a", 10.0), ("b", 5.0)]), snap(&[("c", 10.0)])];
        assert_eq!(links(&before, &after, 10, 3), Ok(()));
    }

    #[test]
    fn a_link_that_carried_unwanted_events_fails() {
        let before = vec![snap(&[("a", 0.0)])];
        let after = vec![snap(&[("a", 12.0)])];
        assert!(links(&before, &after, 10, 2).unwrap_err().contains("carried 12"));
        let after = vec![snap(&[("a", 10.0)])];
        assert!(links(&before, &after, 10, 3).unwrap_err().contains("not 20"));
    }

    #[test]
    fn a_sender_counter_without_the_receiver_s_fails_the_cross_check() {
        let names = ["a".to_string(), "b".to_string()];
        let at = |out: f64, inn: f64, peer: &str| {
            Snapshot::parse(&format!(
                "{LINK_MESSAGES}{{peer=\"{peer}\"}} {out}\n{LINK_MESSAGES_IN}{{peer=\"{peer}\"}} {inn}\n"
            ))
        };
        let before = [at(0.0, 0.0, "b"), at(0.0, 0.0, "a")];
        let agreed = [at(10.0, 0.0, "b"), at(0.0, 10.0, "a")];
        assert_eq!(cross_check(&names, &before, &agreed, false), Ok(()));
        let short = [at(10.0, 0.0, "b"), at(0.0, 7.0, "a")];
        assert!(cross_check(&names, &before, &short, false).unwrap_err().contains("read 7"));
    }

    #[test]
    fn guaranteed_links_want_each_matching_event_once_at_every_other_broker() {
        let at = |sent: f64, received: f64, again: f64| {
            Snapshot::parse(&format!(
                "{GD_PUBEND_SENT}{{pubend=\"p\",kind=\"data\"}} {sent}\n\
                 {GD_PUBEND_SENT}{{pubend=\"p\",kind=\"retransmit\"}} {again}\n\
                 {GD_PUBEND_RECEIVED}{{pubend=\"p\",kind=\"data\"}} {received}\n"
            ))
        };
        let before = [at(0.0, 0.0, 0.0), at(0.0, 0.0, 0.0), at(0.0, 0.0, 0.0)];
        let chain = [at(5.0, 0.0, 0.0), at(5.0, 5.0, 0.0), at(0.0, 5.0, 0.0)];
        assert_eq!(guaranteed_links(&before, &chain, 5, 0), Ok(()));
        let unwanted = [at(6.0, 0.0, 0.0), at(6.0, 6.0, 0.0), at(0.0, 6.0, 0.0)];
        assert!(guaranteed_links(&before, &unwanted, 5, 0).unwrap_err().contains("received 6"));
        let repaired = [at(5.0, 0.0, 1.0), at(5.0, 5.0, 0.0), at(0.0, 5.0, 0.0)];
        assert!(guaranteed_links(&before, &repaired, 5, 0).unwrap_err().contains("retransmitted"));
    }

    #[test]
    fn missing_link_metrics_fail_the_check() {
        assert!(links(&[Snapshot::default()], &[Snapshot::default()], 1, 2).is_err());
    }

    #[test]
    fn link_traffic_is_summed_per_direction() {
        let mut t = Traffic::default();
        let names = ["n1".to_string(), "n2".to_string()];
        let sample = |v: f64| Snapshot::parse(&format!("{LINK_MESSAGES}{{peer=\"x\"}} {v}\n"));
        add_links(&mut t, &names, &[sample(1.0), sample(0.0)], &[sample(4.0), sample(0.0)]);
        add_links(&mut t, &names, &[sample(4.0), sample(0.0)], &[sample(6.0), sample(0.0)]);
        assert_eq!(t.links.get("n1→x"), Some(&5.0));
        assert_eq!(t.links.get("n2→x"), Some(&0.0));
    }

    #[test]
    fn grids_count_events_with_a_floor() {
        let g = Grid {
            matching: vec![100, 10],
            rates: vec![1.0, 100.0],
            sizes: vec![30],
            seconds: 4.0,
            min_events: 20,
            per_broker: 5,
        };
        assert_eq!(g.events(1.0), 20);
        assert_eq!(g.events(100.0), 400);
        assert_eq!(g.points(), 4);
    }
}
