//! Address tokens for UDP clients (see [`tidings_wire::Token`]): a keyed hash of the client's
//! address and port under a secret drawn when the broker starts. A token needs no state on the
//! broker, and a host that cannot receive at an address cannot learn its token, so a datagram
//! with a forged source address can neither open a session, nor speak for one, nor make the
//! broker send more bytes to the victim than it sent itself.
//!
//! A token does not expire while the broker runs; a restart draws a new secret, and a client's
//! next datagram gets the new token back. (QUIC's retry tokens also expire, because they stand
//! for a handshake already paid; here the token is only an address check.)

use std::net::{IpAddr, SocketAddr};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tidings_wire::{Token, TOKEN_LEN};

/// The broker's token key.
pub(crate) struct TokenKey(Hmac<Sha256>);

impl TokenKey {
    /// A key from the operating system's random source.
    pub(crate) fn generate() -> Result<TokenKey, getrandom::Error> {
        let mut secret = [0u8; 64];
        getrandom::fill(&mut secret)?;
        Ok(TokenKey::from_secret(&secret))
    }

    /// A key of HMAC-SHA256's block size, so no length check can fail.
    fn from_secret(secret: &[u8; 64]) -> TokenKey {
        TokenKey(<Hmac<Sha256> as hmac::digest::KeyInit>::new(secret.into()))
    }

    /// The token of `peer`.
    pub(crate) fn token(&self, peer: SocketAddr) -> Token {
        let mut mac = self.0.clone();
        match peer.ip() {
            IpAddr::V4(ip) => mac.update(&ip.to_ipv6_mapped().octets()),
            IpAddr::V6(ip) => mac.update(&ip.octets()),
        }
        mac.update(&peer.port().to_be_bytes());
        let digest = mac.finalize().into_bytes();
        let mut token = [0u8; TOKEN_LEN];
        token.copy_from_slice(&digest[..TOKEN_LEN]);
        Token(token)
    }

    /// Whether `token` is `peer`'s, in time independent of where they differ.
    pub(crate) fn verify(&self, peer: SocketAddr, token: &Token) -> bool {
        let expected = self.token(peer);
        expected.0.iter().zip(token.0.iter()).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_the_addresss_own_and_the_keys_own() {
        let key = TokenKey::from_secret(&[7; 64]);
        let a: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:4001".parse().unwrap();
        assert!(key.verify(a, &key.token(a)));
        assert!(!key.verify(b, &key.token(a)), "another port is another address");
        let other = TokenKey::from_secret(&[8; 64]);
        assert!(!other.verify(a, &key.token(a)), "a restarted broker draws another key");
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:4000".parse().unwrap();
        assert!(key.verify(mapped, &key.token(a)), "v4 and v4-mapped v6 are one address");
    }
}
