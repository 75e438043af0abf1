//! BARRIER, a subscription barrier travelling upstream. Layout:
//! `origin:str16 | id:u64 | root:str16 | relay_to_mates:u8`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;
use crate::peer::BarrierId;

/// Sent upstream behind the summary deltas of a burst of new guaranteed subscriptions, on the
/// same in-order links, toward the publishers of tree `root`; every broker it crosses already
/// holds the deltas. The publisher's broker answers with a [`crate::peer::BarrierAck`]
/// (gd-protocol §11.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Barrier {
    /// The subscriber's broker, which started the barrier and waits for its answer.
    pub origin: String,
    /// Names the barrier among the origin's.
    pub id: BarrierId,
    /// The root cell of the tree the barrier travels up.
    pub root: String,
    /// Whether the receiver also asks its own cell mates (false when the sender is a mate, so
    /// barriers never circle inside a cell).
    pub relay_to_mates: bool,
}

impl Barrier {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        put_str16(out, "origin", &self.origin)?;
        out.put_u64(self.id.0);
        put_str16(out, "root", &self.root)?;
        out.put_u8(u8::from(self.relay_to_mates));
        Ok(())
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Barrier, WireError> {
        let mut r = Reader::new("BARRIER", body);
        let origin = r.str16("origin")?.to_string();
        let id = BarrierId(r.u64("id")?);
        let root = r.str16("root")?.to_string();
        let relay_to_mates = r.bool("relay_to_mates")?;
        r.finish()?;
        Ok(Barrier { origin, id, root, relay_to_mates })
    }
}
