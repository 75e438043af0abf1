//! The broker's subscription table: the matching index behind one lock, and the fan-out of a
//! published message to the queues of its matching subscriptions.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tidings_matching::{MatchStats, Pattern, Selector, SubscriptionId, SubscriptionIndex};
use tidings_wire::Message;

use crate::metrics::Metrics;
use crate::outbox::{Outbox, Push, Target};

/// Shared by every session of a broker.
pub struct Dispatcher {
    index: Mutex<SubscriptionIndex<Arc<Target>>>,
    metrics: Metrics,
    /// The index's counters as last copied into `metrics`.
    reported: Mutex<MatchStats>,
}

/// Scratch space a session reuses across publishes, so dispatch allocates nothing per message.
#[derive(Default)]
pub struct DispatchScratch {
    targets: Vec<Arc<Target>>,
    /// Queues that reported congestion during the current batch of frames.
    pub congested: Vec<Arc<Outbox>>,
    /// Queues that went from empty to non-empty in the current batch; their writers are woken
    /// once, by [`DispatchScratch::wake_writers`], when the batch is done.
    wake: Vec<Arc<Outbox>>,
    /// Scratch for routing decisions when this broker has links.
    pub route: crate::cluster::RouteScratch,
    /// Messages and bytes published in the current batch; counted into metrics once per batch
    /// rather than per message, to keep shared atomics off the per-message path.
    published: u64,
    published_bytes: u64,
}

impl DispatchScratch {
    /// Wakes the writer of every queue this batch filled. Call after each batch of frames,
    /// before waiting on congested queues (whose writers must be awake to drain them).
    pub fn wake_writers(&mut self) {
        for outbox in self.wake.drain(..) {
            outbox.wake();
        }
    }
}

/// A batch cut short (a connection that ends mid-batch, a peer's CLOSE after its data) must not
/// strand what it queued: a writer whose queue went from empty to non-empty is woken only by
/// the batch that did it, and later pushes see a non-empty queue and wake nobody.
impl Drop for DispatchScratch {
    fn drop(&mut self) {
        self.wake_writers();
    }
}

impl Dispatcher {
    /// An empty table.
    pub fn new(metrics: Metrics) -> Dispatcher {
        Dispatcher { index: Mutex::new(SubscriptionIndex::new()), metrics, reported: Mutex::new(MatchStats::default()) }
    }

    /// Adds a subscription.
    pub fn subscribe(&self, pattern: Pattern, selector: Option<Selector>, target: Arc<Target>) -> SubscriptionId {
        let id = self.index.lock().insert(pattern, selector, target);
        self.metrics.subscriptions.inc();
        id
    }

    /// Removes a subscription; unknown ids are ignored.
    pub fn unsubscribe(&self, id: SubscriptionId) {
        if self.index.lock().remove(id).is_some() {
            self.metrics.subscriptions.dec();
        }
    }

    /// Active subscriptions.
    pub fn len(&self) -> usize {
        self.index.lock().len()
    }

    /// True when there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `message` for every matching subscription. The topic must be valid. Queues that
    /// report congestion are collected in `scratch.congested` for the caller to wait on.
    pub fn publish(&self, message: &Message, scratch: &mut DispatchScratch) {
        scratch.published += 1;
        scratch.published_bytes += message.encoded_len() as u64;
        self.deliver(message, scratch);
    }

    /// Queues `message` for every matching local subscription without counting it as
    /// published here (it came from a peer broker).
    pub fn deliver(&self, message: &Message, scratch: &mut DispatchScratch) {
        {
            let mut index = self.index.lock();
            // Only selector matching is timed: without selectors a match is a cache lookup, and
            // reading the clock would cost more than it.
            let started = index.has_selectors().then(Instant::now);
            index.matches(message.topic(), &message.property_view(), &mut scratch.targets);
            if let Some(started) = started {
                self.metrics.match_seconds.observe(started.elapsed().as_secs_f64());
            }
        }
        for target in scratch.targets.drain(..) {
            if target.outbox.push(&target, message, &mut scratch.wake) == Push::Congested
                && !scratch.congested.iter().any(|o| Arc::ptr_eq(o, &target.outbox))
            {
                scratch.congested.push(Arc::clone(&target.outbox));
            }
        }
    }

    /// Copies the index's counters into the Prometheus metrics; called when they are scraped,
    /// so the matching path itself only bumps plain integers under the lock it already holds.
    pub fn report_match_stats(&self) {
        let now = self.index.lock().stats();
        let mut last = self.reported.lock();
        let m = &self.metrics;
        m.selector_evaluations.inc_by(now.selector_evaluations.saturating_sub(last.selector_evaluations));
        m.index_hits.inc_by(now.index_hits.saturating_sub(last.index_hits));
        m.match_cache_hits.inc_by(now.cache_hits.saturating_sub(last.cache_hits));
        m.match_cache_misses.inc_by(now.cache_misses.saturating_sub(last.cache_misses));
        m.selector_subscriptions.set(now.subscriptions_with_selector as i64);
        *last = now;
    }

    /// Ends a batch of frames read together: wakes the writers it queued for, counts its
    /// publishes and records how long the
    /// batch took from being read to having every PUBLISH queued (the publish-to-dispatch
    /// latency of its last message).
    pub fn finish_batch(&self, read_at: Instant, scratch: &mut DispatchScratch) {
        scratch.wake_writers();
        if scratch.published == 0 {
            return;
        }
        self.metrics.messages_in.inc_by(scratch.published);
        self.metrics.bytes_in.inc_by(scratch.published_bytes);
        self.metrics.dispatch_seconds.observe(read_at.elapsed().as_secs_f64());
        scratch.published = 0;
        scratch.published_bytes = 0;
    }
}
