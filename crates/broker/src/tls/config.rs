//! The `[tls]` section.

use serde::{Deserialize, Serialize};

/// `[tls]`: the broker's certificate and key, the CA that signs client and peer certificates,
/// and which listeners speak TLS. Empty `cert`: no TLS anywhere, as before.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The broker's certificate chain (PEM), leaf first.
    pub cert: String,
    /// The broker's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: String,
    /// CA certificates (PEM). When set, every TLS listener requires a client certificate signed
    /// by one of them; links need it to check each other.
    pub ca: String,
    /// The native client listener speaks TLS (only).
    pub tcp: bool,
    /// The MQTT listener speaks TLS (only), as on port 8883.
    pub mqtt: bool,
    /// The admin HTTP port speaks HTTPS (only): metrics, state, the web view, and the admin
    /// logins of a users file, which travel in every request.
    pub admin: bool,
    /// Links to and from other brokers run over mutual TLS with `ca` (the dialler checks the
    /// peer's name against the address it dialled).
    pub links: bool,
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig {
            cert: String::new(),
            key: String::new(),
            ca: String::new(),
            tcp: true,
            mqtt: true,
            admin: true,
            links: false,
        }
    }
}

impl TlsConfig {
    /// Whether TLS is configured at all.
    pub fn enabled(&self) -> bool {
        !self.cert.is_empty()
    }

    /// Whether the native client listener speaks TLS.
    pub fn tcp_on(&self) -> bool {
        self.enabled() && self.tcp
    }

    /// Whether the MQTT listener speaks TLS.
    pub fn mqtt_on(&self) -> bool {
        self.enabled() && self.mqtt
    }

    /// Whether the admin port speaks HTTPS.
    pub fn admin_on(&self) -> bool {
        self.enabled() && self.admin
    }

    /// Problems with the section, for `Config::validate`.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.cert.is_empty() != self.key.is_empty() {
            problems.push("tls.cert and tls.key: give both or neither".to_string());
        }
        if self.links && self.ca.is_empty() {
            problems.push("tls.links: links check each other's certificates against tls.ca; set it".to_string());
        }
        if !self.enabled() && (!self.ca.is_empty() || self.links) {
            problems.push("tls.ca and tls.links need tls.cert and tls.key".to_string());
        }
        problems
    }
}
