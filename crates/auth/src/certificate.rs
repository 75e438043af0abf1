//! The names in a TLS client certificate that a users file can list (`certificate = "NAME"`):
//! the subject's common names, then the subject alternative names (DNS names, e-mail
//! addresses, URIs, IP addresses), in the certificate's order.
//!
//! A small DER walk over the fields a login needs, rather than an X.509 crate: the certificate
//! was already verified by rustls (signature, CA, validity) before its names are read here, and
//! the walk takes any bytes without panicking (a property test feeds it random ones).

use std::net::IpAddr;

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
/// `[0]`: the version field of a v3 certificate.
const VERSION: u8 = 0xA0;
/// `[3]`: the extensions of a v3 certificate.
const EXTENSIONS: u8 = 0xA3;
/// 2.5.4.3, id-at-commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.17, id-ce-subjectAltName.
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1D, 0x11];
/// GeneralName tags (context-specific, primitive).
const RFC822_NAME: u8 = 0x81;
const DNS_NAME: u8 = 0x82;
const URI: u8 = 0x86;
const IP_ADDRESS: u8 = 0x87;
/// The most names taken from one certificate.
const MAX_NAMES: usize = 64;

/// The names of the DER certificate `der` a users file may list, common names first; empty if
/// it does not parse.
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let mut names = names(der).unwrap_or_default();
    names.truncate(MAX_NAMES);
    names
}

/// Reads DER elements (tag, contents) one after the other; `None` at the end or on bytes that
/// are not DER.
struct Der<'a> {
    rest: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Der<'a> {
        Der { rest: bytes }
    }

    /// The contents of the next element if it has `tag`.
    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        self.next().filter(|(t, _)| *t == tag).map(|(_, value)| value)
    }
}

impl<'a> Iterator for Der<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.rest.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 {
                self.rest = &[];
                return None;
            }
            let digits = rest.get(..count)?;
            let len = digits.iter().fold(0usize, |len, &b| (len << 8) | usize::from(b));
            (len, rest.get(count..)?)
        };
        let Some(value) = rest.get(..len) else {
            self.rest = &[];
            return None;
        };
        self.rest = rest.get(len..).unwrap_or_default();
        Some((tag, value))
    }
}

fn names(der: &[u8]) -> Option<Vec<String>> {
    let certificate = Der::new(der).expect(SEQUENCE)?;
    let tbs = Der::new(certificate).expect(SEQUENCE)?;
    let mut fields = Der::new(tbs).peekable();
    if fields.peek().is_some_and(|(tag, _)| *tag == VERSION) {
        fields.next();
    }
    // serialNumber, signature, issuer, validity, then the subject.
    let mut fields = fields.skip(4);
    let (tag, subject) = fields.next()?;
    if tag != SEQUENCE {
        return None;
    }
    let mut out = common_names(subject);
    for (tag, value) in fields {
        if tag == EXTENSIONS {
            out.extend(alt_names(value));
        }
    }
    Some(out)
}

/// The common names of a Name: SEQUENCE OF SET OF { type OID, value string }.
fn common_names(name: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for (tag, set) in Der::new(name) {
        if tag != SET {
            continue;
        }
        for (tag, pair) in Der::new(set) {
            let mut parts = Der::new(pair);
            if tag != SEQUENCE || parts.expect(OID) != Some(COMMON_NAME) {
                continue;
            }
            // UTF8String, PrintableString, IA5String: all UTF-8 (the last two ASCII).
            if let Some((0x0C | 0x13 | 0x16, value)) = parts.next() {
                out.extend(std::str::from_utf8(value).ok().map(str::to_owned));
            }
        }
    }
    out
}

/// The subject alternative names among `[3]`'s extensions.
fn alt_names(explicit: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(list) = Der::new(explicit).expect(SEQUENCE) else { return out };
    for (tag, extension) in Der::new(list) {
        let mut parts = Der::new(extension);
        if tag != SEQUENCE || parts.expect(OID) != Some(SUBJECT_ALT_NAME) {
            continue;
        }
        let mut value = parts.next();
        if value.is_some_and(|(tag, _)| tag == BOOLEAN) {
            value = parts.next(); // `critical`
        }
        let Some((OCTET_STRING, octets)) = value else { continue };
        let Some(general) = Der::new(octets).expect(SEQUENCE) else { continue };
        for (tag, name) in Der::new(general) {
            match tag {
                RFC822_NAME | DNS_NAME | URI => out.extend(std::str::from_utf8(name).ok().map(str::to_owned)),
                IP_ADDRESS => out.extend(ip(name).map(|ip| ip.to_string())),
                _ => {}
            }
        }
    }
    out
}

fn ip(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_and_truncated_elements_end_the_walk() {
        // A SEQUENCE of two bytes with a two-byte length form.
        assert_eq!(Der::new(&[0x30, 0x82, 0x00, 0x02, 1, 2]).next(), Some((0x30, &[1u8, 2][..])));
        assert_eq!(Der::new(&[0x30, 0x05, 1, 2]).next(), None, "a length past the end");
        assert_eq!(Der::new(&[0x30, 0x85, 0, 0, 0, 0, 1]).next(), None, "a length of five bytes");
        assert!(certificate_names(&[]).is_empty());
    }
}
