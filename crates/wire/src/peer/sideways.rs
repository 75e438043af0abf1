//! SIDEWAYS, a guaranteed-delivery frame handed through a cell mate (gd-protocol §11.3).
//! Layout: `origin:str16 | to:str16 | frame`, where `frame` is one whole DATA, SILENCE, ACK,
//! NACK or ACK_EXPECTED frame (its own length and type byte) running to the end of the body.

use bytes::{Bytes, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;
use crate::frame::HEADER_LEN;
use crate::peer::{peek_header, PeerFrame, PeerFrameType};

/// A stream frame from `origin` for `to`, carried by a broker linked to both. A pubend's entry
/// broker may have no link of its own into a child cell's entry broker when a bundle lost some
/// of its links: the data then goes through a cell mate, and acks and nacks come back the same
/// way. The frame keeps its origin so the receiver's core hears the broker that holds the
/// stream, not the one that carried it, and answers it there.
#[derive(Debug, Clone, PartialEq)]
pub struct Sideways {
    /// The broker whose core sent the frame.
    pub origin: String,
    /// The broker whose core it is for.
    pub to: String,
    /// The stream frame: DATA, SILENCE, ACK, NACK or ACK_EXPECTED, never another SIDEWAYS.
    pub frame: Box<PeerFrame>,
}

impl Sideways {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        if !carried(self.frame.frame_type()) {
            let value = self.frame.frame_type() as u64;
            return Err(WireError::InvalidField { frame: "SIDEWAYS", field: "frame", value });
        }
        put_str16(out, "origin", &self.origin)?;
        put_str16(out, "to", &self.to)?;
        self.frame.encode(out)
    }

    pub(crate) fn decode_body(body: Bytes) -> Result<Sideways, WireError> {
        let mut r = Reader::new("SIDEWAYS", &body);
        let origin = r.str16("origin")?.to_string();
        let to = r.str16("to")?.to_string();
        let at = r.position();
        let rest = &body[at..];
        let Some((ty, len)) = peek_header(rest, usize::MAX)? else {
            let need = u32::from_be_bytes(rest.get(..4).and_then(|b| b.try_into().ok()).unwrap_or([0, 0, 0, 1]));
            let (need, have) = ((need as usize + 4).max(HEADER_LEN), rest.len());
            return Err(WireError::UnexpectedEof { frame: "SIDEWAYS", field: "frame", offset: at, need, have });
        };
        if !carried(ty) {
            return Err(WireError::InvalidField { frame: "SIDEWAYS", field: "frame", value: ty as u64 });
        }
        let end = at + 4 + len;
        if end != body.len() {
            return Err(WireError::TrailingBytes { frame: "SIDEWAYS", extra: body.len() - end });
        }
        let inner = body.slice(at + HEADER_LEN..end);
        Ok(Sideways { origin, to, frame: Box::new(PeerFrame::decode_body(ty, inner)?) })
    }
}

/// The frames a SIDEWAYS may carry: the stream frames of one pubend.
fn carried(ty: PeerFrameType) -> bool {
    use PeerFrameType as T;
    matches!(ty, T::Data | T::Silence | T::Ack | T::Nack | T::AckExpected)
}
