//! The login and TLS options every command that talks to a broker shares (the data commands
//! through [`super::server::ServerArgs`], the admin commands through [`AdminArgs`]), so that
//! `--user`, `--password`, `--token`, `--tls-ca`, `--tls-cert` and `--tls-key` mean the same
//! everywhere; and the admin port's client built from them, whose refusals say why.

use std::net::SocketAddr;
use std::path::PathBuf;

use tidings_admin::{AdminClient, StatusError};

/// Who the client is and which CA it trusts.
#[derive(clap::Args, Clone)]
pub(crate) struct LoginArgs {
    /// Log in as this user (a broker with a users file refuses sessions without a login).
    #[arg(long, env = "TIDINGS_USER", value_name = "NAME", requires = "password")]
    pub(crate) user: Option<String>,
    /// The user's password (TIDINGS_PASSWORD keeps it out of the process list).
    #[arg(long, env = "TIDINGS_PASSWORD", value_name = "PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,
    /// Log in with a bearer token instead of a user and password.
    #[arg(long, env = "TIDINGS_TOKEN", value_name = "TOKEN", hide_env_values = true, conflicts_with = "user")]
    pub(crate) token: Option<String>,
    /// Speak TLS, trusting this CA (PEM) to have signed the broker's certificate.
    #[arg(long, visible_alias = "ca", env = "TIDINGS_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for a broker that requires one (`[tls] ca`); with a
    /// users file, a certificate listed for a user logs in as that user without a password.
    #[arg(long, visible_alias = "cert", value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, visible_alias = "key", value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
}

impl LoginArgs {
    /// A client of the admin port at `addr`: HTTPS when `https` or a CA is given, with the
    /// login given.
    pub(crate) fn admin_client(&self, addr: SocketAddr, https: bool) -> anyhow::Result<Admin> {
        let mut client = AdminClient::new(addr);
        match (&self.tls_ca, https) {
            (Some(ca), _) => {
                let identity = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
                client = client.https(ca, identity)?;
            }
            (None, true) => {
                return Err(super::UsageError(
                    "https needs the CA that signed the broker's certificate: --tls-ca FILE".into(),
                )
                .into())
            }
            (None, false) => {}
        }
        let who = match (&self.user, &self.password, &self.token) {
            (Some(user), Some(password), _) => {
                client = client.basic(user, password);
                Some(format!("user {user}"))
            }
            (_, _, Some(token)) => {
                client = client.bearer(token);
                Some("the token".to_string())
            }
            _ => None,
        };
        Ok(Admin { client, who })
    }
}

/// Where a broker's admin port is, and how to log in there.
#[derive(clap::Args)]
pub(crate) struct AdminArgs {
    /// The broker's admin address: HOST:PORT, or https://HOST:PORT for a broker with `[tls]`
    /// (--tls-ca alone also turns HTTPS on).
    #[arg(long, default_value_t = default_admin(), value_name = "ADDRESS")]
    pub(crate) admin: String,
    #[command(flatten)]
    pub(crate) login: LoginArgs,
}

/// `127.0.0.1` and the default admin port.
fn default_admin() -> String {
    format!("127.0.0.1:{}", tidings_broker::DEFAULT_ADMIN_PORT)
}

impl AdminArgs {
    /// The client for `--admin` with the login given.
    pub(crate) fn client(&self) -> anyhow::Result<Admin> {
        let (rest, https) = match self.admin.split_once("://") {
            Some(("https", rest)) => (rest, true),
            Some(("http", rest)) => (rest, false),
            _ => (self.admin.as_str(), false),
        };
        let addr: SocketAddr = rest.trim_end_matches('/').parse().map_err(|_| {
            super::UsageError(format!(
                "--admin {:?} is not HOST:PORT or https://HOST:PORT (an IP address and a port)",
                self.admin
            ))
        })?;
        self.login.admin_client(addr, https)
    }
}

/// An admin port client whose failures name their cause: no login, a refused login, a login
/// without the role, HTTP on an HTTPS port.
#[derive(Clone)]
pub(crate) struct Admin {
    client: AdminClient,
    /// Who logs in, for the errors ("user alice", "the token").
    who: Option<String>,
}

impl Admin {
    /// The same login at another address.
    pub(crate) fn at(&self, addr: SocketAddr) -> Admin {
        Admin { client: self.client.at(addr), who: self.who.clone() }
    }

    /// `GET path`: the body of a 200, or an error saying why not.
    pub(crate) fn get(&self, path: &str) -> anyhow::Result<String> {
        self.client.get(path).map_err(|e| self.explain(e))
    }

    /// `METHOD path`: the status and body of what the handler answered; a refused login is an
    /// error saying why.
    pub(crate) fn request(&self, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
        let (status, body) = self.client.request(method, path).map_err(|e| self.explain(e))?;
        if matches!(status, 401 | 403) {
            let refusal =
                StatusError { method: method.into(), path: path.into(), status, body: body.trim().to_string() };
            return Err(self.explain(std::io::Error::other(refusal)));
        }
        Ok((status, body))
    }

    /// An operator's change (`METHOD path`, as `durable rm` and `cell forget` make): the
    /// handler's answer printed on success (200), an error with its words otherwise.
    pub(crate) fn change(&self, method: &str, path: &str) -> anyhow::Result<std::process::ExitCode> {
        let (status, body) = self.request(method, path)?;
        match status {
            200 => {
                crate::cmd::outln!("{}", body.trim())?;
                Ok(std::process::ExitCode::SUCCESS)
            }
            _ => anyhow::bail!("{}", body.trim()),
        }
    }

    /// One line naming the cause of a failed request.
    fn explain(&self, error: std::io::Error) -> anyhow::Error {
        let addr = self.client.addr();
        let Some(refused) = StatusError::of(&error) else {
            return anyhow::anyhow!("cannot reach the admin port at {addr}: {error}");
        };
        let what = format!("{} {}", refused.method, refused.path);
        match (refused.status, &self.who) {
            (401, None) => anyhow::anyhow!(
                "the admin port at {addr} needs a login ({what}: 401): give --user NAME with --password \
                 (or TIDINGS_PASSWORD), or --token, of a user in the broker's users file"
            ),
            (401, Some(who)) => anyhow::anyhow!(
                "the admin port at {addr} refused the login of {who} ({what}: 401): wrong password or token, \
                 or no such user"
            ),
            (403, who) => anyhow::anyhow!(
                "{} may not {what} on the admin port at {addr} (403): its `admin` role in the users file \
                 must be \"read\" for reading, \"admin\" for changes",
                who.as_deref().unwrap_or("this login")
            ),
            (400, _) if refused.body.contains("HTTPS") && !self.client.is_https() => anyhow::anyhow!(
                "the admin port at {addr} speaks HTTPS only: give --tls-ca FILE (or --admin https://{addr})"
            ),
            _ => anyhow::anyhow!("the admin port at {addr}: {refused}"),
        }
    }
}
