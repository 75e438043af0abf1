//! Prometheus metrics: what an operator watches and what the experiment suite reads.
//!
//! Handles are created once and cloned into sessions, so the hot path only touches atomics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tidings_wire::ReasonCode;

/// Labels a metric by transport.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransportLabel {
    /// `tcp` or `udp`.
    pub transport: &'static str,
}

/// Labels a metric by the protocol a client speaks.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabel {
    /// `native`, `mqtt/3.1.1`, `mqtt/5`, `mqtt-ws/3.1.1` or `mqtt-ws/5`.
    pub protocol: &'static str,
}

/// Labels a metric by protocol reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// A [`ReasonCode`] name.
    pub reason: &'static str,
}

/// Labels a metric by neighbour broker.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabel {
    /// The peer broker's name.
    pub peer: String,
}

/// Labels a metric by a short static reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhyLabel {
    /// Why.
    pub why: &'static str,
}

/// Every metric the broker exports.
#[derive(Clone)]
pub struct Metrics {
    /// Open client sessions, by transport.
    pub connections: Family<TransportLabel, Gauge>,
    /// Sessions ever opened, by transport.
    pub connections_opened: Family<TransportLabel, Counter>,
    /// Open client sessions by protocol (native or MQTT and its version): MQTT clients are
    /// counted under `tcp` in `connections` too, which this family does not replace.
    pub connections_by_protocol: Family<ProtocolLabel, Gauge>,
    /// Active subscriptions.
    pub subscriptions: Gauge,
    /// Messages published to this broker.
    pub messages_in: Counter,
    /// Bytes of published messages (message sections).
    pub bytes_in: Counter,
    /// Deliveries written to subscribers.
    pub messages_out: Counter,
    /// Bytes written to subscribers, frame headers included.
    pub bytes_out: Counter,
    /// Deliveries dropped because a subscriber's queue was full.
    pub slow_consumer_drops: Counter,
    /// Subscribers disconnected because their queue was full.
    pub slow_consumer_disconnects: Counter,
    /// Times a publisher was held back by a congested subscriber.
    pub publisher_stalls: Counter,
    /// Requests (publishes carrying a reply subject) published to this broker.
    pub requests: Counter,
    /// Requests answered "no responders": nothing here or beyond matched them.
    pub no_responders: Counter,
    /// Messages given to one member of a queue group here.
    pub group_deliveries: Counter,
    /// Members passed over because their queue was past half full, slow or closing: each
    /// skip is a message that went to another member instead of waiting.
    pub group_skips: Counter,
    /// Messages a queue group was to get here that no member could take (every one full).
    pub group_unserved: Counter,
    /// Topics with a retained value kept at this broker.
    pub retained_topics: Gauge,
    /// Bytes of the retained values kept at this broker (message sections).
    pub retained_bytes: Gauge,
    /// Frames refused, by reason.
    pub protocol_errors: Family<ReasonLabel, Counter>,
    /// UDP datagrams that did not decode, or came from a session the broker refused.
    pub udp_datagrams_dropped: Counter,
    /// Deliveries too large for one datagram.
    pub udp_deliveries_too_large: Counter,
    /// Datagrams sent to UDP clients carrying deliveries (several deliveries may share one).
    pub udp_datagrams_sent: Counter,
    /// Datagrams to UDP clients the socket would not send (the deliveries in them are lost,
    /// and the client sees the gap in their sequence numbers).
    pub udp_send_errors: Counter,
    /// UDP sessions that expired for want of a keepalive.
    pub udp_sessions_expired: Counter,
    /// UDP datagrams without a valid address token: answered with a TOKEN and nothing else.
    pub udp_unvalidated: Counter,
    /// UDP sessions refused because `[udp] max_sessions` were open.
    pub udp_sessions_refused: Counter,
    /// Time from reading a batch of frames off a socket to having queued each of its
    /// PUBLISHes for every matching subscriber (one sample per batch: its last message's
    /// publish-to-dispatch latency).
    pub dispatch_seconds: Histogram,
    /// Selector evaluations (the residue the content index could not decide by itself).
    pub selector_evaluations: Counter,
    /// Subscriptions found through the content index's equality and range buckets.
    pub index_hits: Counter,
    /// Topic lookups answered by the result cache.
    pub match_cache_hits: Counter,
    /// Topic lookups that walked the trie.
    pub match_cache_misses: Counter,
    /// Active subscriptions that have a selector.
    pub selector_subscriptions: Gauge,
    /// Time to match one message against an index that has selectors (topic-only matches are
    /// a cache lookup and are not timed, to keep the clock off the common path).
    pub match_seconds: Histogram,
    /// Broker links: data messages received, per peer.
    pub link_messages_in: Family<PeerLabel, Counter>,
    /// Broker links: data bytes received (frames), per peer.
    pub link_bytes_in: Family<PeerLabel, Counter>,
    /// Broker links: data messages written, per peer.
    pub link_messages_out: Family<PeerLabel, Counter>,
    /// Broker links: data bytes written (frames), per peer.
    pub link_bytes_out: Family<PeerLabel, Counter>,
    /// Broker links: data messages dropped because the link's queue was full, per peer.
    pub link_drops: Family<PeerLabel, Counter>,
    /// Broker links currently up.
    pub links_up: Gauge,
    /// Links established (handshakes completed and accepted).
    pub links_established: Counter,
    /// Links lost or closed, by why.
    pub links_closed: Family<WhyLabel, Counter>,
    /// Filters in the summary each peer advertised to us (all scopes), per peer.
    pub summary_filters_received: Family<PeerLabel, Gauge>,
    /// Filters in the summary we advertised to each peer (all scopes), per peer.
    pub summary_filters_sent: Family<PeerLabel, Gauge>,
    /// Route recomputations (link-state view changes that changed the graph).
    pub route_recomputations: Counter,
    /// Data messages from peers that routing refused, by why (routes changing).
    pub route_drops: Family<WhyLabel, Counter>,
    /// Frames from peers that did not decode or broke the protocol; the link was closed.
    pub peer_protocol_errors: Counter,
    /// Guaranteed frames from peers whose body did not decode, refused alone (the link stayed
    /// up): a peer's bug to look into, which the protocol recovers from by asking again.
    pub peer_frames_refused: Counter,
    /// Link handshakes refused for failed authentication, by why (`wrong_key`, `no_key`,
    /// `no_proof`).
    pub link_auth_failures: Family<WhyLabel, Counter>,
    /// Connections refused because they claimed the name of a peer whose link is up and alive.
    pub link_takeovers_refused: Counter,
    /// Configuration reloads (SIGHUP) applied.
    pub config_reloads: Counter,
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            connections: Family::default(),
            connections_opened: Family::default(),
            connections_by_protocol: Family::default(),
            subscriptions: Gauge::default(),
            messages_in: Counter::default(),
            bytes_in: Counter::default(),
            messages_out: Counter::default(),
            bytes_out: Counter::default(),
            slow_consumer_drops: Counter::default(),
            slow_consumer_disconnects: Counter::default(),
            publisher_stalls: Counter::default(),
            requests: Counter::default(),
            no_responders: Counter::default(),
            group_deliveries: Counter::default(),
            group_skips: Counter::default(),
            group_unserved: Counter::default(),
            retained_topics: Gauge::default(),
            retained_bytes: Gauge::default(),
            protocol_errors: Family::default(),
            udp_datagrams_dropped: Counter::default(),
            udp_deliveries_too_large: Counter::default(),
            udp_datagrams_sent: Counter::default(),
            udp_send_errors: Counter::default(),
            udp_sessions_expired: Counter::default(),
            udp_unvalidated: Counter::default(),
            udp_sessions_refused: Counter::default(),
            dispatch_seconds: Histogram::new(exponential_buckets(1e-6, 2.0, 24)),
            selector_evaluations: Counter::default(),
            index_hits: Counter::default(),
            match_cache_hits: Counter::default(),
            match_cache_misses: Counter::default(),
            selector_subscriptions: Gauge::default(),
            match_seconds: Histogram::new(exponential_buckets(1e-7, 2.0, 24)),
            link_messages_in: Family::default(),
            link_bytes_in: Family::default(),
            link_messages_out: Family::default(),
            link_bytes_out: Family::default(),
            link_drops: Family::default(),
            links_up: Gauge::default(),
            links_established: Counter::default(),
            links_closed: Family::default(),
            summary_filters_received: Family::default(),
            summary_filters_sent: Family::default(),
            route_recomputations: Counter::default(),
            route_drops: Family::default(),
            peer_protocol_errors: Counter::default(),
            peer_frames_refused: Counter::default(),
            link_auth_failures: Family::default(),
            link_takeovers_refused: Counter::default(),
            config_reloads: Counter::default(),
        };
        m.register_links(registry.sub_registry_with_prefix("tidings"));
        registry.register_collector(Box::new(crate::process_metrics::ProcessCollector));
        let r = registry.sub_registry_with_prefix("tidings");
        r.register(
            "build",
            "The running tidings: its version",
            prometheus_client::metrics::info::Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        r.register("connections", "Open client sessions", m.connections.clone());
        r.register("config_reloads", "Configuration reloads (SIGHUP) applied", m.config_reloads.clone());
        r.register("connections_opened", "Client sessions opened", m.connections_opened.clone());
        r.register(
            "connections_by_protocol",
            "Open client sessions by protocol (native, mqtt/3.1.1, mqtt/5, mqtt-ws/3.1.1, mqtt-ws/5)",
            m.connections_by_protocol.clone(),
        );
        r.register("subscriptions", "Active subscriptions", m.subscriptions.clone());
        r.register("messages_in", "Messages published to this broker", m.messages_in.clone());
        r.register("bytes_in", "Bytes of published message sections", m.bytes_in.clone());
        r.register("messages_out", "Deliveries written to subscribers", m.messages_out.clone());
        r.register("bytes_out", "Bytes written to subscribers", m.bytes_out.clone());
        r.register(
            "slow_consumer_drops",
            "Deliveries dropped for full subscriber queues",
            m.slow_consumer_drops.clone(),
        );
        r.register(
            "slow_consumer_disconnects",
            "Subscribers disconnected for full queues",
            m.slow_consumer_disconnects.clone(),
        );
        r.register("publisher_stalls", "Publishers held back by a congested subscriber", m.publisher_stalls.clone());
        r.register("requests", "Requests (publishes with a reply subject) published here", m.requests.clone());
        r.register("no_responders", "Requests answered no responders at once", m.no_responders.clone());
        r.register(
            "group_deliveries",
            "Messages given to one member of a queue group here",
            m.group_deliveries.clone(),
        );
        r.register("group_skips", "Queue group members skipped because their queue was full", m.group_skips.clone());
        r.register("group_unserved", "Queue group messages no member here could take", m.group_unserved.clone());
        r.register("retained_topics", "Topics with a retained value kept here", m.retained_topics.clone());
        r.register("retained_bytes", "Bytes of retained values kept here", m.retained_bytes.clone());
        r.register("protocol_errors", "Frames refused, by reason", m.protocol_errors.clone());
        r.register("udp_datagrams_dropped", "UDP datagrams that did not decode", m.udp_datagrams_dropped.clone());
        r.register(
            "udp_deliveries_too_large",
            "Deliveries too large for one UDP datagram",
            m.udp_deliveries_too_large.clone(),
        );
        r.register(
            "udp_datagrams_sent",
            "Datagrams of deliveries sent to UDP clients (deliveries are packed several to one)",
            m.udp_datagrams_sent.clone(),
        );
        r.register(
            "udp_send_errors",
            "Datagrams to UDP clients the socket would not send (their deliveries are lost)",
            m.udp_send_errors.clone(),
        );
        r.register("udp_sessions_expired", "UDP sessions expired without keepalive", m.udp_sessions_expired.clone());
        r.register(
            "udp_unvalidated_datagrams",
            "UDP datagrams without a valid address token",
            m.udp_unvalidated.clone(),
        );
        r.register("udp_sessions_refused", "UDP sessions refused at max_sessions", m.udp_sessions_refused.clone());
        r.register(
            "dispatch_seconds",
            "Time from reading a batch of PUBLISH frames to queueing them",
            m.dispatch_seconds.clone(),
        );
        r.register("selector_evaluations", "Selector evaluations", m.selector_evaluations.clone());
        r.register("index_hits", "Subscriptions found by the content index buckets", m.index_hits.clone());
        r.register("match_cache_hits", "Topic lookups answered by the result cache", m.match_cache_hits.clone());
        r.register("match_cache_misses", "Topic lookups that walked the trie", m.match_cache_misses.clone());
        r.register("selector_subscriptions", "Active subscriptions with a selector", m.selector_subscriptions.clone());
        r.register("match_seconds", "Time to match a message against selectors", m.match_seconds.clone());
        m
    }

    fn register_links(&self, r: &mut Registry) {
        r.register("link_messages_in", "Data messages received per broker link", self.link_messages_in.clone());
        r.register("link_bytes_in", "Data bytes received per broker link", self.link_bytes_in.clone());
        r.register("link_messages_out", "Data messages written per broker link", self.link_messages_out.clone());
        r.register("link_bytes_out", "Data bytes written per broker link", self.link_bytes_out.clone());
        r.register(
            "link_drops",
            "Data messages dropped for a full broker link queue, or queued when the link closed",
            self.link_drops.clone(),
        );
        r.register("links_up", "Broker links up", self.links_up.clone());
        r.register("links_established", "Broker links established", self.links_established.clone());
        r.register("links_closed", "Broker links closed, by why", self.links_closed.clone());
        r.register(
            "summary_filters_received",
            "Filters in the summary a peer advertised",
            self.summary_filters_received.clone(),
        );
        r.register(
            "summary_filters_sent",
            "Filters in the summary advertised to a peer",
            self.summary_filters_sent.clone(),
        );
        r.register("route_recomputations", "Route recomputations", self.route_recomputations.clone());
        r.register("route_drops", "Data messages from peers refused by routing", self.route_drops.clone());
        r.register(
            "peer_protocol_errors",
            "Malformed or unexpected frames from peers",
            self.peer_protocol_errors.clone(),
        );
        r.register(
            "peer_frames_refused",
            "Malformed guaranteed frames from peers, refused alone with the link kept up",
            self.peer_frames_refused.clone(),
        );
        r.register(
            "link_auth_failures",
            "Link handshakes refused for failed authentication, by why",
            self.link_auth_failures.clone(),
        );
        r.register(
            "link_takeovers_refused",
            "Connections refused for claiming the name of a live linked peer",
            self.link_takeovers_refused.clone(),
        );
    }

    /// Counts a closed link.
    pub fn link_closed(&self, why: &'static str) {
        self.links_closed.get_or_create(&WhyLabel { why }).inc();
    }

    /// Counts a refused frame.
    pub fn protocol_error(&self, reason: ReasonCode) {
        self.protocol_errors.get_or_create(&ReasonLabel { reason: reason.name() }).inc();
    }

    /// The open-connections gauge of the protocol labelled `protocol`.
    pub fn protocol(&self, protocol: &'static str) -> Gauge {
        self.connections_by_protocol.get_or_create(&ProtocolLabel { protocol }).clone()
    }
}
