//! Fuzzing the broker's session state machine through its socket: arbitrary sequences of
//! frames (any type, any field values: unknown ids, patterns that do not parse, guaranteed
//! frames out of place, frames only a broker sends) and raw bytes, with or without HELLO first,
//! against one running broker. After each sequence the broker must still answer a fresh client,
//! and everything it sent back must decode. `SESSION_FUZZ_CASES` sets how many sequences
//! (default 64; the seed is proptest's, and a failure is shrunk to a short sequence).
//!
//! The handshakes (issue 43) are fuzzed too, in [`handshakes`]: what a server reads before a
//! login completes (a native HELLO with credentials, an MQTT CONNECT, a link's HELLO and AUTH,
//! a TLS ClientHello), mutated, against the codecs in process and a broker with a users file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod handshakes;
mod pki_common;

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tidings_testkit::{BrokerProcess, RawConnection};
use tidings_wire::strategies::frame;
use tidings_wire::{Frame, Hello, Ping};

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Step {
    Frame(Frame),
    Bytes(Vec<u8>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => frame().prop_map(Step::Frame),
        1 => prop::collection::vec(any::<u8>(), 1..48).prop_map(Step::Bytes),
    ]
}

fn cases() -> u32 {
    std::env::var("SESSION_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
}

/// Sends the sequence (the broker may close the connection at any point: later sends fail and
/// are ignored), then reads whatever comes back until the connection closes or goes quiet.
/// Returns an error if the broker sent something that does not decode.
fn play(addr: &str, hello: bool, steps: &[Step]) -> Result<(), String> {
    let mut c = RawConnection::connect(addr).map_err(|e| format!("connect: {e}"))?;
    if hello {
        let _ = c.send(&Frame::Hello(Hello::new("fuzz")));
    }
    for step in steps {
        let sent = match step {
            Step::Frame(frame) => c.send(frame),
            Step::Bytes(bytes) => c.send_bytes(bytes),
        };
        if sent.is_err() {
            break;
        }
    }
    let _ = c.send(&Frame::Ping(Ping { nonce: 42 }));
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match c.expect(Duration::from_millis(300)) {
            Ok(_) => continue,
            Err(e) => {
                return match e.kind() {
                    std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe => Ok(()),
                    _ => Err(format!("the broker sent bytes that do not decode: {e}")),
                };
            }
        }
    }
    Ok(())
}

/// One broker for every case (stopped when the test ends, whatever happened), the cases run
/// by proptest's runner so that a failure is shrunk to a short sequence.
#[test]
fn no_sequence_of_frames_takes_the_broker_down_or_makes_it_send_garbage() {
    let b = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_tidings")), &[]).expect("broker starts");
    let addr = b.tcp();
    let config = ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let strategy = (any::<bool>(), prop::collection::vec(step(), 1..16));
    let result = runner.run(&strategy, |(hello, steps)| {
        prop_assert_eq!(play(&addr, hello, &steps), Ok(()));
        // Still serving: a fresh client completes the handshake and gets its PONG.
        let mut fresh = RawConnection::handshake(&addr).map_err(|e| TestCaseError::fail(format!("handshake: {e}")))?;
        fresh.send(&Frame::Ping(Ping { nonce: 7 })).unwrap();
        let pong = fresh.expect(Duration::from_secs(5)).map_err(|e| TestCaseError::fail(format!("no PONG: {e}")))?;
        prop_assert!(matches!(pong, Frame::Pong(p) if p.nonce == 7), "expected PONG, got {:?}", pong);
        Ok(())
    });
    drop(b);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
