//! TLS (issue 43) with real processes on 127.0.0.1 and certificates made at run time with
//! rcgen in a temporary directory: the `tidings` CLI over TLS, a wrong CA and plaintext refused,
//! client certificates required when the broker has a CA, MQTT over TLS with mosquitto and
//! paho-mqtt, and two brokers linked over mutual TLS delivering messages.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;
mod pki_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use patterns_common::{bin, mosquitto_present, start, text, tidings};
use pki_common::Pki;
use tidings_testkit::BrokerProcess;

/// A broker whose listeners (native and MQTT) speak TLS with a certificate for 127.0.0.1.
fn tls_broker(pki: &Pki, extra_tls: &str, extra: &str) -> BrokerProcess {
    let (cert, key) = pki.issue("broker", &["127.0.0.1", "localhost"]);
    // The admin port stays plain HTTP here unless the test asks (the harness reads metrics).
    let admin = if extra_tls.contains("admin") { "" } else { "admin = false" };
    let config = format!(
        "[tls]\ncert = {cert:?}\nkey = {key:?}\n{admin}\n{extra_tls}\n[mqtt]\nlisten = \"127.0.0.1:0\"\n{extra}"
    );
    BrokerProcess::start_configured(bin(), &config, &[]).unwrap()
}

fn tls_url(b: &BrokerProcess) -> String {
    format!("tls://{}", b.tcp())
}

#[test]
fn native_clients_publish_and_subscribe_over_tls_and_plaintext_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let b = tls_broker(&pki, "", "");
    assert_eq!(b.ready.udp, None, "UDP stays off when the client listener requires TLS");
    let (url, ca) = (tls_url(&b), pki.ca());
    let sub = start(&b, &["sub", "--server", &url, "--tls-ca", &ca, "news.>", "--count", "1"], true);
    let out = tidings(&["pub", "--server", &url, "--tls-ca", &ca, "news.tls", "sealed"]);
    assert!(out.status.success(), "pub over TLS: {}", text(&out.stderr));
    let got = text(&sub.finish().stdout);
    assert!(got.contains("sealed"), "the subscriber got: {got}");

    let plain = tidings(&["pub", "--server", &b.tcp(), "news.tls", "in clear"]);
    assert!(!plain.status.success(), "a plaintext client was let in");
    assert!(text(&plain.stderr).contains("requires TLS"), "{}", text(&plain.stderr));
    let no_ca = tidings(&["pub", "--server", &url, "news.tls", "x"]);
    assert!(!no_ca.status.success() && text(&no_ca.stderr).contains("--tls-ca"), "{}", text(&no_ca.stderr));
}

#[test]
fn a_broker_certificate_from_another_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, other) = (Pki::new(dir.path(), "cell"), Pki::new(dir.path(), "other"));
    let b = tls_broker(&pki, "", "");
    let out = tidings(&["pub", "--server", &tls_url(&b), "--tls-ca", &other.ca(), "news.tls", "x"]);
    assert!(!out.status.success(), "a client trusting another CA connected");
    assert!(text(&out.stderr).contains("TLS handshake"), "{}", text(&out.stderr));
}

