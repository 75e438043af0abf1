//! The hand-off between callers and the writer thread. Callers push and return at once; the
//! writer takes everything queued as one group. Whatever arrives while the writer is writing and
//! syncing waits here and becomes the next group, so groups size themselves with no timer.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;

use crate::types::{PubendId, PublisherId, PublisherSeq, Tick, Token};

/// One submitted operation.
#[derive(Debug)]
pub(crate) enum Op {
    Append { token: Token, pubend: PubendId, tick: Tick, publisher: PublisherId, seq: PublisherSeq, payload: Bytes },
    Lease { token: Token, pubend: PubendId, tick: Tick },
    Release { token: Token, pubend: PubendId, tick: Tick },
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
        let mut pending = self.lock();
        if pending.closed {
            return false;
        }
        pending.ops.push(op);
        drop(pending);
        self.ready.notify_one();
        true
    }

    /// Queues every op of `ops` under one lock and one wake-up; false if the queue is closed.
    pub(crate) fn push_many(&self, ops: impl IntoIterator<Item = Op>) -> bool {
        let mut pending = self.lock();
        if pending.closed {
            return false;
        }
        pending.ops.extend(ops);
        drop(pending);
        self.ready.notify_one();
        true
    }

    /// Closes the queue; the writer drains what is queued, then stops.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Takes whatever is queued now into `ops`, without waiting.
    pub(crate) fn take_now(&self, ops: &mut Vec<Op>) {
        ops.append(&mut self.lock().ops);
    }

    /// Waits for operations (at most `wait`, if given) and takes all of them.
    pub(crate) fn take(&self, wait: Option<Duration>, spare: Vec<Op>) -> Taken {
        let mut pending = self.lock();
        while pending.ops.is_empty() && !pending.closed {
            pending = match wait {
                None => self.ready.wait(pending).unwrap_or_else(PoisonError::into_inner),
                Some(wait) => {
                    let (guard, timeout) =
                        self.ready.wait_timeout(pending, wait).unwrap_or_else(PoisonError::into_inner);
                    if timeout.timed_out() && guard.ops.is_empty() && !guard.closed {
                        return Taken::Idle;
                    }
                    guard
                }
            };
        }
        if pending.ops.is_empty() {
            return Taken::Closed;
        }
        Taken::Group(std::mem::replace(&mut pending.ops, spare))
    }
}
