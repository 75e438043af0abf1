//! The UDP transport: a connected socket, one datagram per publish, requests re-sent until
//! their PONG arrives, and a keepalive that renews every subscription before the broker's TTL
//! expires it.
//!
//! There is no connection to lose, so no reconnect: a broker that restarts simply gets the
//! subscriptions again from the next keepalive.
//!
//! Every datagram starts with the address token the broker gave (a TOKEN frame): the broker
//! answers a datagram without a valid one with its TOKEN only, and the client then sends
//! again at once (see `tidings_wire::Token`).

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tidings_wire::{
    Frame, Hello, Notice, Ping, ReasonCode, Sequence, SubId, Subscribe, Token, Unsubscribe, PROTOCOL_VERSION,
};
use tokio::net::{lookup_host, UdpSocket};
use tokio::sync::watch;
use tokio::time::{interval_at, sleep, timeout, timeout_at, Instant, MissedTickBehavior};
use tracing::{debug, warn};

use crate::builder::Config;
use crate::error::ClientError;
use crate::inbox::Inbox;
use crate::now_us;
use crate::shared::{Link, Route, Shared};
use crate::waiters::Outcome;

/// Frames are packed into datagrams up to this size (a frame larger than it goes alone):
/// under a typical path MTU, so requests are not fragmented.
const DATAGRAM_TARGET: usize = 1400;

/// The largest UDP payload; the receive buffer holds one.
const MAX_DATAGRAM: usize = 65_536;

thread_local! {
    /// Scratch space for encoding a publish; reused so publishing allocates nothing here.
    static SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(2048));
}

/// The UDP half of a client's shared state.
#[derive(Debug)]
pub(crate) struct UdpLink {
    socket: UdpSocket,
    /// The broker's address token for this socket, once it gave one.
    token: watch::Sender<Option<Token>>,
}

/// Opens the socket, exchanges HELLO/WELCOME and starts the reader and keepalive tasks.
pub(crate) async fn connect(config: Config) -> Result<Arc<Shared>, ClientError> {
    let limit = config.connect_timeout;
    let socket = timeout(limit, open(&config))
        .await
        .unwrap_or(Err(ClientError::Timeout { operation: "connect", after: limit }))?;
    let link = Arc::new(UdpLink { socket, token: watch::Sender::new(None) });
    let shared = Arc::new(Shared::new(config, Link::Udp(link.clone())));
    tokio::spawn(read_loop(shared.clone(), link.clone()));
    match link.request(&shared, vec![hello(&shared.config)], "handshake", limit).await {
        // A retried HELLO whose first copy did arrive: the broker knows us, which is the point.
        Err(e) if e.reason() == Some(ReasonCode::DuplicateHello) => {}
        Err(e) => {
            shared.finish(Some(e.clone()));
            return Err(e);
        }
        Ok(()) => {}
    }
    tokio::spawn(keepalive(shared.clone(), link));
    Ok(shared)
}

async fn open(config: &Config) -> Result<UdpSocket, ClientError> {
    let Some(addr) = lookup_host(config.addr.as_str()).await?.next() else {
        return Err(ClientError::NoAddress { addr: config.addr.clone() });
    };
    let local = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let socket = UdpSocket::bind(local).await?;
    // Best effort: the kernel's default buffer still works, it only holds less while this
    // process waits for a CPU.
    if let Err(error) = socket2::SockRef::from(&socket).set_recv_buffer_size(config.udp_recv_buffer) {
        debug!(%error, "cannot size the UDP receive buffer");
    }
    socket.connect(addr).await?;
    Ok(socket)
}

fn hello(config: &Config) -> Frame {
    Frame::Hello(Hello { version: PROTOCOL_VERSION, client_name: config.name.clone(), auth: config.auth.clone() })
}

impl UdpLink {
    /// Starts a datagram with the address token, if the broker gave one yet.
    fn put_token(&self, out: &mut BytesMut) {
        if let Some(token) = *self.token.borrow() {
            // A TOKEN frame has a fixed size: encoding it cannot fail.
            let _ = Frame::Token(token).encode(out);
        }
    }

