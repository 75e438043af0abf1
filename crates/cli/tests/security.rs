//! Issue 43 with real processes on 127.0.0.1: a `tidings broker` with a users file, and the
//! `tidings` CLI and mosquitto clients logging in to it. Wrong and unknown logins are refused;
//! deny rules hold on every subscription kind (plain `>`, queue group, durable) and on publish;
//! MQTT gets its reason codes; a user removed by a SIGHUP reload loses its connection.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod patterns_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use patterns_common::{bin, mosquitto_present, start, text, tidings};
use tidings_client::{Client, ReasonCode};
use tidings_testkit::BrokerProcess;

/// A users file: alice reads everything but `secret.>` and may publish `orders.>` and `_INBOX.>`
/// but not `orders.audit`; bob may publish anything, and read the admin port. Hashes made by `tidings passwd`, as an
/// operator would.
fn users_file(dir: &std::path::Path, with_alice: bool) -> std::path::PathBuf {
    let path = dir.join("users.toml");
    let _ = std::fs::remove_file(&path);
    for (user, password) in [("alice", "alice-pw"), ("bob", "bob-pw")] {
        if user == "alice" && !with_alice {
            continue;
        }
        let out = tidings(&["passwd", "--file", path.to_str().unwrap(), user, "--password", password]);
        assert!(out.status.success(), "passwd: {}", text(&out.stderr));
    }
    let mut doc = std::fs::read_to_string(&path).unwrap();
    doc = doc.replace(
        "name = \"alice\"",
        "name = \"alice\"\nsubscribe = { allow = [\">\"], deny = [\"secret.>\"] }\npublish = { allow = [\"orders.>\", \"_INBOX.>\"], deny = [\"orders.audit\"] }",
    );
    doc = doc.replace(
        "name = \"bob\"",
        "name = \"bob\"\nadmin = \"read\"\npublish = { allow = [\">\"] }\nsubscribe = { allow = [\"_INBOX.>\"] }",
    );
    std::fs::write(&path, doc).unwrap();
    path
}

fn broker(dir: &tempfile::TempDir, extra: &str) -> BrokerProcess {
    let users = users_file(dir.path(), true);
    let config = format!("[security]\nusers_file = {:?}\nfailure_delay = \"50ms\"\n{extra}", users.to_str().unwrap());
    let mut b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    // The admin port asks for a login too (the test reads metrics): bob has the read role.
    b.admin_login("bob", "bob-pw");
    b
}

const ALICE: (&str, &str) = ("alice", "alice-pw");
const BOB: (&str, &str) = ("bob", "bob-pw");

fn as_user<'a>(b: &'a str, user: &'a str, password: &'a str) -> Vec<&'a str> {
    vec!["--server", b, "--user", user, "--password", password]
}

/// `tidings VERB --server B --user U --password P REST...`.
fn args<'a>(verb: &'a str, b: &'a str, (user, password): (&'a str, &'a str), rest: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![verb];
    all.extend(as_user(b, user, password));
    all.extend(rest);
    all
}

/// A broker with the users file, its client address, and a scratch directory.
fn setup(extra: &str) -> (tempfile::TempDir, BrokerProcess, String) {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(&dir, extra);
    let addr = b.tcp();
    (dir, b, addr)
}

#[test]
fn a_wrong_password_an_unknown_user_and_no_login_are_refused() {
    let (_dir, b, addr) = setup("");
    for login in [as_user(&addr, "alice", "wrong"), as_user(&addr, "mallory", "x"), vec!["--server", addr.as_str()]] {
        let mut attempt = vec!["pub"];
        attempt.extend(login);
        attempt.extend(["orders.new", "hi"]);
        let out = tidings(&attempt);
        assert!(!out.status.success(), "{attempt:?} was let in");
        assert!(text(&out.stderr).contains("not_authenticated"), "{attempt:?}: {}", text(&out.stderr));
    }
    let ok = args("pub", &addr, ALICE, &["orders.new", "hi"]);
    let out = tidings(&ok);
    assert!(out.status.success(), "alice refused: {}", text(&out.stderr));
    let failures = tidings_testkit::metric_total(&b.metrics().unwrap(), "tidings_auth_failures_total");
    assert!(failures >= 3.0, "{failures} failures counted");
}

