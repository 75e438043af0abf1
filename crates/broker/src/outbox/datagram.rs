//! The writer of a UDP client: takes a batch from the outbox and packs its frames whole into
//! datagrams, so a queue drained in one batch costs a send per datagram, not per message. Each
//! datagram starts with a SEQUENCE frame numbering its first delivery, so the client counts
//! what was lost on the way (a full socket buffer of a descheduled client drops silently: the
//! broker's send succeeds) against its own subscriptions.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::{Deliver, Frame, Sequence, DELIVER_HEADER_LEN, SEQUENCE_LEN};
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
/// alone, after its SEQUENCE): a client reads every frame of a datagram, so a queue drained in
/// one batch costs a send per datagram, not per message. Every datagram starts with a SEQUENCE
/// giving the number of its first delivery.
struct Packer {
    max: usize,
    /// The datagram being filled: its SEQUENCE, whole frames, then possibly the frame being
    /// encoded.
    buf: BytesMut,
    deliveries: u64,
    /// The number of the next delivery packed: deliveries packed before it, this session.
    next: u64,
}

impl Packer {
    fn new(max: usize) -> Packer {
        Packer { max, buf: BytesMut::with_capacity(MAX_DATAGRAM), deliveries: 0, next: 0 }
    }

    /// Starts a datagram whose first delivery is the next one packed.
    fn start_datagram(&mut self) {
        // A fixed-size frame: encoding it cannot fail.
        let _ = Frame::Sequence(Sequence { first: self.next }).encode(&mut self.buf);
    }

    /// Where the next frame starts in `buf` (after a SEQUENCE, in a fresh datagram).
    fn open(&mut self) -> usize {
        if self.buf.is_empty() {
            self.start_datagram();
        }
        self.buf.len()
    }

    /// The frame from `start` is complete. Returns a datagram to send when it no longer fits
    /// beside what was packed before it (that earlier part goes; the frame starts the next).
    fn close(&mut self, start: usize, delivery: bool) -> Option<Packed> {
        let mut full = None;
        if self.buf.len() > self.max && start > SEQUENCE_LEN {
            let frame = self.buf.split_off(start);
            let earlier = std::mem::take(&mut self.buf);
            self.start_datagram();
            self.buf.extend_from_slice(&frame);
            full = Some(Packed { bytes: earlier, deliveries: std::mem::take(&mut self.deliveries) });
        }
        self.deliveries += u64::from(delivery);
        self.next += u64::from(delivery);
        full
    }

    /// Whatever is packed, as the last datagram of a batch (nothing when only a SEQUENCE is).
    fn flush(&mut self) -> Option<Packed> {
        if self.buf.len() <= SEQUENCE_LEN {
            self.buf.clear();
            return None;
        }
        let bytes = self.buf.split();
        self.buf.reserve(MAX_DATAGRAM);
        Some(Packed { bytes, deliveries: std::mem::take(&mut self.deliveries) })
    }
}

/// Sends one datagram. An error (the peer's port closed, ICMP unreachable, no kernel buffer)
/// loses this datagram only, counted for this client (`send_failed` in `/connz`); the session
/// lives until its keepalive lapses.
async fn send_datagram(socket: &UdpSocket, peer: SocketAddr, outbox: &Outbox, packed: &Packed) {
    if socket.send_to(&packed.bytes, peer).await.is_err() {
        outbox.metrics.udp_send_errors.inc();
        outbox.counts.send_failed.fetch_add(packed.deliveries, Ordering::Relaxed);
        return;
    }
    if packed.deliveries > 0 {
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

    /// Packs frames of `sizes` bytes (deliveries) and returns each datagram's (bytes after its
    /// SEQUENCE, deliveries, the SEQUENCE's first number).
    fn pack(max: usize, sizes: &[usize]) -> Vec<(usize, u64, u64)> {
        let mut packer = Packer::new(max);
        let mut out = Vec::new();
        let seen = |p: Packed| {
            let mut bytes = p.bytes.freeze();
            let Ok(Frame::Sequence(s)) = Frame::decode_datagram(&mut bytes, 1 << 20) else {
                panic!("a datagram starts with its SEQUENCE");
            };
            (bytes.len(), p.deliveries, s.first)
        };
        for &size in sizes {
            let start = packer.open();
            packer.buf.extend_from_slice(&vec![7u8; size]);
            out.extend(packer.close(start, true).map(seen));
        }
        out.extend(packer.flush().map(seen));
        out
    }

    #[test]
    fn deliveries_are_packed_whole_into_numbered_datagrams_up_to_the_size_and_a_large_one_goes_alone() {
        let s = SEQUENCE_LEN;
        assert_eq!(pack(1000 + s, &[300, 300, 300, 300]), [(900, 3, 0), (300, 1, 3)]);
        assert_eq!(pack(1000 + s, &[300, 2000, 300]), [(300, 1, 0), (2000, 1, 1), (300, 1, 2)]);
        assert_eq!(pack(1000 + s, &[1000, 1]), [(1000, 1, 0), (1, 1, 1)]);
        assert_eq!(pack(1000, &[]), []);
    }

    #[test]
    fn a_datagram_of_control_frames_numbers_the_next_delivery() {
        let mut packer = Packer::new(1000);
        let start = packer.open();
        packer.buf.extend_from_slice(&[1; 10]);
        assert!(packer.close(start, true).is_none());
        let sent = packer.flush().map(|p| p.deliveries);
        assert_eq!(sent, Some(1));
        let start = packer.open();
        packer.buf.extend_from_slice(&[2; 10]);
        assert!(packer.close(start, false).is_none());
        let mut pong = packer.flush().map(|p| p.bytes.freeze()).unwrap_or_default();
        assert_eq!(Frame::decode_datagram(&mut pong, 1 << 20).ok(), Some(Frame::Sequence(Sequence { first: 1 })));
        assert!(packer.flush().is_none(), "an empty datagram is not sent");
    }
}
