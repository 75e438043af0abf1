//! Client UDP: one socket, a session per client address that proved it receives there (an
//! address token first in every datagram, `udp_token.rs`), expiry of silent clients.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_wire::{Frame, Notice, ReasonCode};
use tokio::net::UdpSocket;

use crate::config::{OverflowPolicy, SlowConsumer};
use crate::context::Context;
use crate::outbox::{write_datagrams, Outbox};
use crate::session::{Next, Session, Transport};
use crate::udp_expiry::{AwakeClock, Heard};
use crate::udp_token::{ReplyPace, TokenKey};

/// Bytes of a TOKEN frame: a datagram shorter than this gets no answer at all, so a forged
/// source address never makes the broker send more than it received.
const TOKEN_FRAME_LEN: usize = tidings_wire::HEADER_LEN + tidings_wire::TOKEN_LEN;

struct UdpClient {
    session: Session,
    last_heard: Heard,
}

/// Serves datagrams until shutdown.
pub async fn serve(socket: Arc<UdpSocket>, shared: Arc<Context>) {
    let key = match TokenKey::generate() {
        Ok(key) => key,
        Err(error) => {
            tracing::error!(%error, "no random source for UDP address tokens; UDP clients are not served");
            return;
        }
    };
    let ttl = shared.config.udp.session_ttl;
    let mut clients: HashMap<SocketAddr, UdpClient> = HashMap::new();
    let period = (ttl / 4).max(Duration::from_millis(25));
    let mut sweep = tokio::time::interval(period);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut clock = AwakeClock::new(period, Instant::now());
    let mut buf = vec![0u8; 65_536];
    let mut pace = ReplyPace::new(Instant::now());
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            _ = sweep.tick() => {
                clock.sweep(Instant::now());
                expire(&mut clients, (ttl, &clock), &shared);
            }
            received = socket.recv_from(&mut buf) => {
                // Errors here are ICMP reports about earlier sends; they concern one peer only.
                if let Ok((len, peer)) = received {
                    let data = Bytes::copy_from_slice(&buf[..len]);
                    let heard = clock.heard(Instant::now());
                    datagram(data, (peer, heard, &key, &mut pace), &socket, &mut clients, &shared);
                }
            }
        }
    }
    for (_, client) in clients.drain() {
        client.session.outbox.abort();
    }
}

fn datagram(
    mut data: Bytes,
    (peer, heard, key, pace): (SocketAddr, Heard, &TokenKey, &mut ReplyPace),
    socket: &Arc<UdpSocket>,
    clients: &mut HashMap<SocketAddr, UdpClient>,
    shared: &Arc<Context>,
) {
    // Decode the whole datagram first: a garbage datagram is dropped whole and touches no state.
    let len = data.len();
    let mut frames = Vec::new();
    while !data.is_empty() {
        match Frame::decode_datagram(&mut data, shared.config.limits.max_frame) {
            Ok(frame) => frames.push(frame),
            Err(_) => {
                shared.metrics.udp_datagrams_dropped.inc();
                return;
            }
        }
    }
    // Only a client that receives at its address speaks for it (see `tidings_wire::Token`).
    if !matches!(frames.first(), Some(Frame::Token(token)) if key.verify(peer, token)) {
        shared.metrics.udp_unvalidated.inc();
        // Only a request is answered: never a datagram holding a broker's frame (another
        // broker's TOKEN_ISSUED, whose source may be forged, must not start a loop), never a
        // datagram smaller than the answer, and a few a second per source address at most.
        let request = !frames.iter().any(Frame::is_from_broker);
        if request && len >= TOKEN_FRAME_LEN && pace.allow(peer, Instant::now()) {
            if let Ok(bytes) = Frame::TokenIssued(key.token(peer)).to_bytes() {
                let _ = socket.try_send_to(&bytes, peer);
            }
        }
        return;
    }
    frames.remove(0);
    if !clients.contains_key(&peer) && clients.len() >= shared.config.udp.max_sessions {
        shared.metrics.udp_sessions_refused.inc();
        let refusal = Frame::Error(Notice::new(ReasonCode::LimitExceeded, "too many UDP sessions"));
        if let Ok(bytes) = refusal.to_bytes() {
            let _ = socket.try_send_to(&bytes, peer);
        }
        return;
    }
    let client = clients.entry(peer).or_insert_with(|| {
        // A UDP client's queue is short and drops its oldest datagram when full: see `[udp]
        // queue_messages`.
        let limits = SlowConsumer {
            max_messages: shared.config.udp.queue_messages,
            policy: OverflowPolicy::DropOldest,
            ..shared.live.get().slow_consumer
        };
        let outbox = Outbox::new(limits, shared.metrics.clone(), &shared.budget);
        *outbox.client.lock() = format!("udp {peer}");
        shared.tasks.spawn(write_datagrams(
            Arc::clone(socket),
            peer,
            Arc::clone(&outbox),
            shared.config.udp.max_datagram,
        ));
        UdpClient { session: Session::new(Transport::Udp, outbox, Arc::clone(shared)), last_heard: heard }
    });
    client.last_heard = heard;
    let read_at = Instant::now();
    for frame in frames {
        match client.session.handle(frame) {
            Next::Continue => {}
            Next::Close => {
                client.session.finish_batch(read_at);
                if let Some(c) = clients.remove(&peer) {
                    c.session.outbox.abort();
                }
                return;
            }
            Next::Refuse(notice) => {
                client.session.finish_batch(read_at);
                if let Some(c) = clients.remove(&peer) {
                    c.session.outbox.close_with(&Frame::Error(notice));
                }
                return;
            }
        }
    }
    client.session.finish_batch(read_at);
    client.session.forgo_hold_back();
}

fn expire(clients: &mut HashMap<SocketAddr, UdpClient>, (ttl, clock): (Duration, &AwakeClock), shared: &Context) {
    let now = Instant::now();
    clients.retain(|_, c| {
        let alive = !clock.silent_for(c.last_heard, ttl, now);
        if !alive {
            shared.metrics.udp_sessions_expired.inc();
            c.session.outbox.abort();
        }
        alive
    });
}

/// Sets the client socket's buffer sizes from `[udp]`, and says when the kernel gave less than
/// asked (`net.core.rmem_max` / `wmem_max` cap them; Linux reports twice what it keeps for its
/// own bookkeeping, so a size granted below the request was capped).
pub fn size_buffers(socket: &UdpSocket, config: &crate::config::Udp) {
    let sock = socket2::SockRef::from(socket);
    let tries = [
        ("receive", "net.core.rmem_max", config.recv_buffer, sock.set_recv_buffer_size(config.recv_buffer)),
        ("send", "net.core.wmem_max", config.send_buffer, sock.set_send_buffer_size(config.send_buffer)),
    ];
    for (what, sysctl, wanted, set) in tries {
        let granted = match what {
            "receive" => sock.recv_buffer_size(),
            _ => sock.send_buffer_size(),
        };
        match (set, granted) {
            (Ok(()), Ok(granted)) if granted >= wanted => {
                tracing::debug!(what, granted, "client UDP socket buffer");
            }
            (Ok(()), Ok(granted)) => tracing::warn!(
                what,
                wanted,
                granted,
                "the kernel capped the client UDP socket's {what} buffer; raise {sysctl} to let bursts through without loss"
            ),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(what, %error, "cannot size the client UDP socket's {what} buffer");
            }
        }
    }
}
