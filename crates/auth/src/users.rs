//! The users file (TOML) and the lookups a login makes in it.
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! password = "$argon2id$v=19$..."       # `tidings passwd` writes it; bcrypt `$2b$` also accepted
//! scram = "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"  # MQTT 5 enhanced auth; `tidings passwd` writes it too
//! tokens = ["sha256:9f86d08..."]         # bearer tokens, stored as SHA-256 of the token
//! certificate = "alice"                  # a TLS client certificate's common name (or a SAN) that logs in as alice
//! admin = "read"                         # the admin port's role: "read" (GET) or "admin" (also changes)
//! publish = { allow = ["orders.>"], deny = ["orders.audit"] }
//! subscribe = { allow = [">"], deny = ["secret.>"] }
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tidings_matching::Pattern;

use crate::password::{is_known_hash, verify_password};
use crate::permissions::{Permissions, Rules};
use crate::rules::RuleSet;
use crate::scram::ScramCredential;
use crate::AuthError;

/// What the admin API lets a user do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// GET only: metrics, connections, state.
    Read,
    /// Everything, including changes.
    Admin,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[serde(default, rename = "user")]
    users: Vec<UserText>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserText {
    name: String,
    password: Option<String>,
    scram: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    certificate: Option<String>,
    admin: Option<Role>,
    #[serde(default)]
    publish: RulesText,
    #[serde(default)]
    subscribe: RulesText,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesText {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

/// One authenticated principal: a session keeps it for its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user's name (durable subscription names are scoped to it).
    pub name: String,
    /// What it may publish and receive.
    pub permissions: Arc<Permissions>,
    /// Its admin API role, if any.
    pub role: Option<Role>,
    password: Option<String>,
    /// What verifies its SCRAM-SHA-256 proofs, if it may log in that way.
    scram: Option<ScramCredential>,
}

/// How a client proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// Nothing offered.
    None,
    /// A user name and a password.
    Password {
        /// The user's name.
        user: String,
        /// The password in clear (the transport must be TLS for it to stay secret).
        password: String,
    },
    /// A bearer token.
    Token(String),
    /// The names of a TLS client certificate the broker's CA signed (verified by the TLS
    /// handshake): its common names, then its subject alternative names
    /// ([`crate::certificate_names`]). The first one a user lists wins.
    Certificate(Vec<String>),
}

/// Why a login failed; the client is told only that it was refused, the log and metrics more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No credentials, and authentication is required.
    Missing,
    /// No such user (or no user holds that certificate).
    UnknownUser,
    /// The password or token did not match.
    BadSecret,
    /// A client certificate (signed by the CA) that no user lists, and no other credentials.
    UnknownCertificate,
    /// Too many password checks already wait for the verification budget: refused without one.
    Busy,
}

impl Failure {
    /// A stable snake_case name, for metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Missing => "missing",
            Failure::UnknownUser => "unknown_user",
            Failure::BadSecret => "bad_secret",
            Failure::UnknownCertificate => "unknown_certificate",
            Failure::Busy => "busy",
        }
    }
}

/// The loaded users file: indexes by name, token digest and certificate name.
#[derive(Debug, Default)]
pub struct Users {
    by_name: HashMap<String, Arc<User>>,
    by_token: HashMap<[u8; 32], Arc<User>>,
    by_certificate: HashMap<String, Arc<User>>,
}

/// An argon2id hash of a random password, verified for unknown users so that a login's time
/// does not tell which names exist.
fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| crate::password::hash_password(&format!("{:x}", rand::random::<u128>())).unwrap_or_default())
}

