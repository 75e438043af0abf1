//! Fuzzing what a broker reads before a login completes (issue 43). Each case is an opening,
//! a valid handshake of one kind with arbitrary fields, then mutated (bytes flipped, cut short,
//! bytes added): a native HELLO (any version, name, password or token), an MQTT CONNECT (3.1.1
//! or 5.0, with user, password, will and any CONNECT properties, AUTH's method and data among
//! them), or a link's HELLO and AUTH. Each is decoded in process by its codec (which must not
//! panic) and sent to a broker with a users file, which must not let the stranger in (no
//! WELCOME, no successful CONNACK) and must still serve a client with a valid login afterwards.
//! A second test sends random bytes and mutated real TLS ClientHellos to a TLS port: each
//! connection must be closed within the handshake timeout, and the broker must still serve a
//! TLS client. `HANDSHAKE_FUZZ_CASES` sets how many cases (default 64).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use proptest::prelude::*;
use tidings_testkit::{BrokerProcess, RawConnection};
use tidings_wire::mqtt::{Packet, ProtocolVersion, MAX_PACKET_SIZE};
use tidings_wire::peer::{Auth, AuthMode, Incarnation, PeerFrame};
use tidings_wire::{Frame, Hello, HelloAuth, Ping};

use crate::pki_common::Pki;

const TOKEN: &str = "fuzz-healthy-token-0123456789";

