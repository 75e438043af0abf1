//! Brokers' Prometheus metrics, as the experiments read them: what they plot and check is what
//! an operator sees on `/metrics`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Messages published to a broker.
pub const MESSAGES_IN: &str = "tidings_messages_in_total";
/// Deliveries a broker wrote to its subscribers.
pub const MESSAGES_OUT: &str = "tidings_messages_out_total";
/// Deliveries dropped because a subscriber's queue was full.
pub const DROPS: &str = "tidings_slow_consumer_drops_total";
/// Subscribers disconnected because their queue was full.
pub const DISCONNECTS: &str = "tidings_slow_consumer_disconnects_total";
/// Data messages dropped because a broker link's queue was full, per peer.
pub const LINK_DROPS: &str = "tidings_link_drops_total";
/// Data messages a broker received on each of its links (label `peer`).
pub const LINK_MESSAGES_IN: &str = "tidings_link_messages_in_total";
/// Data messages a broker wrote on each of its links (label `peer`).
pub const LINK_MESSAGES_OUT: &str = "tidings_link_messages_out_total";
/// Broker links up now (a gauge): a link that was cut and not yet re-established is missing.
pub const LINKS_UP: &str = "tidings_links_up";
/// Broker links established since the broker started: one per link at start, more after a cut.
pub const LINKS_ESTABLISHED: &str = "tidings_links_established_total";
/// Broker links lost or closed, by why (label `why`): a link cut under load shows here.
pub const LINKS_CLOSED: &str = "tidings_links_closed_total";
/// Data messages from peers that routing refused while routes were changing, by why.
pub const ROUTE_DROPS: &str = "tidings_route_drops_total";
/// Guaranteed delivery: nack messages a broker sent upstream.
pub const GD_NACKS_SENT: &str = "tidings_gd_nacks_sent_total";
/// Guaranteed delivery: ticks (µs of the pubend's clock) a broker nacked upstream: the nack
/// range of seed 001's failure figures.
pub const GD_NACK_TICKS_SENT: &str = "tidings_gd_nack_ticks_sent_total";
/// Guaranteed delivery: nacked ticks from downstream a broker absorbed (consolidation).
pub const GD_NACK_TICKS_ABSORBED: &str = "tidings_gd_nack_ticks_absorbed_total";
/// Guaranteed subscriptions confirmed (after the network's barrier).
pub const GD_SUBSCRIPTIONS_CONFIRMED: &str = "tidings_gd_subscriptions_confirmed_total";
/// Guaranteed protocol messages sent to peers, per pubend and `kind` (`data`, `retransmit`, ...).
pub const GD_PUBEND_SENT: &str = "tidings_gd_pubend_sent_total";
/// Guaranteed protocol messages received from peers, per pubend and `kind`.
pub const GD_PUBEND_RECEIVED: &str = "tidings_gd_pubend_received_total";
/// Guaranteed publishes a broker acknowledged (PUBLISH_ACK sent).
pub const GD_PUBLISHES_ACKED: &str = "tidings_gd_publishes_acked_total";
/// Of those, the ones acknowledged after the pubend log's sync had covered their tick.
pub const GD_PUBLISHES_ACKED_SYNCED: &str = "tidings_gd_publishes_acked_synced_total";
/// fdatasync calls of a broker's pubend log.
pub const GD_FSYNCS: &str = "tidings_gd_fsyncs_total";
/// Active subscriptions (a gauge).
pub const SUBSCRIPTIONS: &str = "tidings_subscriptions";

/// One sample line: `name{label="value",...} number`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name (counters end in `_total`).
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// All samples of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Samples in the order the broker printed them.
    pub samples: Vec<Sample>,
}

impl Snapshot {
    /// Parses Prometheus text exposition (comments and malformed lines are skipped).
    pub fn parse(text: &str) -> Snapshot {
        Snapshot { samples: text.lines().filter(|l| !l.starts_with('#')).filter_map(parse_line).collect() }
    }

    /// Whether any sample has this name.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }

    /// The sum of every sample of `name`, whatever its labels (0 when there is none).
    pub fn sum(&self, name: &str) -> f64 {
        self.samples.iter().filter(|s| s.name == name).map(|s| s.value).sum()
    }

    /// `name`'s samples summed by the value of `label`.
    pub fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            if let Some(v) = s.labels.get(label) {
                *out.entry(v.clone()).or_insert(0.0) += s.value;
            }
        }
        out
    }

    /// How much `name` grew since `earlier`.
    pub fn delta(&self, earlier: &Snapshot, name: &str) -> f64 {
        self.sum(name) - earlier.sum(name)
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
        None => (head, BTreeMap::new()),
    };
    Some(Sample { name: name.to_string(), labels, value })
}

/// `a="x",b="y \"q\""` into a map.
fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let mut chars = after.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.insert(key.trim().to_string(), value);
        rest = after[end + 2..].trim_start_matches(',').trim();
    }
    Some(out)
}

/// Scrapes `/metrics` from an admin address (blocking; a few milliseconds on loopback).
pub fn scrape(admin: &str) -> anyhow::Result<Snapshot> {
    let addr: SocketAddr = admin.parse().map_err(|e| anyhow::anyhow!("admin address {admin:?}: {e}"))?;
    Ok(Snapshot::parse(&tidings_testkit::http_get(addr, "/metrics")?))
}

/// Scrapes every address in order, off the async threads.
pub async fn scrape_all(admins: Vec<String>) -> anyhow::Result<Vec<Snapshot>> {
    tokio::task::spawn_blocking(move || admins.iter().map(|a| scrape(a)).collect()).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP tidings_messages_in Messages\n\
        # TYPE tidings_messages_in counter\n\
        tidings_messages_in_total 42\n\
        tidings_connections{transport=\"tcp\"} 3\n\
        tidings_connections{transport=\"udp\"} 2\n\
        tidings_link_messages_out_total{link=\"n1\",dir=\"a \\\"b\\\"\"} 7\n\
        garbage\n";

    #[test]
    fn samples_and_labels_are_parsed() {
        let s = Snapshot::parse(TEXT);
        assert_eq!(s.samples.len(), 4);
        assert_eq!(s.sum("tidings_messages_in_total"), 42.0);
        assert_eq!(s.sum("tidings_connections"), 5.0);
        assert_eq!(s.by_label("tidings_connections", "transport").get("udp"), Some(&2.0));
        let link = &s.samples[3];
        assert_eq!(link.labels.get("dir").map(String::as_str), Some("a \"b\""));
        assert_eq!(link.labels.get("link").map(String::as_str), Some("n1"));
        assert!(s.has("tidings_connections") && !s.has("nope"));
    }

    #[test]
    fn deltas_subtract_an_earlier_scrape() {
        let before = Snapshot::parse("x_total 10\n");
        let after = Snapshot::parse("x_total 25\n");
        assert_eq!(after.delta(&before, "x_total"), 15.0);
        assert_eq!(after.delta(&before, "y_total"), 0.0);
    }
}
