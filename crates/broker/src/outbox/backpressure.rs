//! Waiting for a queue: a publisher holds back (within its stall bound) for a congested
//! subscriber that is still reading, and a connection's reader pauses while the client leaves
//! its control replies unread.

use super::{Outbox, CONTROL_BACKLOG};

/// A congested queue with no batch written for this long belongs to a client that stopped
/// reading: publishers stop waiting for it (see [`Outbox::wait_drained`]).
pub const NO_PROGRESS: std::time::Duration = std::time::Duration::from_millis(50);

impl Outbox {
    /// Waits while this connection's queued control replies are past [`CONTROL_BACKLOG`] (the
    /// writer takes them as the client reads), or until the connection is done.
    pub async fn wait_control_room(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.lock().control <= CONTROL_BACKLOG || self.done.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    /// True while a publisher should hold back for this queue.
    pub fn is_congested(&self) -> bool {
        self.state.lock().is_congested(&self.limits)
    }

    /// Waits (at most until `deadline`) for the queue to fall below half full, as long as the
    /// client keeps reading: a queue whose writer wrote nothing for [`NO_PROGRESS`] belongs to
    /// a client that stopped, and waiting longer would only pause the publisher (and every
    /// other subscriber of it) for nothing. Returns false if it gave up; the queue is then marked slow
    /// so no publisher waits on it again until it has emptied.
    pub async fn wait_drained(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.is_congested() || self.done.is_cancelled() {
                return true;
            }
            let wake = deadline.min(tokio::time::Instant::now() + NO_PROGRESS);
            if tokio::time::timeout_at(wake, notified).await.is_err() {
                self.state.lock().slow = true;
                return false;
            }
        }
    }
}
