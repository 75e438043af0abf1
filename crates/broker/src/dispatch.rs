//! The broker's subscription table: the matching index behind a read-write lock, and the
//! fan-out of a published message to the queues of its matching subscriptions.
//!
//! Sessions match at once under the read side, each with its own [`MatchScratch`]; only
//! subscribing, unsubscribing and writing back cache misses and counters take the write side.
//! With one lock held across every match, one costly message (a long text against many LIKE
//! selectors) stopped every other publisher for as long as it took.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tidings_matching::{MatchScratch, MatchStats, Pattern, Selector, SubscriptionId, SubscriptionIndex};
use tidings_wire::{Message, Notice};

use crate::metrics::Metrics;
use crate::outbox::{Outbox, Push, Target};
use crate::queue_groups::{self, GroupsHere, QueueGroups, Serve};
use crate::retained::Retained;

/// Shared by every session of a broker.
pub struct Dispatcher {
    index: RwLock<SubscriptionIndex<Arc<Target>>>,
    metrics: Metrics,
    /// The index's counters as last copied into `metrics`.
    reported: Mutex<MatchStats>,
    /// Retained values. Held while a retained publish updates it and is delivered, and while
    /// a new subscription takes its values and joins the index (see [`crate::retained`]).
    retained: Mutex<Retained>,
    /// Queue groups with members here.
    pub groups: QueueGroups,
}

/// Scratch space a session reuses across publishes, so dispatch allocates nothing per message.
#[derive(Default)]
pub struct DispatchScratch {
    targets: Vec<Arc<Target>>,
    /// Matched queue group members, set apart from `targets` for one choice per group.
    members: Vec<Arc<Target>>,
    /// The queue groups the last message was given to here (see [`Dispatcher::deliver`]):
    /// routing sends it to no other member of those.
    pub served: Vec<String>,
    /// The queue groups with members here that could not take the last message published
    /// here: routing may give them to another broker, else [`Dispatcher::serve_leftover`]
    /// gives them to a busy member here.
    pub unserved: Vec<String>,
    /// This session's matching state (see the module doc).
    matching: MatchScratch,
    /// Queues that reported congestion during the current batch of frames.
    pub congested: Vec<Arc<Outbox>>,
    /// Queues that went from empty to non-empty in the current batch; their writers are woken
    /// once, by [`DispatchScratch::wake_writers`], when the batch is done.
    wake: Vec<Arc<Outbox>>,
    /// Messages and bytes published in the current batch; counted into metrics once per batch
    /// rather than per message, to keep shared atomics off the per-message path.
    published: u64,
    published_bytes: u64,
    /// Local subscriptions the last message matched: a request that matched none here (nor
    /// any neighbour's summary) is answered "no responders".
    pub matched: usize,
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

/// Subscriptions removed under one hold of the index's lock in [`Dispatcher::unsubscribe_many`]:
/// a few hundred microseconds' worth, so a publisher waits no longer than that.
pub const BULK_SLICE: usize = 256;

impl Dispatcher {
    /// An empty table keeping at most `max_retained_bytes` of retained values.
    pub fn new(metrics: Metrics, max_retained_bytes: usize) -> Dispatcher {
        Dispatcher {
            index: RwLock::new(SubscriptionIndex::new()),
            metrics,
            reported: Mutex::new(MatchStats::default()),
            retained: Mutex::new(Retained::new(max_retained_bytes)),
            groups: QueueGroups::default(),
        }
    }

    /// Adds a subscription; its target first gets every retained value it matches, before
    /// any live message can reach it. A queue group member gets none: retained values are a
    /// newcomer's view of a topic, and a member is a worker taking its share of new messages.
    pub fn subscribe(&self, pattern: Pattern, selector: Option<Selector>, target: Arc<Target>) -> SubscriptionId {
        let retained = self.retained.lock();
        let mut wake = Vec::new();
        if target.group.is_none() {
            for value in retained.matching(&pattern, selector.as_ref()) {
                target.outbox.push(&target, value, &mut wake);
            }
        }
        let id = self.index.write().insert(pattern, selector, target);
        drop(retained);
        for outbox in wake {
            outbox.wake();
        }
        self.metrics.subscriptions.inc();
        id
    }

