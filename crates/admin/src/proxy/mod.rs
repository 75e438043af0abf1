//! A TCP proxy that injects faults into one link without touching the processes at its ends.
//!
//! SIGSTOP freezes a whole broker; a network fault usually hits one path. Put a [`FaultProxy`]
//! between two brokers (dial the proxy's address instead of the peer's) and:
//! - [`FaultProxy::stall`] stops forwarding in both directions while the connections stay open,
//!   as a congested or black-holed path does: nothing is said, the kernel buffers fill, and only
//!   missed heartbeats can tell;
//! - [`FaultProxy::cut`] resets every connection and refuses new ones, as a failed link does;
//! - [`FaultProxy::heal`] forwards again (held bytes first) and accepts new connections;
//! - [`FaultProxy::start_shaped`] adds a delay, jitter and a bandwidth limit ([`Shape`]), so a
//!   loopback link behaves like a LAN or a WAN.
//!
//! Plain threads and blocking sockets: a test harness must not depend on the runtime of the
//! code it tests, and a proxy for a handful of connections needs nothing more. Dropping the
//! proxy closes its listener and every connection.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

mod shape;

pub use shape::Shape;

/// What the proxy does with traffic right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Bytes flow both ways.
    Forward,
    /// Bytes are held (reads stop once one buffer is held per direction); connections stay up.
    Stall,
    /// Connections are reset and new ones refused.
    Cut,
}

/// Counters a test can read to prove its fault did something.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted and forwarded.
    pub accepted: u64,
    /// Connections refused or reset because the proxy was cut.
    pub refused: u64,
    /// Bytes forwarded, both directions.
    pub bytes: u64,
}

struct State {
    mode: ProxyMode,
    stats: ProxyStats,
    /// Both ends of every open connection, so a cut can reset them.
    open: Vec<(TcpStream, TcpStream)>,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fault-injecting TCP proxy on a loopback port chosen by the OS.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        Self::start_shaped(upstream, Shape::default())
    }

    /// As [`FaultProxy::start`], each direction of every connection shaped by `shape`.
    pub fn start_shaped(upstream: SocketAddr, shape: Shape) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                mode: ProxyMode::Forward,
                stats: ProxyStats::default(),
                open: Vec::new(),
                closed: false,
            }),
            changed: Condvar::new(),
        });
        let accept_shared = Arc::clone(&shared);
        thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept(listener, upstream, accept_shared, shape))?;
        Ok(FaultProxy { addr, shared })
    }

    /// Where to connect instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds all traffic; connections stay open.
    pub fn stall(&self) {
        self.set(ProxyMode::Stall);
    }

    /// Resets every connection and refuses new ones until [`FaultProxy::heal`].
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.mode = ProxyMode::Cut;
        for (a, b) in state.open.drain(..) {
            reset(&a);
            reset(&b);
        }
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Forwards again, and accepts new connections.
    pub fn heal(&self) {
        self.set(ProxyMode::Forward);
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        self.shared.lock().mode
    }

    /// Counters so far.
    pub fn stats(&self) -> ProxyStats {
        self.shared.lock().stats
    }

    fn set(&self, mode: ProxyMode) {
        self.shared.lock().mode = mode;
        self.shared.changed.notify_all();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closed = true;
        for (a, b) in state.open.drain(..) {
            reset(&a);
            reset(&b);
        }
        drop(state);
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees `closed`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

/// Closes with RST rather than FIN where the platform allows: a cut link, not a polite close.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    let _ = stream.shutdown(Shutdown::Both);
}

