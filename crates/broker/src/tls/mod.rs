//! TLS at the broker's front doors and on its links (issue 43), with rustls.
//!
//! `[tls] cert` and `key` turn it on; each listener then speaks TLS unless its switch is off
//! (`tcp`, `mqtt` and `admin` on by default; `links` off). A listener that speaks TLS speaks
//! nothing else: a client that sends plaintext is told so in its own protocol and closed
//! ([`Accepted::Plaintext`]). `[tls] ca` makes client certificates signed by that CA
//! mandatory on every TLS listener; links always need it, as each side proves itself with its
//! certificate and checks the other's (the dialler also checks the name it dialled).
//!
//! SIGHUP reads the certificate, key and CA files again ([`Tls::reload`]): connections made from
//! then on get the new ones, connections already open keep theirs, and files that do not load
//! change nothing (the old ones stay in force, and the error is logged). The paths themselves
//! and the listeners' switches are read at start only.
//!
//! The ring provider is named explicitly (no process-wide default to install), so a library
//! user embedding the broker is not made to pick one.

mod config;
mod stream;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use config::TlsConfig;
pub(crate) use stream::{BoxRead, BoxWrite, ReadSide, TlsRead};

/// The first byte of every TLS connection: a handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;

/// Why TLS could not be set up from the configured files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file is missing, unreadable or holds nothing usable.
    #[error("tls.{what}: cannot use {path:?}: {detail}")]
    File {
        /// Which setting.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        detail: String,
    },
    /// rustls refused the certificates or the key (a key that does not match the certificate).
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built from the CA file.
    #[error("tls.ca: {0}")]
    Verifier(String),
}

/// The loaded certificates: what accepts TLS on each listener and what dials links.
pub struct Tls {
    /// Which listeners speak TLS.
    pub config: TlsConfig,
    /// What the files gave, swapped whole by a reload.
    loaded: parking_lot::RwLock<Loaded>,
}

/// The acceptors and connector built from the files.
#[derive(Clone)]
struct Loaded {
    acceptor: TlsAcceptor,
    links: Option<(TlsAcceptor, TlsConnector)>,
}

/// What came in on a TLS listener.
pub enum Accepted {
    /// A finished TLS handshake.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// The client spoke plaintext first: the caller says so in the listener's protocol.
    Plaintext(TcpStream),
    /// The handshake failed (wrong CA, no client certificate, timeout): already logged.
    Failed,
}

impl Tls {
    /// Loads the certificate, key and CA of `[tls]`; `None` when TLS is not configured.
    pub fn load(config: &TlsConfig) -> Result<Option<Arc<Tls>>, TlsError> {
        if !config.enabled() {
            return Ok(None);
        }
        let loaded = parking_lot::RwLock::new(Self::build(config)?);
        Ok(Some(Arc::new(Tls { config: config.clone(), loaded })))
    }

