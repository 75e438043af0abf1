//! Link authentication with the network's shared key: challenge and response, never sending
//! the key.
//!
//! Each side's HELLO carries a fresh random nonce. Each side then sends AUTH with
//! `HMAC-SHA256(key, label | role | version | dialler's HELLO | listener's HELLO)`, where the
//! HELLOs are their exact frame bytes (both nonces, names, cells, incarnations, version ranges,
//! auth modes) and `role` is the prover's side of the connection. Fresh nonces make an old proof
//! worthless; the role label keeps a proof from being reflected back to its sender as the other
//! side's. Proofs are checked in constant time.
//!
//! What this does not give: every holder of the key is trusted alike, so a broker holding it can
//! still claim any name. Per-broker keys or mutual TLS would bind each name to its own secret.

use std::fmt;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;
use tidings_wire::peer::{Hello, PeerFrame, NONCE_LEN, PROOF_LEN};

/// Shortest key file accepted, in bytes (a 128-bit key written as hex).
pub const MIN_KEY_LEN: usize = 32;

const LABEL: &[u8] = b"tidings peer link auth v2\0";

/// The network's shared secret, held as an HMAC keyed with it (the key schedule is done once).
/// Its `Debug` form does not show it.
#[derive(Clone)]
pub struct NetworkKey(Hmac<Sha256>);

impl fmt::Debug for NetworkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NetworkKey(..)")
    }
}

/// Why a key file cannot be used.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read the cluster key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is too short to be a secret.
    #[error("the cluster key file {path} holds {len} bytes; at least {MIN_KEY_LEN} are needed (`tidings net up` writes 64 hex digits)")]
    TooShort {
        /// The file.
        path: String,
        /// Its length after trimming whitespace.
        len: usize,
    },
}

impl NetworkKey {
    /// Reads a key file: its bytes, without surrounding whitespace (so a trailing newline
    /// does not matter), at least [`MIN_KEY_LEN`] of them.
    pub fn load(path: &Path) -> Result<NetworkKey, KeyError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read { path: name.clone(), source })?;
        let key = bytes.trim_ascii();
        if key.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort { path: name, len: key.len() });
        }
        NetworkKey::from_secret(key).ok_or(KeyError::TooShort { path: name, len: key.len() })
    }

    /// A key from its secret bytes (`None` only if HMAC refused them, which it does not).
    pub fn from_secret(secret: &[u8]) -> Option<NetworkKey> {
        Hmac::<Sha256>::new_from_slice(secret).ok().map(NetworkKey)
    }

    /// Whether the file's permissions let other users read it (worth a warning).
    pub fn readable_by_others(path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
    }
}

/// 32 random bytes as 64 hex digits and a newline: the content of a fresh key file.
pub fn generate_key_text() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let mut text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    text.push('\n');
    Ok(text)
}

/// A fresh challenge for a HELLO.
pub fn nonce() -> Result<[u8; NONCE_LEN], getrandom::Error> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce)?;
    Ok(nonce)
}

/// Which side of a connection a proof speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The side that dialled.
    Dialler,
    /// The side that accepted.
    Listener,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Dialler => b"dialler\0",
            Role::Listener => b"listener\0",
        }
    }
}

/// The HELLOs of one handshake and the version it settled on: what both proofs cover.
#[derive(Clone, Copy, Debug)]
pub struct Transcript<'a> {
    /// The dialling side's HELLO.
    pub dialler: &'a Hello,
    /// The accepting side's HELLO.
    pub listener: &'a Hello,
    /// The negotiated peer protocol version.
    pub version: u16,
}

impl Transcript<'_> {
    fn mac(&self, key: &NetworkKey, role: Role) -> Hmac<Sha256> {
        let mut mac = key.0.clone();
        mac.update(LABEL);
        mac.update(role.label());
        mac.update(&self.version.to_be_bytes());
        for hello in [self.dialler, self.listener] {
            // Frames are length-prefixed, so the concatenation is unambiguous.
            mac.update(&PeerFrame::Hello(hello.clone()).to_bytes().unwrap_or_default());
        }
        mac
    }

    /// The proof `role` sends.
    pub fn proof(&self, key: &NetworkKey, role: Role) -> [u8; PROOF_LEN] {
        self.mac(key, role).finalize().into_bytes().into()
    }

    /// Whether `proof` is the one `role` must send, compared in constant time.
    pub fn verify(&self, key: &NetworkKey, role: Role, proof: &[u8; PROOF_LEN]) -> bool {
        self.mac(key, role).verify_slice(proof).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use tidings_wire::peer::{AuthMode, Incarnation};

    use super::*;

    fn hello(name: &str, nonce: u8) -> Hello {
        Hello {
            min_version: 2,
            max_version: 2,
            auth: AuthMode::SharedKey,
            nonce: [nonce; NONCE_LEN],
            name: name.into(),
            cell: name.into(),
            incarnation: Incarnation(1),
        }
    }

    fn key(byte: u8) -> NetworkKey {
        NetworkKey::from_secret(&[byte; 32]).unwrap()
    }

    #[test]
    fn a_proof_verifies_only_with_the_same_key_role_and_transcript() {
        let (a, b) = (hello("a", 1), hello("b", 2));
        let t = Transcript { dialler: &a, listener: &b, version: 2 };
        let proof = t.proof(&key(7), Role::Dialler);
        assert!(t.verify(&key(7), Role::Dialler, &proof));
        assert!(!t.verify(&key(8), Role::Dialler, &proof), "another key");
        assert!(!t.verify(&key(7), Role::Listener, &proof), "reflected to the other role");
        let other_nonce = hello("b", 3);
        let replay = Transcript { dialler: &a, listener: &other_nonce, version: 2 };
        assert!(!replay.verify(&key(7), Role::Dialler, &proof), "replayed against a fresh nonce");
        let other_name = hello("c", 2);
        let renamed = Transcript { dialler: &a, listener: &other_name, version: 2 };
        assert!(!renamed.verify(&key(7), Role::Dialler, &proof), "another claimed name");
    }

    #[test]
    fn key_files_are_trimmed_and_short_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, generate_key_text().unwrap()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), 65, "64 hex digits and a newline");
        let (a, b) = (hello("a", 1), hello("b", 2));
        let t = Transcript { dialler: &a, listener: &b, version: 2 };
        let loaded = NetworkKey::load(&path).unwrap();
        let direct = NetworkKey::from_secret(text.trim().as_bytes()).unwrap();
        assert_eq!(t.proof(&loaded, Role::Listener), t.proof(&direct, Role::Listener), "the newline is not key");
        std::fs::write(&path, "short\n").unwrap();
        assert!(matches!(NetworkKey::load(&path), Err(KeyError::TooShort { len: 5, .. })));
    }
}