    /// Sends one PUBLISH datagram if the socket can take it now: `Ok(false)` when its send
    /// buffer is full.
    pub(crate) fn try_publish(&self, frame: &Frame) -> Result<bool, ClientError> {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            self.put_token(&mut scratch);
            frame.encode(&mut scratch)?;
            match self.socket.try_send(&scratch) {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                Err(e) => Err(ClientError::from(e)),
            }
        })
    }

    /// Sends one PUBLISH datagram, waiting while the socket's send buffer is full.
    pub(crate) async fn publish(&self, frame: &Frame) -> Result<(), ClientError> {
        while !self.try_publish(frame)? {
            self.socket.writable().await?;
        }
        Ok(())
    }

    /// Subscribes: SUBSCRIBE + PING, re-sent until the PONG. On failure nothing stays
    /// registered.
    pub(crate) async fn subscribe(&self, shared: &Shared, frame: Subscribe, route: Route) -> Result<(), ClientError> {
        let id = frame.id;
        let request = vec![Frame::Subscribe(frame.clone())];
        {
            let mut registry = shared.registry.lock();
            registry.insert(frame, route);
            registry.mark_sent(id, shared.next_seq());
        }
        let outcome = self.request(shared, request, "subscribe", shared.config.request_timeout).await;
        if outcome.is_err() {
            self.forget(shared, id);
        }
        outcome
    }

    /// Removes a subscription and sends one UNSUBSCRIBE (best effort; the broker's TTL
    /// expires it anyway).
    pub(crate) fn forget(&self, shared: &Shared, id: SubId) {
        if shared.registry.lock().remove(id).is_some() {
            self.try_send_frame(&Frame::Unsubscribe(Unsubscribe { id }));
        }
    }

    /// Removes a subscription and waits until the broker confirms the UNSUBSCRIBE.
    pub(crate) async fn unsubscribe(&self, shared: &Shared, id: SubId) -> Result<(), ClientError> {
        shared.registry.lock().remove(id);
        let unsubscribe = vec![Frame::Unsubscribe(Unsubscribe { id })];
        self.request(shared, unsubscribe, "unsubscribe", shared.config.request_timeout).await
    }

    /// PING until a PONG: the broker has handled what was sent before (what arrived of it).
    pub(crate) async fn barrier(&self, shared: &Shared) -> Outcome {
        self.request(shared, Vec::new(), "ping", shared.config.request_timeout).await
    }

    /// Sends `frames` and a PING in one datagram, again every `udp_retry_interval`, until
    /// the PONG arrives or `limit` runs out.
    async fn request(
        &self,
        shared: &Shared,
        mut frames: Vec<Frame>,
        operation: &'static str,
        limit: Duration,
    ) -> Outcome {
        if let Some(e) = shared.closed_error() {
            return Err(e);
        }
        let nonce = shared.next_seq();
        let mut rx = shared.waiters.lock().insert(nonce);
        // A new token from the broker means the last datagram was not taken: send again at once.
        let mut tokens = self.token.subscribe();
        tokens.borrow_and_update();
        frames.push(Frame::Ping(Ping { nonce }));
        let deadline = Instant::now() + limit;
        let retry = shared.config.udp_retry_interval.max(Duration::from_millis(1));
        let outcome = loop {
            if let Err(e) = self.send_frames(&frames).await {
                debug!(error = %e, "request datagram not sent; retrying");
            }
            let answer = tokio::select! {
                answer = timeout_at((Instant::now() + retry).min(deadline), &mut rx) => answer,
                Ok(()) = tokens.changed() => {
                    tokens.borrow_and_update();
                    continue;
                }
            };
            match answer {
                Ok(Ok(outcome)) => break outcome,
                Ok(Err(_)) => break Err(shared.closed_error().unwrap_or(ClientError::Closed)),
                Err(_) if Instant::now() >= deadline => break Err(ClientError::Timeout { operation, after: limit }),
                Err(_) => debug!(operation, "no PONG yet; re-sending"),
            }
        };
        shared.waiters.lock().remove(nonce);
        outcome
    }

    /// Packs frames into as few datagrams as `DATAGRAM_TARGET` allows and sends them.
    async fn send_frames(&self, frames: &[Frame]) -> Result<(), ClientError> {
        let mut datagram = BytesMut::new();
        self.put_token(&mut datagram);
        let prefix = datagram.len();
        for frame in frames {
            let start = datagram.len();
            frame.encode(&mut datagram)?;
            if datagram.len() > DATAGRAM_TARGET && start > prefix {
                let next = datagram.split_off(start);
                self.socket.send(&datagram).await?;
                datagram.clear();
                self.put_token(&mut datagram);
                datagram.extend_from_slice(&next);
            }
        }
        if datagram.len() > prefix {
            self.socket.send(&datagram).await?;
        }
        Ok(())
    }

    /// Sends one frame without waiting (dropped if the socket is busy: UDP is lossy anyway).
    pub(crate) fn try_send_frame(&self, frame: &Frame) {
        let mut out = BytesMut::new();
        self.put_token(&mut out);
        if frame.encode(&mut out).is_ok() {
            if let Err(e) = self.socket.try_send(&out) {
                debug!(error = %e, "control datagram not sent");
            }
        }
    }

    /// Says DISCONNECT (best effort) and finishes the client.
    pub(crate) fn close(&self, shared: &Shared) {
        if shared.closed_error().is_none() {
            self.try_send_frame(&Frame::Disconnect(Notice::new(ReasonCode::Normal, "client closed")));
        }
        shared.finish(None);
    }
}

