//! Address tokens for UDP clients (see [`tidings_wire::Token`]): a keyed hash of the client's
//! address and port under a secret drawn when the broker starts. A token needs no state on the
//! broker, and a host that cannot receive at an address cannot learn its token, so a datagram
//! with a forged source address can neither open a session, nor speak for one, nor make the
//! broker send more bytes to the victim than it sent itself.
//!
//! A token does not expire while the broker runs; a restart draws a new secret, and a client's
//! next datagram gets the new token back. (QUIC's retry tokens also expire, because they stand
//! for a handshake already paid; here the token is only an address check.)

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

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

/// Token answers to one source address (IP and port) per second at most. A client needs one
/// when it starts and one after each broker restart; a few more cover lost datagrams.
const REPLIES_PER_ADDRESS: u32 = 4;

/// Source addresses counted per second at most; past it a new address gets no answer until the
/// next second, so a flood of forged sources cannot grow the table.
const ADDRESSES_PER_WINDOW: usize = 16_384;

/// Bounds token answers per source address (IP and port): a forged source can make the broker
/// send one victim socket at most [`REPLIES_PER_ADDRESS`] answers of 21 bytes a second, and all
/// victims together at most that times [`ADDRESSES_PER_WINDOW`], however many datagrams the
/// forger sends (an answer is no larger than the request: no amplification). Per IP alone, a
/// host starting 100 UDP clients at once waited 25 s for their tokens (`bench subscribers`
/// over UDP timed out its handshakes). A fixed one-second window, cleared whole: no timer, no
/// per-entry expiry, and at most [`ADDRESSES_PER_WINDOW`] entries.
pub(crate) struct ReplyPace {
    window: Instant,
    sent: HashMap<SocketAddr, u32>,
}

impl ReplyPace {
    /// An empty table whose first window starts at `now`.
    pub(crate) fn new(now: Instant) -> ReplyPace {
        ReplyPace { window: now, sent: HashMap::new() }
    }

    /// Whether a token answer may go to `peer` at `now`; counts it if so.
    pub(crate) fn allow(&mut self, peer: SocketAddr, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.sent.clear();
        }
        if !self.sent.contains_key(&peer) && self.sent.len() >= ADDRESSES_PER_WINDOW {
            return false;
        }
        let sent = self.sent.entry(peer).or_insert(0);
        *sent += 1;
        *sent <= REPLIES_PER_ADDRESS
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

    #[test]
    fn token_answers_to_one_address_are_a_few_a_second_and_the_table_is_bounded() {
        let start = Instant::now();
        let mut pace = ReplyPace::new(start);
        let a: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let answered = (0..100).filter(|_| pace.allow(a, start)).count();
        assert_eq!(answered, REPLIES_PER_ADDRESS as usize, "a flood from one address gets a few answers");
        assert!(pace.allow("127.0.0.1:4001".parse().unwrap(), start), "another client of the host is counted apart");
        assert!(pace.allow("127.0.0.2:4000".parse().unwrap(), start), "another host is counted apart");
        assert!(pace.allow(a, start + Duration::from_secs(1)), "the next second starts afresh");
        let mut full = ReplyPace::new(start);
        let socket = |i: u32| SocketAddr::new(IpAddr::from(i.to_be_bytes()), 4000);
        let many = (0..=ADDRESSES_PER_WINDOW as u32).filter(|&i| full.allow(socket(i), start));
        assert_eq!(many.count(), ADDRESSES_PER_WINDOW, "past the table's bound a new address waits");
        assert!(full.sent.len() <= ADDRESSES_PER_WINDOW);
    }
}
