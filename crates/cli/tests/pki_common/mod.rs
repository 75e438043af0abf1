//! Certificates for the TLS process tests, made at run time with rcgen in a temporary
//! directory: a CA, and certificates it signs for brokers and clients (an expired one too).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a part

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA and what it signed, as PEM files in `dir`.
pub(crate) struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    name: String,
}

impl Pki {
    pub(crate) fn new(dir: &Path, name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("tidings test CA {name}"));
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), ca.pem()).unwrap();
        Pki { dir: dir.to_path_buf(), ca, ca_key, name: name.to_string() }
    }

    pub(crate) fn ca(&self) -> String {
        self.path(&format!("{}-ca.pem", self.name))
    }

    pub(crate) fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this CA: (cert, key).
    pub(crate) fn issue(&self, who: &str, names: &[&str]) -> (String, String) {
        self.issue_with(who, names, false)
    }

    /// [`Pki::issue`], valid only in 2020 when `expired`.
    pub(crate) fn issue_with(&self, who: &str, names: &[&str], expired: bool) -> (String, String) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, who);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 12, 31);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (cert_path, key_path) = (self.path(&format!("{who}.pem")), self.path(&format!("{who}.key")));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}