impl Users {
    /// Parses and checks a users file: every pattern, hash and token must be well formed.
    pub fn parse(text: &str) -> Result<Users, AuthError> {
        let file: FileText = toml::from_str(text).map_err(|e| AuthError::File(e.to_string()))?;
        let mut users = Users::default();
        for entry in file.users {
            let plain = entry.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if entry.name.is_empty() || entry.name.len() > 64 || !plain {
                return Err(AuthError::File(format!(
                    "user {:?}: a name is 1 to 64 letters, digits, '-' or '_'",
                    entry.name
                )));
            }
            let permissions = Permissions {
                publish: rules(&entry.name, entry.publish)?,
                subscribe: rules(&entry.name, entry.subscribe)?,
            };
            if let Some(hash) = &entry.password {
                if !is_known_hash(hash) {
                    return Err(AuthError::File(format!(
                        "user {}: the password is not an argon2 or bcrypt hash",
                        entry.name
                    )));
                }
            }
            let scram = match &entry.scram {
                Some(text) => Some(ScramCredential::parse(text).ok_or_else(|| {
                    AuthError::File(format!(
                        "user {}: scram must be SCRAM-SHA-256$<iterations {}..={}>:<salt>$<StoredKey>:<ServerKey> (base64)",
                        entry.name,
                        crate::scram::ITERATIONS.start(),
                        crate::scram::ITERATIONS.end()
                    ))
                })?),
                None => None,
            };
            let user = Arc::new(User {
                name: entry.name.clone(),
                permissions: Arc::new(permissions),
                role: entry.admin,
                password: entry.password,
                scram,
            });
            for token in &entry.tokens {
                users.by_token.insert(parse_digest(&entry.name, token)?, Arc::clone(&user));
            }
            if let Some(name) = entry.certificate {
                if let Some(other) = users.by_certificate.insert(name.clone(), Arc::clone(&user)) {
                    return Err(AuthError::File(format!(
                        "users {} and {} both list the certificate name {name:?}",
                        other.name, entry.name
                    )));
                }
            }
            if users.by_name.insert(entry.name.clone(), user).is_some() {
                return Err(AuthError::File(format!("user {} is listed twice", entry.name)));
            }
        }
        Ok(users)
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &std::path::Path) -> Result<Users, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|e| AuthError::File(format!("{}: {e}", path.display())))?;
        Users::parse(&text)
    }

    /// Checks `credentials`. Slow on purpose for passwords (argon2id): call it off the event
    /// loop, within a cost budget.
    pub fn authenticate(&self, credentials: &Credentials) -> Result<Arc<User>, Failure> {
        match credentials {
            Credentials::None => Err(Failure::Missing),
            Credentials::Password { user, password } => match self.by_name.get(user) {
                Some(found) => match &found.password {
                    Some(hash) if verify_password(password, hash) => Ok(Arc::clone(found)),
                    _ => Err(Failure::BadSecret),
                },
                None => {
                    verify_password(password, decoy_hash());
                    Err(Failure::UnknownUser)
                }
            },
            Credentials::Token(token) => self.by_token.get(&token_digest(token)).cloned().ok_or(Failure::BadSecret),
            Credentials::Certificate(names) => {
                names.iter().find_map(|name| self.by_certificate.get(name)).cloned().ok_or(Failure::UnknownCertificate)
            }
        }
    }

    /// The user called `name` as this file has it, to re-check a session after a reload.
    pub fn get(&self, name: &str) -> Option<&Arc<User>> {
        self.by_name.get(name)
    }

    /// The user called `name` and its SCRAM-SHA-256 credential, if it has one: no password
    /// cost (the client pays the iterations).
    pub fn scram(&self, name: &str) -> Option<(&Arc<User>, &ScramCredential)> {
        let user = self.by_name.get(name)?;
        Some((user, user.scram.as_ref()?))
    }

    /// The user holding bearer `token` (no password cost: tokens are long and random).
    pub fn by_token(&self, token: &str) -> Option<&Arc<User>> {
        self.by_token.get(&token_digest(token))
    }

    /// How many users the file has.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether the file has no user (everyone is refused).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The SHA-256 of a bearer token: the file stores digests so that reading it does not hand out
/// working tokens. A fast hash is enough for long random tokens (not for passwords).
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The `sha256:<hex>` form of a token's digest, as the users file stores it.
pub fn token_entry(token: &str) -> String {
    let hex: String = token_digest(token).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn parse_digest(user: &str, text: &str) -> Result<[u8; 32], AuthError> {
    let bad = || AuthError::File(format!("user {user}: a token must be sha256:<64 hex digits>"));
    let hex = text.strip_prefix("sha256:").ok_or_else(bad)?;
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(digest)
}

fn rules(user: &str, text: RulesText) -> Result<Rules, AuthError> {
    let compile = |list: Vec<String>| -> Result<RuleSet, AuthError> {
        let patterns = list
            .iter()
            .map(|p| Pattern::parse(p).map_err(|e| AuthError::File(format!("user {user}: rule {p:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RuleSet::new(patterns))
    };
    Ok(Rules { allow: compile(text.allow)?, deny: compile(text.deny)? })
}
