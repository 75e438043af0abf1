//! A second connection with a client's identifier takes its session over: the first is told
//! why (5.0 DISCONNECT, Session taken over) and closed, the second gets its CONNACK
//! (MQTT-3.1.4-3). The takeover reaches the first connection through the signal its reader
//! already waits on (issue 42: no token and no wait of its own per idle connection), so this
//! checks that signal, whether or not the first connection ever had a delivery task.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod mqtt_broker;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use tidings_wire::mqtt::{Connect, MqttReason, Packet, Properties, ProtocolVersion};

const V5: ProtocolVersion = ProtocolVersion::V5;

/// Connects as `client_id` (5.0, clean start) and returns the stream once CONNACK succeeded.
fn connect(addr: SocketAddr, client_id: &str) -> TcpStream {
    let connect = Connect {
        version: V5,
        clean_start: true,
        keep_alive: 600,
        properties: Properties::default(),
        client_id: client_id.into(),
        will: None,
        username: None,
        password: None,
    };
    let mut out = BytesMut::new();
    Packet::Connect(Box::new(connect)).encode(V5, &mut out).expect("CONNECT encodes");
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream.write_all(&out).expect("CONNECT written");
    match next_packet(&mut stream) {
        Some(Packet::Connack(connack)) => assert_eq!(connack.reason, MqttReason::Success, "{connack:?}"),
        other => panic!("a CONNACK expected, got {other:?}"),
    }
    stream
}

/// The next packet the broker sends, or `None` once it closed the connection.
fn next_packet(stream: &mut TcpStream) -> Option<Packet> {
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 256];
    loop {
        if let Some(packet) = Packet::decode(&mut buf, V5, 1 << 20).expect("the broker's packets decode") {
            return Some(packet);
        }
        match stream.read(&mut chunk).expect("read within the timeout") {
            0 => return None,
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn a_second_connection_with_the_same_client_id_closes_the_first_saying_why() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = mqtt_broker::config(dir.path());
    let running = runtime.block_on(tidings_broker::server::start(config)).expect("broker starts");
    let addr = running.addresses.mqtt.expect("MQTT bound");
    for round in 0..2 {
        let mut first = connect(addr, "twice");
        let mut second = connect(addr, "twice");
        match next_packet(&mut first) {
            Some(Packet::Disconnect(d)) => assert_eq!(d.reason, MqttReason::SessionTakenOver, "round {round}"),
            other => panic!("round {round}: a DISCONNECT saying the session was taken over expected, got {other:?}"),
        }
        assert!(next_packet(&mut first).is_none(), "round {round}: the first connection is closed");
        drop(first);
        // The second one holds the session and is not disturbed.
        second.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
        let mut byte = [0u8; 1];
        let quiet = matches!(second.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            || e.kind() == std::io::ErrorKind::TimedOut);
        assert!(quiet, "round {round}: the new connection stays open and quiet");
    }
    running.shutdown();
    runtime.block_on(running.wait());
}
