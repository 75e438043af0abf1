//! The names a users file can list for a TLS client certificate, read from certificates made
//! by rcgen (as a CA would issue them), and a walk that takes any bytes without panicking.

use proptest::prelude::*;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use tidings_auth::certificate_names;

fn certificate(common_name: Option<&str>, sans: &[&str], email: Option<&str>) -> Vec<u8> {
    let Ok(mut params) = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()) else {
        panic!("params")
    };
    // rcgen's default subject has a common name of its own: start from an empty one.
    params.distinguished_name = DistinguishedName::new();
    if let Some(cn) = common_name {
        params.distinguished_name.push(DnType::OrganizationName, "tidings tests");
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    if let Some(email) = email {
        let Ok(email) = rcgen::Ia5String::try_from(email) else { panic!("an IA5 string") };
        params.subject_alt_names.push(SanType::Rfc822Name(email));
    }
    let Ok(key) = KeyPair::generate() else { panic!("key") };
    let Ok(cert) = params.self_signed(&key) else { panic!("sign") };
    cert.der().to_vec()
}

#[test]
fn the_common_name_comes_first_then_each_alternative_name() {
    let der = certificate(Some("alice"), &["alice.example", "127.0.0.1"], Some("alice@example.org"));
    assert_eq!(certificate_names(&der), ["alice", "alice.example", "127.0.0.1", "alice@example.org"]);
    let no_cn = certificate(None, &["svc.example"], None);
    assert_eq!(certificate_names(&no_cn), ["svc.example"]);
}

#[test]
fn a_cut_or_altered_certificate_gives_no_names_or_its_own_without_panicking() {
    let der = certificate(Some("bob"), &["bob.example"], None);
    for cut in 0..der.len() {
        let _ = certificate_names(&der[..cut]);
    }
    let mut flipped = der.clone();
    for i in 0..flipped.len() {
        flipped[i] ^= 0xff;
        let _ = certificate_names(&flipped);
        flipped[i] ^= 0xff;
    }
    assert_eq!(certificate_names(&flipped), ["bob", "bob.example"]);
}

proptest! {
    #[test]
    fn any_bytes_are_walked_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let names = certificate_names(&bytes);
        prop_assert!(names.len() <= 64);
    }

    /// Random bytes after a plausible start (nested SEQUENCEs), so the walk gets deeper.
    #[test]
    fn plausible_prefixes_are_walked_without_panicking(tail in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut bytes = vec![0x30, 0x82, 0x01, 0x00, 0x30, 0x81, 0xf0, 0xa0, 0x03, 0x02, 0x01, 0x02];
        bytes.extend(tail);
        let _ = certificate_names(&bytes);
    }
}
