//! One link's bounded outbound queue and the writer that drains it.
//!
//! A flood never cuts a broker link: data that does not fit is dropped and counted per link
//! (`tidings_link_drops`), and the link stays up. Past half full a push reports congestion, and
//! the sender (a publisher's session, or the link reader forwarding a peer's messages) holds
//! back for a bounded time, so bursts slow the publisher instead of being lost; a queue whose
//! waiter timed out is marked slow and reports no congestion until it has drained, exactly as
//! subscriber outboxes do. Control frames (heartbeats, adverts,
//! summaries) bypass the bound and go out ahead of queued data, so a full data queue delays
//! neither liveness nor routing.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The counters of one link, shared with the metrics registry (labelled by peer).
#[derive(Clone, Default)]
pub struct LinkCounters {
    /// Data messages received on the link.
    pub messages_in: Counter,
    /// Data bytes received, frame headers included.
    pub bytes_in: Counter,
    /// Data messages written to the link.
    pub messages_out: Counter,
    /// Data bytes written, frame headers included.
    pub bytes_out: Counter,
    /// Data messages dropped because the link's queue was full, or still queued when the
    /// link closed.
    pub drops: Counter,
}

impl LinkCounters {
    /// The counters of the link to `peer`, taken from the families `metrics` registered: the
    /// link owns its counters and the metrics module only registers families, so `metrics`
    /// knows nothing of links.
    pub fn of_peer(metrics: &crate::metrics::Metrics, peer: &str) -> LinkCounters {
        let label = crate::metrics::PeerLabel { peer: peer.to_string() };
        LinkCounters {
            messages_in: metrics.link_messages_in.get_or_create(&label).clone(),
            bytes_in: metrics.link_bytes_in.get_or_create(&label).clone(),
            messages_out: metrics.link_messages_out.get_or_create(&label).clone(),
            bytes_out: metrics.link_bytes_out.get_or_create(&label).clone(),
            drops: metrics.link_drops.get_or_create(&label).clone(),
        }
    }
}

/// Bounds of a link queue (data only).
#[derive(Clone, Copy, Debug)]
pub struct LinkLimits {
    /// Most data messages queued.
    pub max_messages: usize,
    /// Most data bytes queued.
    pub max_bytes: usize,
}

#[derive(Default)]
struct State {
    control: VecDeque<Bytes>,
    /// The guaranteed lane: never bounded here (the delivery core's ostreams are the queue and
    /// recover what a lost connection takes), FIFO with itself.
    guaranteed: VecDeque<Bytes>,
    data: VecDeque<(Bytes, Bytes)>,
    data_bytes: usize,
    closing: Option<Bytes>,
    slow: bool,
}

/// What happened to a pushed data message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPush {
    /// Queued.
    Queued,
    /// Queued, and the queue is past half full: the sender should hold back a little.
    Congested,
    /// The queue was full: dropped and counted.
    Dropped,
    /// The link is closing.
    Closed,
}

/// A bounded queue of frames for one link connection.
pub struct LinkQueue {
    state: Mutex<State>,
    wake: Notify,
    drained: Notify,
    limits: LinkLimits,
    counters: LinkCounters,
    /// Cancelled when the connection is finished, from either side.
    pub done: CancellationToken,
}

impl LinkQueue {
    /// An empty queue.
    pub fn new(limits: LinkLimits, counters: LinkCounters) -> LinkQueue {
        LinkQueue {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            drained: Notify::new(),
            limits,
            counters,
            done: CancellationToken::new(),
        }
    }

    /// The link's counters.
    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Queues a control frame, ahead of queued data.
    pub fn push_control(&self, frame: Bytes) {
        let mut s = self.state.lock();
        if s.closing.is_some() {
            return;
        }
        s.control.push_back(frame);
        drop(s);
        self.wake.notify_one();
    }

