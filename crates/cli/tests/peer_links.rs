//! Black-box tests of the link handshake against real broker processes: a fake peer speaks raw
//! peer frames to a broker's link listener and tries what an attacker or a broken broker
//! would. The judge is what the broker says (its CLOSE reason) and what it does afterwards (its
//! metrics and `/state`): a refused peer changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use serde_json::Value;
use tidings_broker::cluster::auth::{NetworkKey, Role, Transcript};
use tidings_testkit::{http_get, test_key_text, BrokerProcess};
use tidings_wire::peer::{
    Advert, Auth, AuthMode, Hello, Incarnation, LinkStat, LinkStats, PeerFrame, NONCE_LEN, PEER_PROTOCOL_MIN_VERSION,
    PEER_PROTOCOL_VERSION,
};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

fn the_test_key() -> NetworkKey {
    NetworkKey::from_secret(test_key_text().as_bytes()).unwrap()
}

/// A raw link connection that dials a broker the way another broker would.
struct FakePeer {
    stream: TcpStream,
    buf: BytesMut,
}

impl FakePeer {
    fn dial(addr: SocketAddr) -> FakePeer {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        FakePeer { stream, buf: BytesMut::new() }
    }

    fn send(&mut self, frame: &PeerFrame) {
        self.stream.write_all(&frame.to_bytes().unwrap()).unwrap();
    }

    fn hello(name: &str, incarnation: u64, auth: AuthMode) -> Hello {
        Hello {
            min_version: PEER_PROTOCOL_MIN_VERSION,
            max_version: PEER_PROTOCOL_VERSION,
            auth,
            nonce: [0x5a; NONCE_LEN],
            name: name.into(),
            cell: name.into(),
            incarnation: Incarnation(incarnation),
        }
    }