    /// Refuses a retained publish the store has no room for (see [`Retained::check`]).
    pub fn check_retained(&self, message: &Message) -> Result<(), Notice> {
        self.retained.lock().check(message)
    }

    /// Refuses, as [`Dispatcher::check_retained`], a guaranteed retained publish the store has
    /// no room for; else marks its topic durable (see [`crate::retained`]) before its value is
    /// applied, so every change after it reaches the copy on disk.
    pub fn check_durable_retained(&self, message: &Message) -> Result<(), Notice> {
        let mut retained = self.retained.lock();
        retained.check(message)?;
        retained.keep_durably(message.topic());
        Ok(())
    }

    /// Takes back, at start, the retained values this broker kept on disk, and hands `hook`
    /// every later change of their topics (see [`Retained::restore`]). Returns how many.
    pub fn restore_retained(&self, values: Vec<Message>, hook: crate::retained::DurableHook) -> usize {
        let mut retained = self.retained.lock();
        let kept = retained.restore(values, hook);
        self.metrics.retained_topics.set(retained.len() as i64);
        self.metrics.retained_bytes.set(retained.bytes() as i64);
        kept
    }

    /// Topics with a retained value here, and their bytes.
    pub fn retained_size(&self) -> (usize, usize) {
        let retained = self.retained.lock();
        (retained.len(), retained.bytes())
    }

    /// Removes a subscription; unknown ids are ignored.
    pub fn unsubscribe(&self, id: SubscriptionId) {
        if self.index.write().remove(id).is_some() {
            self.metrics.subscriptions.dec();
        }
    }

    /// Removes many subscriptions, [`BULK_SLICE`] under one hold of the index's lock at a
    /// time: between slices, publishers match and other sessions subscribe.
    pub fn unsubscribe_many(&self, ids: &[SubscriptionId]) {
        for slice in ids.chunks(BULK_SLICE) {
            let mut index = self.index.write();
            let removed = slice.iter().filter(|id| index.remove(**id).is_some()).count();
            drop(index);
            self.metrics.subscriptions.dec_by(removed as i64);
        }
    }

    /// Active subscriptions.
    pub fn len(&self) -> usize {
        self.index.read().len()
    }

    /// True when there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `message` for every matching subscription. The topic must be valid. Queues that
    /// report congestion are collected in `scratch.congested` for the caller to wait on.
    /// Returns how long matching took when it was timed (some subscription has a selector).
    pub fn publish(&self, message: &Message, scratch: &mut DispatchScratch) -> Option<std::time::Duration> {
        scratch.published += 1;
        scratch.published_bytes += message.encoded_len() as u64;
        self.deliver(message, GroupsHere::All, scratch)
    }

    /// The groups among `allowed` with a member here whose subscription matches `message` and
    /// that can take it now, into `scratch.served` (cleared first): what a broker that received
    /// a copy naming groups serves itself, rather than passing them on.
    pub fn groups_ready(&self, message: &Message, allowed: &[String], scratch: &mut DispatchScratch) {
        scratch.served.clear();
        self.match_members(message, scratch);
        queue_groups::ready(&mut scratch.members, GroupsHere::Only(allowed), &mut scratch.served);
    }

    /// Gives `message`, published here, to a busy member of each group in `scratch.unserved`
    /// that `routed` (whether routing sent a group elsewhere) says went nowhere: a skipped
    /// member is passed over for another, never for nobody.
    pub fn serve_leftover(&self, message: &Message, routed: impl Fn(&str) -> bool, scratch: &mut DispatchScratch) {
        let mut leftover = std::mem::take(&mut scratch.unserved);
        leftover.retain(|group| !routed(group));
        if !leftover.is_empty() {
            self.match_members(message, scratch);
            let out = Serve {
                wake: &mut scratch.wake,
                congested: &mut scratch.congested,
                served: &mut scratch.served,
                unserved: &mut Vec::new(),
            };
            queue_groups::serve(&mut scratch.members, GroupsHere::Only(&leftover), message, &self.metrics, out);
        }
        leftover.clear();
        scratch.unserved = leftover;
    }

