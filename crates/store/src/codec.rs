//! The record format. Every record is framed as
//! `[body length: u32 LE][CRC-32 of (length bytes ++ body): u32 LE][body]`, and the body is
//! `[kind: u8][pubend: u64 LE][tick: u64 LE]` followed, for data, by
//! `[publisher: u64 LE][publisher seq: u64 LE][payload]`, and for a publisher's high-water mark
//! (written in a segment's checkpoint) by `[publisher: u64 LE][highest seq: u64 LE]`, its tick
//! the tick of that publish. A void (kind 5, its tick zero) ends everything the pubend's log held
//! before it. All integers little-endian.
//!
//! The format has no version number: a kind is a version of a record. A new kind is added, never
//! an old one changed, so a log written before a kind existed decodes as it always did (the
//! golden bytes in the tests pin every kind).
//! The checksum covers the length too, so a flipped length bit is caught, not followed.

use crate::types::{PubendId, PublisherId, PublisherSeq, Tick};

/// Bytes before the body: length and checksum.
pub(crate) const HEADER: usize = 8;
/// The largest body accepted (a guard against reading a garbage length as a huge record).
pub(crate) const MAX_BODY: usize = 16 << 20;

const KIND_DATA: u8 = 1;
const KIND_LEASE: u8 = 2;
const KIND_RELEASE: u8 = 3;
const KIND_PUBLISHER: u8 = 4;
const KIND_VOID: u8 = 5;
const META_BODY: usize = 17;
const DATA_FIXED: usize = 33;

/// A decoded record, borrowing its payload from the segment bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry<'a> {
    /// A message.
    Data { pubend: PubendId, tick: Tick, publisher: PublisherId, seq: PublisherSeq, payload: &'a [u8] },
    /// The pubend's tick lease was raised to `tick`.
    Lease { pubend: PubendId, tick: Tick },
    /// Every record of the pubend up to `tick` is released.
    Release { pubend: PubendId, tick: Tick },
    /// The publisher's highest logged `seq` (at `tick`), kept after its records are released so
    /// a retry of a publish acknowledged before a restart is still taken as a retry (T4).
    Publisher { pubend: PubendId, tick: Tick, publisher: PublisherId, seq: PublisherSeq },
    /// Everything the pubend's log held before this record (records, lease, release point,
    /// publishers, lost ranges) is void: its log starts again empty, at any tick.
    Void { pubend: PubendId },
}

/// What [`decode`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// A whole, intact record and its framed length.
    Record(Entry<'a>, usize),
    /// The bytes end inside the record (a torn tail if nothing valid follows).
    Truncated,
    /// Framing or checksum is wrong.
    Bad,
}

/// The framed size of a data record with `payload_len` payload bytes.
pub(crate) fn data_len(payload_len: usize) -> usize {
    HEADER + DATA_FIXED + payload_len
}

/// Appends a framed data record to `out`.
pub(crate) fn encode_data(
    out: &mut Vec<u8>,
    pubend: PubendId,
    tick: Tick,
    publisher: PublisherId,
    seq: PublisherSeq,
    payload: &[u8],
) {
    let start = begin(out, DATA_FIXED + payload.len(), KIND_DATA, pubend, tick);
    out.extend_from_slice(&publisher.0.to_le_bytes());
    out.extend_from_slice(&seq.0.to_le_bytes());
    out.extend_from_slice(payload);
    seal(out, start);
}

/// Appends a framed lease record to `out`.
pub(crate) fn encode_lease(out: &mut Vec<u8>, pubend: PubendId, tick: Tick) {
    let start = begin(out, META_BODY, KIND_LEASE, pubend, tick);
    seal(out, start);
}

/// Appends a framed release record to `out`.
pub(crate) fn encode_release(out: &mut Vec<u8>, pubend: PubendId, tick: Tick) {
    let start = begin(out, META_BODY, KIND_RELEASE, pubend, tick);
    seal(out, start);
}

/// Appends a framed void record to `out` (its tick field is zero: it voids every tick).
pub(crate) fn encode_void(out: &mut Vec<u8>, pubend: PubendId) {
    let start = begin(out, META_BODY, KIND_VOID, pubend, Tick(0));
    seal(out, start);
}

