//! One update of the web view: the network as this broker's link-state view knows it, this
//! broker's own links with their rates, every other link's rates and queues as its ends
//! reported them over the links, and its panel. Built once a second by one producer for every
//! viewer, so its cost does not grow with the number of viewers.
//!
//! The link-state database lists only up links, and a killed broker's last advert may linger:
//! so a link is up when every end whose advert is known lists it, a broker is up when it is
//! reachable from here over up links, and brokers and links seen once are remembered, so a
//! cut or a crash shows as down rather than as nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tidings_route::FilterPage;

use super::seen::{Reports, SeenLink};
use crate::context::Context;
use crate::metrics::{TransportLabel, WhyLabel};

/// What one update says; the page's only input.
#[derive(Serialize)]
pub struct Overview {
    /// The broker serving the page.
    broker: String,
    /// Its cell.
    cell: String,
    /// When this was built, in milliseconds since the Unix epoch (the charts' time axis).
    unix_ms: u64,
    /// Every broker known, up or down, by name.
    brokers: Vec<BrokerView>,
    /// Every link known, up or down, each once (ends in name order).
    links: Vec<LinkView>,
    /// This broker's panel.
    stats: Stats,
    /// Guaranteed delivery at this broker.
    guaranteed: crate::guaranteed::GuaranteedState,
    /// Messages per second published to each pubend hosted here (acknowledged into its log),
    /// by pubend; over the driver's snapshots, which are up to 250 ms old.
    publish_per_s: BTreeMap<String, f64>,
}

/// One broker of the network.
#[derive(Serialize)]
struct BrokerView {
    name: String,
    cell: String,
    up: bool,
    /// Guaranteed-delivery pubends it hosts (from its advert).
    pubends: usize,
}

/// One link between two brokers: `own` when this broker is an end (its rates and queue as
/// measured here), else `seen` when an end reported it over the links.
#[derive(Serialize)]
struct LinkView {
    a: String,
    b: String,
    up: bool,
    own: Option<OwnLink>,
    seen: Option<SeenLink>,
}

/// This broker's side of one of its up links.
#[derive(Serialize)]
struct OwnLink {
    /// Data messages per second from this broker to the peer, and back.
    out_per_s: f64,
    in_per_s: f64,
    queued_messages: usize,
    queued_bytes: usize,
    drops: u64,
}

/// This broker's panel.
#[derive(Serialize)]
struct Stats {
    connections: i64,
    subscriptions: i64,
    messages_in: u64,
    messages_out: u64,
    in_per_s: f64,
    out_per_s: f64,
    /// Percent of one core over the last interval.
    cpu_percent: f64,
    rss_bytes: i64,
    /// Messages dropped or refused, by reason (totals since start).
    drops: BTreeMap<&'static str, u64>,
}

/// Counters of the previous update, for rates.
struct Counters {
    at: Instant,
    links: BTreeMap<String, (u64, u64)>,
    messages: (u64, u64),
    published: BTreeMap<String, u64>,
    cpu_seconds: f64,
}

/// The producer's memory between updates.
#[derive(Default)]
pub(super) struct Producer {
    /// Every broker seen, with its cell.
    seen_brokers: BTreeMap<String, String>,
    /// Every link seen, ends in name order.
    seen_links: BTreeSet<(String, String)>,
    last: Option<Counters>,
}

/// Why data messages were not delivered, from the broker's counters.
const ROUTE_DROPS: [&str; 7] =
    ["unknown_tree", "unknown_root", "not_from_parent", "not_from_mate", "unencodable", "unreachable", "link_closed"];

impl Producer {
    /// Forgets the counters rates are computed from (after a pause with no viewer).
    pub(super) fn forget_rates(&mut self) {
        self.last = None;
    }