#[test]
fn a_subscriber_to_everything_gets_nothing_denied() {
    let (_dir, b, addr) = setup("");
    let sub = args("sub", &addr, ALICE, &[">", "--count", "1"]);
    let all = start(&b, &sub, true);
    for topic in ["secret.plans", "secret.a.b", "public.news"] {
        let publish = args("pub", &addr, BOB, &[topic, topic]);
        let out = tidings(&publish);
        assert!(out.status.success(), "bob publishes {topic}: {}", text(&out.stderr));
    }
    let out = all.finish();
    let got = text(&out.stdout);
    assert!(got.contains("public.news") && !got.contains("secret"), "alice's `>` got: {got}");
}

/// Once a race: the broker's ERROR could be read before the CLI staged its flush, which then
/// passed on the next connection. The client now keeps the refusal for the next flush/close.
#[test]
fn denied_publishes_are_refused() {
    let (_dir, _b, addr) = setup("");
    // alice may not publish on a denied topic, nor outside her allow list.
    for topic in ["orders.audit", "secret.plans"] {
        let publish = args("pub", &addr, ALICE, &[topic, "x"]);
        let out = tidings(&publish);
        assert!(!out.status.success(), "alice published on {topic}");
        assert!(text(&out.stderr).contains("not_authorized"), "{}", text(&out.stderr));
    }
}

#[test]
fn queue_and_durable_subscriptions_obey_the_same_deny_rules() {
    let (_dir, b, addr) = setup("");
    for extra in [vec!["--queue", "workers"], vec!["--durable", "mine"], vec![]] {
        let mut sub = args("sub", &addr, ALICE, &extra);
        sub.extend(["secret.>", "--count", "1"]);
        let out = tidings(&sub);
        assert!(!out.status.success(), "{extra:?} subscribed to secret.>");
        assert!(text(&out.stderr).contains("not_authorized"), "{extra:?}: {}", text(&out.stderr));
    }
    // A queue member on `>` takes its turn only for what it may read.
    let sub = args("sub", &addr, ALICE, &["--queue", "workers", ">", "--count", "1"]);
    let member = start(&b, &sub, true);
    for topic in ["secret.q", "public.q"] {
        let publish = args("pub", &addr, BOB, &[topic, topic]);
        assert!(tidings(&publish).status.success());
    }
    let got = text(&member.finish().stdout);
    assert!(got.contains("public.q") && !got.contains("secret"), "queue member got: {got}");
}

/// The publish check runs once per new topic on a connection (the session remembers the last
/// topic that passed): a refused topic is never remembered, so it is refused again, and a topic
/// that passed before passes after it. Guaranteed publishes are refused one by one without
/// closing the connection, so one connection shows all of it.
#[test]
fn a_refused_topic_stays_refused_on_the_same_connection() {
    let (_dir, _b, addr) = setup("");
    patterns_common::runtime().block_on(async {
        let client = Client::builder(&addr).password(ALICE.0, ALICE.1).no_reconnect().connect().await.unwrap();
        let steps = [
            ("orders.new", true),
            ("orders.audit", false),
            ("orders.audit", false),
            ("orders.new", true),
            ("secret.x", false),
        ];
        for (i, (topic, allowed)) in steps.into_iter().enumerate() {
            let publish = client.publish_guaranteed(topic, &[], Bytes::from_static(b"x"));
            let out = tokio::time::timeout(Duration::from_secs(10), publish).await.expect("an answer within 10 s");
            assert_eq!(out.is_ok(), allowed, "step {i}, {topic}: {out:?}");
            if let Err(error) = out {
                assert_eq!(error.reason(), Some(ReasonCode::NotAuthorized), "step {i}: {error:?}");
            }
        }
    });
}

