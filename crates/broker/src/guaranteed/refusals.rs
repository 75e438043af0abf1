//! Publishes refused as unavailable, and what that means for the same publisher's next ones.
//!
//! A pubend's core takes a publisher's sequence numbers as they come and treats a publish
//! numbered at or below the highest it logged as a retry: answered, never logged again (T4).
//! That holds only if a publisher's publishes reach it in order. A refusal can break the order:
//! a client pipelines its window, the broker refuses publish `s` (no quorum reachable yet, not
//! the group's leader, a home elsewhere) and, a moment later, takes `s + 1` (the quorum came
//! up); the client resends `s` on its next connection, and the core, having logged `s + 1`,
//! answers it as a retry without logging it: an acknowledged publish lost (the nemesis on a
//! replicated cell, `--publishers-cell PHB --seed 4`, lost 119 that way after a whole-cell kill).
//!
//! So once a publish is refused as unavailable, by whatever refuses it (the gate before the
//! engine, the engine's log closing, the replica group, a deposed host's waiters), every later
//! publish of the same publisher on the same connection is refused too: those that arrived up
//! to [`WINDOW`] after the refusal (the ones the client had in flight when the refusal reached
//! it), and those that arrived before it and were held (for a leader, or for the retention
//! limit), whatever the time they are served. The client drops the connection at the first
//! refusal and sends its window again, in order, on its next one (to the next broker of its
//! list, or the same one); once its bound of refusals in a row is reached it hands them to its
//! caller and never sends those publishes again. Either way nothing is logged out of order. A
//! publish numbered at or below the refused one on that connection (the window sent again)
//! ends the rule at once; another connection's publishes neither follow nor end it, so a
//! publish the old connection left held is still refused after the new one has sent its
//! window.
//!
//! Before every refusal was counted here, only the gate's were: a publish refused later, as a
//! deposed host's waiting publishes are (`replicas::depose`), left the same connection's next
//! publishes free to be logged once the host led again, ahead of the refused one's retry. The
//! broker's membership test once saw a group hold a publisher's `s + 2` without `s` and
//! `s + 1`, whose retries the engine reopened from the group then took for old ones, refusing
//! the publisher in a loop (docs/replication.md, "Membership changes"); this is the one path
//! to such a hole found in the code, though that run's was not traced to the end.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tidings_delivery::PublisherId;
use tidings_wire::GuaranteedPublish;

use crate::outbox::Outbox;

/// How long after a refusal the same connection's later publishes of that publisher are
/// refused: far longer than a window's publishes take to arrive behind the refused one.
const WINDOW: Duration = Duration::from_secs(1);

/// Refusals above this many remembered: the ones whose connection is gone, or older than
/// [`KEPT`], are forgotten first.
const REMEMBERED: usize = 1024;

/// How long a refusal is kept at least while its connection lives: longer than a publish is
/// ever held behind it (5 s for a leader, the retention limit's wait).
const KEPT: Duration = Duration::from_secs(600);

/// One publisher's last refusal on one connection.
struct Refusal {
    /// The connection it was refused on (kept as a weak handle, so its address, the key, is
    /// not reused while the entry lives).
    session: Weak<Outbox>,
    /// The lowest sequence number refused there.
    low: u64,
    /// When that refusal was sent.
    at: Instant,
}

/// The last refusal of each publisher on each connection (see the module).
#[derive(Default)]
pub(crate) struct Refusals(HashMap<(PublisherId, usize), Refusal>);

/// The key of `publisher` on `reply`'s connection.
fn key(publisher: PublisherId, reply: &Arc<Outbox>) -> (PublisherId, usize) {
    (publisher, Arc::as_ptr(reply) as usize)
}

impl Refusals {
    /// Whether `publish`, which arrived on `reply`'s connection at `since`, comes behind a
    /// refusal there and must be refused too.
    pub(crate) fn behind(&mut self, publish: &GuaranteedPublish, reply: &Arc<Outbox>, since: Instant) -> bool {
        let key = key(PublisherId(publish.publisher.0), reply);
        let Some(last) = self.0.get(&key) else { return false };
        if publish.seq > last.low {
            // Held since before the refusal, or pipelined right behind it.
            return since < last.at + WINDOW;
        }
        self.0.remove(&key);
        false
    }

    /// `publisher`'s publish `seq` was refused as unavailable on `reply`'s connection.
    pub(crate) fn refused(&mut self, publisher: PublisherId, seq: u64, reply: &Arc<Outbox>) {
        if self.0.len() >= REMEMBERED {
            self.0.retain(|_, r| r.session.strong_count() > 0 && r.at.elapsed() < KEPT);
        }
        let now = Instant::now();
        let refusal = self.0.entry(key(publisher, reply)).or_insert(Refusal {
            session: Arc::downgrade(reply),
            low: seq,
            at: now,
        });
        // A refusal a window after the last starts the rule afresh: the lower one it kept
        // was given up on or sent again by then.
        refusal.low = if now >= refusal.at + WINDOW { seq } else { refusal.low.min(seq) };
        refusal.at = now;
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_wire::{Message, PublisherId as WirePublisher};

    use super::*;
    use crate::budget::QueueBudget;
    use crate::config::SlowConsumer;
    use crate::metrics::Metrics;

    fn outbox() -> Arc<Outbox> {
        let registry = &mut prometheus_client::registry::Registry::default();
        Outbox::new(SlowConsumer::default(), Metrics::new(registry), &QueueBudget::new(0))
    }

    fn publish(publisher: u64, seq: u64) -> GuaranteedPublish {
        let Ok(message) = Message::new("t", &[], Bytes::from_static(b"x"), 0) else { panic!("a valid message") };
        GuaranteedPublish { publisher: WirePublisher(publisher), seq, pubend: String::new(), home: None, message }
    }

    #[test]
    fn a_refusal_refuses_the_same_connections_later_publishes_of_that_publisher_only() {
        let (one, two) = (outbox(), outbox());
        let mut refusals = Refusals::default();
        let now = Instant::now;
        assert!(!refusals.behind(&publish(7, 5), &one, now()));
        refusals.refused(PublisherId(7), 5, &one);
        assert!(refusals.behind(&publish(7, 6), &one, now()), "pipelined behind the refused one");
        assert!(!refusals.behind(&publish(8, 6), &one, now()), "another publisher");
        refusals.refused(PublisherId(7), 6, &one);
        assert!(refusals.behind(&publish(7, 9), &one, now()));
        assert!(!refusals.behind(&publish(7, 11), &two, now()), "a new connection starts afresh");
        assert!(refusals.behind(&publish(7, 9), &one, now()), "and does not end the old one's rule");
        assert!(!refusals.behind(&publish(7, 5), &one, now()), "the window sent again from the refused one");
        assert!(!refusals.behind(&publish(7, 6), &one, now()), "the rule ended with it");
    }

    /// A publish held (for a leader, for the retention limit) since before a refusal is refused
    /// whenever it is served; one that arrives a window after the refusal is not.
    #[test]
    fn a_publish_held_from_before_the_refusal_is_refused_late() {
        let one = outbox();
        let mut refusals = Refusals::default();
        let arrived = Instant::now();
        refusals.refused(PublisherId(7), 5, &one);
        assert!(refusals.behind(&publish(7, 6), &one, arrived));
        let late = Instant::now() + WINDOW;
        assert!(!refusals.behind(&publish(7, 7), &one, late), "arrived a window after the refusal");
    }
}