#[test]
fn with_a_ca_the_broker_requires_a_client_certificate_it_signed() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, other) = (Pki::new(dir.path(), "cell"), Pki::new(dir.path(), "other"));
    let ca = pki.ca();
    let b = tls_broker(&pki, &format!("ca = {ca:?}"), "");
    let url = tls_url(&b);
    let (cert, key) = pki.issue("alice", &["alice"]);
    let ok = tidings(&["pub", "--server", &url, "--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key, "a.b", "x"]);
    assert!(ok.status.success(), "a client with a certificate from the CA: {}", text(&ok.stderr));
    let none = tidings(&["pub", "--server", &url, "--tls-ca", &ca, "a.b", "x"]);
    assert!(!none.status.success(), "a client without a certificate was let in");
    let (cert, key) = other.issue("mallory", &["mallory"]);
    let foreign =
        tidings(&["pub", "--server", &url, "--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key, "a.b", "x"]);
    assert!(!foreign.status.success(), "a client certificate from another CA was let in");
}

#[test]
fn mosquitto_clients_speak_mqtt_over_tls() {
    if !mosquitto_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let b = tls_broker(&pki, "", "");
    let port = b.ready.mqtt.unwrap().port().to_string();
    let tls = ["-h", "127.0.0.1", "-p", &port, "--cafile", &pki.ca()];
    let before = b.metric("tidings_subscriptions").unwrap();
    let sub = Command::new("mosquitto_sub")
        .args(tls)
        .args(["-t", "plant/#", "-v", "-C", "1", "-W", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tidings_testkit::wait_until("mosquitto_sub subscribes", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() > before
    });
    let publish = Command::new("mosquitto_pub").args(tls).args(["-t", "plant/a", "-m", "warm"]).output().unwrap();
    assert!(publish.status.success(), "mosquitto_pub over TLS: {}", text(&publish.stderr));
    let out = tidings_testkit::finish_within(sub, Duration::from_secs(20));
    assert_eq!(text(&out.stdout).trim(), "plant/a warm", "{}", text(&out.stderr));
    // Plaintext MQTT on the TLS port gets nowhere.
    let plain = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port, "-t", "plant/a", "-m", "clear"])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!plain.status.success(), "plaintext MQTT was let in");
}

/// paho-mqtt (Python) with `tls_set`: subscribes, publishes to itself, prints what it got.
const PAHO_TLS: &str = r#"
import sys, threading
import paho.mqtt.client as mqtt
port, ca = int(sys.argv[1]), sys.argv[2]
got = threading.Event()
def on_message(client, userdata, message):
    print(message.topic, message.payload.decode())
    got.set()
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="paho-tls")
c.on_message = on_message
c.tls_set(ca_certs=ca)
c.connect("127.0.0.1", port)
c.loop_start()
c.subscribe("paho/tls", qos=0)
import time; time.sleep(0.5)
c.publish("paho/tls", "over tls", qos=0)
ok = got.wait(10)
c.disconnect(); c.loop_stop()
sys.exit(0 if ok else 1)
"#;

