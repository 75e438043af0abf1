//! Metrics of guaranteed delivery: what the log and the core are doing, per broker.

use std::collections::HashMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels a per-pubend metric: the pubend (hex id) and the kind of protocol message (`data`,
/// `retransmit`, `silence`, `ack`, `nack`, `ack_expected`; `publish` for acked publishes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PubendKind {
    /// The pubend, as its 16 hex digits.
    pubend: String,
    /// The kind of message.
    kind: &'static str,
}

/// Labels a per-pubend gauge: the pubend (hex id).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PubendLabel {
    /// The pubend, as its 16 hex digits.
    pub pubend: String,
}

/// Labels a replica group's snapshot count: the pubend and what happened (taken, sent,
/// received, refused).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotLabel {
    /// The pubend, as its 16 hex digits.
    pub pubend: String,
    /// taken, sent, received or refused.
    pub event: String,
}

/// Handles for the guaranteed-delivery metrics (cheap to clone: atomics behind `Arc`s).
#[derive(Clone)]
pub struct GuaranteedMetrics {
    /// Guaranteed publishes acknowledged (PUBLISH_ACK sent), retries included.
    pub publishes_acked: Counter,
    /// Of those, the ones whose tick the pubend log had reported synced when the PUBLISH_ACK
    /// was queued: the evidence that each acknowledgement came after the sync covering it
    /// (`bench overhead` checks it equals the acknowledgements its publisher received).
    pub publishes_acked_synced: Counter,
    /// Guaranteed publishes refused (the log could not take them).
    pub publishes_refused: Counter,
    /// Resends of a relay's republishes after none was answered for a while (its watch): each
    /// one a publish the pubend neither acknowledged nor refused. Zero is the expected value.
    pub relay_resends_unanswered: Counter,
    /// Retried publishes recognised as already logged.
    pub duplicate_publishes: Counter,
    /// Time from a GPUBLISH reaching the driver to its PUBLISH_ACK being queued.
    pub ack_seconds: Histogram,
    /// fdatasync calls of the pubend log.
    pub fsyncs: Counter,
    /// How long each turn of the driver's loop took (a command or a timer, with its actions):
    /// every guaranteed message of the broker waits behind the turn in progress.
    pub driver_turn_seconds: Histogram,
    /// How long each fdatasync of the pubend log took: the disk's share of `ack_seconds`.
    pub fsync_seconds: Histogram,
    /// Waits of the log writer for more publishes before a sync (`[storage] linger`).
    pub lingers: Counter,
    /// Of those, waits that gathered nothing.
    pub lingers_fruitless: Counter,
    /// Appends per group commit (one write and one sync each).
    pub group_size: Histogram,
    /// Bytes written to the pubend log.
    pub log_bytes: Counter,
    /// Log records found damaged by a read: never served, their ticks are lost.
    pub corrupt_records: Counter,
    /// Damaged stretches found when the log was opened (their ticks are answered as lost).
    pub corrupt_at_open: Counter,
    /// Log segments deleted after release.
    pub segments_deleted: Counter,
    /// Replicated pubends' logs voided and seeded again from their replica group, because the
    /// group held a record below the log's last tick that the log lacked.
    pub logs_voided: Counter,
    /// Ticks known to hold a message that became lost because the record was unreadable
    /// (their subscribers got gap notices).
    pub damaged_ticks: Counter,
    /// Guaranteed deliveries queued to subscribers.
    pub deliveries: Counter,
    /// Of those, the ones a catch-up's cursor queued, outside the driver (`super::cursor`).
    pub catch_up_served: Counter,
    /// Times a subscriber's outbox filled and its subend stopped (nothing dropped).
    pub outbox_full: Counter,
    /// Nacks sent upstream.
    pub nacks_sent: Counter,
    /// Ticks nacked upstream (the nack range of seed 001's failure figures; ticks are µs).
    pub nack_ticks_sent: Counter,
    /// Nacked ticks absorbed by consolidation.
    pub nack_ticks_absorbed: Counter,
    /// Retransmissions sent downstream (answers to nacks).
    pub retransmits: Counter,
    /// Guaranteed subscriptions confirmed (SUBSCRIBED sent; in a network, after the barrier).
    pub subscriptions_confirmed: Counter,
    /// Guaranteed-delivery frames queued on links to peers.
    pub peer_frames_sent: Counter,
    /// Guaranteed-delivery frames not sent: no link to the destination (the core recovers).
    pub peer_frames_unsent: Counter,
    /// Peers seen back with a new incarnation (their streams re-told).
    pub peer_restarts: Counter,
    /// F silences from a broker that is not a stream's upstream cell (a former upstream after
    /// a reroute), dropped: judged for another subtree.
    pub foreign_finals: Counter,
    /// Untold F runs cut back when judged again after the routing summaries moved.
    pub rejudged: Counter,
    /// F from the upstream cell judged under another tree than this broker's, dropped.
    pub stale_tree_finals: Counter,
    /// First-time Data for ticks already final here, dropped.
    pub duplicates_dropped: Counter,
    /// Knowledge contradicting what a stream held (D against F): protocol errors, the old
    /// value kept. Anything but 0 wants a look.
    pub conflicts: Counter,
    /// Peer messages with impossible fields, or for a pubend with no stream here.
    pub refused_messages: Counter,
    /// Frames sent sideways through a cell mate (no link of our own to the destination).
    pub sideways_sent: Counter,
    /// Sideways frames carried on for another broker, and acks and nacks handed on to our
    /// cell's entry broker for their pubend.
    pub sideways_carried: Counter,
    /// Sideways frames this broker was asked to carry but had no link to hand on (the core
    /// recovers).
    pub sideways_unsent: Counter,
    /// Per pubend: protocol messages sent to peers, by kind (retransmits answer nacks).
    pub pubend_sent: PubendCounters,
    /// Per pubend: protocol messages received from peers, by kind.
    pub pubend_received: PubendCounters,
    /// Per pubend: publishes acknowledged (kind `publish`).
    pub pubend_acked: PubendCounters,
    /// Per pubend: how far the doubt horizon trails the pubend's clock, ms (gd-protocol §13),
    /// refreshed with `/state`.
    pub horizon_lag_ms: Family<PubendLabel, Gauge>,
    /// Per hosted pubend: how long the oldest message its log still holds has waited for
    /// release, ms (0: everything logged is released).
    pub release_lag_ms: Family<PubendLabel, Gauge>,
    /// Per pubend: the largest lag of a local guaranteed subscription behind its clock, ms.
    pub subend_lag_ms_max: Family<PubendLabel, Gauge>,
    /// Per replica group here: its term as this broker sees it.
    pub replica_term: Family<PubendLabel, Gauge>,
    /// Per replica group here: its commit index as this broker knows it.
    pub replica_commit: Family<PubendLabel, Gauge>,
    /// Per replica group here: 1 while this broker leads it.
    pub replica_leading: Family<PubendLabel, Gauge>,
    /// Per replica group: elections this broker won (raft-rs made it leader), counted as they
    /// happen, where `replica_term` and `replica_leading` are read every 250 ms and can miss
    /// a lead held for less: summed over a cell, the group's elections.
    pub replica_elections_won: Family<PubendLabel, Counter>,
    /// Per replica group this broker leads: the entries its furthest follower lacks.
    pub replica_lag_max: Family<PubendLabel, Gauge>,
    /// Per replica group here: the first index its log holds (compacted below).
    pub replica_first_index: Family<PubendLabel, Gauge>,
    /// Per replica group here: the bytes of the entries its log holds.
    pub replica_log_bytes: Family<PubendLabel, Gauge>,
    /// Per replica group here: snapshots taken, sent, received and refused since start.
    pub replica_snapshots: Family<SnapshotLabel, Gauge>,
    /// Per replica group led here: snapshot chunks queued for its mates and not sent yet (a
    /// level, not a count: non-zero while a paced snapshot is in flight).
    pub replica_snapshot_chunks_queued: Family<PubendLabel, Gauge>,
    /// Pubends hosted by this broker.
    pub pubends: Gauge,
    /// Guaranteed subscriptions.
    pub subends: Gauge,
    /// Durable subscriptions created.
    pub durable_created: Counter,
    /// Writes of retained values to disk (each one synced transaction, possibly of several
    /// values): how often guaranteed retained values cost an fsync.
    pub retained_writes: Counter,
    /// Durable subscriptions taken up again by a client.
    pub durable_resumed: Counter,
    /// Durable subscriptions deleted.
    pub durable_deleted: Counter,
    /// Guaranteed queue group messages given back by a member that left unacknowledged, to be
    /// redelivered to another (each is a message some worker may have done twice).
    pub group_redeliveries: Counter,
    /// Members of guaranteed queue groups here.
    pub group_members: Gauge,
    /// GROUP frames this broker handed on between two other brokers (it is on the path
    /// between a member's broker and the home).
    pub group_relayed: Counter,
    /// Breaks on a GROUP path this broker told an end of (its own included): each makes a
    /// home let a broker's members go, or a member's broker join them again.
    pub group_breaks: Counter,
    /// Checkpoint writes of durable subscriptions made durable.
    pub durable_checkpoints: Counter,
    /// Checkpoint writes that failed (retried; the messages stay held).
    pub durable_checkpoint_failures: Counter,
    /// Durable subscriptions, held by a client or not.
    pub durables: Gauge,
    /// Publishes held back by a pubend log at its retention limit (backpressure policy).
    pub publishes_held: Counter,
    /// Early releases of a pubend log past its retention limit (release policy).
    pub early_releases: Counter,
}

