//! The admin port's HTTP, as little as reading it needs: one HTTP/1.0 request per connection,
//! read to close, so no HTTP client library (or async runtime) is linked for a few pages.
//! HTTPS (a broker with `[tls]`) goes through rustls' blocking stream, with the ring provider
//! the rest of the workspace names; the login is an `Authorization` header (Basic or Bearer).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How long a connect, a read or a write may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// One admin port and how to talk to it: plain HTTP or HTTPS with a CA (and a client
/// certificate for a broker with `[tls] ca`), with or without a login. Cheap to clone: the
/// TLS setup is loaded once and shared.
#[derive(Debug, Clone)]
pub struct AdminClient {
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    authorization: Option<String>,
}

/// An answer whose status was not 200 (for [`AdminClient::get`]): kept whole, so that a caller
/// can tell a refused login (401) or a missing role (403) from other failures and say which.
#[derive(Debug, Clone)]
pub struct StatusError {
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The HTTP status.
    pub status: u16,
    /// The body, trimmed.
    pub body: String,
}

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: status {}: {}", self.method, self.path, self.status, self.body)
    }
}

impl std::error::Error for StatusError {}

impl StatusError {
    /// The [`StatusError`] inside `error`, if that is what it is.
    pub fn of(error: &std::io::Error) -> Option<&StatusError> {
        error.get_ref()?.downcast_ref::<StatusError>()
    }
}

impl AdminClient {
    /// Plain HTTP to `addr`, without a login.
    pub fn new(addr: SocketAddr) -> AdminClient {
        AdminClient { addr, tls: None, authorization: None }
    }

    /// The same TLS setup and login for another broker's admin port (a network's brokers share
    /// one CA and one users file).
    pub fn at(&self, addr: SocketAddr) -> AdminClient {
        AdminClient { addr, ..self.clone() }
    }

    /// The address asked.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether requests go over HTTPS.
    pub fn is_https(&self) -> bool {
        self.tls.is_some()
    }

    /// Speaks HTTPS, trusting the CA certificates in `ca` (PEM) to have signed the broker's
    /// certificate, which must name the address's IP; `identity` is this client's certificate
    /// and key (PEM), for a broker that requires one.
    pub fn https(mut self, ca: &Path, identity: Option<(&Path, &Path)>) -> std::io::Result<AdminClient> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certificates(ca)? {
            roots.add(cert).map_err(|e| file_error(ca, e))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_root_certificates(roots);
        let config = match identity {
            Some((cert, key)) => {
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
                builder.with_client_auth_cert(pem_certificates(cert)?, key).map_err(std::io::Error::other)?
            }
            None => builder.with_no_client_auth(),
        };
        self.tls = Some(Arc::new(config));
        Ok(self)
    }

    /// Logs in with HTTP Basic (`user:password`).
    pub fn basic(self, user: &str, password: &str) -> AdminClient {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.authorization(Some(format!("Basic {pair}")))
    }

    /// Logs in with a bearer token.
    pub fn bearer(self, token: &str) -> AdminClient {
        self.authorization(Some(format!("Bearer {token}")))
    }

    /// Sends this `Authorization` header value (or none).
    pub fn authorization(mut self, value: Option<String>) -> AdminClient {
        self.authorization = value;
        self
    }

    /// `GET path`: the body of a 200; any other status is a [`StatusError`].
    pub fn get(&self, path: &str) -> std::io::Result<String> {
        match self.request("GET", path)? {
            (200, body) => Ok(body),
            (status, body) => Err(std::io::Error::other(StatusError {
                method: "GET".into(),
                path: path.into(),
                status,
                body: body.trim().to_string(),
            })),
        }
    }

    /// `METHOD path`: the status and the body, whatever the status.
    pub fn request(&self, method: &str, path: &str) -> std::io::Result<(u16, String)> {
        let stream = TcpStream::connect_timeout(&self.addr, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        let login = self.authorization.as_ref().map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let head = format!("{method} {path} HTTP/1.0\r\nHost: {}\r\n{login}\r\n", self.addr);
        let response = match &self.tls {
            None => exchange(stream, &head)?,
            Some(config) => {
                let name = ServerName::try_from(self.addr.ip().to_string()).map_err(std::io::Error::other)?;
                let connection =
                    rustls::ClientConnection::new(Arc::clone(config), name).map_err(std::io::Error::other)?;
                exchange(rustls::StreamOwned::new(connection, stream), &head).map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!(
                            "HTTPS with {}: {e} (is the admin port HTTPS, its certificate signed by the CA given, \
                             and a client certificate given if it requires one?)",
                            self.addr
                        ),
                    )
                })?
            }
        };
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        match head.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
            Some(status) => Ok((status, body.to_string())),
            None => {
                Err(std::io::Error::other(format!("{method} {path}: {}", head.lines().next().unwrap_or("no response"))))
            }
        }
    }
}

/// Writes the request and reads the answer to the close. A TLS peer that closes without a
/// close_notify ends the answer too (an HTTP/1.0 body ends at the close either way), as does
/// a reset after some of it.
fn exchange(mut stream: impl Read + Write, head: &str) -> std::io::Result<Vec<u8>> {
    stream.write_all(head.as_bytes())?;
    stream.flush()?;
    let mut response = Vec::new();
    match stream.read_to_end(&mut response) {
        Ok(_) => Ok(response),
        // A server that answers without reading the whole request may reset the connection
        // as it closes: what came before the reset is the answer.
        Err(e)
            if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset)
                && !response.is_empty() =>
        {
            Ok(response)
        }
        Err(e) => Err(e),
    }
}

fn file_error(path: &Path, detail: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("{}: {detail}", path.display()))
}

fn pem_certificates(path: &Path) -> std::io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no CERTIFICATE in the file"));
    }
    Ok(certs)
}

/// `GET path` from an admin listener: the body of a 200, an error naming the status otherwise.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    http_get_as(addr, path, None)
}

/// [`http_get`] with an `Authorization` header value (`Basic ...`), for a broker whose admin
/// port asks for a login (a users file).
pub fn http_get_as(addr: SocketAddr, path: &str, authorization: Option<&str>) -> std::io::Result<String> {
    AdminClient::new(addr).authorization(authorization.map(str::to_owned)).get(path)
}

/// `METHOD path` over HTTP/1.0 to `addr`: the status and the body, whatever the status.
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    http_request_as(addr, method, path, None)
}

/// [`http_request`] with an `Authorization` header value.
pub fn http_request_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> std::io::Result<(u16, String)> {
    AdminClient::new(addr).authorization(authorization.map(str::to_owned)).request(method, path)
}
