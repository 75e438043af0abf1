//! HELLO, the first frame each broker sends on a link. Layout:
//! `min_version:u16 | max_version:u16 | auth:u8 | nonce:[u8; 32] | name:str16 | cell:str16 | incarnation:u64`.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;
use crate::peer::Incarnation;

/// Length of the random challenge each side puts in its HELLO.
pub const NONCE_LEN: usize = 32;

/// How a link proves who is at the other end. Both sides must announce the same mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AuthMode {
    /// No proof: only for test networks started with `insecure`; anyone who reaches the
    /// listener is believed.
    Insecure = 0,
    /// Each side proves it holds the network's shared key with an AUTH frame: an HMAC-SHA256
    /// over both HELLOs (see [`crate::peer::Auth`]).
    SharedKey = 1,
}

/// Opens a link: the versions the sender speaks, how it will authenticate, a fresh random
/// challenge, and who it claims to be. The claim (name, cell, incarnation) is believed only
/// once the AUTH exchange succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Oldest peer protocol version the sender speaks.
    pub min_version: u16,
    /// Newest peer protocol version the sender speaks; the link uses the highest version both
    /// ranges contain ([`Hello::negotiate`]).
    pub max_version: u16,
    /// How the sender will prove its identity.
    pub auth: AuthMode,
    /// Random bytes the other side must include in its proof, so an old proof cannot be
    /// replayed.
    pub nonce: [u8; NONCE_LEN],
    /// The sender's broker name.
    pub name: String,
    /// The sender's cell.
    pub cell: String,
    /// The sender's incarnation.
    pub incarnation: Incarnation,
}

impl Hello {
    /// The version a link between the senders of `self` and `other` speaks: the highest both
    /// ranges contain, or `None` when they do not overlap.
    pub fn negotiate(&self, other: &Hello) -> Option<u16> {
        let version = self.max_version.min(other.max_version);
        (version >= self.min_version.max(other.min_version)).then_some(version)
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u16(self.min_version);
        out.put_u16(self.max_version);
        out.put_u8(self.auth as u8);
        out.put_slice(&self.nonce);
        put_str16(out, "name", &self.name)?;
        put_str16(out, "cell", &self.cell)?;
        out.put_u64(self.incarnation.0);
        Ok(())
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Hello, WireError> {
        let mut r = Reader::new("PEER HELLO", body);
        let min_version = r.u16("min_version")?;
        let max_version = r.u16("max_version")?;
        let auth = match r.u8("auth")? {
            0 => AuthMode::Insecure,
            1 => AuthMode::SharedKey,
            v => return Err(WireError::InvalidField { frame: "PEER HELLO", field: "auth", value: u64::from(v) }),
        };
        let nonce = r.array::<NONCE_LEN>("nonce")?;
        let name = r.str16("name")?.to_string();
        let cell = r.str16("cell")?.to_string();
        let incarnation = Incarnation(r.u64("incarnation")?);
        r.finish()?;
        Ok(Hello { min_version, max_version, auth, nonce, name, cell, incarnation })
    }
}
