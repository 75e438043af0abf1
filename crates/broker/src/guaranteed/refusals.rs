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
//! So once a publish is refused as unavailable, every later publish of the same publisher on
//! the same connection is refused too, for [`WINDOW`]: the ones the client had in flight when
//! the refusal reached it. The client drops the connection at the first refusal and sends its
//! window again, in order, on its next one (to the next broker of its list, or the same one);
//! once its bound of refusals in a row is reached it hands them to its caller and never sends
//! those publishes again. Either way nothing is logged out of order. A publish numbered at or below the refused one on that connection (the
//! window sent again) ends the rule at once.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tidings_delivery::PublisherId;
use tidings_wire::GuaranteedPublish;

use crate::outbox::Outbox;

/// How long after a refusal the same connection's later publishes of that publisher are
/// refused: far longer than a window's publishes take to arrive behind the refused one.
const WINDOW: Duration = Duration::from_secs(1);

/// Publishers above this many refusals remembered: the ones whose connection is gone are
/// forgotten first.
const REMEMBERED: usize = 1024;

/// One publisher's last refusal.
struct Refusal {
    /// The connection it was refused on.
    session: Weak<Outbox>,
    /// The lowest sequence number refused there.
    low: u64,
    /// When that refusal was sent.
    at: Instant,
}

/// The last refusal of each publisher (see the module).
#[derive(Default)]
pub(crate) struct Refusals(HashMap<PublisherId, Refusal>);

impl Refusals {
    /// Whether `publish`, arriving on `reply`'s connection, comes behind a refusal there and
    /// must be refused too.
    pub(crate) fn behind(&mut self, publish: &GuaranteedPublish, reply: &Arc<Outbox>) -> bool {
        let publisher = PublisherId(publish.publisher.0);
        let Some(last) = self.0.get(&publisher) else { return false };
        let same = Weak::ptr_eq(&last.session, &Arc::downgrade(reply));
        if same && publish.seq > last.low && last.at.elapsed() < WINDOW {
            return true;
        }
        self.0.remove(&publisher);
        false
    }

    /// `publish` was refused as unavailable on `reply`'s connection.
    pub(crate) fn refused(&mut self, publish: &GuaranteedPublish, reply: &Arc<Outbox>) {
        if self.0.len() >= REMEMBERED {
            self.0.retain(|_, r| r.session.strong_count() > 0 && r.at.elapsed() < WINDOW);
        }
        let publisher = PublisherId(publish.publisher.0);
        let session = Arc::downgrade(reply);
        match self.0.get_mut(&publisher) {
            Some(last) if Weak::ptr_eq(&last.session, &session) && last.at.elapsed() < WINDOW => {
                last.low = last.low.min(publish.seq);
            }
            _ => {
                self.0.insert(publisher, Refusal { session, low: publish.seq, at: Instant::now() });
            }
        }
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
        assert!(!refusals.behind(&publish(7, 5), &one));
        refusals.refused(&publish(7, 5), &one);
        assert!(refusals.behind(&publish(7, 6), &one), "pipelined behind the refused one");
        assert!(!refusals.behind(&publish(8, 6), &one), "another publisher");
        refusals.refused(&publish(7, 6), &one);
        assert!(refusals.behind(&publish(7, 9), &one));
        assert!(!refusals.behind(&publish(7, 5), &one), "the window sent again from the refused one");
        assert!(!refusals.behind(&publish(7, 6), &one), "the rule ended with it");
        refusals.refused(&publish(7, 10), &one);
        assert!(!refusals.behind(&publish(7, 11), &two), "a new connection starts afresh");
        assert!(!refusals.behind(&publish(7, 12), &one), "and ends the old connection's rule");
    }
}