    /// The next frame, or `None` once the broker closed the connection.
    fn next(&mut self) -> Option<PeerFrame> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(frame) = PeerFrame::decode(&mut self.buf, 1 << 24).unwrap() {
                return Some(frame);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Takes what arrives within a few milliseconds, whole frames into `out`.
    fn poll(&mut self, out: &mut Vec<PeerFrame>) {
        self.stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut chunk = [0u8; 4096];
        if let Ok(n) = self.stream.read(&mut chunk) {
            self.buf.extend_from_slice(&chunk[..n]);
        }
        while let Some(frame) = PeerFrame::decode(&mut self.buf, 1 << 24).unwrap() {
            out.push(frame);
        }
        self.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }

    /// Reads until the broker's CLOSE; returns its reason.
    fn close_reason(&mut self) -> String {
        loop {
            match self.next() {
                Some(PeerFrame::Close(close)) => return close.reason,
                Some(_) => {}
                None => panic!("connection closed without a CLOSE frame"),
            }
        }
    }

    /// Dials as `name` with `key` (or none) and runs the handshake as a dialler; returns the
    /// broker's HELLO. Whether the broker accepted shows in what follows.
    fn handshake(addr: SocketAddr, name: &str, incarnation: u64, key: Option<&NetworkKey>) -> (FakePeer, Hello) {
        FakePeer::handshake_speaking(addr, (name, incarnation), key, PEER_PROTOCOL_VERSION)
    }

    /// As [`FakePeer::handshake`], speaking peer protocol versions up to `max_version` only.
    fn handshake_speaking(
        addr: SocketAddr,
        (name, incarnation): (&str, u64),
        key: Option<&NetworkKey>,
        max_version: u16,
    ) -> (FakePeer, Hello) {
        let mut peer = FakePeer::dial(addr);
        let auth = if key.is_some() { AuthMode::SharedKey } else { AuthMode::Insecure };
        let ours = Hello { max_version, ..FakePeer::hello(name, incarnation, auth) };
        peer.send(&PeerFrame::Hello(ours.clone()));
        let Some(PeerFrame::Hello(theirs)) = peer.next() else { panic!("the broker sent no HELLO") };
        if let Some(key) = key {
            let version = ours.negotiate(&theirs).unwrap();
            let transcript = Transcript { dialler: &ours, listener: &theirs, version };
            peer.send(&PeerFrame::Auth(Auth { proof: transcript.proof(key, Role::Dialler) }));
        }
        (peer, theirs)
    }
}

fn metric(broker: &BrokerProcess, name: &str) -> f64 {
    broker.metric(name).unwrap()
}

fn state(broker: &BrokerProcess) -> Value {
    serde_json::from_str(&http_get(broker.ready.admin.unwrap(), "/state").unwrap()).unwrap()
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two real brokers, `a` listening and `b` dialling it, linked.
fn linked_pair() -> (BrokerProcess, BrokerProcess) {
    let a = BrokerProcess::start(bin(), &["--name", "a", "--cluster-listen", "127.0.0.1:0"]).unwrap();
    let a_cluster = a.ready.cluster.unwrap().to_string();
    let b = BrokerProcess::start(bin(), &["--name", "b", "--peer", &a_cluster]).unwrap();
    wait_for("a and b link", || metric(&a, "tidings_links_up") == 1.0 && metric(&b, "tidings_links_up") == 1.0);
    wait_for("a and b agree on the view", || state(&a)["router"]["view"] == state(&b)["router"]["view"]);
    (a, b)
}

/// What must not change when a peer is refused: a's links, its link-state view, what it knows
/// of b.
fn fingerprint(a: &BrokerProcess) -> (f64, f64, Value, Value) {
    let s = state(a);
    (
        metric(a, "tidings_links_up"),
        metric(a, "tidings_links_established_total"),
        s["router"]["view"].clone(),
        s["router"]["links"].clone(),
    )
}

#[test]
fn an_unauthenticated_or_wrong_key_peer_is_refused_and_changes_nothing() {
    let (a, _b) = linked_pair();
    let before = fingerprint(&a);
    let cluster = a.ready.cluster.unwrap();

    let (mut insecure, _) = FakePeer::handshake(cluster, "c", 1, None);
    assert!(insecure.close_reason().contains("authentication required"));

    let wrong = NetworkKey::from_secret(&[7u8; 32]).unwrap();
    let (mut forger, _) = FakePeer::handshake(cluster, "b", 99, Some(&wrong));
    let reason = forger.close_reason();
    assert!(reason.contains("authentication failed"), "{reason}");

    // A HELLO with a key mode but control frames instead of a proof.
    let mut skipper = FakePeer::dial(cluster);
    skipper.send(&PeerFrame::Hello(FakePeer::hello("d", 1, AuthMode::SharedKey)));
    let forged = Advert {
        origin: "b".into(),
        cell: "b".into(),
        incarnation: Incarnation(u64::MAX),
        sequence: 1,
        links: vec![],
        pubends: vec![],
    };
    skipper.send(&PeerFrame::Adverts(vec![forged]));
    let reason = skipper.close_reason();
    assert!(reason.contains("must be AUTH"), "{reason}");

    assert_eq!(metric(&a, "tidings_link_auth_failures_total{why=\"no_key\"}"), 1.0);
    assert_eq!(metric(&a, "tidings_link_auth_failures_total{why=\"wrong_key\"}"), 1.0);
    assert_eq!(metric(&a, "tidings_link_auth_failures_total{why=\"no_proof\"}"), 1.0);
    assert_eq!(fingerprint(&a), before, "a refused peer changed the broker's links or view");
}

#[test]
fn a_hello_claiming_the_name_of_a_live_linked_peer_is_refused() {
    let (a, _b) = linked_pair();
    let before = fingerprint(&a);
    // The right key, b's name, a newer incarnation: what took over b's link before.
    let (mut impostor, _) = FakePeer::handshake(a.ready.cluster.unwrap(), "b", u64::MAX, Some(&the_test_key()));
    let reason = impostor.close_reason();
    assert!(reason.contains("b is linked to a and alive"), "{reason}");
    assert_eq!(metric(&a, "tidings_link_takeovers_refused_total"), 1.0);
    assert_eq!(fingerprint(&a), before, "the impostor changed a's link to b");
}

#[test]
fn bad_input_from_a_peer_closes_only_that_link_with_a_clear_reason() {
    let broker = BrokerProcess::start(bin(), &["--name", "solo", "--cluster-listen", "127.0.0.1:0"]).unwrap();
    let cluster = broker.ready.cluster.expect("a cluster listener");
    let key = the_test_key();
    for (what, bytes, expect) in [
        ("garbage", vec![0u8, 0, 0, 1, 99], "unknown frame type 0x63"),
        ("oversized", vec![0xff, 0xff, 0xff, 0xff, 1], "exceeds the maximum"),
    ] {
        let mut peer = FakePeer::dial(cluster);
        peer.stream.write_all(&bytes).unwrap();
        let reason = peer.close_reason();
        assert!(reason.contains(expect), "{what}: {reason}");
    }
    let (mut own_name, _) = FakePeer::handshake(cluster, "solo", 1, Some(&key));
    assert!(own_name.close_reason().contains("cannot link to itself"));
    // A malformed frame after a good handshake closes that link, and nothing else.
    let (mut intruder, _) = FakePeer::handshake(cluster, "intruder", 1, Some(&key));
    intruder.stream.write_all(&[0, 0, 0, 4, 0x08, 0, 9, 1]).unwrap();
    let reason = intruder.close_reason();
    assert!(reason.contains("malformed frame"), "{reason}");
    assert_eq!(metric(&broker, "tidings_peer_protocol_errors_total"), 1.0);
    let (_friend, _) = FakePeer::handshake(cluster, "friend", 1, Some(&key));
    wait_for("a well-behaved peer links after the bad ones", || metric(&broker, "tidings_links_up") == 1.0);
}

/// A guaranteed frame whose body is malformed (a NACK whose ranges are not sorted) is refused
/// alone: the link stays up and keeps working. Closing the link for it made the peer redial
/// and send the same frame again, ten times a second, for minutes (issue 38, failure B).
#[test]
fn a_malformed_guaranteed_frame_is_refused_alone_and_the_link_stays_up() {
    let broker = BrokerProcess::start(bin(), &["--name", "solo", "--cluster-listen", "127.0.0.1:0"]).unwrap();
    let cluster = broker.ready.cluster.expect("a cluster listener");
    let (mut peer, _) = FakePeer::handshake(cluster, "relay", 1, Some(&the_test_key()));
    wait_for("the peer links", || metric(&broker, "tidings_links_up") == 1.0);
    // NACK (0x13): pubend 7, two ranges, [10, 20] then [5, 6]: out of order.
    let mut body = vec![0x13];
    body.extend(7u64.to_be_bytes());
    body.extend(2u32.to_be_bytes());
    for tick in [10u64, 20, 5, 6] {
        body.extend(tick.to_be_bytes());
    }
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend(body);
    for _ in 0..3 {
        peer.stream.write_all(&frame).unwrap();
    }
    peer.send(&PeerFrame::Heartbeat);
    wait_for("the three frames are refused", || metric(&broker, "tidings_peer_frames_refused_total") == 3.0);
    assert_eq!(metric(&broker, "tidings_peer_protocol_errors_total"), 0.0, "no link was closed for them");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric(&broker, "tidings_links_up"), 1.0, "the link is still up");
    assert_eq!(state(&broker)["router"]["links"][0]["peer"], "relay", "{}", state(&broker));
}

#[test]
fn a_second_broker_on_a_locked_data_dir_refuses_to_start() {
    let scratch = tempfile::tempdir().unwrap();
    let data = scratch.path().join("shared").display().to_string();
    let first = BrokerProcess::start(bin(), &["--name", "one", "--data", &data]).unwrap();
    let counter = Path::new(&data).join("incarnation");
    let before = std::fs::read_to_string(&counter).unwrap();
    let mut second = Command::new(bin())
        .args(["broker", "--name", "two", "--listen", "127.0.0.1:0", "--udp", "off", "--admin", "off"])
        .args(["--data", &data])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            panic!("the second broker started on a locked data directory");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    second.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("in use by another broker"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), before, "untouched");
    drop(first);
}

