//! The hand-off between callers and the writer thread. Callers push and return at once; the
//! writer takes everything queued as one group. Whatever arrives while the writer is writing and
//! syncing waits here and becomes the next group, so groups size themselves with no timer.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::types::{PubendId, PublisherId, PublisherSeq, Tick, Token};

/// One submitted operation.
#[derive(Debug)]
pub(crate) enum Op {
    Append { token: Token, pubend: PubendId, tick: Tick, publisher: PublisherId, seq: PublisherSeq, payload: Bytes },
    Lease { token: Token, pubend: PubendId, tick: Tick },
    Release { token: Token, pubend: PubendId, tick: Tick },
    Void { token: Token, pubend: PubendId },
}

/// What the writer got from [`Queue::take`].
#[derive(Debug)]
pub(crate) enum Taken {
    Group(Vec<Op>),
    Idle,
    Closed,
}

#[derive(Debug, Default)]
struct Pending {
    ops: Vec<Op>,
    closed: bool,
    /// The writer waits on the condition variable (set under the lock before it waits, so a
    /// push never misses it). A push wakes it only then: a notify is a system call whether
    /// anyone waits or not, and one per publish was two thirds of a guaranteed publisher's
    /// broker's futex calls (the writer mostly sleeps out its linger or syncs, not waits).
    waiting: bool,
    /// When the first and the last of `ops` were pushed: how spread out the arrivals a paced
    /// sleep gathered were (see `linger.rs`).
    first_at: Option<Instant>,
    last_at: Option<Instant>,
}

/// The submission queue.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pending: Mutex<Pending>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `op`; false if the queue is closed.
    pub(crate) fn push(&self, op: Op) -> bool {
        self.push_many(std::iter::once(op))
    }

    /// Queues every op of `ops` under one lock and one wake-up; false if the queue is closed.
    pub(crate) fn push_many(&self, ops: impl IntoIterator<Item = Op>) -> bool {
        let mut pending = self.lock();
        if pending.closed {
            return false;
        }
        pending.ops.extend(ops);
        let now = Instant::now();
        pending.first_at.get_or_insert(now);
        pending.last_at = Some(now);
        let wake = std::mem::take(&mut pending.waiting);
        drop(pending);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// Closes the queue; the writer drains what is queued, then stops.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Takes whatever is queued now into `ops`, without waiting; returns the time between
    /// the first and the last push of what it took (zero for none or one push).
    pub(crate) fn take_now(&self, ops: &mut Vec<Op>) -> Duration {
        let mut pending = self.lock();
        ops.append(&mut pending.ops);
        let first = pending.first_at.take();
        let last = pending.last_at.take();
        first.zip(last).map_or(Duration::ZERO, |(first, last)| last.saturating_duration_since(first))
    }

    /// Waits for operations (at most `wait`, if given) and takes all of them.
    pub(crate) fn take(&self, wait: Option<Duration>, spare: Vec<Op>) -> Taken {
        let mut pending = self.lock();
        while pending.ops.is_empty() && !pending.closed {
            pending.waiting = true;
            pending = match wait {
                None => self.ready.wait(pending).unwrap_or_else(PoisonError::into_inner),
                Some(wait) => {
                    let (mut guard, timeout) =
                        self.ready.wait_timeout(pending, wait).unwrap_or_else(PoisonError::into_inner);
                    if timeout.timed_out() && guard.ops.is_empty() && !guard.closed {
                        guard.waiting = false;
                        return Taken::Idle;
                    }
                    guard
                }
            };
            pending.waiting = false;
        }
        if pending.ops.is_empty() {
            return Taken::Closed;
        }
        pending.first_at = None;
        pending.last_at = None;
        Taken::Group(std::mem::replace(&mut pending.ops, spare))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn lease(tick: u64) -> Op {
        Op::Lease { token: Token(tick), pubend: PubendId(1), tick: Tick(tick) }
    }

    #[test]
    fn a_push_wakes_a_waiting_writer_and_pushes_meanwhile_join_the_next_group() {
        let queue = Arc::new(Queue::default());
        let writer = {
            let queue = Arc::clone(&queue);
            // Bounded, so a push that fails to wake it fails the test instead of hanging it.
            std::thread::spawn(move || match queue.take(Some(Duration::from_secs(10)), Vec::new()) {
                Taken::Group(ops) => ops.len(),
                other => panic!("the push did not wake the waiting writer: {other:?}"),
            })
        };
        // The writer is waiting (or about to): the push must wake it, however they interleave.
        while !queue.lock().waiting {
            std::thread::yield_now();
        }
        assert!(queue.push(lease(1)));
        assert_eq!(writer.join().unwrap(), 1);
        // Nobody waits now: pushes queue without a wake-up and are all taken at once.
        assert!(queue.push(lease(2)));
        assert!(queue.push_many([lease(3), lease(4)]));
        assert!(!queue.lock().waiting);
        match queue.take(Some(Duration::from_millis(1)), Vec::new()) {
            Taken::Group(ops) => assert_eq!(ops.len(), 3),
            other => panic!("{other:?}"),
        }
        assert!(matches!(queue.take(Some(Duration::from_millis(1)), Vec::new()), Taken::Idle));
        assert!(!queue.lock().waiting, "a timed-out wait leaves no writer marked waiting");
        queue.close();
        assert!(!queue.push(lease(5)));
        assert!(matches!(queue.take(None, Vec::new()), Taken::Closed));
    }
}