    /// Queues a guaranteed-delivery frame (DATA, SILENCE, ACK, NACK, ACK_EXPECTED) in the
    /// guaranteed lane: never dropped for a full queue, and in the order pushed, so a SILENCE
    /// or ACK_EXPECTED never overtakes the DATA it follows. False once the link is closing.
    pub fn push_guaranteed(&self, frame: Bytes) -> bool {
        let mut s = self.state.lock();
        if s.closing.is_some() || self.done.is_cancelled() {
            return false;
        }
        let was_empty = s.guaranteed.is_empty() && s.data.is_empty() && s.control.is_empty();
        s.guaranteed.push_back(frame);
        drop(s);
        if was_empty {
            self.wake.notify_one();
        }
        true
    }

    /// Queues a data frame (`prefix` from `convert::routed_prefix`, then the message section).
    pub fn push_data(&self, prefix: Bytes, section: Bytes) -> DataPush {
        let size = prefix.len() + section.len();
        let mut s = self.state.lock();
        if s.closing.is_some() || self.done.is_cancelled() {
            return DataPush::Closed;
        }
        if s.data.len() >= self.limits.max_messages || s.data_bytes + size > self.limits.max_bytes {
            drop(s);
            self.counters.drops.inc();
            return DataPush::Dropped;
        }
        let was_empty = s.data.is_empty() && s.control.is_empty();
        s.data.push_back((prefix, section));
        s.data_bytes += size;
        let congested = !s.slow && self.past_half(&s);
        drop(s);
        if was_empty {
            self.wake.notify_one();
        }
        if congested {
            DataPush::Congested
        } else {
            DataPush::Queued
        }
    }

    fn past_half(&self, s: &State) -> bool {
        s.data.len() * 2 > self.limits.max_messages || s.data_bytes * 2 > self.limits.max_bytes
    }

    /// Waits (at most until `deadline`) for the queue to fall below half full. Returns false if
    /// it timed out; the queue is then marked slow, and nobody waits on it again until the
    /// writer finds it below a quarter full.
    pub async fn wait_drained(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.state.lock();
                if s.slow || s.closing.is_some() || self.done.is_cancelled() || !self.past_half(&s) {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.state.lock().slow = true;
                return false;
            }
        }
    }

    /// Writes a CLOSE frame with `reason` after queued control frames, drops queued data
    /// (counted with the link's drops: best effort loses it), and ends the connection.
    pub fn close(&self, reason: &str) {
        let mut s = self.state.lock();
        if s.closing.is_none() {
            s.closing = Some(super::convert::close_bytes(reason));
            self.counters.drops.inc_by(s.data.len() as u64);
            s.data.clear();
            s.guaranteed.clear();
            s.data_bytes = 0;
        }
        drop(s);
        self.wake.notify_one();
    }

    /// The connection is gone: stop the writer now, unless a CLOSE frame is on its way (the
    /// writer then gives up on its own if the socket is dead).
    pub fn abort_after_close(&self) {
        let mut s = self.state.lock();
        if s.closing.is_none() {
            self.counters.drops.inc_by(s.data.len() as u64);
            s.data.clear();
            s.data_bytes = 0;
            drop(s);
            self.done.cancel();
            self.wake.notify_one();
        }
    }

    /// Data messages and bytes waiting.
    pub fn backlog(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.data.len(), s.data_bytes)
    }

    /// Moves everything queued into `chunks`, control first. Returns the data messages and
    /// bytes taken, and the closing frame once nothing else is left.
    fn take(&self, chunks: &mut VecDeque<Bytes>) -> (u64, u64, Option<Bytes>) {
        let mut s = self.state.lock();
        if s.data.len() * 4 < self.limits.max_messages && s.data_bytes * 4 < self.limits.max_bytes {
            s.slow = false;
        }
        chunks.extend(s.control.drain(..));
        chunks.extend(s.guaranteed.drain(..));
        let (mut messages, mut bytes) = (0u64, 0u64);
        for (prefix, section) in s.data.drain(..) {
            messages += 1;
            bytes += (prefix.len() + section.len()) as u64;
            chunks.push_back(prefix);
            chunks.push_back(section);
        }
        s.data_bytes = 0;
        let closing = if chunks.is_empty() { s.closing.clone() } else { None };
        (messages, bytes, closing)
    }
}

/// Chunks up to this size (frame prefixes, small messages) are copied into one buffer; larger
/// message sections go out by vectored write straight from the published buffer.
const INLINE_CHUNK: usize = 512;