/// Appends a framed publisher high-water record to `out`.
pub(crate) fn encode_publisher(
    out: &mut Vec<u8>,
    pubend: PubendId,
    tick: Tick,
    publisher: PublisherId,
    seq: PublisherSeq,
) {
    let start = begin(out, DATA_FIXED, KIND_PUBLISHER, pubend, tick);
    out.extend_from_slice(&publisher.0.to_le_bytes());
    out.extend_from_slice(&seq.0.to_le_bytes());
    seal(out, start);
}

fn begin(out: &mut Vec<u8>, body: usize, kind: u8, pubend: PubendId, tick: Tick) -> usize {
    let start = out.len();
    out.reserve(HEADER + body);
    // The body is at most MAX_BODY (checked by the writer), so it fits in u32.
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind);
    out.extend_from_slice(&pubend.0.to_le_bytes());
    out.extend_from_slice(&tick.0.to_le_bytes());
    start
}

fn seal(out: &mut [u8], start: usize) {
    let crc = checksum(&out[start..start + 4], &out[start + HEADER..]);
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn checksum(length: &[u8], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(length);
    hasher.update(body);
    hasher.finalize()
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Decodes the record that starts at `bytes[0]`.
pub(crate) fn decode(bytes: &[u8]) -> Decoded<'_> {
    if bytes.len() < HEADER {
        return Decoded::Truncated;
    }
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[..4]);
    let body_len = u32::from_le_bytes(word) as usize;
    if !(META_BODY..=MAX_BODY).contains(&body_len) {
        return Decoded::Bad;
    }
    if bytes.len() < HEADER + body_len {
        return Decoded::Truncated;
    }
    word.copy_from_slice(&bytes[4..8]);
    let body = &bytes[HEADER..HEADER + body_len];
    if u32::from_le_bytes(word) != checksum(&bytes[..4], body) {
        return Decoded::Bad;
    }
    match parse_body(body) {
        Some(entry) => Decoded::Record(entry, HEADER + body_len),
        None => Decoded::Bad,
    }
}

fn parse_body(body: &[u8]) -> Option<Entry<'_>> {
    let pubend = PubendId(u64_at(body, 1));
    let tick = Tick(u64_at(body, 9));
    match (body[0], body.len()) {
        (KIND_LEASE, META_BODY) => Some(Entry::Lease { pubend, tick }),
        (KIND_RELEASE, META_BODY) => Some(Entry::Release { pubend, tick }),
        (KIND_VOID, META_BODY) if tick == Tick(0) => Some(Entry::Void { pubend }),
        (KIND_PUBLISHER, DATA_FIXED) => Some(Entry::Publisher {
            pubend,
            tick,
            publisher: PublisherId(u64_at(body, 17)),
            seq: PublisherSeq(u64_at(body, 25)),
        }),
        (KIND_DATA, len) if len >= DATA_FIXED => Some(Entry::Data {
            pubend,
            tick,
            publisher: PublisherId(u64_at(body, 17)),
            seq: PublisherSeq(u64_at(body, 25)),
            payload: &body[DATA_FIXED..],
        }),
        _ => None,
    }
}

/// Finds the next offset after `from` where an intact record starts, if any: used to tell a
/// torn tail (nothing valid follows) from damage in the middle (valid records follow).
pub(crate) fn resync(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from + 1;
    while at + HEADER <= bytes.len() {
        // A record's length is at least 17, so one of its first four bytes is not zero: skip
        // runs of zeros (a zero-filled tail) instead of decoding at every offset.
        let nonzero = at + bytes[at..].iter().position(|b| *b != 0)?;
        let start = nonzero.saturating_sub(3).max(at);
        if let Some(found) = (start..=nonzero).find(|&c| matches!(decode(&bytes[c..]), Decoded::Record(..))) {
            return Some(found);
        }
        at = nonzero + 1;
    }
    None
}

