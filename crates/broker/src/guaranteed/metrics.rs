//! Metrics of guaranteed delivery: what the log and the core are doing, per broker.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Handles for the guaranteed-delivery metrics (cheap to clone: atomics behind `Arc`s).
#[derive(Clone)]
pub struct GuaranteedMetrics {
    /// Guaranteed publishes acknowledged (PUBLISH_ACK sent), retries included.
    pub publishes_acked: Counter,
    /// Guaranteed publishes refused (the log could not take them).
    pub publishes_refused: Counter,
    /// Retried publishes recognised as already logged.
    pub duplicate_publishes: Counter,
    /// Time from a GPUBLISH reaching the driver to its PUBLISH_ACK being queued.
    pub ack_seconds: Histogram,
    /// fdatasync calls of the pubend log.
    pub fsyncs: Counter,
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
    /// Ticks known to hold a message that became lost because the record was unreadable
    /// (their subscribers got gap notices).
    pub damaged_ticks: Counter,
    /// Guaranteed deliveries queued to subscribers.
    pub deliveries: Counter,
    /// Times a subscriber's outbox filled and its subend stopped (nothing dropped).
    pub outbox_full: Counter,
    /// Nacks sent upstream.
    pub nacks_sent: Counter,
    /// Nacked ticks absorbed by consolidation.
    pub nack_ticks_absorbed: Counter,
    /// Retransmissions sent downstream (answers to nacks).
    pub retransmits: Counter,
    /// Pubends hosted by this broker.
    pub pubends: Gauge,
    /// Guaranteed subscriptions.
    pub subends: Gauge,
}

impl GuaranteedMetrics {
    /// Creates the handles and registers them under `tidings_gd_*`.
    pub fn new(registry: &mut Registry) -> GuaranteedMetrics {
        let m = GuaranteedMetrics {
            publishes_acked: Counter::default(),
            publishes_refused: Counter::default(),
            duplicate_publishes: Counter::default(),
            ack_seconds: Histogram::new(exponential_buckets(1e-5, 2.0, 20)),
            fsyncs: Counter::default(),
            group_size: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            log_bytes: Counter::default(),
            corrupt_records: Counter::default(),
            corrupt_at_open: Counter::default(),
            segments_deleted: Counter::default(),
            damaged_ticks: Counter::default(),
            deliveries: Counter::default(),
            outbox_full: Counter::default(),
            nacks_sent: Counter::default(),
            nack_ticks_absorbed: Counter::default(),
            retransmits: Counter::default(),
            pubends: Gauge::default(),
            subends: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("tidings_gd");
        r.register("publishes_acked", "Guaranteed publishes acknowledged", m.publishes_acked.clone());
        r.register("publishes_refused", "Guaranteed publishes refused", m.publishes_refused.clone());
        r.register("duplicate_publishes", "Retried publishes already logged", m.duplicate_publishes.clone());
        r.register("ack_seconds", "GPUBLISH to PUBLISH_ACK", m.ack_seconds.clone());
        r.register("fsyncs", "fdatasync calls of the pubend log", m.fsyncs.clone());
        r.register("group_size", "Appends per group commit", m.group_size.clone());
        r.register("log_bytes", "Bytes written to the pubend log", m.log_bytes.clone());
        r.register("corrupt_records", "Pubend log records found damaged by a read", m.corrupt_records.clone());
        r.register("corrupt_at_open", "Damaged stretches found opening the pubend log", m.corrupt_at_open.clone());
        r.register("segments_deleted", "Pubend log segments deleted after release", m.segments_deleted.clone());
        r.register("damaged_ticks", "Message ticks lost to unreadable records (gap notices)", m.damaged_ticks.clone());
        r.register("deliveries", "Guaranteed deliveries queued", m.deliveries.clone());
        r.register("outbox_full", "Guaranteed subscribers paused by a full outbox", m.outbox_full.clone());
        r.register("nacks_sent", "Nacks sent upstream", m.nacks_sent.clone());
        r.register("nack_ticks_absorbed", "Nacked ticks absorbed by consolidation", m.nack_ticks_absorbed.clone());
        r.register("retransmits", "Retransmissions answering nacks", m.retransmits.clone());
        r.register("pubends", "Pubends hosted", m.pubends.clone());
        r.register("subends", "Guaranteed subscriptions", m.subends.clone());
        m
    }
}