/// Drains `queue` into the connection until it closes. Small chunks are coalesced into one
/// buffer so that a batch of small messages costs one write.
pub(super) async fn write_link<W: AsyncWrite + Unpin>(mut writer: W, queue: std::sync::Arc<LinkQueue>) {
    let mut chunks = VecDeque::new();
    let mut scratch = BytesMut::with_capacity(64 * 1024);
    let mut out = VecDeque::new();
    loop {
        if queue.done.is_cancelled() {
            break;
        }
        let (messages, bytes, closing) = queue.take(&mut chunks);
        if let Some(closing) = closing {
            let close = async {
                writer.write_all(&closing).await?;
                writer.flush().await
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), close).await;
            break;
        }
        if chunks.is_empty() {
            tokio::select! {
                _ = queue.wake.notified() => continue,
                _ = queue.done.cancelled() => break,
            }
        }
        for chunk in chunks.drain(..) {
            if chunk.len() <= INLINE_CHUNK {
                scratch.extend_from_slice(&chunk);
            } else {
                if !scratch.is_empty() {
                    out.push_back(scratch.split().freeze());
                }
                out.push_back(chunk);
            }
        }
        if !scratch.is_empty() {
            out.push_back(scratch.split().freeze());
        }
        // TLS holds the last record until flushed; on plain TCP the flush costs nothing.
        if crate::outbox::write_chunks(&mut writer, &mut out).await.is_err() || writer.flush().await.is_err() {
            break;
        }
        queue.counters.messages_out.inc_by(messages);
        queue.counters.bytes_out.inc_by(bytes);
        queue.drained.notify_waiters();
        if scratch.capacity() < 16 * 1024 {
            scratch.reserve(64 * 1024);
        }
    }
    let _ = writer.shutdown().await;
    queue.done.cancel();
    queue.drained.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_data_but_keeps_control() {
        let queue = LinkQueue::new(LinkLimits { max_messages: 2, max_bytes: 1 << 20 }, LinkCounters::default());
        let data = || (Bytes::from_static(b"pre"), Bytes::from_static(b"body"));
        assert_eq!(queue.push_data(data().0, data().1), DataPush::Queued);
        assert_eq!(queue.push_data(data().0, data().1), DataPush::Congested);
        assert_eq!(queue.push_data(data().0, data().1), DataPush::Dropped);
        queue.push_control(Bytes::from_static(b"hb"));
        assert_eq!(queue.counters().drops.get(), 1);
        let mut chunks = VecDeque::new();
        let (messages, bytes, closing) = queue.take(&mut chunks);
        assert_eq!((messages, bytes, closing), (2, 14, None));
        assert_eq!(chunks.front().map(|c| &c[..]), Some(&b"hb"[..]), "control goes first");
        for _ in 0..2 {
            queue.push_data(data().0, data().1);
        }
        queue.close("bye");
        assert_eq!(queue.counters().drops.get(), 3, "what a closing link discards is counted too");
        assert_eq!(queue.push_data(data().0, data().1), DataPush::Closed);
    }

    #[test]
    fn guaranteed_frames_are_never_dropped_on_a_full_queue_and_keep_their_order() {
        let queue = LinkQueue::new(LinkLimits { max_messages: 1, max_bytes: 1 << 20 }, LinkCounters::default());
        assert_eq!(queue.push_data(Bytes::from_static(b"p"), Bytes::from_static(b"d")), DataPush::Congested);
        assert_eq!(queue.push_data(Bytes::from_static(b"p"), Bytes::from_static(b"d")), DataPush::Dropped);
        for frame in [&b"data1"[..], b"silence", b"data2", b"ack_expected"] {
            assert!(queue.push_guaranteed(Bytes::copy_from_slice(frame)));
        }
        let mut chunks = VecDeque::new();
        queue.take(&mut chunks);
        let lane: Vec<&[u8]> = chunks.iter().take(4).map(|c| &c[..]).collect();
        assert_eq!(lane, [&b"data1"[..], b"silence", b"data2", b"ack_expected"]);
        queue.close("bye");
        assert!(!queue.push_guaranteed(Bytes::from_static(b"late")), "a closing link takes nothing more");
    }
}
