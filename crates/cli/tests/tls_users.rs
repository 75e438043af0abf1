//! TLS client certificates as logins (issue 43), with real processes on 127.0.0.1: a broker
//! with `[tls] ca` and a users file logs in, without a password, a client whose certificate
//! the CA signed and whose common name (or a subject alternative name) a user lists, over the
//! native protocol and MQTT; a certificate no user lists is refused saying so, an expired one
//! fails its TLS handshake, and a password still logs in as its own user. The admin port over
//! HTTPS logs in by certificate the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;
mod pki_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use patterns_common::{bin, mosquitto_present, text, tidings};
use pki_common::Pki;
use tidings_admin::AdminClient;
use tidings_testkit::BrokerProcess;

/// alice is listed by her certificate's common name and may publish `orders.>`; dave by a DNS
/// name in his certificate's SANs, and may publish `fleet.>`; bob has a password only (and
/// reads the admin port, as the harness does for metrics).
fn users(dir: &std::path::Path) -> String {
    let path = dir.join("users.toml");
    let out = tidings(&["passwd", "--file", path.to_str().unwrap(), "bob", "--password", "bob-pw"]);
    assert!(out.status.success(), "passwd: {}", text(&out.stderr));
    let mut doc = std::fs::read_to_string(&path).unwrap();
    doc.push_str(concat!(
        "\n[[user]]\nname = \"alice\"\ncertificate = \"alice\"\npublish = { allow = [\"orders.>\"] }\n",
        "\n[[user]]\nname = \"dave\"\ncertificate = \"dave.example\"\npublish = { allow = [\"fleet.>\"] }\n",
    ));
    doc = doc.replace("name = \"bob\"", "name = \"bob\"\nadmin = \"read\"\npublish = { allow = [\"bob.>\"] }");
    std::fs::write(&path, doc).unwrap();
    path.display().to_string()
}

fn broker(pki: &Pki, users: &str) -> BrokerProcess {
    let (cert, key) = pki.issue("broker", &["127.0.0.1"]);
    let ca = pki.ca();
    let config = format!(
        "[tls]\ncert = {cert:?}\nkey = {key:?}\nca = {ca:?}\nadmin = false\n[security]\nusers_file = {users:?}\nfailure_delay = \"10ms\"\n[mqtt]\nlisten = \"127.0.0.1:0\"\n"
    );
    let mut b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    b.admin_login("bob", "bob-pw");
    b
}

/// `tidings pub` over TLS with the client certificate `(cert, key)` and `extra` options.
fn publish(
    b: &BrokerProcess,
    pki: &Pki,
    (cert, key): &(String, String),
    extra: &[&str],
    topic: &str,
) -> (bool, String) {
    let url = format!("tls://{}", b.tcp());
    let ca = pki.ca();
    let mut args: Vec<&str> = vec!["pub", "--server", &url, "--tls-ca", &ca, "--cert", cert, "--key", key];
    args.extend(extra);
    args.extend([topic, "x"]);
    let out = tidings(&args);
    (out.status.success(), text(&out.stderr))
}

#[test]
fn a_certificate_a_user_lists_logs_in_as_that_user_and_others_are_refused_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let b = broker(&pki, &users(dir.path()));

    let alice = pki.issue("alice", &["laptop.example"]);
    let (ok, said) = publish(&b, &pki, &alice, &[], "orders.new");
    assert!(ok, "alice's certificate logs her in: {said}");
    // It is alice's login, with alice's rules: she may not publish outside orders.>.
    let (ok, said) = publish(&b, &pki, &alice, &[], "fleet.x");
    assert!(!ok && said.contains("user alice may not publish to fleet.x"), "{said}");

    let dave = pki.issue("laptop-7", &["dave.example"]);
    let (ok, said) = publish(&b, &pki, &dave, &[], "fleet.truck1");
    assert!(ok, "a SAN a user lists logs in too: {said}");

    let mallory = pki.issue("mallory", &["mallory.example"]);
    let (ok, said) = publish(&b, &pki, &mallory, &[], "orders.new");
    assert!(!ok, "a certificate no user lists was let in");
    assert!(said.contains("not_authenticated") && said.contains("no user"), "{said}");

    // A password given beside a certificate is the login: bob's, with bob's rules.
    let (ok, said) = publish(&b, &pki, &mallory, &["--user", "bob", "--password", "bob-pw"], "bob.x");
    assert!(ok, "bob's password beside mallory's certificate: {said}");

    let expired = pki.issue_with("alice-old", &["alice"], true);
    let (ok, said) = publish(&b, &pki, &expired, &[], "orders.new");
    assert!(!ok, "an expired certificate was let in");
    assert!(said.to_lowercase().contains("expired"), "the client is told its certificate expired: {said}");
    let failures = tidings_testkit::metric_total(&b.metrics().unwrap(), "tidings_auth_failures_total");
    assert!(failures >= 1.0, "the unlisted certificate was counted: {failures}");
}

