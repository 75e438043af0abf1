//! How the log writer thread's completions reach the driver: a queue, and a doorbell (one
//! end of a Unix socket pair) that the runtime's I/O driver polls.
//!
//! Why not the driver's command channel: a task woken from a thread outside the runtime goes
//! through tokio's inject queue, which unparks a worker as "searching"; that worker, finding
//! the driver task, is the last searcher and unparks the other worker too, which finds
//! nothing and parks again. At one publish in flight that was one worker wake in three on the
//! guaranteed path (issue 45, part 3: `docs/results/issue45-guaranteed-switches.md`). A
//! readable socket instead wakes the worker parked in `epoll_wait`, which runs the driver
//! without waking anyone else.
//!
//! The bell rings only when the queue goes from empty to not empty, and the driver silences it
//! before it takes the queue, so a group pushed meanwhile rings again: no completion waits for
//! a wake that was already spent.

use std::io::{ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use parking_lot::Mutex;
use tidings_store::Completion;

/// Groups of completions in the order the writer finished them.
type Queue = Arc<Mutex<Vec<Vec<Completion>>>>;

/// The writer thread's end.
pub(crate) struct Sender {
    queue: Queue,
    bell: UnixStream,
}

/// The driver's end.
pub(crate) struct Receiver {
    queue: Queue,
    /// Taken by [`Receiver::bell`] once the driver runs in the runtime.
    bell: Option<UnixStream>,
}

/// A connected pair; both ends of the bell are non-blocking (a ring already pending is enough).
pub(crate) fn channel() -> std::io::Result<(Sender, Receiver)> {
    let (ring, hear) = UnixStream::pair()?;
    ring.set_nonblocking(true)?;
    hear.set_nonblocking(true)?;
    let queue = Queue::default();
    Ok((Sender { queue: Arc::clone(&queue), bell: ring }, Receiver { queue, bell: Some(hear) }))
}

impl Sender {
    /// Queues one group, ringing when the driver may be waiting for it.
    pub(crate) fn send(&mut self, group: Vec<Completion>) {
        let first = {
            let mut queue = self.queue.lock();
            queue.push(group);
            queue.len() == 1
        };
        // A full socket already holds a ring; a closed one means the driver stopped.
        if first {
            let _ = self.bell.write(&[1]);
        }
    }
}

impl Receiver {
    /// The bell as the runtime polls it; `None` after the first call, or when the runtime
    /// refused it (then the driver takes the queue on a timer).
    pub(crate) fn bell(&mut self) -> Option<Bell> {
        let std = self.bell.take()?;
        match tokio::net::UnixStream::from_std(std) {
            Ok(stream) => Some(Bell(stream)),
            Err(error) => {
                tracing::error!(%error, "the log's completion bell could not be registered");
                None
            }
        }
    }

    /// Every group queued so far, oldest first.
    pub(crate) fn take(&self) -> Vec<Vec<Completion>> {
        std::mem::take(&mut *self.queue.lock())
    }
}

/// The driver's end of the doorbell, registered with the runtime.
pub(crate) struct Bell(tokio::net::UnixStream);

impl Bell {
    /// Waits until the bell rang, then silences it (call [`Receiver::take`] after). Once the
    /// writer thread is gone (its end closed) it never returns: no completion can come.
    pub(crate) async fn rung(&self) {
        loop {
            if self.0.readable().await.is_err() {
                // Never for a socket pair; wait forever rather than spin.
                return std::future::pending().await;
            }
            match self.silence() {
                Silenced::Rang => return,
                Silenced::Quiet => continue,
                Silenced::Gone => return std::future::pending().await,
            }
        }
    }

    /// Reads every pending ring.
    fn silence(&self) -> Silenced {
        let mut rang = false;
        let mut buf = [0u8; 64];
        loop {
            match self.0.try_read(&mut buf) {
                Ok(0) if rang => return Silenced::Rang,
                Ok(0) => return Silenced::Gone,
                Ok(_) => rang = true,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(_) if rang => return Silenced::Rang,
                Err(error) if error.kind() == ErrorKind::WouldBlock => return Silenced::Quiet,
                Err(_) => return Silenced::Gone,
            }
        }
    }
}

/// What silencing the bell found.
enum Silenced {
    /// It had rung.
    Rang,
    /// Nothing was pending (the readiness was stale).
    Quiet,
    /// The writer's end is closed.
    Gone,
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use tidings_store::{OpKind, Token};

    fn group(token: u64) -> Vec<Completion> {
        vec![Completion {
            token: Token(token),
            kind: OpKind::Append,
            pubend: tidings_store::PubendId(1),
            tick: tidings_store::Tick(token),
            result: Ok(()),
        }]
    }

    #[test]
    fn the_bell_rings_once_per_empty_queue_and_groups_come_in_order() {
        let (mut sender, mut receiver) = channel().unwrap();
        let mut hear = receiver.bell.take().unwrap();
        sender.send(group(1));
        sender.send(group(2));
        let mut buf = [0u8; 8];
        assert_eq!(hear.read(&mut buf).unwrap(), 1, "one ring for two groups");
        let taken = receiver.take();
        assert_eq!(taken.iter().map(|g| g[0].token.0).collect::<Vec<_>>(), [1, 2]);
        sender.send(group(3));
        assert_eq!(hear.read(&mut buf).unwrap(), 1, "the emptied queue rings again");
        assert_eq!(receiver.take().len(), 1);
    }

    #[tokio::test]
    async fn a_group_sent_from_another_thread_wakes_the_driver_side() {
        let (mut sender, mut receiver) = channel().unwrap();
        let bell = receiver.bell().unwrap();
        assert!(receiver.bell().is_none(), "the bell is handed out once");
        let writer = std::thread::spawn(move || {
            sender.send(group(7));
            sender
        });
        tokio::time::timeout(std::time::Duration::from_secs(10), bell.rung()).await.unwrap();
        assert_eq!(receiver.take()[0][0].token.0, 7);
        let mut sender = writer.join().unwrap();
        // Silenced: a group sent after the take rings again and is not lost.
        sender.send(group(8));
        tokio::time::timeout(std::time::Duration::from_secs(10), bell.rung()).await.unwrap();
        assert_eq!(receiver.take()[0][0].token.0, 8);
        // A writer gone leaves the bell silent for good, not ringing forever.
        drop(sender);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), bell.rung()).await;
        assert!(waited.is_err(), "a closed bell does not ring");
    }
}
