//! What every benchmark message carries at the front of its payload: its number, and the time
//! it was meant to be sent. Probes carry [`PROBE`] instead of a number, so they can never be
//! counted as data.

use bytes::{BufMut, Bytes, BytesMut};

/// The number of probe messages (never counted as data).
pub const PROBE: u64 = u64::MAX;

/// Bytes the mark takes: the number, then the intended send time.
pub const MARK_BYTES: usize = 16;

/// A message's identity and schedule, read back from its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The message's number (0, 1, ...), or [`PROBE`].
    pub number: u64,
    /// When the publisher's schedule said to send it ([`now_us`](tidings_client::now_us)
    /// clock); latency from here includes any delay of the publisher itself (no coordinated
    /// omission). 0 when the run has no schedule.
    pub intended_us: u64,
}

/// `size` bytes (at least [`MARK_BYTES`]): the number and intended send time little-endian,
/// then zeros.
pub fn payload(number: u64, intended_us: u64, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(MARK_BYTES));
    b.put_u64_le(number);
    b.put_u64_le(intended_us);
    b.resize(size.max(MARK_BYTES), 0);
    b.freeze()
}

/// The mark at the front of a payload, if it has one.
pub fn read(payload: &[u8]) -> Option<Mark> {
    let number = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let intended_us = u64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some(Mark { number, intended_us })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_carries_its_number_and_schedule() {
        let p = payload(42, 1_000, 100);
        assert_eq!(p.len(), 100);
        assert_eq!(read(&p), Some(Mark { number: 42, intended_us: 1_000 }));
        assert_eq!(payload(1, 0, 2).len(), MARK_BYTES);
        assert_eq!(read(&p[..12]), None);
    }
}
