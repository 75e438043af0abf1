//! A connection's read buffer, for clients and links alike: memory allocated as bytes arrive,
//! charged to the broker's budget past the first chunk, given back when the connection goes
//! quiet, and a deadline on the frame at its front.
//!
//! An attack held 8 MiB per connection with the header of a large frame and half its body,
//! for as long as it liked and outside every budget. Now the buffer grows only as bytes come
//! (never to the length a header announces, and never past the frame at its front plus one
//! chunk: the connection's bound), each growth past [`READ_CHUNK`] is charged to the broker's
//! [`QueueBudget`] before it is made (refused: the connection closes), and a frame that has not
//! arrived whole within `[limits] frame_timeout` of its first byte closes the connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::time::Instant;

use crate::budget::QueueBudget;

/// Reads grow the buffer up to this while frames keep coming; a buffer of this much is not
/// charged to the budget (every connection may hold one chunk).
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// ...and start from this; an idle connection holds no read buffer at all.
pub(crate) const MIN_READ_CHUNK: usize = 4 * 1024;

/// How long an empty read buffer is kept for the next read before it goes back.
pub(crate) const KEEP_EMPTY_BUFFER: Duration = Duration::from_millis(500);

/// The broker's budget for frames being read is spent: the connection asking for more closes.
#[derive(Debug)]
pub(crate) struct OverBudget;

/// See the module comment.
///
/// Quiet means empty for [`KEEP_EMPTY_BUFFER`], not empty once: a publisher sending a frame
/// every half millisecond emptied it at every read, and with freed memory returned to the
/// operating system at once (`return_freed_memory`) each read then cost a page fault and a
/// zeroed page (`perf` on the broker under `bench overhead`: `exc_page_fault` below
/// `ReadBuffer::prepare`).
pub(crate) struct ReadBuffer {
    /// The bytes read and not yet decoded.
    pub(crate) buf: BytesMut,
    chunk: usize,
    /// A release of the empty buffer is scheduled.
    pub(crate) releasing: bool,
    budget: Arc<QueueBudget>,
    /// Bytes charged to `budget`: the capacity past [`READ_CHUNK`].
    charged: usize,
    frame_timeout: Duration,
    /// When the frame at the front of `buf` began to arrive (None: nothing buffered).
    frame_began: Option<Instant>,
    /// How many more bytes the frame at the front needs, by the protocol's own header.
    needed: fn(&[u8]) -> Option<usize>,
}

impl ReadBuffer {
    /// An empty buffer of native frames charging `budget`, whose frames must arrive within
    /// `frame_timeout`.
    pub(crate) fn new(budget: Arc<QueueBudget>, frame_timeout: Duration) -> ReadBuffer {
        ReadBuffer::of(tidings_wire::frame::needed, budget, frame_timeout)
    }

    /// [`ReadBuffer::new`] for another protocol's frames, whose headers `needed` reads (MQTT's).
    pub(crate) fn of(
        needed: fn(&[u8]) -> Option<usize>,
        budget: Arc<QueueBudget>,
        frame_timeout: Duration,
    ) -> ReadBuffer {
        ReadBuffer {
            needed,
            buf: BytesMut::new(),
            chunk: MIN_READ_CHUNK,
            releasing: false,
            budget,
            charged: 0,
            frame_timeout,
            frame_began: None,
        }
    }

    /// Room for the next read; returns how much, or [`OverBudget`] when growing would pass
    /// the broker's budget.
    pub(crate) fn prepare(&mut self) -> Result<usize, OverBudget> {
        let len = self.buf.len();
        if self.buf.capacity() - len < self.chunk / 4 {
            let want = len + self.chunk;
            if want <= READ_CHUNK {
                self.buf.reserve(self.chunk);
            } else {
                // Doubling keeps copies few, but never past the frame at the front and a chunk.
                let frame_end = (self.needed)(&self.buf).map_or(want, |more| len + more + READ_CHUNK);
                let capacity = (self.buf.capacity() * 2).min(frame_end).max(want);
                self.charge(capacity)?;
                let mut grown = BytesMut::with_capacity(capacity);
                grown.extend_from_slice(&self.buf);
                self.buf = grown;
            }
        }
        self.charge(self.buf.capacity())?;
        Ok(self.buf.capacity() - self.buf.len())
    }

    /// Brings the charge to what a buffer of `capacity` holds past the free chunk.
    fn charge(&mut self, capacity: usize) -> Result<(), OverBudget> {
        let owed = capacity.saturating_sub(READ_CHUNK);
        if owed > self.charged {
            if !self.budget.charge_read(owed - self.charged) {
                return Err(OverBudget);
            }
        } else {
            self.budget.refund_read(self.charged - owed);
        }
        self.charged = owed;
        Ok(())
    }

    /// A read of `n` bytes into `room`: a full read doubles the next, a small one halves it.
    pub(crate) fn after_read(&mut self, n: usize, room: usize) {
        if n == room {
            self.chunk = (self.chunk * 2).min(READ_CHUNK);
        } else if n < room / 8 {
            self.chunk = (self.chunk / 2).max(MIN_READ_CHUNK);
        }
        if n > 0 && self.frame_began.is_none() {
            self.frame_began = Some(Instant::now());
        }
    }

