//! How a benchmark's clients reach a secured broker: TLS with a CA, a login, or both. Every
//! client a run opens (publisher and subscribers alike) takes the same [`Access`], so a run
//! against a TLS broker measures TLS on every connection, as the peer's run does.

use std::path::PathBuf;

use tidings_client::ClientBuilder;

/// TLS and login settings for every client of a run; the default is plain TCP, no login.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Speak TLS, trusting this CA (PEM) to have signed the broker's certificate.
    pub tls_ca: Option<PathBuf>,
    /// Log in as `(user, password)`.
    pub login: Option<(String, String)>,
}

impl Access {
    /// `builder` with these settings applied.
    pub fn apply(&self, mut builder: ClientBuilder) -> ClientBuilder {
        if let Some(ca) = &self.tls_ca {
            builder = builder.tls_ca(ca.clone());
        }
        if let Some((user, password)) = &self.login {
            builder = builder.password(user.clone(), password.clone());
        }
        builder
    }
}
