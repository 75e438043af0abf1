//! DATA, one guaranteed message and the silence around it. Layout:
//! `pubend:u64 | tick:u64 | final_from:u64 | final_to:u64 | requested_only:u8 | tree:u64 | message section`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;
use crate::frame::Message;
use crate::peer::{PubendId, Tick, TreeId};

/// Tick `tick` of `pubend` is this message (D); ticks `final_from..tick` and `tick+1..=final_to`
/// are final silence (F), so one frame closes the gap back to the previous message
/// (gd-protocol §7). The decoder refuses `final_from > tick` or `tick > final_to`.
#[derive(Debug, Clone, PartialEq)]
pub struct Data {
    /// The stream.
    pub pubend: PubendId,
    /// The message's tick.
    pub tick: Tick,
    /// First tick of the final range this frame closes (`tick` if none before it).
    pub final_from: Tick,
    /// Last tick of the final range this frame closes (`tick` if none after it).
    pub final_to: Tick,
    /// A retransmission answering curiosity: forward it only to links that asked (nacked).
    pub requested_only: bool,
    /// The routing tree the sender judged the final ranges under: they hold only for the
    /// subtree it judged them for, so a receiver routing the pubend by another tree takes
    /// the D and drops the F.
    pub tree: TreeId,
    /// The published message section, verbatim.
    pub message: Message,
}

impl Data {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u64(self.pubend.0);
        out.put_u64(self.tick.0);
        out.put_u64(self.final_from.0);
        out.put_u64(self.final_to.0);
        out.put_u8(u8::from(self.requested_only));
        out.put_u64(self.tree.0);
        out.put_slice(self.message.as_bytes());
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<Data, WireError> {
        let mut r = Reader::new("DATA", &body);
        let pubend = PubendId(r.u64("pubend")?);
        let tick = Tick(r.u64("tick")?);
        let final_from = Tick(r.u64("final_from")?);
        let final_to = Tick(r.u64("final_to")?);
        if final_from > tick {
            return Err(WireError::InvalidField { frame: "DATA", field: "final_from", value: final_from.0 });
        }
        if final_to < tick {
            return Err(WireError::InvalidField { frame: "DATA", field: "final_to", value: final_to.0 });
        }
        let requested_only = r.bool("requested_only")?;
        let tree = TreeId(r.u64("tree")?);
        let message = Message::decode(body.slice(r.position()..))?;
        Ok(Data { pubend, tick, final_from, final_to, requested_only, tree, message })
    }
}