/// One session holding an allowed subscription (no per-message check) and then a wildcard over
/// a denied topic (the outbox's gate, set from then on): the wildcard gets nothing denied, and
/// the allowed subscription keeps getting its own messages.
#[test]
fn an_allowed_subscription_beside_a_filtered_one_on_one_session() {
    let (_dir, _b, addr) = setup("");
    patterns_common::runtime().block_on(async {
        let login =
            |(user, password): (&str, &str)| Client::builder(&addr).password(user, password).no_reconnect().connect();
        let (alice, bob) = (login(ALICE).await.unwrap(), login(BOB).await.unwrap());
        let mut news = alice.subscribe("public.news").await.unwrap();
        let mut everything = alice.subscribe(">").await.unwrap();
        for topic in ["secret.plans", "public.news", "secret.more", "public.other"] {
            bob.publish(topic, Bytes::from(topic)).await.unwrap();
        }
        bob.flush().await.unwrap();
        assert_eq!(next(&mut news).await.topic, "public.news");
        let got = [next(&mut everything).await, next(&mut everything).await];
        let topics: Vec<&str> = got.iter().map(|d| d.topic.as_str()).collect();
        assert_eq!(topics, ["public.news", "public.other"], "alice's `>` got {topics:?}");
        // Nothing more: the secrets were withheld, not late.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(everything.try_recv().is_none() && news.try_recv().is_none());
    });
}

/// The next delivery of `sub`, within 10 s.
async fn next(sub: &mut tidings_client::Subscription) -> tidings_client::Delivery {
    tokio::time::timeout(Duration::from_secs(10), sub.recv()).await.expect("a delivery").expect("open")
}

#[test]
fn a_user_removed_by_a_reload_loses_its_connection() {
    let (dir, b, addr) = setup("");
    let sub = args("sub", &addr, ALICE, &["orders.>"]);
    let before = b.metric("tidings_subscriptions").unwrap();
    let _alice = start(&b, &sub, false);
    users_file(dir.path(), false);
    b.signal(tidings_testkit::Signal::Hup).unwrap();
    tidings_testkit::wait_until("alice's subscription is gone", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() <= before
    });
    // And she cannot come back: her reconnects are refused.
    let publish = args("pub", &addr, ALICE, &["orders.new", "x"]);
    assert!(!tidings(&publish).status.success(), "a removed user still logs in");
    assert!(b.metric("tidings_subscriptions").unwrap() <= before);
}

/// A broker with a users file and an MQTT listener, and that listener's port; `None` without
/// mosquitto's clients.
fn mqtt_setup() -> Option<(tempfile::TempDir, BrokerProcess, String)> {
    if !mosquitto_present() {
        return None;
    }
    let (dir, b, _) = setup("[mqtt]\nlisten = \"127.0.0.1:0\"\n");
    let port = b.ready.mqtt.expect("an MQTT listener").port().to_string();
    Some((dir, b, port))
}

#[test]
fn an_mqtt_user_removed_by_a_reload_loses_its_connection() {
    let Some((dir, b, port)) = mqtt_setup() else { return };
    let before = b.metric("tidings_subscriptions").unwrap();
    // `-W 20`: it goes by itself within 20 s, whatever happens here.
    let login = "-V 5 -W 20 -u alice -P alice-pw -t orders/#";
    let mut alice = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port])
        .args(login.split(' '))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tidings_testkit::wait_until("alice's MQTT subscription", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() > before
    });
    users_file(dir.path(), false);
    b.signal(tidings_testkit::Signal::Hup).unwrap();
    tidings_testkit::wait_until("alice's MQTT subscription is gone", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() <= before
    });
    let _ = alice.kill();
    let _ = alice.wait();
}