/// Receives datagrams and handles every frame in each, until the client closes.
async fn read_loop(shared: Arc<Shared>, link: Arc<UdpLink>) {
    // One receive buffer for every datagram; each datagram's bytes are copied out of it at
    // their own size. Receiving straight into a fresh 64 KiB buffer per datagram kept that
    // whole buffer alive while any of its deliveries waited for the application: a few
    // hundred bytes of message pinned 64 KiB, and a subscriber behind by a thousand
    // deliveries held 64 MiB.
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut inbox = Inbox::default();
    let mut sequence = Sequencer::default();
    loop {
        let received = tokio::select! {
            () = shared.stopped() => return,
            received = link.socket.recv(&mut buf) => received,
        };
        if let Err(e) = received {
            // An ICMP "port unreachable" for an earlier datagram, typically. Before the first
            // WELCOME nothing answers at that address: the handshake fails now rather than at
            // its timeout. After it, the broker may be restarting: keep listening, and let
            // requests time out on their own.
            if e.kind() == io::ErrorKind::ConnectionRefused && shared.server_name().is_none() {
                shared.waiters.lock().fail_all(&ClientError::from(e));
                continue;
            }
            debug!(error = %e, "udp receive failed");
            tokio::select! {
                () = shared.stopped() => return,
                () = sleep(Duration::from_millis(50)) => continue,
            }
        }
        let Ok(len) = received else { continue };
        let read_us = now_us();
        let mut datagram = Bytes::copy_from_slice(&buf[..len]);
        while !datagram.is_empty() {
            match Frame::decode_datagram(&mut datagram, shared.config.max_frame) {
                Ok(Frame::TokenIssued(token)) => {
                    link.token.send_replace(Some(token));
                }
                Ok(Frame::Sequence(Sequence { first })) => sequence.datagram(first),
                Ok(Frame::Deliver(mut deliver)) => {
                    deliver.missed = deliver.missed.saturating_add(sequence.delivery());
                    shared.handle_inbound(Frame::Deliver(deliver), read_us, &mut inbox);
                }
                Ok(frame) => {
                    if let Some(error) = shared.handle_inbound(frame, read_us, &mut inbox) {
                        debug!(%error, "broker notice over udp");
                    }
                }
                Err(error) => {
                    warn!(%error, "dropping the rest of a malformed datagram");
                    break;
                }
            }
        }
        shared.hand_over(&mut inbox).await;
    }
}