fn cases() -> u32 {
    std::env::var("HANDSHAKE_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// Which door an opening knocks on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Door {
    Native,
    Mqtt(ProtocolVersion),
    Link,
}

fn native() -> impl Strategy<Value = Vec<u8>> {
    let auth = prop_oneof![
        Just(HelloAuth::None),
        (".{0,40}", ".{0,200}").prop_map(|(user, password)| HelloAuth::Password { user, password }),
        ".{0,200}".prop_map(HelloAuth::Token),
    ];
    (any::<u16>(), ".{0,16}", auth).prop_map(|(version, client_name, auth)| {
        let auth = if version < tidings_wire::HELLO_AUTH_VERSION { HelloAuth::None } else { auth };
        Frame::Hello(Hello { version, client_name, auth }).to_bytes().unwrap().to_vec()
    })
}

fn mqtt(version: ProtocolVersion) -> impl Strategy<Value = Vec<u8>> {
    tidings_wire::mqtt::strategies::connect(version).prop_map(move |connect| {
        let mut out = BytesMut::new();
        Packet::Connect(Box::new(connect)).encode(version, &mut out).unwrap();
        out.to_vec()
    })
}

fn link() -> impl Strategy<Value = Vec<u8>> {
    let names = (".{0,12}", ".{0,8}", any::<u64>());
    (any::<u16>(), any::<u16>(), any::<bool>(), any::<[u8; 32]>(), names, any::<[u8; 32]>()).prop_map(
        |(min_version, max_version, keyed, nonce, (name, cell, incarnation), proof)| {
            let auth = if keyed { AuthMode::SharedKey } else { AuthMode::Insecure };
            let hello = tidings_wire::peer::Hello {
                min_version,
                max_version,
                auth,
                nonce,
                name,
                cell,
                incarnation: Incarnation(incarnation),
            };
            let mut bytes = PeerFrame::Hello(hello).to_bytes().unwrap().to_vec();
            bytes.extend_from_slice(&PeerFrame::Auth(Auth { proof }).to_bytes().unwrap());
            bytes
        },
    )
}

/// Flips, a cut and extra bytes applied to a valid opening.
fn mutated(valid: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let flips = prop::collection::vec((any::<usize>(), any::<u8>()), 0..4);
    let extra = prop::collection::vec(any::<u8>(), 0..24);
    (valid, flips, prop::option::of(any::<usize>()), extra).prop_map(|(mut bytes, flips, cut, extra)| {
        for (at, mask) in flips {
            let len = bytes.len();
            if let Some(byte) = bytes.get_mut(at % len.max(1)) {
                *byte ^= mask;
            }
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        bytes.extend(extra);
        bytes
    })
}

fn opening() -> impl Strategy<Value = (Door, Vec<u8>)> {
    prop_oneof![
        mutated(native()).prop_map(|b| (Door::Native, b)),
        mutated(mqtt(ProtocolVersion::V311)).prop_map(|b| (Door::Mqtt(ProtocolVersion::V311), b)),
        mutated(mqtt(ProtocolVersion::V5)).prop_map(|b| (Door::Mqtt(ProtocolVersion::V5), b)),
        mutated(link()).prop_map(|b| (Door::Link, b)),
    ]
}

/// The codec of `door` on `bytes`, in process: whatever it returns, it must return.
fn decode_in_process(door: Door, bytes: &[u8]) {
    let mut buf = BytesMut::from(bytes);
    match door {
        Door::Native => while let Ok(Some(_)) = Frame::decode(&mut buf, 4096) {},
        Door::Mqtt(version) => while let Ok(Some(_)) = Packet::decode(&mut buf, version, MAX_PACKET_SIZE) {},
        Door::Link => while let Ok(Some(_)) = PeerFrame::decode(&mut buf, 1 << 20) {},
    }
}

/// Sends `bytes` on a fresh connection to `addr` and returns what comes back until the broker
/// closes, goes quiet for half a second, three seconds pass, or `enough` bytes came.
fn knock(addr: SocketAddr, bytes: &[u8], enough: usize) -> Vec<u8> {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else { return Vec::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = stream.write_all(bytes);
    let (mut got, mut chunk, until) = (Vec::new(), [0u8; 4096], Instant::now() + Duration::from_secs(3));
    while Instant::now() < until && got.len() < enough {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    got
}

/// A v5 CONNECT with the token as a password alone (a bearer token, as the broker reads it).
fn mqtt_token_connect() -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 0x42, 0, 60, 0, 0, 1, b'h'];
    body.extend_from_slice(&(TOKEN.len() as u16).to_be_bytes());
    body.extend_from_slice(TOKEN.as_bytes());
    let mut packet = vec![0x10, u8::try_from(body.len()).unwrap()];
    packet.extend(body);
    packet
}

/// A CONNACK whose reason is success (3.1.1 and 5.0 both put it in the fourth byte).
fn connack_success(answer: &[u8]) -> bool {
    answer.first() == Some(&0x20) && answer.get(3) == Some(&0)
}

/// A client with a valid login still gets in: native (WELCOME, then PONG) and MQTT (CONNACK 0).
fn still_serving(b: &BrokerProcess) -> Result<(), String> {
    let mut c = RawConnection::connect(&b.tcp()).map_err(|e| format!("connect: {e}"))?;
    let hello = Hello { auth: HelloAuth::Token(TOKEN.into()), ..Hello::new("healthy") };
    c.send(&Frame::Hello(hello)).map_err(|e| e.to_string())?;
    match c.expect(Duration::from_secs(10)) {
        Ok(Frame::Welcome(_)) => {}
        other => return Err(format!("a valid login got {other:?}")),
    }
    c.send(&Frame::Ping(Ping { nonce: 9 })).map_err(|e| e.to_string())?;
    match c.expect(Duration::from_secs(5)) {
        Ok(Frame::Pong(p)) if p.nonce == 9 => {}
        other => return Err(format!("expected PONG, got {other:?}")),
    }
    let answer = knock(b.ready.mqtt.unwrap(), &mqtt_token_connect(), 4);
    if !connack_success(&answer) {
        return Err(format!("a valid MQTT login got {answer:?}"));
    }
    Ok(())
}

#[test]
fn no_mutated_handshake_lets_a_stranger_in_or_takes_the_broker_down() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.toml");
    let entry = tidings_auth::token_entry(TOKEN);
    std::fs::write(&users, format!("[[user]]\nname = \"alice\"\ntokens = [{entry:?}]\n")).unwrap();
    let config = format!(
        "[security]\nusers_file = {:?}\nfailure_delay = \"10ms\"\n[limits]\nhandshake_timeout = \"2s\"\n[mqtt]\nlisten = \"127.0.0.1:0\"\n",
        users.to_str().unwrap()
    );
    let b = BrokerProcess::start_configured(bin(), &config, &["--cluster-listen", "127.0.0.1:0"]).unwrap();
    let doors = |door: Door| match door {
        Door::Native => b.tcp().parse::<SocketAddr>().unwrap(),
        Door::Mqtt(_) => b.ready.mqtt.unwrap(),
        Door::Link => b.ready.cluster.unwrap(),
    };
    let config = ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&opening(), |(door, bytes)| {
        decode_in_process(door, &bytes);
        let answer = knock(doors(door), &bytes, usize::MAX);
        match door {
            Door::Native => {
                let mut buf = BytesMut::from(&answer[..]);
                while let Ok(Some(frame)) = Frame::decode(&mut buf, 1 << 20) {
                    prop_assert!(!matches!(frame, Frame::Welcome(_)), "a stranger got WELCOME: {:?}", bytes);
                }
            }
            Door::Mqtt(_) => prop_assert!(!connack_success(&answer), "a stranger got CONNACK 0: {:?}", bytes),
            Door::Link => {}
        }
        still_serving(&b).map_err(TestCaseError::fail)?;
        Ok(())
    });
    drop(b);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// The first bytes `tidings pub` sends to a TLS server: a real ClientHello.
fn client_hello(ca: &str) -> Vec<u8> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tls://{}", listener.local_addr().unwrap());
    let mut client = std::process::Command::new(bin())
        .args(["pub", "--server", &url, "--tls-ca", ca, "--connect-timeout", "3s", "x", "y"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (mut stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = vec![0u8; 4096];
    let n = stream.read(&mut hello).unwrap();
    hello.truncate(n);
    drop(stream);
    let _ = client.kill();
    let _ = client.wait();
    assert_eq!(hello.first(), Some(&0x16), "a TLS handshake record");
    hello
}

#[test]
fn random_bytes_and_mutated_client_hellos_to_a_tls_port_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "fuzz");
    let (cert, key) = pki.issue("broker", &["127.0.0.1"]);
    let config =
        format!("[tls]\ncert = {cert:?}\nkey = {key:?}\nadmin = false\n[limits]\nhandshake_timeout = \"1s\"\n");
    let b = BrokerProcess::start_configured(bin(), &config, &[]).unwrap();
    let addr: SocketAddr = b.tcp().parse().unwrap();
    let hello = client_hello(&pki.ca());
    let healthy = || {
        let url = format!("tls://{addr}");
        let out = std::process::Command::new(bin())
            .args(["pub", "--server", &url, "--tls-ca", &pki.ca(), "fuzz.after", "ok"])
            .output()
            .unwrap();
        out.status.success()
    };
    let config = ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let strategy = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..600),
        mutated(Just(hello.clone())),
        prop::collection::vec(any::<u8>(), 1..300).prop_map(|tail| [&[0x16u8, 0x03, 0x01][..], &tail[..]].concat()),
    ];
    let case = std::cell::Cell::new(0u32);
    let result = runner.run(&strategy, |bytes| {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = stream.write_all(&bytes);
        let began = Instant::now();
        let mut chunk = [0u8; 4096];
        let closed = loop {
            match stream.read(&mut chunk) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                    break false
                }
                Err(_) => break true, // reset: closed too
            }
        };
        prop_assert!(closed, "the broker held the connection open {:?} after {:?}", began.elapsed(), bytes);
        case.set(case.get() + 1);
        if case.get().is_multiple_of(16) {
            prop_assert!(healthy(), "a TLS client was refused after {} cases", case.get());
        }
        Ok(())
    });
    let after = healthy();
    drop(b);
    if let Err(failure) = result {
        panic!("{failure}");
    }
    assert!(after, "a TLS client was refused after the fuzz");
}
