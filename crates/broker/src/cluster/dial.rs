//! The dial loop: one a configured peer address, dialling, running the connection
//! ([`super::link`]) and dialling again after it ends, paced by [`Redial`]. It does not dial a
//! broker its cell forgot, and a broker its cell refused as forgotten dials seldom.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_route::BrokerName;
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use super::link::{connection, plain, sealed, Ends, LinkContext};
use super::redial::Redial;
use super::Direction;
use crate::tls::{BoxRead, BoxWrite, Tls};

const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Keeps a link to the broker at `address`: dials, runs the connection, and redials after it
/// ends, quickly while the peer was up a moment ago, with backoff once it has been gone for
/// longer ([`Redial`]). While the peer is linked through another connection (it dialled us),
/// it waits instead of opening a duplicate.
/// With `tls`, the link runs over mutual TLS and the peer's certificate must name the host
/// of `address`.
pub async fn dial_loop(address: String, ctx: Arc<LinkContext>, tls: Option<Arc<Tls>>) {
    let settings = &ctx.config.cluster;
    let seed = ctx.cluster.incarnation().0 ^ address.bytes().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let min_ms = settings.reconnect_min.as_millis() as u64;
    let mut redial = Redial::new(min_ms, settings.reconnect_max.as_millis() as u64, seed);
    let began = Instant::now();
    let now_ms = || began.elapsed().as_millis() as u64;
    let mut peer: Option<BrokerName> = None;
    let mut unreachable = Unreachable::default();
    let mut said_forgotten = false;
    loop {
        if ctx.shutdown.is_cancelled() {
            return;
        }
        let forgotten = peer.as_ref().filter(|p| ctx.cluster.is_forgotten(p));
        if forgotten.is_some() != said_forgotten {
            info!(%address, peer = ?forgotten, "a broker forgotten in this cell: not dialled while it is");
            said_forgotten = forgotten.is_some();
        }
        let delay = if forgotten.is_some() {
            // Its cell refuses it (`tidings cell forget`): nothing to dial for.
            settings.reconnect_max.as_millis() as u64
        } else if peer.as_ref().is_some_and(|p| ctx.cluster.is_linked(p)) {
            redial.up(now_ms());
            min_ms
        } else {
            match tokio::time::timeout(DIAL_TIMEOUT, dial(&address, tls.as_deref())).await {
                Ok(Ok((halves, ends))) => {
                    unreachable.reached(&address);
                    let outcome = connection(halves, Direction::Outbound, ends, Arc::clone(&ctx)).await;
                    if outcome.established {
                        redial.up(now_ms());
                    }
                    peer = outcome.peer.or(peer);
                    if outcome.forgotten_here {
                        // Refused for good unless the cell re-admits this broker: seldom.
                        tokio::select! {
                            _ = tokio::time::sleep(FORGOTTEN_REDIAL) => {}
                            _ = ctx.shutdown.cancelled() => return,
                        }
                    }
                }
                Ok(Err(e)) => unreachable.failed(&address, &e.to_string()),
                Err(_) => unreachable.failed(&address, "timed out"),
            }
            redial.next_delay_ms(now_ms())
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
            _ = ctx.shutdown.cancelled() => return,
        }
    }
}

/// Connects to `address`, over TLS when given; the TLS handshake is within the dial's time.
async fn dial(address: &str, tls: Option<&Tls>) -> std::io::Result<((BoxRead, BoxWrite), Ends)> {
    let stream = TcpStream::connect(address).await?;
    let ends = (stream.peer_addr().ok(), stream.local_addr().ok());
    match tls {
        None => Ok((plain(stream), ends)),
        Some(tls) => {
            let _ = stream.set_nodelay(true);
            let stream =
                tls.connect_link(stream, address).await.map_err(|e| std::io::Error::other(format!("TLS: {e}")))?;
            Ok((sealed(stream), ends))
        }
    }
}

/// How often a peer that stays unreachable is reported again.
const UNREACHABLE_WARN_EVERY: Duration = Duration::from_secs(30);

/// Says at WARN that a configured peer cannot be dialled: at the first failure, then at most
/// every 30 s while it lasts (each attempt at DEBUG), and at INFO once it answers again.
#[derive(Default)]
struct Unreachable {
    failures: u64,
    warned: Option<std::time::Instant>,
}

impl Unreachable {
    fn failed(&mut self, address: &str, error: &str) {
        self.failures += 1;
        if self.warned.is_none_or(|at| at.elapsed() >= UNREACHABLE_WARN_EVERY) {
            warn!(%address, error, attempts = self.failures, "cannot reach peer; retrying");
            self.warned = Some(std::time::Instant::now());
        } else {
            debug!(%address, error, attempts = self.failures, "dial failed");
        }
    }

    fn reached(&mut self, address: &str) {
        if self.warned.is_some() {
            info!(%address, failed_attempts = self.failures, "peer reachable again");
        }
        *self = Unreachable::default();
    }
}

/// How long a broker its cell forgot waits before it dials a mate that refused it again.
const FORGOTTEN_REDIAL: Duration = Duration::from_secs(30);
