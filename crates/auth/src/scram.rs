//! SCRAM-SHA-256 (RFC 5802, RFC 7677), the server's side: MQTT 5.0 enhanced authentication
//! with the method EMQX and HiveMQ offer. The password never crosses the wire, even in clear
//! TCP, and the broker stores only what verifies a proof ([`ScramCredential`]), not what
//! makes one.
//!
//! Pure: the caller parses the client's first message ([`ClientFirst`]), looks its user's
//! credential up, gives a fresh random nonce, and gets the server's first message back with an
//! [`ScramExchange`] that checks the client's final message. No I/O, no clock, no randomness.
//!
//! Passwords are taken as their UTF-8 bytes: SASLprep is not applied, which changes nothing for
//! ASCII passwords and is what most clients do.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The MQTT Authentication Method this module serves.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// The longest SCRAM message taken from a client: a user name of 64 characters (escaped, at
/// most three bytes each), a nonce and a proof fit many times over; more is not SCRAM.
pub(crate) const MAX_MESSAGE: usize = 1024;

/// The iteration count new credentials get (RFC 7677's minimum, and PostgreSQL's default):
/// the client pays it at each login, the broker never does.
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// The iteration counts a stored credential may have: below RFC 7677's 4096 a stolen users
/// file is cheap to guess from; above ten million a client takes seconds to log in.
pub(crate) const ITERATIONS: std::ops::RangeInclusive<u32> = 4096..=10_000_000;

/// The longest client nonce taken: RFC 5802 sets none; 24 random bytes are usual.
const MAX_NONCE: usize = 256;

type HmacSha256 = Hmac<Sha256>;

/// Why a SCRAM exchange failed. Everything but [`ScramError::Proof`] is a client that does not
/// speak SCRAM-SHA-256 as RFC 5802 says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// The message is not the one expected at this step (the text says which part).
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// Longer than [`MAX_MESSAGE`].
    #[error("SCRAM message longer than {MAX_MESSAGE} bytes")]
    TooLong,
    /// The client asks for channel binding (`p=`), which is not offered.
    #[error("SCRAM channel binding is not supported")]
    ChannelBinding,
    /// The final message's nonce or channel binding is not the exchange's.
    #[error("SCRAM nonce or channel binding does not match")]
    Mismatch,
    /// The proof is wrong: a wrong password, an unknown user, or a user without a credential.
    #[error("SCRAM proof does not verify")]
    Proof,
}

/// What verifies a user's SCRAM-SHA-256 proofs: salt, iterations, StoredKey and ServerKey. In
/// the users file as PostgreSQL writes it: `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
/// (base64), so credentials move between the two as they are.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: [u8; 32],
    server_key: [u8; 32],
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// Derives the credential of `password` with `salt` and `iterations` (RFC 5802 §3).
    pub fn derive(password: &str, salt: &[u8], iterations: u32) -> ScramCredential {
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut salted);
        let client_key = hmac(&salted, b"Client Key");
        ScramCredential {
            iterations,
            salt: salt.to_vec(),
            stored_key: Sha256::digest(client_key).into(),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// A new credential for `password`: a fresh 16-byte salt, [`DEFAULT_ITERATIONS`].
    pub fn generate(password: &str) -> ScramCredential {
        ScramCredential::derive(password, &rand::random::<[u8; 16]>(), DEFAULT_ITERATIONS)
    }

    /// A credential no password matches, for a user with none (or no such user): the exchange
    /// runs as for a real one and fails at the proof, so a client cannot tell which names
    /// exist or have a credential. The salt is the same at each try for a name (`secret` is
    /// the process's), as a real user's is.
    pub fn decoy(name: &str, secret: &[u8; 32]) -> ScramCredential {
        let salt = hmac(secret, name.as_bytes());
        ScramCredential {
            iterations: DEFAULT_ITERATIONS,
            salt: salt[..16].to_vec(),
            stored_key: hmac(secret, &salt),
            server_key: hmac(&salt, secret),
        }
    }

    /// Parses the users file's form, with its iterations in [`ITERATIONS`].
    pub fn parse(text: &str) -> Option<ScramCredential> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok().filter(|i| ITERATIONS.contains(i))?;
        let salt = B64.decode(salt).ok().filter(|salt| !salt.is_empty() && salt.len() <= 64)?;
        let stored_key = B64.decode(stored).ok()?.try_into().ok()?;
        let server_key = B64.decode(server).ok()?.try_into().ok()?;
        Some(ScramCredential { iterations, salt, stored_key, server_key })
    }
}

impl std::fmt::Display for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (salt, stored, server) = (B64.encode(&self.salt), B64.encode(self.stored_key), B64.encode(self.server_key));
        write!(f, "SCRAM-SHA-256${}:{salt}${stored}:{server}", self.iterations)
    }
}

/// The client's first message (`n,,n=<user>,r=<nonce>`), checked and taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    gs2_header: String,
    bare: String,
    username: String,
    nonce: String,
}