#[test]
fn mqtt_logins_and_denied_topics_get_their_reason_codes() {
    let Some((_dir, b, port)) = mqtt_setup() else { return };
    let mqtt_pub = |args: &[&str]| {
        let mut all = vec!["-h", "127.0.0.1", "-p", port.as_str()];
        all.extend(args);
        let child = Command::new("mosquitto_pub").args(&all).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        tidings_testkit::finish_within(child.unwrap(), Duration::from_secs(20))
    };
    let wrong = mqtt_pub(&["-u", "alice", "-P", "nope", "-t", "orders/new", "-m", "x"]);
    assert!(!wrong.status.success());
    let said = text(&wrong.stderr).to_lowercase();
    assert!(said.contains("bad user name or password"), "{said}");
    let none = mqtt_pub(&["-V", "5", "-t", "orders/new", "-m", "x"]);
    assert!(!none.status.success(), "an MQTT client without a login was let in");
    // mosquitto says "not authorised" (3.1.1) or "Not authorized" (5.0).
    assert!(text(&none.stderr).to_lowercase().contains("not authori"), "{}", text(&none.stderr));

    // alice's `#` (tidings `>`) through MQTT: a denied publish of bob's is not delivered, and her
    // own publish to a denied topic is refused (v5 DISCONNECT 0x87) and delivers nothing.
    let mut sub = Command::new("mosquitto_sub");
    sub.args(["-h", "127.0.0.1", "-p", &port, "-V", "5", "-u", "alice", "-P", "alice-pw", "-t", "#", "-C", "1"]);
    let before = b.metric("tidings_subscriptions").unwrap();
    let watcher = sub.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    tidings_testkit::wait_until("mosquitto_sub subscribes", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() > before
    });
    let denied = mqtt_pub(&["-V", "5", "-u", "alice", "-P", "alice-pw", "-t", "orders/audit", "-m", "audit"]);
    let _ = denied; // mosquitto_pub may exit 0 once its QoS 0 packet is written; what counts is below
    assert!(mqtt_pub(&["-u", "bob", "-P", "bob-pw", "-t", "secret/x", "-m", "secret"]).status.success());
    assert!(mqtt_pub(&["-u", "bob", "-P", "bob-pw", "-t", "public/x", "-m", "public"]).status.success());
    let got = tidings_testkit::finish_within(watcher, Duration::from_secs(20));
    assert_eq!(text(&got.stdout).trim(), "public", "alice's # got: {}", text(&got.stdout));
    // A denied MQTT subscription fails alone with SUBACK 0x87 (alice may not read secret/#).
    let refused = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port, "-V", "5", "-u", "alice", "-P", "alice-pw", "-t", "secret/#", "-C", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tidings_testkit::finish_within(refused, Duration::from_secs(20));
    let said = text(&out.stderr).to_lowercase();
    assert!(said.contains("denied") || said.contains("not authori"), "{said}");
    assert!(text(&out.stdout).is_empty(), "a denied filter delivered: {}", text(&out.stdout));
}