/// Counts the deliveries lost on the way from the broker by the SEQUENCE first in each of its
/// datagrams (the number of the datagram's first delivery), and hands the count to the next
/// delivery's `missed`, beside what the broker's queue dropped: a subscriber's losses are then
/// its own to see, wherever they happened. A datagram numbered below what was already seen
/// came late (reordered): it is delivered, and each of its deliveries takes one back from the
/// losses not yet told; one numbered 0, or far below, starts a new numbering (the broker
/// restarted, or let the session go and a keepalive opened a new one).
#[derive(Debug, Default)]
struct Sequencer {
    /// The number the next datagram should start at, once one was seen.
    next: Option<u64>,
    /// Deliveries lost and not yet told to a delivery.
    lost: u64,
    /// The current datagram came late: its deliveries do not move `next`.
    late: bool,
}

/// How far below the numbers already seen a datagram may come and still be a late one of the
/// same numbering (a reordering network holds a few datagrams back, not thousands).
const REORDER_WINDOW: u64 = 4096;

impl Sequencer {
    /// A datagram starting at delivery `first` arrived.
    fn datagram(&mut self, first: u64) {
        self.late = false;
        match self.next {
            Some(next) if first > next => self.lost += first - next,
            Some(next) if first < next && first != 0 && next - first <= REORDER_WINDOW => {
                self.late = true;
                return;
            }
            _ => {}
        }
        self.next = Some(first);
    }

    /// A delivery of the current datagram arrived: the losses to tell with it.
    fn delivery(&mut self) -> u32 {
        if self.late {
            self.lost = self.lost.saturating_sub(1);
            return 0;
        }
        if let Some(next) = self.next.as_mut() {
            *next += 1;
        }
        let told = u32::try_from(self.lost).unwrap_or(u32::MAX);
        self.lost -= u64::from(told);
        told
    }
}

/// Every third of the TTL: every live SUBSCRIBE again, and a PING.
async fn keepalive(shared: Arc<Shared>, link: Arc<UdpLink>) {
    let period = (shared.config.udp_ttl / 3).max(Duration::from_millis(10));
    let mut ticker = interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shared.stopped() => return,
            _ = ticker.tick() => {}
        }
        let mut frames: Vec<Frame> = shared.registry.lock().frames().cloned().map(Frame::Subscribe).collect();
        frames.push(Frame::Ping(Ping { nonce: shared.next_seq() }));
        if let Err(error) = link.send_frames(&frames).await {
            debug!(%error, "keepalive not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_in_the_broker_s_numbers_is_told_with_the_next_delivery() {
        let mut s = Sequencer::default();
        s.datagram(0);
        assert_eq!([s.delivery(), s.delivery()], [0, 0]);
        s.datagram(2);
        assert_eq!(s.delivery(), 0, "in sequence: nothing lost");
        s.datagram(10);
        assert_eq!([s.delivery(), s.delivery()], [7, 0], "3..10 lost, told once");
        s.datagram(14);
        s.datagram(12);
        assert_eq!(s.delivery(), 0, "a late delivery takes one back from the gap");
        s.datagram(14);
        assert_eq!([s.delivery(), s.delivery()], [1, 0], "of 12 and 13, only 13 was lost");
        s.datagram(0);
        assert_eq!(s.delivery(), 0, "a new session numbers from 0 again");
        s.datagram(3);
        assert_eq!(s.delivery(), 2, "and its gaps count");
        s.datagram(9_999);
        assert_eq!(s.delivery(), 9_995);
        s.datagram(5);
        assert_eq!(s.delivery(), 0, "far below: a new numbering whose first datagram was lost, not a late one");
        s.datagram(7);
        assert_eq!(s.delivery(), 1);
    }
}