    /// Reads the files again (SIGHUP): new connections get what they hold now; open ones keep
    /// what they have. On an error nothing changes.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = Self::build(&self.config)?;
        *self.loaded.write() = fresh;
        Ok(())
    }

    fn build(config: &TlsConfig) -> Result<Loaded, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates("cert", &config.cert)?;
        let key = private_key(&config.key)?;
        let roots = match config.ca.is_empty() {
            true => None,
            false => Some(Arc::new(roots(&config.ca)?)),
        };
        let server = |roots: Option<&Arc<RootCertStore>>| -> Result<ServerConfig, TlsError> {
            let builder =
                ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
            let builder = match roots {
                Some(roots) => {
                    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                        .build()
                        .map_err(|e| TlsError::Verifier(e.to_string()))?;
                    builder.with_client_cert_verifier(verifier)
                }
                None => builder.with_no_client_auth(),
            };
            Ok(builder.with_single_cert(chain.clone(), key.clone_key())?)
        };
        let acceptor = TlsAcceptor::from(Arc::new(server(roots.as_ref())?));
        let links = match (&roots, config.links) {
            (Some(roots), true) => {
                let listen = TlsAcceptor::from(Arc::new(server(Some(roots))?));
                let dial = ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(roots.clone())
                    .with_client_auth_cert(chain.clone(), key.clone_key())?;
                Some((listen, TlsConnector::from(Arc::new(dial))))
            }
            _ => None,
        };
        Ok(Loaded { acceptor, links })
    }

    /// Accepts a client connection on a TLS listener, within `limit`.
    pub async fn accept(&self, stream: TcpStream, limit: Duration) -> Accepted {
        let acceptor = self.loaded.read().acceptor.clone();
        accept_with(&acceptor, stream, limit).await
    }

    /// Accepts a link from another broker: its certificate must be signed by the CA.
    pub async fn accept_link(&self, stream: TcpStream, limit: Duration) -> Accepted {
        let links = self.loaded.read().links.clone();
        match links {
            Some((acceptor, _)) => accept_with(&acceptor, stream, limit).await,
            None => Accepted::Failed,
        }
    }

    /// Dials a link over TLS: the peer's certificate must be signed by the CA and name the host
    /// of `address` (`HOST:PORT`, an IP address or a DNS name).
    pub async fn connect_link(
        &self,
        stream: TcpStream,
        address: &str,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let Some((_, connector)) = self.loaded.read().links.clone() else {
            return Err(io::Error::other("tls.links is off"));
        };
        let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).map_err(|e| io::Error::other(format!("{host:?}: {e}")))?;
        connector.connect(name, stream).await
    }

    /// Whether links speak TLS.
    pub fn links(&self) -> bool {
        self.loaded.read().links.is_some()
    }
}

/// The names of the client certificate the handshake verified (with `[tls] ca`), which a
/// users file may list to log the client in without a password; `None` without one.
pub(crate) fn client_names(stream: &tokio_rustls::server::TlsStream<TcpStream>) -> Option<Vec<String>> {
    let (_, connection) = stream.get_ref();
    let leaf = connection.peer_certificates()?.first()?;
    Some(tidings_auth::certificate_names(leaf))
}

async fn accept_with(acceptor: &TlsAcceptor, stream: TcpStream, limit: Duration) -> Accepted {
    let peer = stream.peer_addr().ok();
    let mut first = [0u8; 1];
    match tokio::time::timeout(limit, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] != HANDSHAKE_RECORD => return Accepted::Plaintext(stream),
        Ok(Ok(1)) => {}
        _ => return Accepted::Failed,
    }
    match tokio::time::timeout(limit, acceptor.accept(stream).into_fallible()).await {
        Ok(Ok(tls)) => Accepted::Tls(Box::new(tls)),
        Ok(Err((error, stream))) => {
            tracing::info!(?peer, %error, "TLS handshake refused");
            close_gently(stream).await;
            Accepted::Failed
        }
        Err(_) => Accepted::Failed,
    }
}

/// Closes a connection after a last word (the TLS alert of a refused handshake, an HTTP 400)
/// so that the client reads it instead of a reset: a close with the client's bytes still
/// unread (its first data, sent with its last handshake flight; its request) resets the
/// connection, and a reset can discard what was written before the client reads it. Writes
/// end, what the client sends is read and dropped until it closes. Bounded to a second.
pub(crate) async fn close_gently(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut scrap = [0u8; 4096];
    let drain = async {
        stream.shutdown().await?;
        while stream.read(&mut scrap).await? > 0 {}
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

fn file_error(what: &'static str, path: &str, detail: impl std::fmt::Display) -> TlsError {
    TlsError::File { what, path: path.to_string(), detail: detail.to_string() }
}

/// Every certificate in a PEM file, leaf first.
fn certificates(what: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if chain.is_empty() {
        return Err(file_error(what, path, "no CERTIFICATE in the file"));
    }
    Ok(chain)
}

fn private_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error("key", path, e))
}

fn roots(path: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates("ca", path)? {
        roots.add(cert).map_err(|e| file_error("ca", path, e))?;
    }
    Ok(roots)
}