    /// The next update. Takes the router's lock (read) once, for a snapshot without filters,
    /// and tells the network someone watches, so its brokers report their links.
    pub(super) fn build(&mut self, shared: &Context) -> Overview {
        shared.core.cluster.watching();
        let reports = Reports::new(shared.core.cluster.link_reports());
        let state = shared.core.cluster.state(FilterPage { offset: 0, limit: 0 });
        let now = Instant::now();
        let me = state.name.to_string();
        self.seen_brokers.insert(me.clone(), state.cell.to_string());
        // Who lists whom, from every advert; this broker's own links from its connections.
        let mut lists: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut pubends = BTreeMap::new();
        for advert in &state.router.adverts {
            let origin = advert.origin.to_string();
            self.seen_brokers.insert(origin.clone(), advert.cell.to_string());
            pubends.insert(origin.clone(), advert.pubends.len());
            let peers = advert.links.iter().map(|l| l.peer.to_string()).collect();
            lists.insert(origin, peers);
        }
        lists.insert(me.clone(), state.connections.iter().map(|c| c.peer.to_string()).collect());
        for (origin, peers) in &lists {
            for peer in peers {
                self.seen_links.insert(ends(origin, peer));
            }
        }
        let listed = |from: &str, to: &str| lists.get(from).is_none_or(|peers| peers.contains(to));
        let up_links: BTreeSet<&(String, String)> =
            self.seen_links.iter().filter(|(a, b)| listed(a, b) && listed(b, a)).collect();
        let reachable = reach(&me, &up_links);

        let seconds = self.last.as_ref().map(|last| now.duration_since(last.at).as_secs_f64()).unwrap_or(0.0);
        let rate = |now: u64, then: Option<u64>| match then {
            Some(then) if seconds > 0.0 => now.saturating_sub(then) as f64 / seconds,
            _ => 0.0,
        };
        let mut link_counters = BTreeMap::new();
        let mut own = BTreeMap::new();
        for c in &state.connections {
            let peer = c.peer.to_string();
            let then = self.last.as_ref().and_then(|last| last.links.get(&peer).copied());
            own.insert(
                peer.clone(),
                OwnLink {
                    out_per_s: rate(c.messages_out, then.map(|t| t.1)),
                    in_per_s: rate(c.messages_in, then.map(|t| t.0)),
                    queued_messages: c.queued_messages,
                    queued_bytes: c.queued_bytes,
                    drops: c.drops,
                },
            );
            link_counters.insert(peer, (c.messages_in, c.messages_out));
        }
        let links = self
            .seen_links
            .iter()
            .map(|pair @ (a, b)| {
                let peer = if *a == me {
                    Some(b)
                } else if *b == me {
                    Some(a)
                } else {
                    None
                };
                LinkView {
                    a: a.clone(),
                    b: b.clone(),
                    up: up_links.contains(pair),
                    own: peer.and_then(|peer| own.remove(peer)),
                    seen: if peer.is_none() { reports.link(a, b) } else { None },
                }
            })
            .collect();
        let brokers = self
            .seen_brokers
            .iter()
            .map(|(name, cell)| BrokerView {
                name: name.clone(),
                cell: cell.clone(),
                up: reachable.contains(name.as_str()),
                pubends: pubends.get(name).copied().unwrap_or(0),
            })
            .collect();

        let m = &shared.metrics;
        let messages = (m.messages_in.get(), m.messages_out.get());
        let process = crate::process_metrics::read_sample();
        let cpu_seconds = process.as_ref().map_or(0.0, |p| p.cpu_seconds);
        let then = self.last.as_ref();
        let cpu_percent = match then {
            Some(last) if seconds > 0.0 => (cpu_seconds - last.cpu_seconds).max(0.0) / seconds * 100.0,
            _ => 0.0,
        };
        let stats = Stats {
            connections: ["tcp", "udp"]
                .iter()
                .filter_map(|t| m.connections.get(&TransportLabel { transport: t }).map(|g| g.get()))
                .sum(),
            subscriptions: m.subscriptions.get(),
            messages_in: messages.0,
            messages_out: messages.1,
            in_per_s: rate(messages.0, then.map(|t| t.messages.0)),
            out_per_s: rate(messages.1, then.map(|t| t.messages.1)),
            cpu_percent,
            rss_bytes: process.as_ref().map_or(0, |p| p.resident_bytes),
            drops: drops(shared),
        };
        let guaranteed = shared.core.guaranteed.state();
        let published: BTreeMap<String, u64> =
            guaranteed.pubends.iter().filter_map(|p| Some((p.pubend.clone(), p.published?))).collect();
        let publish_per_s = published
            .iter()
            .map(|(pubend, &n)| (pubend.clone(), rate(n, then.and_then(|t| t.published.get(pubend).copied()))))
            .collect();
        self.last = Some(Counters { at: now, links: link_counters, messages, cpu_seconds, published });
        Overview {
            broker: me,
            cell: state.cell.to_string(),
            unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            brokers,
            links,
            stats,
            guaranteed,
            publish_per_s,
        }
    }
}

/// A link's ends in name order, so each link is kept once whoever reported it.
fn ends(x: &str, y: &str) -> (String, String) {
    if x <= y {
        (x.to_string(), y.to_string())
    } else {
        (y.to_string(), x.to_string())
    }
}

/// The brokers reachable from `from` over `links` (`from` included).
fn reach<'a>(from: &'a str, links: &BTreeSet<&'a (String, String)>) -> BTreeSet<&'a str> {
    let mut reached = BTreeSet::from([from]);
    let mut frontier = vec![from];
    while let Some(at) = frontier.pop() {
        for (a, b) in links.iter().map(|pair| (pair.0.as_str(), pair.1.as_str())) {
            let next = if a == at {
                b
            } else if b == at {
                a
            } else {
                continue;
            };
            if reached.insert(next) {
                frontier.push(next);
            }
        }
    }
    reached
}

/// The broker's drop and refusal counters that are not zero, by reason.
fn drops(shared: &Context) -> BTreeMap<&'static str, u64> {
    let m = &shared.metrics;
    let mut drops = BTreeMap::from([
        ("slow_consumer", m.slow_consumer_drops.get()),
        ("slow_consumer_disconnect", m.slow_consumer_disconnects.get()),
        ("publisher_stall", m.publisher_stalls.get()),
        ("no_responders", m.no_responders.get()),
        ("queue_group_unserved", m.group_unserved.get()),
        ("udp_datagram", m.udp_datagrams_dropped.get()),
    ]);
    for why in ROUTE_DROPS {
        if let Some(counter) = m.route_drops.get(&WhyLabel { why }) {
            drops.insert(why, counter.get());
        }
    }
    drops.retain(|_, n| *n > 0);
    drops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_follows_up_links_only_from_the_start() {
        let links = [ends("a", "b"), ends("c", "b"), ends("d", "e")];
        let up: BTreeSet<&(String, String)> = links.iter().collect();
        let reached = reach("a", &up);
        assert_eq!(reached, BTreeSet::from(["a", "b", "c"]));
        assert_eq!(reach("e", &up), BTreeSet::from(["d", "e"]));
    }
}