/// True if nothing but zeros follows: the clean end of a zero-filled segment.
pub(crate) fn only_zeros(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_data(&mut out, PubendId(7), Tick(9), PublisherId(3), PublisherSeq(4), payload);
        out
    }

    #[test]
    fn a_data_record_round_trips_with_its_framed_length() {
        let bytes = data(b"hello");
        assert_eq!(bytes.len(), data_len(5));
        let expected = Entry::Data {
            pubend: PubendId(7),
            tick: Tick(9),
            publisher: PublisherId(3),
            seq: PublisherSeq(4),
            payload: b"hello",
        };
        assert_eq!(decode(&bytes), Decoded::Record(expected, bytes.len()));
    }

    #[test]
    fn lease_and_release_records_round_trip() {
        let mut out = Vec::new();
        encode_lease(&mut out, PubendId(1), Tick(2));
        encode_release(&mut out, PubendId(1), Tick(3));
        let Decoded::Record(lease, used) = decode(&out) else { panic!("lease did not decode") };
        assert_eq!(lease, Entry::Lease { pubend: PubendId(1), tick: Tick(2) });
        let Decoded::Record(release, _) = decode(&out[used..]) else { panic!("release") };
        assert_eq!(release, Entry::Release { pubend: PubendId(1), tick: Tick(3) });
    }

    #[test]
    fn a_publisher_high_water_record_round_trips() {
        let mut out = Vec::new();
        encode_publisher(&mut out, PubendId(1), Tick(5), PublisherId(9), PublisherSeq(42));
        let expected =
            Entry::Publisher { pubend: PubendId(1), tick: Tick(5), publisher: PublisherId(9), seq: PublisherSeq(42) };
        assert_eq!(decode(&out), Decoded::Record(expected, out.len()));
    }

    /// Bytes of a log written before the void record existed: one record of each kind then.
    const OLD_LOG: &str = concat!(
        "23000000ddd806cc0107000000000000000900000000000000030000000000000004000000000000006869",
        "1100000083203f2d0207000000000000000a00000000000000",
        "1100000075f07c790307000000000000000200000000000000",
        "21000000c963acfd040700000000000000090000000000000003000000000000000400000000000000",
    );
    /// The void record of pubend 7.
    const VOID: &str = "1100000000406d9c0507000000000000000000000000000000";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn entries(bytes: &[u8]) -> Vec<Entry<'_>> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Decoded::Record(entry, used) = decode(&bytes[at..]) {
            out.push(entry);
            at += used;
        }
        assert_eq!(at, bytes.len(), "every byte is in a record");
        out
    }

    /// The bytes of every kind, as logs on disk hold them: a change to the format fails here
    /// (a kind is added, never changed), and a log written before the void record existed
    /// decodes to what it did then.
    #[test]
    fn every_kind_encodes_to_its_golden_bytes_and_old_logs_decode_as_before() {
        let mut out = Vec::new();
        encode_data(&mut out, PubendId(7), Tick(9), PublisherId(3), PublisherSeq(4), b"hi");
        encode_lease(&mut out, PubendId(7), Tick(10));
        encode_release(&mut out, PubendId(7), Tick(2));
        encode_publisher(&mut out, PubendId(7), Tick(9), PublisherId(3), PublisherSeq(4));
        assert_eq!(hex(&out), OLD_LOG);
        let (p, publisher, seq) = (PubendId(7), PublisherId(3), PublisherSeq(4));
        assert_eq!(
            entries(&out),
            [
                Entry::Data { pubend: p, tick: Tick(9), publisher, seq, payload: b"hi" },
                Entry::Lease { pubend: p, tick: Tick(10) },
                Entry::Release { pubend: p, tick: Tick(2) },
                Entry::Publisher { pubend: p, tick: Tick(9), publisher, seq },
            ]
        );
        let mut void = Vec::new();
        encode_void(&mut void, p);
        assert_eq!(hex(&void), VOID);
        assert_eq!(entries(&void), [Entry::Void { pubend: p }]);
        // A void with a tick is not one this format writes: it is refused, not half-read.
        let mut odd = Vec::new();
        let start = begin(&mut odd, META_BODY, KIND_VOID, p, Tick(1));
        seal(&mut odd, start);
        assert_eq!(decode(&odd), Decoded::Bad);
    }

    #[test]
    fn every_truncated_prefix_is_truncated_never_a_record() {
        let bytes = data(b"payload bytes");
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), Decoded::Truncated, "cut at {cut}");
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = data(b"0123456789");
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(!matches!(decode(&flipped), Decoded::Record(..)), "bit {bit} flipped went unnoticed");
        }
    }

    #[test]
    fn resync_finds_the_record_after_a_damaged_one() {
        let mut bytes = data(b"first");
        let second = bytes.len();
        bytes.extend(data(b"second"));
        bytes[10] ^= 0xff;
        assert_eq!(resync(&bytes, 0), Some(second));
        assert_eq!(resync(&bytes, second), None);
    }
}
