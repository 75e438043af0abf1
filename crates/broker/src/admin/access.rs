//! Who may use the admin port (issue 43): with a users file, every admin request but the probes
//! (`/healthz`, `/readyz`, which a load balancer or an orchestrator polls without credentials)
//! must log in with HTTP Basic (`user:password`), a bearer token, or (over HTTPS with
//! `[tls] ca`, when the request has no `Authorization` header) the TLS client certificate its
//! connection was verified with, mapped to a user as a native client's is (`certificate =
//! "NAME"` in the users file), as a user whose `admin` role allows it: `read` for GET
//! (metrics, state, connections, the web view), `admin` for
//! anything that changes the broker (`DELETE /durable/NAME`). Without a users file the port is
//! open, as before.
//!
//! A password check costs tens of milliseconds (argon2id), and a browser or a scraper sends its
//! credentials with every request, so a successful login is remembered for [`REMEMBER`] by the
//! SHA-256 of its `Authorization` header (never the header itself), and forgotten at once when
//! the users file is reloaded. Failures go through the same budget, delay and counters as client
//! logins (`security::Guard::login`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, Method, StatusCode};
use base64::Engine as _;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tidings_auth::{Credentials, Role, User};

use crate::security::Guard;

/// How long a successful admin login is remembered.
pub const REMEMBER: Duration = Duration::from_secs(60);
/// Most logins remembered at once (a flood of distinct good credentials cannot grow it).
const REMEMBERED: usize = 256;

/// Paths anyone may read: liveness and readiness probes.
const OPEN: [&str; 2] = ["/healthz", "/readyz"];

/// Why a request is turned away: the status and a line for the body.
pub type Refusal = (StatusCode, &'static str);

/// A remembered login: the user, when it logged in, and the users file's reload it was under.
type Remembered = (Arc<User>, Instant, u64);

/// The admin port's door: the broker's guard and the logins it remembers.
pub struct Door {
    guard: Arc<Guard>,
    /// By the digest of an `Authorization` header.
    remembered: Mutex<HashMap<[u8; 32], Remembered>>,
}

impl Door {
    /// The door of a broker with a users file.
    pub fn new(guard: Arc<Guard>) -> Door {
        Door { guard, remembered: Mutex::new(HashMap::new()) }
    }

    /// Lets the request in, or says why not. `certificate`: the names of the client
    /// certificate the connection's TLS handshake verified; the login when the request carries
    /// no `Authorization` header (one that does logs in as what it says, as a native HELLO's
    /// credentials do).
    pub async fn admit(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        certificate: Option<&[String]>,
    ) -> Result<(), Refusal> {
        if OPEN.contains(&path) {
            return Ok(());
        }
        let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
        let user = match certificate {
            // No password to verify: a lookup of the names, so nothing is remembered.
            Some(names) if header.is_empty() => {
                let credentials = Credentials::Certificate(names.to_vec());
                let login = self.guard.login(credentials, "admin").await;
                login.map_err(|_| (StatusCode::UNAUTHORIZED, "refused: no user lists this client certificate"))?
            }
            _ => self.user(header).await?,
        };
        let needed = if method == Method::GET || method == Method::HEAD { Role::Read } else { Role::Admin };
        match (user.role, needed) {
            (Some(Role::Admin), _) | (Some(Role::Read), Role::Read) => Ok(()),
            (Some(Role::Read), Role::Admin) => {
                Err((StatusCode::FORBIDDEN, "this user's admin role is read: no changes"))
            }
            (None, _) => Err((StatusCode::FORBIDDEN, "this user has no admin role")),
        }
    }

    async fn user(&self, header: &str) -> Result<Arc<User>, Refusal> {
        let credentials =
            credentials(header).ok_or((StatusCode::UNAUTHORIZED, "log in: HTTP Basic or a bearer token"))?;
        let digest: [u8; 32] = Sha256::digest(header.as_bytes()).into();
        let reload = *self.guard.watch().borrow();
        if let Some((user, at, under)) = self.remembered.lock().get(&digest) {
            if at.elapsed() < REMEMBER && *under == reload {
                return Ok(Arc::clone(user));
            }
        }
        let user = self.guard.login(credentials, "admin").await.map_err(|_| (StatusCode::UNAUTHORIZED, "refused"))?;
        let mut remembered = self.remembered.lock();
        remembered.retain(|_, (_, at, under)| at.elapsed() < REMEMBER && *under == reload);
        if remembered.len() < REMEMBERED {
            remembered.insert(digest, (Arc::clone(&user), Instant::now(), reload));
        }
        Ok(user)
    }
}

/// The credentials of an `Authorization` header: `Basic base64(user:password)` or `Bearer T`.
fn credentials(header: &str) -> Option<Credentials> {
    let (scheme, value) = header.trim().split_once(' ')?;
    let value = value.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(Credentials::Token(value.to_string()));
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(value).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(Credentials::Password { user: user.to_string(), password: password.to_string() })
}

#[cfg(test)]
mod tests {
    use super::credentials;
    use tidings_auth::Credentials;

    #[test]
    fn basic_and_bearer_headers_give_their_credentials_and_others_none() {
        let basic = credentials("Basic YWxpY2U6czNjcmV0OjE="); // alice:s3cret:1
        assert_eq!(basic, Some(Credentials::Password { user: "alice".into(), password: "s3cret:1".into() }));
        assert_eq!(credentials("bearer abc"), Some(Credentials::Token("abc".into())));
        assert_eq!(credentials("Basic !!!"), None);
        assert_eq!(credentials("Basic YWxpY2U="), None, "no colon");
        assert_eq!(credentials("Digest x"), None);
        assert_eq!(credentials(""), None);
    }
}