#[test]
fn a_link_listener_without_a_key_needs_the_insecure_flag() {
    let out =
        Command::new(bin()).args(["broker", "--print-config", "--cluster-listen", "127.0.0.1:0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster.key_file") && err.contains("--cluster-insecure"), "{err}");
    let out = Command::new(bin())
        .args(["broker", "--print-config", "--cluster-listen", "127.0.0.1:0", "--cluster-insecure"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn insecure_brokers_link_with_each_other_but_not_with_keyed_ones() {
    let a =
        BrokerProcess::start(bin(), &["--name", "a", "--cluster-listen", "127.0.0.1:0", "--cluster-insecure"]).unwrap();
    let a_cluster = a.ready.cluster.unwrap().to_string();
    let b = BrokerProcess::start(bin(), &["--name", "b", "--peer", &a_cluster, "--cluster-insecure"]).unwrap();
    wait_for("insecure brokers link", || {
        metric(&a, "tidings_links_up") == 1.0 && metric(&b, "tidings_links_up") == 1.0
    });
    let (mut keyed, _) = FakePeer::handshake(a.ready.cluster.unwrap(), "c", 1, Some(&the_test_key()));
    let reason = keyed.close_reason();
    assert!(reason.contains("this broker is insecure"), "{reason}");
    assert_eq!(metric(&a, "tidings_links_up"), 1.0);
}

/// The LINK_STATS frames each peer receives over `time`, heartbeats sent meanwhile so every
/// link stays up.
fn link_reports(peers: &mut [&mut FakePeer], time: Duration) -> Vec<Vec<LinkStats>> {
    let mut frames = vec![Vec::new(); peers.len()];
    let deadline = Instant::now() + time;
    while Instant::now() < deadline {
        for (peer, got) in peers.iter_mut().zip(&mut frames) {
            peer.send(&PeerFrame::Heartbeat);
            peer.poll(got);
        }
    }
    let reports = |frames: Vec<PeerFrame>| {
        frames.into_iter().filter_map(|frame| if let PeerFrame::LinkStats(s) = frame { Some(s) } else { None })
    };
    frames.into_iter().map(|f| reports(f).collect()).collect()
}

/// LINK_STATS (peer protocol version 4, the web view's reports of every link) goes only where
/// it is understood and only while someone watches: with no viewer the broker sends none; with
/// one, it sends its own report, flagged wanted, on its version 4 links and never on the version
/// 3 one (an older broker would close the link on the unknown type); a peer's report is passed
/// on to the other version 4 peer, once, not back; a malformed one is refused alone.
#[test]
fn link_reports_go_only_to_links_that_speak_them_while_someone_watches() {
    let broker = BrokerProcess::start(bin(), &["--name", "solo", "--cluster-listen", "127.0.0.1:0"]).unwrap();
    let cluster = broker.ready.cluster.expect("a cluster listener");
    let key = the_test_key();
    let (mut old, _) = FakePeer::handshake_speaking(cluster, ("old", 1), Some(&key), 3);
    let (mut new1, _) = FakePeer::handshake(cluster, "new1", 1, Some(&key));
    let (mut new2, _) = FakePeer::handshake(cluster, "new2", 1, Some(&key));
    wait_for("three peers link", || metric(&broker, "tidings_links_up") == 3.0);
    let quiet = link_reports(&mut [&mut old, &mut new1, &mut new2], Duration::from_millis(2500));
    assert!(quiet.iter().all(Vec::is_empty), "reports with nobody watching: {quiet:?}");

    let mut viewer = TcpStream::connect(broker.ready.admin.unwrap()).unwrap();
    viewer.write_all(b"GET /events HTTP/1.1\r\nHost: solo\r\n\r\n").unwrap();
    let watched = link_reports(&mut [&mut old, &mut new1, &mut new2], Duration::from_millis(3500));
    assert!(watched[0].is_empty(), "a version 3 link got reports: {:?}", watched[0]);
    for got in &watched[1..] {
        assert!(got.iter().all(|s| s.origin == "solo" && s.wanted), "{got:?}");
        let peers = |s: &LinkStats| s.links.iter().map(|l| l.peer.clone()).collect::<Vec<_>>();
        assert!(got.iter().any(|s| peers(s) == ["new1", "new2", "old"]), "no report of solo's 3 links: {got:?}");
        assert!(got.windows(2).all(|w| w[0].sequence < w[1].sequence), "{got:?}");
    }

    let far = LinkStats {
        origin: "far".into(),
        incarnation: Incarnation(1),
        sequence: 1,
        wanted: false,
        links: vec![LinkStat { peer: "new1".into(), out_centi: 500, in_centi: 0, queued_messages: 0, queued_bytes: 0 }],
    };
    new1.send(&PeerFrame::LinkStats(far.clone()));
    new1.send(&PeerFrame::LinkStats(far.clone()));
    let relayed = link_reports(&mut [&mut old, &mut new1, &mut new2], Duration::from_millis(1500));
    let from_far = |got: &Vec<LinkStats>| got.iter().filter(|s| s.origin == "far").cloned().collect::<Vec<_>>();
    assert_eq!(from_far(&relayed[2]), vec![far], "passed on to new2 once");
    assert!(from_far(&relayed[1]).is_empty() && relayed[0].is_empty(), "{relayed:?}");

    // LINK_STATS of origin "x" with flag bits 0x80: refused, counted, the link kept.
    let mut frame = vec![0, 0, 0, 25, 0x09, 0, 1, b'x'];
    frame.extend(1u64.to_be_bytes());
    frame.extend(2u64.to_be_bytes());
    frame.extend([0x80, 0, 0, 0, 0]);
    new1.stream.write_all(&frame).unwrap();
    wait_for("the bad report is refused", || metric(&broker, "tidings_peer_frames_refused_total") == 1.0);
    let after = link_reports(&mut [&mut old, &mut new1, &mut new2], Duration::from_millis(300));
    assert!(after.iter().flatten().all(|s| s.origin == "solo"), "the bad report went on: {after:?}");
    assert_eq!(metric(&broker, "tidings_peer_protocol_errors_total"), 0.0, "no link was closed for it");
    assert_eq!(metric(&broker, "tidings_links_up"), 3.0);
    drop(viewer);
}

/// A broker its cell forgot (`tidings cell forget`, kept in `<data dir>/cell-forgotten`) is
/// refused before the listener says HELLO: the first frame it reads is a CLOSE saying why, so
/// no link comes up on its side either, and the refusal changes nothing here. A broker of
/// another name links after it.
#[test]
fn a_forgotten_broker_is_refused_before_the_listener_says_hello() {
    let data = tempfile::tempdir().unwrap();
    let ghost_id = tidings_wire::hash::fnv1a(b"ghost").max(1);
    std::fs::write(data.path().join("cell-forgotten"), format!("{ghost_id}\n")).unwrap();
    let dir = data.path().display().to_string();
    let args = ["--name", "solo", "--cluster-listen", "127.0.0.1:0", "--data", &dir];
    let broker = BrokerProcess::start(bin(), &args).unwrap();
    let cluster = broker.ready.cluster.expect("a cluster listener");
    let before = fingerprint(&broker);
    let mut ghost = FakePeer::dial(cluster);
    ghost.send(&PeerFrame::Hello(FakePeer::hello("ghost", 1, AuthMode::SharedKey)));
    match ghost.next() {
        Some(PeerFrame::Close(close)) => {
            assert!(close.reason.starts_with("forgotten by cell solo: `tidings cell forget ghost`"), "{}", close.reason)
        }
        other => panic!("the forgotten broker read {other:?}, not a CLOSE"),
    }
    assert_eq!(fingerprint(&broker), before, "the refusal changed the broker's links");
    assert!(state(&broker)["forgotten_here"].is_null(), "solo itself is not forgotten");
    let (_friend, _) = FakePeer::handshake(cluster, "friend", 1, Some(&the_test_key()));
    wait_for("another broker links", || metric(&broker, "tidings_links_up") == 1.0);
}

/// A broker dials a configured peer that turns out to be one its cell forgot: it closes before
/// AUTH with the reason, and does not dial that address again (on main it redialled every
/// 100-800 ms).
#[test]
fn a_broker_does_not_dial_a_forgotten_broker_again() {
    let data = tempfile::tempdir().unwrap();
    let ghost_id = tidings_wire::hash::fnv1a(b"ghost").max(1);
    std::fs::write(data.path().join("cell-forgotten"), format!("{ghost_id}\n")).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (dir, ghost_at) = (data.path().display().to_string(), listener.local_addr().unwrap().to_string());
    let args = ["--name", "solo", "--cluster-listen", "127.0.0.1:0", "--data", &dir, "--peer", &ghost_at];
    let broker = BrokerProcess::start(bin(), &args).unwrap();
    let (stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ghost = FakePeer { stream, buf: BytesMut::new() };
    let Some(PeerFrame::Hello(_)) = ghost.next() else { panic!("the dialler sent no HELLO") };
    ghost.send(&PeerFrame::Hello(FakePeer::hello("ghost", 1, AuthMode::SharedKey)));
    let reason = ghost.close_reason();
    assert!(reason.starts_with("forgotten by cell solo: `tidings cell forget ghost`"), "{reason}");
    listener.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let again = listener.accept();
    assert!(again.is_err(), "the broker dialled the forgotten broker again");
    assert_eq!(metric(&broker, "tidings_links_up"), 0.0);
}

/// On an insecure network a broker that dials a mate which forgot it has its link up for a
/// moment (its handshake ends at the HELLOs), then reads the mate's CLOSE: it takes it as its
/// cell saying it is forgotten, shows why in `/state`, refuses a guaranteed publish with it,
/// and does not dial the mate again at once.
#[test]
fn an_insecure_broker_closed_as_forgotten_says_so_and_refuses_guaranteed_publishes() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mate_at = listener.local_addr().unwrap().to_string();
    let args = ["--name", "p3", "--cluster-listen", "127.0.0.1:0", "--cluster-insecure", "--peer", &mate_at];
    let broker = BrokerProcess::start(bin(), &args).unwrap();
    let (stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut mate = FakePeer { stream, buf: BytesMut::new() };
    let Some(PeerFrame::Hello(theirs)) = mate.next() else { panic!("the dialler sent no HELLO") };
    let ours = Hello { cell: theirs.cell.clone(), ..FakePeer::hello("mate", 1, AuthMode::Insecure) };
    mate.send(&PeerFrame::Hello(ours));
    let why = format!("forgotten by cell {}: `tidings cell forget p3` was run", theirs.cell);
    mate.send(&PeerFrame::Close(tidings_wire::peer::Close { reason: why.clone() }));
    wait_for("p3 says its cell forgot it", || state(&broker)["forgotten_here"] == why.as_str());
    let out = publish_guaranteed(&broker);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a guaranteed publish at the forgotten broker was acknowledged");
    assert!(said.contains("unavailable: this broker was forgotten by cell"), "{said}");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "the forgotten broker dialled the mate again within seconds");
}

/// A CLOSE saying "forgotten by cell ..." as the first frame of a connection this broker did
/// not dial is anyone's to send (it comes before AUTH): a healthy broker does not take it as its
/// cell forgetting it, and goes on acknowledging guaranteed publishes. Before, one such frame
/// from any client of the cluster port stopped its guaranteed publishes until a mate linked
/// again.
#[test]
fn a_close_on_a_connection_it_did_not_dial_does_not_make_a_broker_forgotten() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().display().to_string();
    let args = ["--name", "solo", "--cluster-listen", "127.0.0.1:0", "--data", &dir];
    let broker = BrokerProcess::start(bin(), &args).unwrap();
    let cluster = broker.ready.cluster.expect("a cluster listener");
    let mut stranger = FakePeer::dial(cluster);
    let why = "forgotten by cell default: `tidings cell forget solo` was run".to_string();
    stranger.send(&PeerFrame::Close(tidings_wire::peer::Close { reason: why }));
    // The broker drops the connection: the stranger reads its end (or its refusal).
    let _ = stranger.next();
    std::thread::sleep(Duration::from_millis(500));
    assert!(state(&broker)["forgotten_here"].is_null(), "a stranger's CLOSE made the broker forgotten");
    let out = publish_guaranteed(&broker);
    assert!(out.status.success(), "a guaranteed publish was refused: {}", String::from_utf8_lossy(&out.stderr));
}

/// One guaranteed publish at `broker` with `tidings pub`, its own client state directory, within
/// 30 s: what the command said and how it ended.
fn publish_guaranteed(broker: &BrokerProcess) -> std::process::Output {
    let state_dir = tempfile::tempdir().unwrap();
    let publish = Command::new(bin())
        .args(["pub", "--server", &broker.tcp(), "--guaranteed", "g.a", "x"])
        .env("XDG_STATE_HOME", state_dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tidings_testkit::finish_within(publish, Duration::from_secs(30))
}
