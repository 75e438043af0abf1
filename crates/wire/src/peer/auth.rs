//! AUTH, each side's proof of the shared key. Layout: `proof:[u8; 32]`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;

/// Length of a proof: one HMAC-SHA256 output.
pub const PROOF_LEN: usize = 32;

/// Proves that the sender holds the network key without revealing it: an HMAC over both HELLOs
/// (so both nonces, names, incarnations and the negotiated version) and the sender's role.
/// The broker computes and checks it; this crate only carries the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auth {
    /// The HMAC-SHA256 tag.
    pub proof: [u8; PROOF_LEN],
}

impl Auth {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_slice(&self.proof);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Auth, WireError> {
        let mut r = Reader::new("AUTH", body);
        let proof = r.array::<PROOF_LEN>("proof")?;
        r.finish()?;
        Ok(Auth { proof })
    }
}
