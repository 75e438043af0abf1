//! Brokers' Prometheus metrics, as the experiments read them: what they plot and check is what
//! an operator sees on `/metrics`.

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

pub use tidings_admin::{Sample, Snapshot};

/// Scrapes `/metrics` from an admin address (blocking; a few milliseconds on loopback).
pub fn scrape(admin: &str) -> anyhow::Result<Snapshot> {
    let addr: SocketAddr = admin.parse().map_err(|e| anyhow::anyhow!("admin address {admin:?}: {e}"))?;
    Ok(tidings_admin::scrape(addr)?)
}

/// Scrapes every address in order, off the async threads.
pub async fn scrape_all(admins: Vec<String>) -> anyhow::Result<Vec<Snapshot>> {
    tokio::task::spawn_blocking(move || admins.iter().map(|a| scrape(a)).collect()).await?
}