impl ClientFirst {
    /// Parses `data`: no channel binding (`n` or `y`), an authorization identity only if it
    /// is the user itself, no mandatory extension (`m=`).
    pub fn parse(data: &[u8]) -> Result<ClientFirst, ScramError> {
        let text = text_of(data)?;
        let mut parts = text.splitn(3, ',');
        let (Some(binding), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ScramError::Malformed("client-first-message needs a GS2 header"));
        };
        match binding {
            "n" | "y" => {}
            _ if binding.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("GS2 channel binding flag")),
        }
        let mut attributes = bare.split(',');
        let username = match attributes.next().and_then(|a| a.strip_prefix("n=")) {
            Some(name) => unescape(name)?,
            None => return Err(ScramError::Malformed("client-first-message needs n=")),
        };
        let nonce = match attributes.next().and_then(|a| a.strip_prefix("r=")) {
            Some(nonce) if valid_nonce(nonce) => nonce.to_string(),
            _ => return Err(ScramError::Malformed("client-first-message needs a printable r=")),
        };
        if attributes.any(|a| a.starts_with("m=")) {
            return Err(ScramError::Malformed("a mandatory extension (m=) is not supported"));
        }
        if let Some(identity) = authzid.strip_prefix("a=") {
            if unescape(identity)? != username {
                return Err(ScramError::Malformed("the authorization identity must be the user"));
            }
        } else if !authzid.is_empty() {
            return Err(ScramError::Malformed("GS2 authorization identity"));
        }
        let gs2_header = format!("{binding},{authzid},");
        Ok(ClientFirst { gs2_header, bare: bare.to_string(), username, nonce })
    }

    /// The user the client says it is (unescaped).
    pub fn username(&self) -> &str {
        &self.username
    }
}

/// An exchange waiting for the client's final message.
#[derive(Debug, Clone)]
pub struct ScramExchange {
    gs2_header: String,
    /// `client-first-message-bare "," server-first-message`: the AuthMessage's start.
    said: String,
    nonce: String,
    credential: ScramCredential,
}

impl ScramExchange {
    /// Answers `first` for a user with `credential` (a [`ScramCredential::decoy`] for a user
    /// without one), with `server_nonce` (fresh, random, printable, no comma): the exchange,
    /// and the server's first message to send.
    pub fn start(first: ClientFirst, credential: ScramCredential, server_nonce: &str) -> (ScramExchange, Vec<u8>) {
        let nonce = format!("{}{server_nonce}", first.nonce);
        let salt = B64.encode(&credential.salt);
        let server_first = format!("r={nonce},s={salt},i={}", credential.iterations);
        let said = format!("{},{server_first}", first.bare);
        let exchange = ScramExchange { gs2_header: first.gs2_header, said, nonce, credential };
        (exchange, server_first.into_bytes())
    }

    /// Checks the client's final message (`c=<binding>,r=<nonce>,p=<proof>`): the server's
    /// final message (`v=<signature>`, which proves to the client that the broker holds its
    /// credential) when the proof verifies.
    pub fn finish(&self, data: &[u8]) -> Result<Vec<u8>, ScramError> {
        let text = text_of(data)?;
        let (without_proof, proof) =
            text.rsplit_once(",p=").ok_or(ScramError::Malformed("client-final-message needs p= last"))?;
        let mut attributes = without_proof.split(',');
        let binding = attributes.next().and_then(|a| a.strip_prefix("c="));
        let nonce = attributes.next().and_then(|a| a.strip_prefix("r="));
        let (Some(binding), Some(nonce)) = (binding, nonce) else {
            return Err(ScramError::Malformed("client-final-message needs c= and r="));
        };
        if B64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) || nonce != self.nonce {
            return Err(ScramError::Mismatch);
        }
        let proof: [u8; 32] = B64
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(ScramError::Malformed("the proof is 32 bytes in base64"))?;
        let auth_message = format!("{},{without_proof}", self.said);
        let signature = hmac(&self.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
        let stored: [u8; 32] = Sha256::digest(&client_key).into();
        // Every byte compared, whatever the first difference: the time says nothing.
        let differ = stored.iter().zip(self.credential.stored_key).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if differ != 0 {
            return Err(ScramError::Proof);
        }
        let server_signature = hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn text_of(data: &[u8]) -> Result<&str, ScramError> {
    if data.len() > MAX_MESSAGE {
        return Err(ScramError::TooLong);
    }
    std::str::from_utf8(data).map_err(|_| ScramError::Malformed("not UTF-8"))
}

/// A nonce is printable ASCII without a comma (RFC 5802 §7).
fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty() && nonce.len() <= MAX_NONCE && nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// A `saslname`: `=2C` is a comma and `=3D` an equals sign; any other `=` is malformed.
fn unescape(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("a user name's '=' must be =2C or =3D")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// RFC 7677 §3's example exchange (user `user`, password `pencil`), for the tests of this
/// module and of the code built on it: with the RFC's server nonce, every message is the RFC's.
pub mod rfc7677 {
    /// The salt, base64.
    pub const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    /// The client's first message.
    pub const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    /// The server's nonce (appended to the client's).
    pub const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    /// The server's first message.
    pub const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    /// The client's final message, with the proof of `pencil`.
    pub const CLIENT_FINAL: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    /// The server's final message (its signature).
    pub const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    /// The credential of `pencil` with the RFC's salt and 4096 iterations.
    pub fn credential() -> super::ScramCredential {
        use base64::Engine;
        let salt = super::B64.decode(SALT).unwrap_or_default();
        super::ScramCredential::derive("pencil", &salt, 4096)
    }
}

#[cfg(test)]
#[path = "scram_tests.rs"]
mod tests;