impl GuaranteedMetrics {
    /// Creates the handles and registers them under `tidings_gd_*`.
    pub fn new(registry: &mut Registry) -> GuaranteedMetrics {
        let m = GuaranteedMetrics {
            publishes_acked: Counter::default(),
            publishes_acked_synced: Counter::default(),
            publishes_refused: Counter::default(),
            relay_resends_unanswered: Counter::default(),
            duplicate_publishes: Counter::default(),
            ack_seconds: Histogram::new(exponential_buckets(1e-5, 2.0, 20)),
            fsyncs: Counter::default(),
            driver_turn_seconds: Histogram::new(exponential_buckets(1e-6, 2.0, 22)),
            fsync_seconds: Histogram::new(exponential_buckets(1e-5, 2.0, 20)),
            lingers: Counter::default(),
            lingers_fruitless: Counter::default(),
            group_size: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            log_bytes: Counter::default(),
            corrupt_records: Counter::default(),
            corrupt_at_open: Counter::default(),
            segments_deleted: Counter::default(),
            logs_voided: Counter::default(),
            damaged_ticks: Counter::default(),
            deliveries: Counter::default(),
            catch_up_served: Counter::default(),
            outbox_full: Counter::default(),
            nacks_sent: Counter::default(),
            nack_ticks_sent: Counter::default(),
            nack_ticks_absorbed: Counter::default(),
            retransmits: Counter::default(),
            subscriptions_confirmed: Counter::default(),
            peer_frames_sent: Counter::default(),
            peer_frames_unsent: Counter::default(),
            peer_restarts: Counter::default(),
            foreign_finals: Counter::default(),
            rejudged: Counter::default(),
            stale_tree_finals: Counter::default(),
            duplicates_dropped: Counter::default(),
            conflicts: Counter::default(),
            refused_messages: Counter::default(),
            sideways_sent: Counter::default(),
            sideways_carried: Counter::default(),
            sideways_unsent: Counter::default(),
            pubend_sent: PubendCounters::default(),
            pubend_received: PubendCounters::default(),
            pubend_acked: PubendCounters::default(),
            horizon_lag_ms: Family::default(),
            release_lag_ms: Family::default(),
            subend_lag_ms_max: Family::default(),
            replica_term: Family::default(),
            replica_commit: Family::default(),
            replica_leading: Family::default(),
            replica_elections_won: Family::default(),
            replica_lag_max: Family::default(),
            replica_first_index: Family::default(),
            replica_log_bytes: Family::default(),
            replica_snapshots: Family::default(),
            replica_snapshot_chunks_queued: Family::default(),
            pubends: Gauge::default(),
            subends: Gauge::default(),
            durable_created: Counter::default(),
            retained_writes: Counter::default(),
            durable_resumed: Counter::default(),
            durable_deleted: Counter::default(),
            group_redeliveries: Counter::default(),
            group_members: Gauge::default(),
            group_relayed: Counter::default(),
            group_breaks: Counter::default(),
            durable_checkpoints: Counter::default(),
            durable_checkpoint_failures: Counter::default(),
            durables: Gauge::default(),
            publishes_held: Counter::default(),
            early_releases: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("tidings_gd");
        r.register("publishes_acked", "Guaranteed publishes acknowledged", m.publishes_acked.clone());
        r.register(
            "publishes_acked_synced",
            "Guaranteed publishes acknowledged after the pubend log's sync had covered their tick",
            m.publishes_acked_synced.clone(),
        );
        r.register("publishes_refused", "Guaranteed publishes refused", m.publishes_refused.clone());
        r.register(
            "relay_resends_unanswered",
            "Resends of a relay's republishes after none was answered for 6 s",
            m.relay_resends_unanswered.clone(),
        );
        r.register("duplicate_publishes", "Retried publishes already logged", m.duplicate_publishes.clone());
        r.register("ack_seconds", "GPUBLISH to PUBLISH_ACK", m.ack_seconds.clone());
        r.register("fsyncs", "fdatasync calls of the pubend log", m.fsyncs.clone());
        r.register("driver_turn_seconds", "Time of each turn of the driver's loop", m.driver_turn_seconds.clone());
        r.register("fsync_seconds", "Time of each fdatasync of the pubend log", m.fsync_seconds.clone());
        r.register("log_lingers", "Waits of the log writer for more publishes before a sync", m.lingers.clone());
        r.register(
            "log_lingers_fruitless",
            "Waits of the log writer that gathered no publish (waiting then pauses for a second)",
            m.lingers_fruitless.clone(),
        );
        r.register("group_size", "Appends per group commit", m.group_size.clone());
        r.register("log_bytes", "Bytes written to the pubend log", m.log_bytes.clone());
        r.register("corrupt_records", "Pubend log records found damaged by a read", m.corrupt_records.clone());
        r.register("corrupt_at_open", "Damaged stretches found opening the pubend log", m.corrupt_at_open.clone());
        r.register("segments_deleted", "Pubend log segments deleted after release", m.segments_deleted.clone());
        r.register(
            "logs_voided",
            "Replicated pubend logs voided and seeded again from their group, which contradicted them",
            m.logs_voided.clone(),
        );
        r.register("damaged_ticks", "Message ticks lost to unreadable records (gap notices)", m.damaged_ticks.clone());
        r.register("deliveries", "Guaranteed deliveries queued", m.deliveries.clone());
        r.register("catch_up_served", "Guaranteed deliveries queued by a catch-up's cursor", m.catch_up_served.clone());
        r.register("outbox_full", "Guaranteed subscribers paused by a full outbox", m.outbox_full.clone());
        r.register("nacks_sent", "Nacks sent upstream", m.nacks_sent.clone());
        r.register("nack_ticks_sent", "Ticks nacked upstream (the nack range)", m.nack_ticks_sent.clone());
        r.register("nack_ticks_absorbed", "Nacked ticks absorbed by consolidation", m.nack_ticks_absorbed.clone());
        r.register("retransmits", "Retransmissions answering nacks", m.retransmits.clone());
        r.register("subscriptions_confirmed", "Guaranteed subscriptions confirmed", m.subscriptions_confirmed.clone());
        r.register("peer_frames_sent", "Guaranteed frames queued on links", m.peer_frames_sent.clone());
        r.register("peer_frames_unsent", "Guaranteed frames with no link to send on", m.peer_frames_unsent.clone());
        r.register("peer_restarts", "Peers seen back with a new incarnation", m.peer_restarts.clone());
        r.register("foreign_finals", "F silences from a former upstream, dropped", m.foreign_finals.clone());
        r.register(
            "rejudged",
            "Untold F runs cut back: a tick passed the filter when judged again",
            m.rejudged.clone(),
        );
        r.register("stale_tree_finals", "F judged under another tree than ours, dropped", m.stale_tree_finals.clone());
        r.register(
            "duplicates_dropped",
            "First-time Data for ticks already final, dropped",
            m.duplicates_dropped.clone(),
        );
        r.register("conflicts", "Knowledge contradicting what a stream held (D against F)", m.conflicts.clone());
        r.register(
            "refused_messages",
            "Peer messages with impossible fields or for no stream here",
            m.refused_messages.clone(),
        );
        r.register("sideways_sent", "Guaranteed frames sent through a cell mate", m.sideways_sent.clone());
        r.register("sideways_carried", "Guaranteed frames carried on for other brokers", m.sideways_carried.clone());
        r.register("sideways_unsent", "Sideways frames with no link to hand on", m.sideways_unsent.clone());
        r.register("pubend_sent", "Protocol messages sent per pubend and kind", m.pubend_sent.family.clone());
        r.register(
            "pubend_received",
            "Protocol messages received per pubend and kind",
            m.pubend_received.family.clone(),
        );
        r.register("pubend_acked", "Publishes acknowledged per pubend", m.pubend_acked.family.clone());
        r.register("horizon_lag_ms", "Doubt horizon behind the pubend's clock (ms)", m.horizon_lag_ms.clone());
        r.register(
            "release_lag_ms",
            "Age of the oldest unreleased message in the pubend log (ms)",
            m.release_lag_ms.clone(),
        );
        let lag = m.subend_lag_ms_max.clone();
        r.register("subend_lag_ms_max", "Largest lag of a local guaranteed subscription (ms)", lag);
        r.register("replica_term", "Term of each replica group here", m.replica_term.clone());
        r.register("replica_commit", "Commit index of each replica group here", m.replica_commit.clone());
        r.register("replica_leading", "1 while this broker leads the replica group", m.replica_leading.clone());
        let won = m.replica_elections_won.clone();
        r.register("replica_elections_won", "Elections this broker won, per replica group", won);
        let lag = m.replica_lag_max.clone();
        r.register("replica_lag_max", "Entries the furthest follower of a group led here lacks", lag);
        let first = m.replica_first_index.clone();
        r.register("replica_first_index", "First index the replica log holds here (compacted below)", first);
        r.register("replica_log_bytes", "Bytes of the entries the replica log holds here", m.replica_log_bytes.clone());
        let snapshots = m.replica_snapshots.clone();
        r.register("replica_snapshots", "Replica snapshots taken, sent, received, refused and too large, and their chunks sent, received and refused, here", snapshots);
        let queued = m.replica_snapshot_chunks_queued.clone();
        r.register(
            "replica_snapshot_chunks_queued",
            "Snapshot chunks a group led here has queued for its mates, not sent yet",
            queued,
        );
        r.register("pubends", "Pubends hosted", m.pubends.clone());
        r.register("subends", "Guaranteed subscriptions", m.subends.clone());
        r.register("durable_created", "Durable subscriptions created", m.durable_created.clone());
        r.register("retained_writes", "Synced writes of retained values to disk", m.retained_writes.clone());
        r.register("durable_resumed", "Durable subscriptions taken up again by a client", m.durable_resumed.clone());
        r.register("durable_deleted", "Durable subscriptions deleted", m.durable_deleted.clone());
        r.register(
            "group_redeliveries",
            "Guaranteed queue group messages a leaving member gave back for redelivery",
            m.group_redeliveries.clone(),
        );
        r.register("group_members", "Members of guaranteed queue groups", m.group_members.clone());
        r.register("group_relayed", "GROUP frames handed on between two other brokers", m.group_relayed.clone());
        r.register("group_breaks", "Breaks on GROUP paths told to an end", m.group_breaks.clone());
        r.register("durable_checkpoints", "Durable checkpoint writes made durable", m.durable_checkpoints.clone());
        let failures = m.durable_checkpoint_failures.clone();
        r.register("durable_checkpoint_failures", "Durable checkpoint writes that failed (retried)", failures);
        r.register("durables", "Durable subscriptions, held or not", m.durables.clone());
        r.register("publishes_held", "Publishes held back at a retention limit", m.publishes_held.clone());
        r.register("early_releases", "Pubend logs released early at a retention limit", m.early_releases.clone());
        m
    }
}

/// One per-pubend counter family, with the handles already used kept. The driver counts
/// every protocol message it sends or takes in and every acknowledged publish; through the
/// family alone each count formatted the pubend's 16 hex digits and looked the label up under
/// the family's lock. Clones share the counts (the family's atomics), each with its own handles.
#[derive(Clone, Default)]
pub struct PubendCounters {
    family: Family<PubendKind, Counter>,
    handles: HashMap<(u64, &'static str), Counter>,
}

impl PubendCounters {
    /// Counts one `kind` for `pubend`.
    pub fn inc(&mut self, pubend: u64, kind: &'static str) {
        let family = &self.family;
        self.handles
            .entry((pubend, kind))
            .or_insert_with(|| family.get_or_create(&PubendKind { pubend: format!("{pubend:016x}"), kind }).clone())
            .inc();
    }