/// The CLI's admin commands log in to a broker with a users file (plain HTTP here; HTTPS in
/// `tls.rs`): bob, who has the read role, reads it; no login and a user without the role are
/// refused, each in one line naming the cause.
#[test]
fn tidings_info_logs_in_to_the_admin_port() {
    let (_dir, b, _) = setup("");
    let admin = b.ready.admin.unwrap().to_string();
    let out = tidings(&["info", "--admin", &admin, "--user", "bob", "--password", "bob-pw"]);
    assert!(out.status.success(), "info as bob: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("broker "), "{}", text(&out.stdout));
    let none = tidings(&["info", "--admin", &admin]);
    assert!(!none.status.success(), "info without a login succeeded");
    assert!(text(&none.stderr).contains("needs a login"), "{}", text(&none.stderr));
    let alice = tidings(&["durable", "ls", "--admin", &admin, "--user", "alice", "--password", "alice-pw"]);
    assert!(!alice.status.success(), "alice has no admin role");
    assert!(text(&alice.stderr).contains("user alice may not GET"), "{}", text(&alice.stderr));
}

/// `no_auth_user`: a client with no credentials at all is that user (alice here), with her
/// rules; a wrong password is still refused, not downgraded; a users file without her does not
/// load, at start or at a reload (the old file stays in force).
#[test]
fn anonymous_clients_are_the_no_auth_user_and_nobody_else() {
    let (dir, b, addr) = setup("no_auth_user = \"alice\"\n");
    let anonymous = |rest: &[&str]| {
        let mut all = vec!["pub", "--server", addr.as_str()];
        all.extend(rest);
        tidings(&all)
    };
    let out = anonymous(&["orders.new", "hi"]);
    assert!(out.status.success(), "an anonymous publish alice may make: {}", text(&out.stderr));
    let out = anonymous(&["orders.audit", "hi"]);
    assert!(!out.status.success(), "an anonymous publish alice may not make was taken");
    let wrong = tidings(&args("pub", &addr, ("alice", "wrong"), &["orders.new", "hi"]));
    assert!(text(&wrong.stderr).contains("not_authenticated"), "a wrong password: {}", text(&wrong.stderr));
    let unknown = tidings(&args("pub", &addr, ("mallory", "x"), &["orders.new", "hi"]));
    assert!(!unknown.status.success(), "an unknown user was let in as the no-auth user");
    // A reload to a file without alice is refused: anonymous clients keep her rules.
    users_file(dir.path(), false);
    b.signal(tidings_testkit::Signal::Hup).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = anonymous(&["orders.new", "again"]);
    assert!(out.status.success(), "after a refused reload: {}", text(&out.stderr));
    // And a broker whose users file lacks the no-auth user does not start.
    let users = dir.path().join("users.toml");
    let config = format!("[security]\nusers_file = {:?}\nno_auth_user = \"alice\"\n", users.to_str().unwrap());
    assert!(BrokerProcess::start_configured(bin(), &config, &[]).is_err(), "a no_auth_user nobody is started");
}

/// Starts mosquitto's `program` (`mosquitto_sub`/`mosquitto_pub`) on `b`'s MQTT listener in
/// 5.0 with `login` and `args`, its output piped.
fn mosquitto_v5(b: &BrokerProcess, login: &[&str], program: &str, args: &[&str]) -> std::process::Child {
    let port = b.ready.mqtt.expect("an MQTT listener").port().to_string();
    let mut all = vec!["-h", "127.0.0.1", "-p", port.as_str(), "-V", "5"];
    all.extend(login);
    all.extend(args);
    Command::new(program).args(&all).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// The same through MQTT with mosquitto's clients and no login: alice's `#` gets what she may
/// read, and her denied filter gets its SUBACK refusal.
#[test]
fn anonymous_mqtt_clients_are_the_no_auth_user() {
    if !mosquitto_present() {
        return;
    }
    let (_dir, b, _) = setup("no_auth_user = \"alice\"\n[mqtt]\nlisten = \"127.0.0.1:0\"\n");
    let spawn = |program: &str, args: &[&str]| mosquitto_v5(&b, &[], program, args);
    let before = b.metric("tidings_subscriptions").unwrap();
    let watcher = spawn("mosquitto_sub", &["-t", "#", "-C", "1"]);
    tidings_testkit::wait_until("mosquitto_sub subscribes", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() > before
    });
    let published = tidings_testkit::finish_within(
        spawn("mosquitto_pub", &["-t", "orders/new", "-m", "anon"]),
        Duration::from_secs(20),
    );
    assert!(published.status.success(), "{}", text(&published.stderr));
    let got = tidings_testkit::finish_within(watcher, Duration::from_secs(20));
    assert_eq!(text(&got.stdout).trim(), "anon");
    let refused =
        tidings_testkit::finish_within(spawn("mosquitto_sub", &["-t", "secret/#", "-C", "1"]), Duration::from_secs(20));
    let said = text(&refused.stderr).to_lowercase();
    assert!(said.contains("denied") || said.contains("not authori"), "{said}");
}

/// With a users file, what the broker does for a client after its connection ends acts as the
/// client's user: its will is published (alice may publish `orders/will`), and its session's
/// expiry deletes its durable subscription. Both were refused before: the broker's own session
/// for them never logged in.
#[test]
fn a_logged_in_clients_will_and_session_expiry_are_carried_out() {
    if !mosquitto_present() {
        return;
    }
    let (_dir, b, _) = setup("[mqtt]\nlisten = \"127.0.0.1:0\"\n");
    let spawn = |program: &str, args: &[&str]| mosquitto_v5(&b, &["-u", "alice", "-P", "alice-pw"], program, args);
    let before = b.metric("tidings_subscriptions").unwrap();
    let watcher = spawn("mosquitto_sub", &["-t", "orders/will", "-C", "1"]);
    tidings_testkit::wait_until("the watcher subscribes", Duration::from_secs(10), || {
        b.metric("tidings_subscriptions").unwrap() > before
    });
    let will = ["--will-topic", "orders/will", "--will-payload", "gone"];
    let mut dying =
        spawn("mosquitto_sub", &[&["-i", "dying", "-c", "-x", "1", "-q", "1", "-t", "orders/x"][..], &will].concat());
    tidings_testkit::wait_until("the durable subscription is taken", Duration::from_secs(10), || {
        b.metric("tidings_gd_durables").unwrap() >= 1.0
    });
    dying.kill().unwrap();
    let _ = dying.wait();
    let got = tidings_testkit::finish_within(watcher, Duration::from_secs(20));
    assert_eq!(text(&got.stdout).trim(), "gone", "the will: {}", text(&got.stderr));
    tidings_testkit::wait_until("the expired session's durable is deleted", Duration::from_secs(15), || {
        b.metric("tidings_gd_durables").unwrap() == 0.0
    });
}
