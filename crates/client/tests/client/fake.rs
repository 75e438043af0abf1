//! Small fake brokers, TCP and UDP, that speak tidings frames through `tidings-wire` and
//! behave as the client may rely on: HELLO/WELCOME, PONG after earlier frames, DELIVER with
//! the client's SubId, ERROR then close for a bad SUBSCRIBE, UDP renewals. Topic matching is a
//! naive `*`/`>` loop. Patterns containing `invalid` and the selector `bad` are refused, as
//! are topics containing `forbidden`; a SUBSCRIBE to a pattern containing `flaky` on the first
//! connection drops that connection unanswered; a published property `missed` (Int) becomes
//! the DELIVER's `missed` count. Guaranteed publishes (GPUBLISH) are logged once per
//! `(publisher, seq)` and acknowledged with the log position as tick; a topic containing
//! `refuse` is refused (PUBLISH_REFUSED), and one containing `unacked` is logged on the first
//! connection, which then drops before the acknowledgement. A guaranteed SUBSCRIBE is
//! confirmed with SUBSCRIBED (start: the next log position) and gets GDELIVER for each new
//! logged publish that matches.

// Test harness: a panic here fails the test that drove it, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tidings_wire::{
    Deliver, DeliveryMode, Frame, GuaranteedDeliver, GuaranteedPublish, Message, Notice, Pong, PubendId, PublishAck,
    PublishRefused, PublisherId, ReasonCode, SubId, Subscribe, Subscribed, Tick, Value, Welcome, DEFAULT_MAX_FRAME,
    PROTOCOL_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

/// Every wait in these tests is bounded by this.
pub(crate) const LIMIT: Duration = Duration::from_secs(5);

/// Runs `f` or fails the test after [`LIMIT`].
pub(crate) async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(LIMIT, f).await {
        Ok(out) => out,
        Err(_) => panic!("timed out: {what}"),
    }
}

pub(crate) fn matches(pattern: &str, topic: &str) -> bool {
    let topic: Vec<&str> = topic.split('.').collect();
    for (i, level) in pattern.split('.').enumerate() {
        match level {
            ">" => return topic.len() > i,
            "*" if i < topic.len() => {}
            literal if topic.get(i) == Some(&literal) => {}
            _ => return false,
        }
    }
    pattern.split('.').count() == topic.len()
}

fn refusal(sub: &Subscribe) -> Option<Notice> {
    if sub.pattern.contains("invalid") {
        return Some(Notice::new(ReasonCode::InvalidPattern, format!("pattern {:?} is invalid", sub.pattern)));
    }
    if sub.selector.as_deref() == Some("bad") {
        return Some(Notice::new(ReasonCode::InvalidSelector, "selector does not parse"));
    }
    None
}

fn deliver(id: SubId, message: &Message) -> Frame {
    let missed = match tidings_wire::lookup(&message.properties(), "missed") {
        Some(Value::Int(n)) => *n as u32,
        _ => 0,
    };
    Frame::Deliver(Deliver { id, missed, message: message.clone() })
}

/// State shared by a fake broker's tasks; tests read it and wait for it to change.
#[derive(Default)]
pub(crate) struct Shared<S> {
    state: Mutex<S>,
    changed: Notify,
}