    /// What these handles counted of `kind` for `pubend` so far (0 before the first): the
    /// web view's publish rate reads the driver's own count, without the family's lock.
    pub fn count(&self, pubend: u64, kind: &'static str) -> u64 {
        self.handles.get(&(pubend, kind)).map_or(0, |counter| counter.get())
    }

    /// Counts one protocol message under its pubend and kind.
    pub(super) fn message(&mut self, message: &tidings_delivery::Message) {
        self.inc(message.pubend().0, kind(message));
    }
}

/// The kind label of one protocol message.
fn kind(message: &tidings_delivery::Message) -> &'static str {
    use tidings_delivery::Message;
    match message {
        Message::Data { requested_only: true, .. } => "retransmit",
        Message::Data { .. } => "data",
        Message::Silence { .. } => "silence",
        Message::Ack { .. } => "ack",
        Message::Nack { .. } => "nack",
        Message::AckExpected { .. } => "ack_expected",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(counters: &PubendCounters) -> String {
        let mut registry = Registry::default();
        registry.register("pubend_sent", "test", counters.family.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn kept_handles_count_into_the_family_under_the_hex_label_and_clones_share_the_counts() {
        let mut counters = PubendCounters::default();
        let mut clone = counters.clone();
        counters.inc(0xab, "data");
        counters.inc(0xab, "data");
        clone.inc(0xab, "data");
        counters.inc(0xab, "nack");
        let text = exposition(&counters);
        assert!(text.contains(r#"pubend_sent_total{pubend="00000000000000ab",kind="data"} 3"#), "{text}");
        assert!(text.contains(r#"pubend_sent_total{pubend="00000000000000ab",kind="nack"} 1"#), "{text}");
    }
}
