//! A taken batch as the bytes of its frames: DELIVER and GDELIVER headers written into one
//! scratch buffer, small bodies copied after them, large ones shared (no copy per subscriber).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use tidings_wire::{Deliver, GuaranteedDeliver, DELIVER_HEADER_LEN, GUARANTEED_DELIVER_HEADER_LEN};

use super::queue::Item;
use super::Target;

/// Bodies up to this size are copied into the write buffer; larger ones go out by vectored
/// write straight from the published buffer. Copying a small body is cheaper than an extra
/// I/O slice; past a few hundred bytes the copy (once per subscriber) costs more.
const INLINE_BODY: usize = 512;

/// Appends the frames of `batch` to `chunks`: small bodies copied into `scratch`, large ones
/// shared. Returns (deliveries, bytes).
pub(super) fn encode_batch(
    batch: &mut VecDeque<Item<Target>>,
    scratch: &mut BytesMut,
    chunks: &mut VecDeque<Bytes>,
) -> (u64, u64) {
    let (mut delivered, mut bytes) = (0u64, 0u64);
    for item in batch.drain(..) {
        match item {
            Item::Deliver(target, message, missed) => {
                Deliver::encode_header(target.id, missed, &message, scratch);
                push_body(message.as_bytes(), scratch, chunks);
                delivered += 1;
                bytes += (DELIVER_HEADER_LEN + message.encoded_len()) as u64;
            }
            Item::Guaranteed(id, pubend, tick, message) => {
                GuaranteedDeliver::encode_header(id, pubend, tick, &message, scratch);
                push_body(message.as_bytes(), scratch, chunks);
                delivered += 1;
                bytes += (GUARANTEED_DELIVER_HEADER_LEN + message.encoded_len()) as u64;
            }
            Item::Frame(frame) => scratch.extend_from_slice(&frame),
        }
    }
    if !scratch.is_empty() {
        chunks.push_back(scratch.split().freeze());
    }
    (delivered, bytes)
}

/// A message body after its header: copied when small, shared when large (see [`INLINE_BODY`]).
fn push_body(body: &Bytes, scratch: &mut BytesMut, chunks: &mut VecDeque<Bytes>) {
    if body.len() <= INLINE_BODY {
        scratch.extend_from_slice(body);
    } else {
        chunks.push_back(scratch.split().freeze());
        chunks.push_back(body.clone());
    }
}
