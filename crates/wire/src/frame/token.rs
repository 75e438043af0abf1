//! TOKEN (client to broker) and TOKEN_ISSUED (broker to client), over UDP only. Layout of
//! both: `token:16 bytes`.

use bytes::{BufMut, BytesMut};

use crate::cursor::Reader;
use crate::error::WireError;

/// Bytes in an address token.
pub const TOKEN_LEN: usize = 16;

/// Proves over UDP that a datagram comes from the address it says it does, as QUIC's retry
/// token does. A datagram's source address is not checked by anyone: without this, a forged
/// SUBSCRIBE made the broker send a victim messages it never asked for, and a forged
/// DISCONNECT cut a real subscriber off. The broker answers a datagram that does not start with
/// a valid TOKEN with a TOKEN_ISSUED (and nothing else); the client puts that token first, as
/// a TOKEN, in every datagram after it. Only a host that receives at the address can learn its
/// token. The answer has a type of its own and a broker never answers a datagram holding a
/// broker's frame: when both were TOKEN, one forged datagram made two brokers answer each
/// other's answers forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token(pub [u8; TOKEN_LEN]);

impl Token {
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_slice(&self.0);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Token, WireError> {
        let mut r = Reader::new("TOKEN", body);
        let token = r.array::<TOKEN_LEN>("token")?;
        r.finish()?;
        Ok(Token(token))
    }
}