#[test]
fn paho_speaks_mqtt_over_tls() {
    let paho = Command::new("python3").args(["-c", "import paho.mqtt.client"]).status().is_ok_and(|s| s.success());
    if !paho {
        assert!(std::env::var_os("TIDINGS_REQUIRE_MQTT_CLIENTS").is_none(), "paho-mqtt required but missing");
        eprintln!("SKIPPED: python3 with paho-mqtt not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let b = tls_broker(&pki, "", "");
    let port = b.ready.mqtt.unwrap().port().to_string();
    let child = Command::new("python3")
        .args(["-c", PAHO_TLS, &port, &pki.ca()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tidings_testkit::finish_within(child, Duration::from_secs(20));
    assert!(out.status.success(), "paho over TLS: {} {}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "paho/tls over tls");
}

/// A broker for a linked pair, with a certificate `ca` signed: TLS on its links only (its
/// clients speak plaintext, which keeps the test's publishers simple).
fn linked(pki: &Pki, ca: &str, name: &str, peer: Option<&BrokerProcess>) -> BrokerProcess {
    let (cert, key) = pki.issue(name, &["127.0.0.1"]);
    let config = format!(
        "[tls]\ncert = {cert:?}\nkey = {key:?}\nca = {ca:?}\nlinks = true\ntcp = false\nmqtt = false\nadmin = false\n"
    );
    let mut args = vec!["--name".to_string(), name.to_string(), "--cluster-listen".into(), "127.0.0.1:0".into()];
    if let Some(peer) = peer {
        args.extend(["--peer".to_string(), peer.ready.cluster.unwrap().to_string()]);
    }
    BrokerProcess::start_configured(bin(), &config, &args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap()
}

#[test]
fn two_brokers_linked_over_tls_deliver_and_a_peer_without_the_cells_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cell");
    let a = linked(&pki, &pki.ca(), "a", None);
    let b = linked(&pki, &pki.ca(), "b", Some(&a));
    tidings_testkit::wait_until("the TLS link is up", Duration::from_secs(20), || {
        a.metric("tidings_links_up").unwrap_or(0.0) == 1.0 && b.metric("tidings_links_up").unwrap_or(0.0) == 1.0
    });
    let sub = start(&b, &["sub", "--server", &b.tcp(), "over.>", "--count", "1"], true);
    // The subscription reaches a through the link before the publish is sent.
    // Published until one crosses: b's subscription reaches a through the link in its time.
    tidings_testkit::wait_until("a message crosses the TLS link", Duration::from_secs(10), || {
        let out = tidings(&["pub", "--server", &a.tcp(), "over.link", "across"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        tidings_testkit::metric_total(&b.metrics().unwrap(), "tidings_link_messages_in_total") > 0.0
    });
    let got = text(&sub.finish().stdout);
    assert!(got.contains("across"), "b's subscriber got: {got}");

    // Same network key, its own CA: the TLS handshake fails both ways.
    let stranger = Pki::new(dir.path(), "stranger");
    let c = linked(&stranger, &stranger.ca(), "c", Some(&a));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.metric("tidings_links_up").unwrap_or(0.0), 0.0, "a broker of another CA linked");
    assert_eq!(a.metric("tidings_links_up").unwrap_or(0.0), 1.0, "a keeps only b");
}

/// The admin port over HTTPS (`[tls] admin`, on by default with TLS) behind a users file's
/// logins: the probes are open, a user with the `read` role may GET but not DELETE, the
/// `admin` role may change things, a user without a role gets 403, no login gets 401 with a
/// Basic challenge, and plain HTTP on the port is told to use HTTPS. Python's urllib (the
/// standard library) is the HTTPS client, with the test CA.
#[test]
fn the_admin_port_speaks_https_and_asks_for_a_login_with_a_role() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let users = dir.path().join("users.toml");
    for (user, password) in [("alice", "alice-pw"), ("bob", "bob-pw"), ("carol", "carol-pw")] {
        let out = tidings(&["passwd", "--file", users.to_str().unwrap(), user, "--password", password]);
        assert!(out.status.success(), "passwd: {}", text(&out.stderr));
    }
    let doc = std::fs::read_to_string(&users).unwrap();
    let doc = doc.replace("name = \"alice\"", "name = \"alice\"\nadmin = \"read\"");
    std::fs::write(&users, doc.replace("name = \"bob\"", "name = \"bob\"\nadmin = \"admin\"")).unwrap();
    let security = format!("[security]\nusers_file = {:?}\nfailure_delay = \"10ms\"\n", users.to_str().unwrap());
    let b = tls_broker(&pki, "admin = true", &security);
    let admin = b.ready.admin.unwrap();
    let script = r#"
import base64, json, ssl, sys, urllib.request, urllib.error
url, ca = sys.argv[1], sys.argv[2]
context = ssl.create_default_context(cafile=ca)
def call(method, path, login):
    request = urllib.request.Request(url + path, method=method)
    if login:
        request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    try:
        with urllib.request.urlopen(request, context=context, timeout=20) as response:
            return [response.status, response.headers.get("WWW-Authenticate") or ""]
    except urllib.error.HTTPError as error:
        return [error.code, error.headers.get("WWW-Authenticate") or ""]
cases = {
    "healthz": ("GET", "/healthz", None),
    "no login": ("GET", "/metrics", None),
    "wrong password": ("GET", "/metrics", "alice:nope"),
    "read role": ("GET", "/metrics", "alice:alice-pw"),
    "read role again": ("GET", "/state", "alice:alice-pw"),
    "read role deletes": ("DELETE", "/durable/nobody", "alice:alice-pw"),
    "admin role deletes": ("DELETE", "/durable/nobody", "bob:bob-pw"),
    "no role": ("GET", "/metrics", "carol:carol-pw"),
}
print(json.dumps({name: call(*case) for name, case in cases.items()}))
"#;
    let out = Command::new("python3")
        .args(["-c", script, &format!("https://127.0.0.1:{}", admin.port()), &pki.ca()])
        .output()
        .unwrap();
    assert!(out.status.success(), "the HTTPS client failed: {}", text(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = |case: &str| got[case][0].as_u64().unwrap();
    assert_eq!(status("healthz"), 200, "the probes need no login: {got}");
    assert_eq!(status("no login"), 401, "{got}");
    assert!(got["no login"][1].as_str().unwrap().starts_with("Basic realm="), "a browser is asked to log in: {got}");
    assert_eq!(status("wrong password"), 401, "{got}");
    assert_eq!(status("read role"), 200, "{got}");
    assert_eq!(status("read role again"), 200, "{got}");
    assert_eq!(status("read role deletes"), 403, "{got}");
    let deleted = status("admin role deletes");
    assert!(deleted != 401 && deleted != 403, "the admin role reaches the handler (no such durable: {deleted}): {got}");
    assert_eq!(status("no role"), 403, "{got}");

    use std::io::{Read as _, Write as _};
    let mut plain = std::net::TcpStream::connect(admin).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = plain.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("HTTPS only"), "plain HTTP: {answer:?}");
}

/// SIGHUP reads the certificate files again (`[tls]`, issue 43): a broker whose certificate is
/// replaced by one of another CA serves new connections with it (a client trusting only the old
/// CA is refused, one trusting the new CA gets in), a subscriber connected before the reload
/// keeps its connection and its messages, and a file that does not load changes nothing.
#[test]
fn sighup_reloads_the_certificate_for_new_connections_and_keeps_open_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, next) = (Pki::new(dir.path(), "cell"), Pki::new(dir.path(), "next"));
    let b = tls_broker(&pki, "", "");
    let (url, old_ca, new_ca) = (tls_url(&b), pki.ca(), next.ca());
    let sub = start(&b, &["sub", "--server", &url, "--tls-ca", &old_ca, "news.>", "--count", "2"], true);
    // The same file names: the broker's config points at them.
    let (cert, _) = next.issue("broker", &["127.0.0.1", "localhost"]);
    b.signal(tidings_testkit::Signal::Hup).unwrap();
    tidings_testkit::wait_until("a client of the new CA gets in", Duration::from_secs(10), || {
        tidings(&["pub", "--server", &url, "--tls-ca", &new_ca, "news.reloaded", "after"]).status.success()
    });
    let old = tidings(&["pub", "--server", &url, "--tls-ca", &old_ca, "news.reloaded", "refused"]);
    assert!(!old.status.success(), "a new connection still got the old certificate");

    std::fs::write(&cert, "not a certificate").unwrap();
    b.signal(tidings_testkit::Signal::Hup).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let kept = tidings(&["pub", "--server", &url, "--tls-ca", &new_ca, "news.reloaded", "kept"]);
    assert!(kept.status.success(), "a broken file replaced the certificate in force: {}", text(&kept.stderr));
    let got = text(&sub.finish().stdout);
    assert!(got.contains("after") && got.contains("kept"), "the subscriber connected before the reload got: {got}");
    assert!(!got.contains("refused"));
}

/// `tidings ARGS` with TIDINGS_PASSWORD set to `password` (and no other TIDINGS_ variable
/// from the test's environment), to its end.
fn tidings_env(args: &[&str], password: Option<&str>) -> std::process::Output {
    let mut command = Command::new(bin());
    command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for name in ["TIDINGS_USER", "TIDINGS_PASSWORD", "TIDINGS_TOKEN", "TIDINGS_TLS_CA"] {
        command.env_remove(name);
    }
    if let Some(password) = password {
        command.env("TIDINGS_PASSWORD", password);
    }
    tidings_testkit::finish_within(command.spawn().unwrap(), Duration::from_secs(20))
}

/// The CLI's own admin commands over HTTPS with a login (issue 43): `tidings info` and
/// `durable ls|rm` with `--tls-ca` (or `--ca`, or an https:// address) and `--user`, the
/// password from `--password` or TIDINGS_PASSWORD. Each refusal is one line naming its cause:
/// no login, a wrong password, a user without the role, https without a CA, HTTP on the
/// HTTPS port.
#[test]
fn the_cli_admin_commands_speak_https_with_a_login() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let users = dir.path().join("users.toml");
    for (user, password) in [("alice", "alice-pw"), ("carol", "carol-pw")] {
        let out = tidings(&["passwd", "--file", users.to_str().unwrap(), user, "--password", password]);
        assert!(out.status.success(), "passwd: {}", text(&out.stderr));
    }
    let doc =
        std::fs::read_to_string(&users).unwrap().replace("name = \"alice\"", "name = \"alice\"\nadmin = \"read\"");
    std::fs::write(&users, doc).unwrap();
    let security = format!("[security]\nusers_file = {:?}\nfailure_delay = \"10ms\"\n", users.to_str().unwrap());
    let b = tls_broker(&pki, "admin = true", &security);
    let (admin, ca) = (b.ready.admin.unwrap().to_string(), pki.ca());
    let https = format!("https://{admin}");

    let ok = tidings_env(&["info", "--admin", &https, "--tls-ca", &ca, "--user", "alice"], Some("alice-pw"));
    assert!(ok.status.success(), "info as alice: {}", text(&ok.stderr));
    assert!(
        text(&ok.stdout).starts_with("broker ") && text(&ok.stdout).contains("connections"),
        "{}",
        text(&ok.stdout)
    );
    let listed = tidings_env(
        &["info", "--admin", &admin, "--ca", &ca, "--user", "alice", "--password", "alice-pw", "--connections"],
        None,
    );
    assert!(listed.status.success(), "--ca alone turns HTTPS on: {}", text(&listed.stderr));
    let ls = tidings_env(&["durable", "ls", "--admin", &https, "--tls-ca", &ca, "--user", "alice"], Some("alice-pw"));
    assert!(ls.status.success(), "durable ls: {}", text(&ls.stderr));
    assert!(text(&ls.stdout).contains("no durable subscriptions"), "{}", text(&ls.stdout));

    let refused = |args: &[&str], password: Option<&str>, want: &[&str]| {
        let out = tidings_env(args, password);
        let said = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {}", text(&out.stdout));
        assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
        for want in want {
            assert!(said.contains(want), "{args:?}: {said:?} lacks {want:?}");
        }
    };
    refused(
        &["durable", "rm", "gone", "--admin", &https, "--tls-ca", &ca, "--user", "alice"],
        Some("alice-pw"),
        &["user alice may not DELETE /durable/gone", "403"],
    );
    refused(&["info", "--admin", &https, "--tls-ca", &ca], None, &["needs a login", "401", "--user"]);
    refused(
        &["info", "--admin", &https, "--tls-ca", &ca, "--user", "alice"],
        Some("nope"),
        &["refused the login of user alice", "401"],
    );
    refused(
        &["info", "--admin", &https, "--tls-ca", &ca, "--user", "carol"],
        Some("carol-pw"),
        &["user carol may not GET", "403", "role"],
    );
    refused(&["info", "--admin", &https], None, &["--tls-ca"]);
    refused(&["info", "--admin", &admin, "--user", "alice"], Some("alice-pw"), &["HTTPS only", "--tls-ca"]);
    let other = Pki::new(dir.path(), "other");
    refused(
        &["info", "--admin", &https, "--tls-ca", &other.ca(), "--user", "alice"],
        Some("alice-pw"),
        &["HTTPS with", "signed by the CA given"],
    );
}
