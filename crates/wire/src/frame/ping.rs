//! PING and PONG. Layout of both: `nonce:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;

/// A round-trip probe. The broker answers each PING with a PONG carrying the same nonce after
/// it has handled every earlier frame of the session, so a PONG is also a barrier: a client
/// that subscribed and then got its PONG knows the subscription is active. Over UDP a PING
/// also renews the sender's subscriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// Chosen by the sender, echoed in the PONG.
    pub nonce: u64,
}

/// The answer to a [`Ping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pong {
    /// The nonce of the PING being answered.
    pub nonce: u64,
}

pub(crate) fn encode_nonce(nonce: u64, out: &mut BytesMut) {
    out.put_u64(nonce);
}

pub(crate) fn decode_nonce(frame: &'static str, body: &[u8]) -> Result<u64, WireError> {
    let mut r = Reader::new(frame, body);
    let nonce = r.u64("nonce")?;
    r.finish()?;
    Ok(nonce)
}
