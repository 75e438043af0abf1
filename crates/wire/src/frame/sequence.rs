//! SEQUENCE, broker to client over UDP only. Layout: `first:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;

/// Numbers a UDP client's deliveries so the client can count what the network lost: the
/// broker puts one first in every datagram of deliveries, giving the session-wide number of
/// the datagram's first delivery (deliveries the broker sent this client before it). A
/// datagram dropped on the way (a full socket buffer at the client, a lossy link) leaves a gap
/// the client sees at the next one and counts against the subscription of its next delivery
/// (its `missed`), beside what the broker's own queue dropped. Without it a UDP subscriber's
/// losses were silent: the broker's send succeeds and the kernel drops at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// The number of the datagram's first delivery (0 for the session's first).
    pub first: u64,
}

impl Sequence {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u64(self.first);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Sequence, WireError> {
        let mut r = Reader::new("SEQUENCE", body);
        let first = r.u64("first")?;
        r.finish()?;
        Ok(Sequence { first })
    }
}

/// Bytes of an encoded SEQUENCE frame (header and body).
pub const SEQUENCE_LEN: usize = crate::HEADER_LEN + 8;