impl<S> Shared<S> {
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap()
    }

    fn update<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let r = f(&mut self.lock());
        self.changed.notify_waiters();
        r
    }

    /// Waits (bounded) until `cond` holds.
    pub(crate) async fn wait_until(&self, what: &str, cond: impl Fn(&S) -> bool) {
        bounded(what, async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if cond(&self.lock()) {
                    return;
                }
                notified.await;
            }
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------
// TCP

enum Command {
    Send(Frame),
    Close,
}

/// What the TCP fake broker has seen.
#[derive(Default)]
pub(crate) struct TcpState {
    /// Connections accepted so far.
    pub(crate) accepted: usize,
    /// Client names from HELLO, in order.
    pub(crate) hellos: Vec<String>,
    /// Every frame after HELLO, from every connection, with the connection number.
    pub(crate) received: Vec<(usize, Frame)>,
    /// Guaranteed publishes logged, once each, in order: (publisher, seq, payload).
    pub(crate) log: Vec<(PublisherId, u64, Bytes)>,
    /// Guaranteed subscriptions as (connection, id, pattern).
    gsubs: Vec<(usize, SubId, String)>,
    subs: Vec<(usize, SubId, String)>,
    conns: HashMap<usize, mpsc::UnboundedSender<Command>>,
}

impl TcpState {
    /// The frames received on connection `conn`.
    pub(crate) fn frames_of(&self, conn: usize) -> Vec<Frame> {
        self.received.iter().filter(|(c, _)| *c == conn).map(|(_, f)| f.clone()).collect()
    }

    /// Live subscriptions as (connection, id, pattern).
    pub(crate) fn subscriptions(&self) -> Vec<(usize, SubId, String)> {
        self.subs.clone()
    }
}

/// How the TCP fake broker behaves.
#[derive(Clone, Copy)]
pub(crate) struct Behaviour {
    /// `max_frame` announced in WELCOME.
    pub(crate) max_frame: u32,
    /// After the handshake, never read again (to make the client's writes back up).
    pub(crate) stall: bool,
}

impl Default for Behaviour {
    fn default() -> Behaviour {
        Behaviour { max_frame: DEFAULT_MAX_FRAME as u32, stall: false }
    }
}

pub(crate) struct TcpBroker {
    pub(crate) addr: SocketAddr,
    pub(crate) shared: Arc<Shared<TcpState>>,
    accept: JoinHandle<()>,
}

impl Drop for TcpBroker {
    fn drop(&mut self) {
        self.accept.abort();
        self.close_all(None);
    }
}

impl TcpBroker {
    pub(crate) async fn start() -> TcpBroker {
        TcpBroker::start_with(Behaviour::default()).await
    }

    pub(crate) async fn start_with(behaviour: Behaviour) -> TcpBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::<TcpState>::default());
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), behaviour));
        TcpBroker { addr, shared, accept }
    }

    /// Stops accepting: later connection attempts are refused.
    pub(crate) fn stop_listening(&self) {
        self.accept.abort();
    }

    /// Drops every connection, after sending `notice` as DISCONNECT if given.
    pub(crate) fn close_all(&self, notice: Option<Notice>) {
        self.shared.update(|s| {
            for tx in s.conns.values() {
                if let Some(n) = &notice {
                    let _ = tx.send(Command::Send(Frame::Disconnect(n.clone())));
                }
                let _ = tx.send(Command::Close);
            }
            s.conns.clear();
            s.subs.clear();
            s.gsubs.clear();
        });
    }

    /// Logs `n` guaranteed publishes no subscriber is sent: as if they were published while
    /// the subscribers' connections were failing.
    pub(crate) fn log_unseen(&self, n: usize) {
        self.shared.update(|s| {
            for i in 0..n {
                s.log.push((PublisherId(u64::MAX), i as u64, Bytes::new()));
            }
        });
    }

    /// Sends a frame on every live connection (a broker PING, say).
    pub(crate) fn send_all(&self, frame: Frame) {
        for tx in self.shared.lock().conns.values() {
            let _ = tx.send(Command::Send(frame.clone()));
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared<TcpState>>, behaviour: Behaviour) {
    while let Ok((stream, _)) = listener.accept().await {
        let conn = shared.update(|s| {
            s.accepted += 1;
            s.accepted
        });
        tokio::spawn(serve(stream, conn, shared.clone(), behaviour));
    }
}

async fn read_frame(stream: &mut TcpStream, buf: &mut BytesMut) -> Option<Frame> {
    loop {
        if let Some(frame) = Frame::decode(buf, DEFAULT_MAX_FRAME).unwrap() {
            return Some(frame);
        }
        if stream.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

async fn write_frame(stream: &mut TcpStream, frame: &Frame) -> bool {
    stream.write_all(&frame.to_bytes().unwrap()).await.is_ok()
}

async fn serve(mut stream: TcpStream, conn: usize, shared: Arc<Shared<TcpState>>, behaviour: Behaviour) {
    let mut buf = BytesMut::new();
    let Some(Frame::Hello(hello)) = read_frame(&mut stream, &mut buf).await else {
        let refusal = Notice::new(ReasonCode::HandshakeRequired, "HELLO first");
        write_frame(&mut stream, &Frame::Error(refusal)).await;
        return;
    };
    let welcome =
        Welcome { version: PROTOCOL_VERSION, max_frame: behaviour.max_frame, server_name: "fake-broker".into() };
    write_frame(&mut stream, &Frame::Welcome(welcome)).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    shared.update(|s| {
        s.hellos.push(hello.client_name);
        s.conns.insert(conn, tx.clone());
    });
    if behaviour.stall {
        let _ = rx.recv().await;
        return;
    }
    loop {
        tokio::select! {
            command = rx.recv() => match command {
                Some(Command::Send(frame)) => {
                    if !write_frame(&mut stream, &frame).await {
                        break;
                    }
                }
                Some(Command::Close) | None => break,
            },
            frame = read_frame(&mut stream, &mut buf) => match frame {
                Some(frame) => handle(conn, frame, &tx, &shared),
                None => break,
            },
        }
    }
    shared.update(|s| {
        s.conns.remove(&conn);
        s.subs.retain(|(c, _, _)| *c != conn);
        s.gsubs.retain(|(c, _, _)| *c != conn);
    });
}

fn handle(conn: usize, frame: Frame, tx: &mpsc::UnboundedSender<Command>, shared: &Shared<TcpState>) {
    shared.update(|s| {
        s.received.push((conn, frame.clone()));
        match frame {
            Frame::Ping(p) => {
                let _ = tx.send(Command::Send(Frame::Pong(Pong { nonce: p.nonce })));
            }
            Frame::Subscribe(sub) if sub.pattern.contains("flaky") && conn == 1 => {
                let _ = tx.send(Command::Close);
            }
            Frame::Subscribe(sub) if sub.mode == DeliveryMode::Guaranteed => {
                let starts = vec![(PubendId(1), Tick(s.log.len() as u64 + 1))];
                let _ = tx.send(Command::Send(Frame::Subscribed(Subscribed { id: sub.id, starts })));
                s.gsubs.push((conn, sub.id, sub.pattern));
            }
            Frame::Subscribe(sub) => {
                let duplicate = s.subs.iter().any(|(c, id, _)| *c == conn && *id == sub.id);
                let notice = refusal(&sub)
                    .or_else(|| duplicate.then(|| Notice::new(ReasonCode::DuplicateSubscriptionId, "id in use")));
                match notice {
                    Some(notice) => {
                        let _ = tx.send(Command::Send(Frame::Error(notice)));
                        let _ = tx.send(Command::Close);
                    }
                    None => s.subs.push((conn, sub.id, sub.pattern)),
                }
            }
            Frame::Unsubscribe(u) => s.subs.retain(|(c, id, _)| !(*c == conn && *id == u.id)),
            Frame::Publish(message) if message.topic().contains("forbidden") => {
                let _ = tx.send(Command::Send(Frame::Error(Notice::new(ReasonCode::InvalidTopic, "forbidden"))));
                let _ = tx.send(Command::Close);
            }
            Frame::Publish(message) => {
                for (c, id, pattern) in &s.subs {
                    if matches(pattern, message.topic()) {
                        if let Some(tx) = s.conns.get(c) {
                            let _ = tx.send(Command::Send(deliver(*id, &message)));
                        }
                    }
                }
            }
            Frame::GuaranteedPublish(publish) => guaranteed(conn, publish, tx, s),
            Frame::Disconnect(_) => {
                let _ = tx.send(Command::Close);
            }
            _ => {}
        }
    });
}

fn guaranteed(conn: usize, p: GuaranteedPublish, tx: &mpsc::UnboundedSender<Command>, s: &mut TcpState) {
    if p.message.topic().contains("refuse") {
        let reason = Notice::new(ReasonCode::InvalidTopic, "refused");
        let _ = tx.send(Command::Send(Frame::PublishRefused(PublishRefused {
            publisher: p.publisher,
            seq: p.seq,
            reason,
        })));
        return;
    }
    let at = match s.log.iter().position(|(id, seq, _)| *id == p.publisher && *seq == p.seq) {
        Some(at) => at,
        None => {
            s.log.push((p.publisher, p.seq, p.message.payload()));
            s.log.len() - 1
        }
    };
    if p.message.topic().contains("unacked") && conn == 1 {
        let _ = tx.send(Command::Close);
        return;
    }
    let tick = Tick(at as u64 + 1);
    if at + 1 == s.log.len() {
        for (c, id, pattern) in &s.gsubs {
            if let (true, Some(tx)) = (matches(pattern, p.message.topic()), s.conns.get(c)) {
                let message = p.message.clone();
                let deliver = GuaranteedDeliver { id: *id, pubend: PubendId(1), tick, message, redelivered: false };
                let _ = tx.send(Command::Send(Frame::GuaranteedDeliver(deliver)));
            }
        }
    }
    let ack = PublishAck { publisher: p.publisher, seq: p.seq, pubend: PubendId(1), tick };
    let _ = tx.send(Command::Send(Frame::PublishAck(ack)));
}

// ---------------------------------------------------------------------------------------
// UDP

/// What the UDP fake broker has seen.
#[derive(Default)]
pub(crate) struct UdpState {
    /// Every frame received, with its sender.
    pub(crate) received: Vec<(SocketAddr, Frame)>,
    /// Datagrams received.
    pub(crate) datagrams: usize,
    /// PINGs still to ignore (simulated loss).
    pub(crate) drop_pings: usize,
    subs: Vec<(SocketAddr, SubId, String)>,
}

impl UdpState {
    /// How many SUBSCRIBE frames arrived for `id`.
    pub(crate) fn subscribes_for(&self, id: SubId) -> usize {
        self.received.iter().filter(|(_, f)| matches!(f, Frame::Subscribe(s) if s.id == id)).count()
    }

    pub(crate) fn live_subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// Forgets every subscription, as a restarted broker would.
    pub(crate) fn forget_subscriptions(&mut self) {
        self.subs.clear();
    }
}

pub(crate) struct UdpBroker {
    pub(crate) addr: SocketAddr,
    pub(crate) shared: Arc<Shared<UdpState>>,
    task: JoinHandle<()>,
}

impl Drop for UdpBroker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl UdpBroker {
    pub(crate) async fn start() -> UdpBroker {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let shared = Arc::new(Shared::<UdpState>::default());
        let task = tokio::spawn(udp_loop(socket, shared.clone()));
        UdpBroker { addr, shared, task }
    }
}

async fn udp_loop(socket: UdpSocket, shared: Arc<Shared<UdpState>>) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else { continue };
        let mut datagram = Bytes::copy_from_slice(&buf[..n]);
        let mut replies = Vec::new();
        shared.update(|s| {
            s.datagrams += 1;
            while !datagram.is_empty() {
                let frame = Frame::decode_datagram(&mut datagram, DEFAULT_MAX_FRAME).unwrap();
                s.received.push((from, frame.clone()));
                udp_handle(s, from, frame, &mut replies);
            }
        });
        for (to, frame) in replies {
            let _ = socket.send_to(&frame.to_bytes().unwrap(), to).await;
        }
    }
}

fn udp_handle(s: &mut UdpState, from: SocketAddr, frame: Frame, replies: &mut Vec<(SocketAddr, Frame)>) {
    match frame {
        Frame::Hello(_) => {
            let welcome = Welcome { version: PROTOCOL_VERSION, max_frame: 65_000, server_name: "fake-udp".into() };
            replies.push((from, Frame::Welcome(welcome)));
        }
        Frame::Ping(p) if s.drop_pings > 0 => {
            s.drop_pings -= 1;
            let _ = p;
        }
        Frame::Ping(p) => replies.push((from, Frame::Pong(Pong { nonce: p.nonce }))),
        Frame::Subscribe(sub) => {
            if let Some(notice) = refusal(&sub) {
                replies.push((from, Frame::Error(notice)));
            } else if !s.subs.iter().any(|(a, id, _)| *a == from && *id == sub.id) {
                s.subs.push((from, sub.id, sub.pattern));
            }
        }
        Frame::Unsubscribe(u) => s.subs.retain(|(a, id, _)| !(*a == from && *id == u.id)),
        Frame::Publish(message) => {
            for (to, id, pattern) in &s.subs {
                if matches(pattern, message.topic()) {
                    replies.push((*to, deliver(*id, &message)));
                }
            }
        }
        Frame::Disconnect(_) => s.subs.retain(|(a, _, _)| *a != from),
        _ => {}
    }
}

#[test]
fn naive_matcher_follows_the_wildcard_rules() {
    assert!(matches("a.*.c", "a.b.c"));
    assert!(matches("a.>", "a.b.c"));
    assert!(!matches("a.>", "a"));
    assert!(!matches("a.*", "a.b.c"));
    assert!(matches("a.b", "a.b"));
    assert!(!matches("a.b", "a.c"));
}
