//! SILENCE, ticks that carry no message for the receiver. Layout:
//! `pubend:u64 | kind:u8 | requested_only:u8 | tree:u64 | count:u32 | count × (first:u64 | last:u64)`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::peer::ids::{put_ranges, read_ranges};
use crate::peer::{PubendId, TickRange, TreeId};

/// What the silent ticks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SilenceKind {
    /// Final: no message for the receiver at these ticks, ever (kind byte 0).
    Final = 0,
    /// Lost: the messages at these ticks are gone (released or beyond repair); the receiver
    /// reports the loss instead of waiting (kind byte 1).
    Lost = 1,
}

/// The given ticks of `pubend` are F (or L) for the receiver (gd-protocol §7): filtered out,
/// no message published, or answered silence for a nack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Silence {
    /// The stream.
    pub pubend: PubendId,
    /// Final or lost.
    pub kind: SilenceKind,
    /// A retransmission answering curiosity: forward only to links that asked.
    pub requested_only: bool,
    /// The routing tree the sender judged final ticks under (see [`crate::peer::Data::tree`]);
    /// lost ticks are lost for everyone.
    pub tree: TreeId,
    /// The silent ticks, sorted and disjoint.
    pub ranges: Vec<TickRange>,
}

impl Silence {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u64(self.pubend.0);
        out.put_u8(self.kind as u8);
        out.put_u8(u8::from(self.requested_only));
        out.put_u64(self.tree.0);
        put_ranges(out, &self.ranges)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Silence, WireError> {
        let mut r = Reader::new("SILENCE", body);
        let pubend = PubendId(r.u64("pubend")?);
        let kind = match r.u8("kind")? {
            0 => SilenceKind::Final,
            1 => SilenceKind::Lost,
            v => return Err(WireError::InvalidField { frame: "SILENCE", field: "kind", value: u64::from(v) }),
        };
        let requested_only = r.bool("requested_only")?;
        let tree = TreeId(r.u64("tree")?);
        let ranges = read_ranges(&mut r, "SILENCE")?;
        r.finish()?;
        Ok(Silence { pubend, kind, requested_only, tree, ranges })
    }
}
