//! The second hardening issue's holes, against real brokers: half a frame held memory without
//! a budget or a time limit (clients, and links before they authenticate); bulk work (a
//! million subscriptions dropped at once, admin pages) froze unrelated clients. Each test
//! prints the figure it measures; `#[ignore]`d ones are the full-size measurements.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use tidings_testkit::{BrokerProcess, RawConnection};
use tidings_wire::{Frame, ReasonCode};

const SECOND: Duration = Duration::from_secs(1);

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

/// The header of a PUBLISH announcing `len` bytes (type byte and body), then `body` bytes of it.
fn half_frame(len: u32, body: usize) -> Vec<u8> {
    let mut bytes = len.to_be_bytes().to_vec();
    bytes.push(0x03);
    bytes.resize(5 + body, 0);
    bytes
}

/// Opens `n` connections that each send HELLO, then most of a large frame, and stop.
fn hold_half_frames(b: &BrokerProcess, n: usize, len: u32, body: usize) -> Vec<RawConnection> {
    let bytes = half_frame(len, body);
    (0..n)
        .map(|_| {
            let mut c = RawConnection::handshake(&b.tcp()).unwrap();
            // A connection refused mid-way may be closed already; its ERROR is read later.
            let _ = c.send_bytes(&bytes);
            c
        })
        .collect()
}

/// The attack: after HELLO, the header of a large frame and most of its body, then nothing.
/// Each connection held its bytes outside every budget for as long as it liked. Now they are
/// charged to the broker's budget (past it the connection is closed at once) and a frame not
/// whole within `frame_timeout` closes its connection.
#[test]
fn half_frames_are_held_within_the_brokers_budget_and_closed_at_the_frame_deadline() {
    let toml = "[limits]\nmax_frame = 1048576\nmax_queued_bytes = 2097152\nframe_timeout = \"2s\"\n\
                [slow_consumer]\nmax_bytes = 1048576\n";
    let b = BrokerProcess::start_configured(bin(), toml, &[]).unwrap();
    let started = Instant::now();
    let mut held = hold_half_frames(&b, 6, 1_000_000, 900_000);
    let reading = b.metric("tidings_reading_bytes").unwrap();
    assert!(reading <= 2.0 * 1024.0 * 1024.0, "{reading} bytes held for frames being read, past the 2 MiB budget");
    let mut over_budget = 0;
    for c in &mut held {
        match c.expect(Duration::from_millis(500)) {
            Ok(Frame::Error(n)) if n.to_string().contains("frames being read") => over_budget += 1,
            Ok(Frame::Error(n)) => assert_eq!(n.reason(), Some(ReasonCode::LimitExceeded), "{n}"),
            _ => {}
        }
    }
    assert!(over_budget >= 2, "six frames of 900 KB fit a budget of 2 MiB: only {over_budget} were refused");
    for c in &mut held {
        assert!(c.expect_closed(10 * SECOND), "a half frame was held past the frame deadline");
    }
    eprintln!("half frames: all closed {:?} after they began (frame_timeout 2 s)", started.elapsed());
    tidings_testkit::wait_until("the read buffers go back to the budget", 5 * SECOND, || {
        b.metric("tidings_reading_bytes").unwrap() == 0.0
    });
    let mut fine = RawConnection::handshake(&b.tcp()).unwrap();
    fine.send(&Frame::Ping(tidings_wire::Ping { nonce: 7 })).unwrap();
    assert!(matches!(fine.expect(5 * SECOND), Ok(Frame::Pong(_))), "the broker still serves");
}

/// Before a peer authenticates, the link listener read frames of a link's full size (8 MiB
/// and more) and held them until the 5 s handshake bound. Now a handshake frame is at most
/// 4 KiB: a larger header closes the connection at once.
#[test]
fn before_a_link_is_verified_a_large_frame_is_refused_at_its_header() {
    let b = BrokerProcess::start(bin(), &["--name", "a", "--cluster-listen", "127.0.0.1:0"]).unwrap();
    let mut stream = TcpStream::connect(b.ready.cluster.expect("a cluster listener")).unwrap();
    stream.set_read_timeout(Some(10 * SECOND)).unwrap();
    let started = Instant::now();
    let _ = stream.write_all(&half_frame(8 << 20, 256 * 1024));
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let closed = started.elapsed();
    eprintln!("an unverified peer's 8 MiB header: closed after {closed:?}");
    assert!(closed < 3 * SECOND, "closed after {closed:?}: held until the handshake bound (5 s)");
}