fn accept(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>, shape: Shape) {
    for incoming in listener.incoming() {
        let Ok(client) = incoming else { continue };
        let mut state = shared.lock();
        if state.closed {
            return;
        }
        if state.mode == ProxyMode::Cut {
            state.stats.refused += 1;
            reset(&client);
            continue;
        }
        drop(state);
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else {
            reset(&client);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let pumps = (|| -> std::io::Result<()> {
            let ends = (client.try_clone()?, server.try_clone()?);
            let (c_read, s_write) = (client.try_clone()?, server.try_clone()?);
            let (s_read, c_write) = (server.try_clone()?, client.try_clone()?);
            let mut state = shared.lock();
            state.stats.accepted += 1;
            state.open.push(ends);
            drop(state);
            for (from, to) in [(c_read, s_write), (s_read, c_write)] {
                let shared = Arc::clone(&shared);
                let name = "fault-proxy-pump".to_string();
                thread::Builder::new().name(name).spawn(move || match shape.is_none() {
                    true => pump(from, to, &shared),
                    false => shape::pump(from, to, &shared, shape),
                })?;
            }
            Ok(())
        })();
        if pumps.is_err() {
            reset(&client);
            reset(&server);
        }
    }
}

/// Waits while the proxy is stalled; false once it is cut or closed (stop forwarding).
fn wait_while_stalled(shared: &Shared) -> bool {
    let mut state = shared.lock();
    while state.mode == ProxyMode::Stall && !state.closed {
        state = shared.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
    }
    !(state.mode == ProxyMode::Cut || state.closed)
}

/// Copies one direction until either side closes, waiting while stalled.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !wait_while_stalled(shared) {
            break;
        }
        shared.lock().stats.bytes += n as u64;
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut read = stream.try_clone().unwrap();
                    let mut write = stream;
                    let _ = std::io::copy(&mut read, &mut write);
                });
            }
        });
        addr
    }

    fn roundtrip(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(bytes)?;
        let mut back = vec![0u8; bytes.len()];
        stream.read_exact(&mut back)?;
        Ok(back)
    }

    #[test]
    fn forwards_stalls_heals_and_cuts() {
        let proxy = FaultProxy::start(echo_server()).unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert_eq!(roundtrip(&mut stream, b"hello").unwrap(), b"hello");

        proxy.stall();
        let stalled = roundtrip(&mut stream, b"held");
        assert!(stalled.is_err(), "a stalled proxy forwarded: {stalled:?}");
        proxy.heal();
        let mut back = [0u8; 4];
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"held", "held bytes arrive once healed");

        proxy.cut();
        let mut rest = [0u8; 1];
        assert!(matches!(stream.read(&mut rest), Ok(0) | Err(_)), "a cut connection stays open");
        let mut refused = TcpStream::connect(proxy.addr()).unwrap();
        refused.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(refused.read(&mut rest), Ok(0) | Err(_)), "a cut proxy accepted a connection");
        assert_eq!(proxy.stats().refused, 1);

        proxy.heal();
        let mut again = TcpStream::connect(proxy.addr()).unwrap();
        again.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(roundtrip(&mut again, b"again").unwrap(), b"again");
        assert_eq!(proxy.stats().accepted, 2);
    }

    #[test]
    fn a_shaped_proxy_delays_each_way_and_limits_the_rate() {
        let shape = Shape { delay: Duration::from_millis(30), jitter: Duration::from_millis(5), rate: 1_000_000 };
        let proxy = FaultProxy::start_shaped(echo_server(), shape).unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(roundtrip(&mut stream, b"ping").unwrap(), b"ping");
        let rtt = started.elapsed();
        assert!(rtt >= Duration::from_millis(60), "a round trip through two 30 ms delays took {rtt:?}");
        // 300 kB out and back at 1 MB/s each way: at least 0.3 s on the line.
        let started = std::time::Instant::now();
        let bulk = vec![7u8; 300_000];
        let mut writer = stream.try_clone().unwrap();
        let sender = thread::spawn(move || writer.write_all(&bulk));
        let mut back = vec![0u8; 300_000];
        stream.read_exact(&mut back).unwrap();
        sender.join().unwrap().unwrap();
        assert!(back.iter().all(|&b| b == 7), "the bytes came back changed");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300), "300 kB at 1 MB/s took {took:?}");
    }
}
