//! The writer of a UDP client: takes a batch from the outbox and packs its frames whole into
//! datagrams, so a queue drained in one batch costs a send per datagram, not per message.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::{Deliver, DELIVER_HEADER_LEN};
use tokio::net::UdpSocket;

use super::queue::Item;
use super::{Outbox, Target, Turn};

/// Drains `outbox` to one UDP client, a datagram per frame. A delivery too large for a
/// datagram is counted and skipped.
pub async fn write_datagrams(socket: Arc<UdpSocket>, peer: SocketAddr, outbox: Arc<Outbox>, max_datagram: usize) {
    let mut batch = VecDeque::new();
    let mut packer = Packer::new(max_datagram);
    loop {
        match outbox.next_batch(&mut batch).await {
            Turn::Write => {}
            Turn::Close(closing) => {
                let _ = socket.send_to(&closing, peer).await;
                break;
            }
            Turn::Stop => break,
        }
        let charged: usize = batch.iter().map(Item::charged).sum();
        // Deliveries too large for a datagram, by subscription: told on its next one here.
        let mut too_large: Vec<(Arc<Target>, u32)> = Vec::new();
        for item in batch.drain(..) {
            let start = packer.open();
            let delivered = match item {
                Item::Deliver(target, message, missed) => {
                    let carried = too_large.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &target));
                    let missed = missed.saturating_add(carried.map_or(0, |(_, n)| std::mem::take(n)));
                    if DELIVER_HEADER_LEN + message.encoded_len() > MAX_DATAGRAM {
                        outbox.metrics.udp_deliveries_too_large.inc();
                        match too_large.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &target)) {
                            Some((_, n)) => *n = missed.saturating_add(1),
                            None => too_large.push((target, missed.saturating_add(1))),
                        }
                        continue;
                    }
                    Deliver::encode_header(target.id, missed, &message, &mut packer.buf);
                    packer.buf.extend_from_slice(message.as_bytes());
                    true
                }
                Item::Guaranteed(..) => {
                    // Guaranteed subscriptions are refused over UDP; nothing queues these here.
                    continue;
                }
                Item::Frame(bytes) => {
                    packer.buf.extend_from_slice(&bytes);
                    false
                }
            };
            if let Some(full) = packer.close(start, delivered) {
                send_datagram(&socket, peer, &outbox, &full).await;
            }
        }
        if let Some(last) = packer.flush() {
            send_datagram(&socket, peer, &outbox, &last).await;
        }
        // Not followed by another delivery in this batch: the next one queued carries them.
        for (target, n) in too_large {
            target.missed.fetch_add(n, Ordering::Relaxed);
        }
        outbox.written(charged);
        outbox.drained.notify_waiters();
    }
    outbox.finish();
    outbox.discard();
}

/// Largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;

/// One datagram to send, and how many deliveries it carries.
struct Packed {
    bytes: BytesMut,
    deliveries: u64,
}

/// Packs whole frames into datagrams of at most `max` bytes (a frame larger than that goes
/// alone): a client reads every frame of a datagram, so a queue drained in one batch costs a
/// send per datagram, not per message.
struct Packer {
    max: usize,
    /// The datagram being filled: whole frames, then possibly the frame being encoded.
    buf: BytesMut,
    deliveries: u64,
}

impl Packer {
    fn new(max: usize) -> Packer {
        Packer { max, buf: BytesMut::with_capacity(MAX_DATAGRAM), deliveries: 0 }
    }

    /// Where the next frame starts in `buf`.
    fn open(&self) -> usize {
        self.buf.len()
    }

    /// The frame from `start` is complete. Returns a datagram to send when it no longer fits
    /// beside what was packed before it (that earlier part goes; the frame starts the next).
    fn close(&mut self, start: usize, delivery: bool) -> Option<Packed> {
        let mut full = None;
        if self.buf.len() > self.max && start > 0 {
            let frame = self.buf.split_off(start);
            let earlier = std::mem::replace(&mut self.buf, frame);
            full = Some(Packed { bytes: earlier, deliveries: std::mem::take(&mut self.deliveries) });
        }
        self.deliveries += u64::from(delivery);
        full
    }

    /// Whatever is packed, as the last datagram of a batch.
    fn flush(&mut self) -> Option<Packed> {
        if self.buf.is_empty() {
            return None;
        }
        let bytes = self.buf.split();
        self.buf.reserve(MAX_DATAGRAM);
        Some(Packed { bytes, deliveries: std::mem::take(&mut self.deliveries) })
    }
}

/// Sends one datagram. An error (the peer's port closed, ICMP unreachable) loses this
/// datagram only; the session lives until its keepalive lapses.
async fn send_datagram(socket: &UdpSocket, peer: SocketAddr, outbox: &Outbox, packed: &Packed) {
    if socket.send_to(&packed.bytes, peer).await.is_ok() && packed.deliveries > 0 {
        let bytes = packed.bytes.len() as u64;
        outbox.metrics.messages_out.inc_by(packed.deliveries);
        outbox.metrics.bytes_out.inc_by(bytes);
        outbox.metrics.udp_datagrams_sent.inc();
        outbox.counts.messages_out.fetch_add(packed.deliveries, Ordering::Relaxed);
        outbox.counts.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packs frames of `sizes` bytes (deliveries) and returns each datagram's (bytes, deliveries).
    fn pack(max: usize, sizes: &[usize]) -> Vec<(usize, u64)> {
        let mut packer = Packer::new(max);
        let mut out = Vec::new();
        for &size in sizes {
            let start = packer.open();
            packer.buf.extend_from_slice(&vec![7u8; size]);
            out.extend(packer.close(start, true).map(|p| (p.bytes.len(), p.deliveries)));
        }
        out.extend(packer.flush().map(|p| (p.bytes.len(), p.deliveries)));
        out
    }

    #[test]
    fn deliveries_are_packed_whole_into_datagrams_up_to_the_size_and_a_large_one_goes_alone() {
        assert_eq!(pack(1000, &[300, 300, 300, 300]), [(900, 3), (300, 1)]);
        assert_eq!(pack(1000, &[300, 2000, 300]), [(300, 1), (2000, 1), (300, 1)]);
        assert_eq!(pack(1000, &[1000, 1]), [(1000, 1), (1, 1)]);
        assert_eq!(pack(1000, &[]), []);
    }
}
