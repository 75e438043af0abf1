//! One budget for the bytes queued to all clients together. Each outbox is bounded on its own
//! (`[slow_consumer] max_bytes`), but a dozen stalled subscribers each at its bound add up to
//! more than the machine may have; past `[limits] max_queued_bytes`, the connections holding
//! the most are cut (slowest first) until the total fits again.
//!
//! Frames being read count against the same limit: a client that announces a large frame and
//! sends it slowly, or half of it, held its bytes outside any budget (150 connections held
//! 1.2 GiB). A read buffer past its first chunk charges its growth here before it grows, and
//! may take only what queued bytes and other readers leave; past that its connection is closed.
//! Queued bytes are not cut for readers (a reader cannot make the broker cut a subscriber).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// A queue the budget may cut: the budget sits below the outboxes that charge it, so it knows
/// them only through this (an outbox implements it).
pub trait Cuttable: Send + Sync {
    /// Bytes it holds against the budget now.
    fn held(&self) -> usize;
    /// True once its connection is finished (what it still holds is coming back).
    fn is_cut(&self) -> bool;
    /// Who it belongs to, for the log line of a cut.
    fn client(&self) -> String;
    /// Drops what it holds (refunding it) and ends its connection at once.
    fn cut(&self);
}

/// The shared budget; every outbox charges what it queues and refunds what it wrote or dropped.
pub struct QueueBudget {
    limit: usize,
    used: AtomicUsize,
    outboxes: Mutex<Vec<Weak<dyn Cuttable>>>,
    /// Bytes queued to clients now (`tidings_queued_bytes`).
    pub gauge: Gauge,
    /// Connections cut to bring the total back under the limit.
    pub cuts: Counter,
    /// Held while shedding: two publishers' threads passing the limit at once would each see
    /// the same outbox not yet cut, cut it twice and count two cuts for one connection.
    shedding: Mutex<()>,
    reading: AtomicUsize,
    /// Bytes held for frames being read, past each connection's first chunk
    /// (`tidings_reading_bytes`).
    pub reading_gauge: Gauge,
}

impl QueueBudget {
    /// A budget of `limit` bytes (0: none).
    pub fn new(limit: usize) -> Arc<QueueBudget> {
        Arc::new(QueueBudget {
            limit: if limit == 0 { usize::MAX } else { limit },
            used: AtomicUsize::new(0),
            outboxes: Mutex::default(),
            gauge: Gauge::default(),
            cuts: Counter::default(),
            shedding: Mutex::default(),
            reading: AtomicUsize::new(0),
            reading_gauge: Gauge::default(),
        })
    }

    /// Lists `outbox` among those that may be cut.
    pub(crate) fn register(&self, outbox: Weak<dyn Cuttable>) {
        let mut outboxes = self.outboxes.lock();
        // Connections come and go: the dead entries go whenever the list doubles.
        if outboxes.len() >= 64 && outboxes.len().is_power_of_two() {
            outboxes.retain(|weak| weak.strong_count() > 0);
        }
        outboxes.push(outbox);
    }

    /// `bytes` more are queued; true when the total is now past the limit. Outboxes charge a
    /// reserve at a time (`BUDGET_RESERVE`), not per delivery, so the total and its gauge are
    /// written about once per 16 KiB queued.
    pub(crate) fn charge(&self, bytes: usize) -> bool {
        let used = self.used.fetch_add(bytes, Relaxed) + bytes;
        self.gauge.set(used as i64);
        used > self.limit
    }

    /// `bytes` were written or dropped. Nothing to refund touches nothing: every push refunds
    /// what it dropped, usually 0, and two atomics shared by every thread (the total and its
    /// gauge) written per delivery were 18 % of the broker's CPU at 1->100 on two threads
    /// (`perf`, issue 45).
    pub(crate) fn refund(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let used = self.used.fetch_sub(bytes, Relaxed).saturating_sub(bytes);
        self.gauge.set(used as i64);
    }

    /// Bytes charged and not yet refunded.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// `bytes` more for a frame being read: true and charged if the frames being read stay
    /// within the limit, else false and nothing charged. Reading has a budget of the same size
    /// beside the queued bytes', not a share of theirs: subscribers that fill the queues must
    /// not starve a publisher's reads (queued bytes past the limit are shed from the
    /// connections holding the most), and a reader must not cut subscribers by reading. Memory
    /// for both stays within twice the limit.
    pub(crate) fn charge_read(&self, bytes: usize) -> bool {
        let reading = self.reading.fetch_add(bytes, Relaxed) + bytes;
        if reading > self.limit {
            self.reading.fetch_sub(bytes, Relaxed);
            return false;
        }
        self.reading_gauge.set(reading as i64);
        true
    }

    /// `bytes` of frames being read were handled or given up.
    pub(crate) fn refund_read(&self, bytes: usize) {
        let reading = self.reading.fetch_sub(bytes, Relaxed).saturating_sub(bytes);
        self.reading_gauge.set(reading as i64);
    }

    /// Cuts the connections holding the most until the total is within the limit. Called with
    /// no outbox lock held.
    pub(crate) fn shed(&self) {
        let _one_at_a_time = self.shedding.lock();
        let outboxes: Vec<Arc<dyn Cuttable>> = self.outboxes.lock().iter().filter_map(Weak::upgrade).collect();
        // What connections already cut still hold (a batch their writer is giving up) comes
        // back shortly: it is not a reason to cut anyone else.
        let (cut, live): (Vec<_>, Vec<_>) = outboxes.into_iter().partition(|o| o.is_cut());
        let returning: usize = cut.iter().map(|o| o.held()).sum();
        let mut by_held: Vec<(usize, Arc<dyn Cuttable>)> =
            live.into_iter().map(|o| (o.held(), o)).filter(|(held, _)| *held > 0).collect();
        by_held.sort_by_key(|(held, _)| std::cmp::Reverse(*held));
        let mut remaining = self.used().saturating_sub(returning);
        for (held, outbox) in by_held {
            if remaining <= self.limit {
                break;
            }
            remaining = remaining.saturating_sub(held);
            self.cuts.inc();
            let client = outbox.client();
            tracing::warn!(
                %client,
                held,
                limit = self.limit,
                "the broker's queued bytes are past limits.max_queued_bytes: the connection holding the most is cut"
            );
            outbox.cut();
        }
    }
}
