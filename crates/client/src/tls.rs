//! TLS for the TCP transport: the CA that signs the broker's certificate, optionally the
//! client's own certificate (a broker with `[tls] ca` requires one), loaded once at `connect`.
//!
//! The ring provider is named explicitly, so an application does not have to install a
//! process-wide default for this client to work.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::error::ClientError;

/// The scheme that asks for TLS in an address: `tls://host:port`.
pub(crate) const SCHEME: &str = "tls://";

/// What the builder collected: whether to speak TLS and with which files.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) on: bool,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
}

/// A loaded TLS setup: the connector and the name the broker's certificate must carry.
#[derive(Clone)]
pub(crate) struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish_non_exhaustive()
    }
}

fn error(detail: impl fmt::Display) -> ClientError {
    ClientError::Tls { detail: detail.to_string() }
}

impl Tls {
    /// Loads `settings` for the broker at `addr` (`host:port`); `None` when TLS is off.
    pub(crate) fn load(settings: &TlsSettings, addr: &str) -> Result<Option<Tls>, ClientError> {
        if !settings.on {
            return Ok(None);
        }
        let Some(ca) = &settings.ca else {
            return Err(error("TLS needs the CA that signed the broker's certificate (tls_ca, `--tls-ca FILE`)"));
        };
        let mut roots = RootCertStore::empty();
        for cert in pem_certificates(ca)? {
            roots.add(cert).map_err(|e| error(format!("{}: {e}", ca.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(error)?
            .with_root_certificates(roots);
        let config = match &settings.identity {
            Some((cert, key)) => {
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| error(format!("{}: {e}", key.display())))?;
                builder.with_client_auth_cert(pem_certificates(cert)?, key).map_err(error)?
            }
            None => builder.with_no_client_auth(),
        };
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).map_err(|e| error(format!("{host:?}: {e}")))?;
        Ok(Some(Tls { connector: TlsConnector::from(Arc::new(config)), name }))
    }

    /// The TLS handshake on a fresh connection. A failure names the likely causes: a broker
    /// certificate the CA did not sign or that does not name the host, or a plaintext port.
    pub(crate) async fn connect(&self, stream: TcpStream) -> Result<TlsStream<TcpStream>, ClientError> {
        self.connector.connect(self.name.clone(), stream).await.map_err(|e| {
            error(format!(
                "TLS handshake with {:?} failed: {e} (is the port a TLS listener, and its certificate signed by the CA given?)",
                self.name
            ))
        })
    }
}

fn pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| error(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(error(format!("{}: no CERTIFICATE in the file", path.display())));
    }
    Ok(certs)
}

/// Splits `tls://host:port` into `host:port` and whether TLS was asked for; in a failover list
/// (`tls://a:1,tls://b:2`) each address loses its scheme, and any one asks for TLS for all.
pub(crate) fn strip_scheme(addr: &str) -> (String, bool) {
    let mut tls = false;
    let list: Vec<&str> = addr
        .split(',')
        .map(|one| match one.trim().strip_prefix(SCHEME) {
            Some(rest) => {
                tls = true;
                rest
            }
            None => one,
        })
        .collect();
    (list.join(","), tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_scheme_turns_tls_on_and_is_taken_off_the_address() {
        assert_eq!(strip_scheme("tls://b1:6464"), ("b1:6464".to_string(), true));
        assert_eq!(strip_scheme("b1:6464"), ("b1:6464".to_string(), false));
        assert_eq!(strip_scheme("tls://a:1,tls://b:2"), ("a:1,b:2".to_string(), true));
    }

    #[test]
    fn tls_without_a_ca_is_refused_with_the_flag_to_use() {
        let settings = TlsSettings { on: true, ..Default::default() };
        let err = Tls::load(&settings, "127.0.0.1:1").unwrap_err().to_string();
        assert!(err.contains("--tls-ca"), "{err}");
        assert!(Tls::load(&TlsSettings::default(), "127.0.0.1:1").unwrap().is_none());
    }
}