#[test]
fn mqtt_clients_log_in_by_certificate() {
    if !mosquitto_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let b = broker(&pki, &users(dir.path()));
    let port = b.ready.mqtt.unwrap().port().to_string();
    let mqtt_pub = |(cert, key): &(String, String), topic: &str| {
        let args = ["-h", "127.0.0.1", "-p", &port, "--cafile", &pki.ca(), "--cert", cert, "--key", key];
        let child = Command::new("mosquitto_pub")
            .args(args)
            .args(["-V", "5", "-q", "1", "-t", topic, "-m", "x"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        tidings_testkit::finish_within(child, Duration::from_secs(20))
    };
    let alice = mqtt_pub(&pki.issue("alice", &["laptop.example"]), "orders/new");
    assert!(alice.status.success(), "alice by certificate over MQTT: {}", text(&alice.stderr));
    let mallory = mqtt_pub(&pki.issue("mallory", &["mallory.example"]), "orders/new");
    assert!(!mallory.status.success(), "an unlisted certificate was let in over MQTT");
    assert!(text(&mallory.stderr).to_lowercase().contains("not authori"), "{}", text(&mallory.stderr));
}

/// The admin port over HTTPS with `[tls] ca` (a client certificate required): a request with
/// no `Authorization` header logs in by the certificate its connection showed, mapped to a user
/// as a native client's is. alice (listed by her certificate, role `read`) may GET but not
/// DELETE; dave (listed, no admin role) gets 403; a certificate no user lists gets 401; and a
/// Basic login beside a certificate is the login (bob's password, mallory's certificate).
#[test]
fn the_admin_port_logs_in_by_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let users = users(dir.path());
    let doc = std::fs::read_to_string(&users).unwrap();
    std::fs::write(&users, doc.replace("certificate = \"alice\"", "certificate = \"alice\"\nadmin = \"read\""))
        .unwrap();
    let ((cert, key), ca) = (pki.issue("broker", &["127.0.0.1"]), pki.ca());
    let config = format!(
        "[tls]\ncert = {cert:?}\nkey = {key:?}\nca = {ca:?}\nadmin = true\n[security]\nusers_file = {users:?}\nfailure_delay = \"10ms\"\n"
    );
    let b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    let admin = b.ready.admin.unwrap();
    let as_holder = |(cert, key): &(String, String)| {
        AdminClient::new(admin).https(Path::new(&ca), Some((Path::new(cert), Path::new(key)))).unwrap()
    };
    let status = |client: &AdminClient, method: &str, path: &str| client.request(method, path).unwrap().0;

    let alice = as_holder(&pki.issue("alice", &["laptop.example"]));
    assert_eq!(status(&alice, "GET", "/metrics"), 200, "alice's certificate logs her in with role read");
    assert_eq!(status(&alice, "GET", "/state"), 200);
    assert_eq!(status(&alice, "DELETE", "/durable/nobody"), 403, "read may not change the broker");
    let dave = as_holder(&pki.issue("laptop-7", &["dave.example"]));
    assert_eq!(status(&dave, "GET", "/metrics"), 403, "dave has no admin role");
    let mallory = as_holder(&pki.issue("mallory", &["mallory.example"]));
    assert_eq!(status(&mallory, "GET", "/metrics"), 401, "no user lists mallory's certificate");
    assert_eq!(status(&mallory, "GET", "/healthz"), 200, "the probes stay open");
    let bob = mallory.basic("bob", "bob-pw");
    assert_eq!(status(&bob, "GET", "/metrics"), 200, "bob's password beside mallory's certificate");
    let wrong = as_holder(&pki.issue("alice", &["laptop.example"])).basic("bob", "nope");
    assert_eq!(status(&wrong, "GET", "/metrics"), 401, "a header given is the login, even beside a good certificate");
}