    /// Once every whole frame read is decoded (`decoded` of them this time): starts the next
    /// frame's clock, refunds what decoding took off, and returns true if the buffer is held
    /// empty at its smallest, so it should go back unless a read comes within
    /// [`KEEP_EMPTY_BUFFER`]; a release that is already scheduled is not moved (a steady
    /// reader gives its buffer back once per period).
    pub(crate) fn settle(&mut self, decoded: usize) -> bool {
        if self.buf.is_empty() {
            self.frame_began = None;
        } else if decoded > 0 {
            self.frame_began = Some(Instant::now());
        }
        // Decoding splits frames off the front: the buffer's own capacity only shrinks.
        let _ = self.charge(self.buf.capacity());
        let idle = self.buf.is_empty() && self.buf.capacity() > 0 && self.chunk == MIN_READ_CHUNK;
        let schedule = idle && !self.releasing;
        self.releasing |= idle;
        schedule
    }

    /// When the frame at the front must have arrived whole (None: no frame begun).
    pub(crate) fn frame_deadline(&self) -> Option<Instant> {
        self.frame_began.map(|began| began + self.frame_timeout)
    }

    /// The scheduled release is due: the buffer goes back if it is still empty.
    pub(crate) fn release(&mut self) {
        self.releasing = false;
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
            let _ = self.charge(0);
        }
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        self.budget.refund_read(self.charged);
    }
}

/// Waits until `deadline`, or forever without one: a `select!` branch for a frame's deadline.
pub(crate) async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(budget: usize) -> (ReadBuffer, Arc<QueueBudget>) {
        let budget = QueueBudget::new(budget);
        (ReadBuffer::new(Arc::clone(&budget), Duration::from_secs(10)), budget)
    }

    #[test]
    fn an_empty_read_buffer_goes_back_once_its_release_is_due_not_at_every_read() {
        let (mut read, _) = buffer(0);
        assert!(!read.settle(0), "nothing held yet");
        let room = read.prepare().unwrap();
        read.buf.extend_from_slice(b"frame");
        read.after_read(5, room);
        assert!(!read.settle(0), "bytes still to decode");
        read.buf.clear();
        assert!(read.settle(1), "held empty: a release is scheduled");
        assert!(!read.settle(0), "and not scheduled again while it is pending");
        read.buf.extend_from_slice(b"partial");
        read.release();
        assert!(read.buf.capacity() > 0, "a buffer holding a partial frame stays");
        read.buf.clear();
        assert!(read.settle(0));
        read.release();
        assert_eq!(read.buf.capacity(), 0, "an empty one goes back");
    }

    /// Feeds `bytes` of a frame announcing `announced` bytes, a full read at a time.
    fn feed(read: &mut ReadBuffer, announced: u32, bytes: usize) -> Result<(), OverBudget> {
        read.buf.extend_from_slice(&announced.to_be_bytes());
        read.buf.extend_from_slice(&[0x03]);
        while read.buf.len() < bytes {
            let room = read.prepare()?;
            let n = room.min(bytes - read.buf.len());
            read.buf.extend_from_slice(&vec![0; n]);
            read.after_read(n, room);
        }
        Ok(())
    }

    #[test]
    fn a_large_frame_is_held_as_it_arrives_within_its_connections_bound_and_charged() {
        let (mut read, budget) = buffer(0);
        feed(&mut read, 8 << 20, 5).unwrap();
        assert!(read.prepare().unwrap() <= READ_CHUNK, "a header alone commits no more than a chunk");
        assert_eq!(budget.reading_gauge.get(), 0);
        feed(&mut read, 0, 1 << 20).unwrap();
        assert!(read.buf.capacity() <= 2 * (1 << 20) + READ_CHUNK, "grows with what arrived");
        assert_eq!(budget.reading_gauge.get() as usize, read.buf.capacity() - READ_CHUNK, "and is charged");
        let mut whole = buffer(0).0;
        feed(&mut whole, 3 << 20, 3 << 20).unwrap();
        assert!(whole.buf.capacity() <= (3 << 20) + 4 + READ_CHUNK, "never past the frame and a chunk");
        drop(read);
        assert_eq!(budget.reading_gauge.get(), 0, "all refunded when the connection goes");
    }

    #[test]
    fn past_the_brokers_budget_a_read_buffer_cannot_grow() {
        let (mut first, budget) = buffer(1 << 20);
        feed(&mut first, 8 << 20, 600 << 10).unwrap();
        let (mut second, _) = (ReadBuffer::new(Arc::clone(&budget), Duration::from_secs(10)), ());
        assert!(feed(&mut second, 8 << 20, 8 << 20).is_err(), "the budget is spent");
        assert!(budget.reading_gauge.get() as usize <= 1 << 20);
        drop(first);
        assert!(feed(&mut ReadBuffer::new(budget, Duration::from_secs(10)), 8 << 20, 900 << 10).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_frames_clock_starts_at_its_first_byte_and_restarts_at_the_next_frame() {
        let (mut read, _) = buffer(0);
        assert_eq!(read.frame_deadline(), None);
        let room = read.prepare().unwrap();
        read.buf.extend_from_slice(&[0, 0, 0, 9, 3]);
        read.after_read(5, room);
        let first = read.frame_deadline().unwrap();
        tokio::time::advance(Duration::from_secs(3)).await;
        read.after_read(1, room);
        read.settle(0);
        assert_eq!(read.frame_deadline(), Some(first), "more of the same frame does not move it");
        read.settle(1);
        assert_eq!(read.frame_deadline(), Some(first + Duration::from_secs(3)), "the next frame's own clock");
        read.buf.clear();
        read.settle(1);
        assert_eq!(read.frame_deadline(), None);
    }
}