    /// The queue group member subscriptions `message` matches, into `scratch.members`.
    fn match_members(&self, message: &Message, scratch: &mut DispatchScratch) {
        {
            let index = self.index.read();
            index.matches_shared(
                message.topic(),
                &message.property_view(),
                &mut scratch.matching,
                &mut scratch.targets,
            );
        }
        scratch.members.extend(scratch.targets.drain(..).filter(|target| target.group.is_some()));
    }

    /// Queues `message` for every matching local subscription, and for one matching member of
    /// each queue group `groups` allows (those served are left in `scratch.served`), without
    /// counting it as published here (when it came from a peer broker).
    pub fn deliver(
        &self,
        message: &Message,
        groups: GroupsHere<'_>,
        scratch: &mut DispatchScratch,
    ) -> Option<std::time::Duration> {
        scratch.served.clear();
        scratch.unserved.clear();
        // A retained publish updates the store and is delivered under its lock, so no new
        // subscription falls between the two (see `subscribe`).
        let _retained = message.is_retain().then(|| {
            let mut retained = self.retained.lock();
            retained.apply(message);
            self.metrics.retained_topics.set(retained.len() as i64);
            self.metrics.retained_bytes.set(retained.bytes() as i64);
            retained
        });
        // Kept, not delivered: its live copy travels by guaranteed delivery (an MQTT QoS 1/2
        // retained publish).
        if message.is_retain_only() {
            scratch.targets.clear();
            scratch.matched = 0;
            return None;
        }
        let spent = {
            let index = self.index.read();
            // Only selector matching is timed: without selectors a match is a cache lookup, and
            // reading the clock would cost more than it.
            let started = index.has_selectors().then(Instant::now);
            index.matches_shared(
                message.topic(),
                &message.property_view(),
                &mut scratch.matching,
                &mut scratch.targets,
            );
            started.map(|started| {
                let spent = started.elapsed();
                self.metrics.match_seconds.observe(spent.as_secs_f64());
                spent
            })
        };
        if scratch.matching.wants_absorb() {
            self.absorb(scratch);
        }
        scratch.matched = scratch.targets.len();
        if scratch.targets.iter().any(|target| target.group.is_some()) {
            let mut at = 0;
            while at < scratch.targets.len() {
                if scratch.targets[at].group.is_some() {
                    scratch.members.push(scratch.targets.swap_remove(at));
                } else {
                    at += 1;
                }
            }
            let out = Serve {
                wake: &mut scratch.wake,
                congested: &mut scratch.congested,
                served: &mut scratch.served,
                unserved: &mut scratch.unserved,
            };
            queue_groups::serve(&mut scratch.members, groups, message, &self.metrics, out);
        }
        for target in scratch.targets.drain(..) {
            if target.outbox.push(&target, message, &mut scratch.wake) == Push::Congested
                && !scratch.congested.iter().any(|o| Arc::ptr_eq(o, &target.outbox))
            {
                scratch.congested.push(Arc::clone(&target.outbox));
            }
        }
        spent
    }

    /// Ends a batch of deliveries: what matching found and counted goes into the index, if
    /// nobody else holds it.
    pub fn settle(&self, scratch: &mut DispatchScratch) {
        if scratch.matching.has_pending() {
            self.absorb(scratch);
        }
    }

    /// Writes a session's cache misses and counters into the index, if nobody else holds it:
    /// waiting here would queue every other session's matching behind whatever match holds
    /// the read side now, so a busy index leaves them for a later batch.
    fn absorb(&self, scratch: &mut DispatchScratch) {
        if let Some(mut index) = self.index.try_write() {
            index.absorb(&mut scratch.matching);
        }
    }

    /// Copies the index's counters into the Prometheus metrics; called when they are scraped,
    /// so the matching path itself only bumps plain integers in its session's scratch (written
    /// back to the index with its cache misses at the end of a batch).
    pub fn report_match_stats(&self) {
        let now = self.index.read().stats();
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
        self.settle(scratch);
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
