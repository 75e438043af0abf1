//! A link that behaves like a real network rather than loopback: a one-way delay, jitter and a
//! bandwidth limit on each direction of a [`super::FaultProxy`] (issue 45: the kernel's netem is
//! not available on the machines this runs on, and the seeds' experiments ran on real LANs and
//! WANs).
//!
//! The model is a serial line followed by a propagation delay: a chunk read at `now` leaves the
//! sender once the chunks before it are sent (`len / rate` each), and arrives `delay` plus a
//! uniform draw in `[0, jitter]` later, never before the chunk ahead of it (TCP keeps order, so
//! jitter on one stream shows as bunching, not reordering). What is in flight is bounded
//! ([`IN_FLIGHT`] chunks): a sender faster than the rate is held back, as a full router queue
//! holds back TCP, instead of the proxy buffering without end.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use super::Shared;

/// Chunks a direction holds in flight (at most [`CHUNK`] bytes each).
pub(crate) const IN_FLIGHT: usize = 64;
/// The largest read a shaped direction forwards as one chunk: small enough that a chunk's
/// serial time stays short at WAN rates.
const CHUNK: usize = 16 * 1024;

/// How a proxy shapes the bytes it forwards, each direction alike. The default shapes nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Added to every chunk, one way.
    pub delay: Duration,
    /// Up to this much more per chunk, drawn uniformly.
    pub jitter: Duration,
    /// Bytes per second each way; 0 is unlimited.
    pub rate: u64,
}

impl Shape {
    /// Whether it changes anything (an unshaped proxy forwards with no extra thread).
    pub fn is_none(&self) -> bool {
        self.delay.is_zero() && self.jitter.is_zero() && self.rate == 0
    }
}

/// Where a direction's line stands: when its last chunk left the sender, and when it arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Line {
    sent: Instant,
    arrives: Instant,
}

impl Line {
    pub(crate) fn new(now: Instant) -> Line {
        Line { sent: now, arrives: now }
    }

    /// When a chunk of `len` bytes read at `now` arrives, `draw` in `[0, 1)` picking its jitter.
    pub(crate) fn admit(&mut self, shape: &Shape, now: Instant, len: usize, draw: f64) -> Instant {
        let serial = match shape.rate {
            0 => Duration::ZERO,
            rate => Duration::from_secs_f64(len as f64 / rate as f64),
        };
        self.sent = self.sent.max(now) + serial;
        let arrives = self.sent + shape.delay + shape.jitter.mul_f64(draw);
        self.arrives = self.arrives.max(arrives);
        self.arrives
    }
}

/// A uniform draw in `[0, 1)` from the OS (a few thousand a second at most: no generator of our
/// own needed).
fn draw() -> f64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

/// Copies one direction through the shaped line until either side closes: this thread reads
/// and stamps each chunk, a second one writes it when it arrives.
pub(crate) fn pump(mut from: TcpStream, to: TcpStream, shared: &Shared, shape: Shape) {
    let (tx, rx) = sync_channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let Ok(writer) = thread::Builder::new().name("fault-proxy-line".into()).spawn(move || deliver(rx, to)) else {
        return;
    };
    let mut line = Line::new(Instant::now());
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !super::wait_while_stalled(shared) {
            break;
        }
        shared.lock().stats.bytes += n as u64;
        let at = line.admit(&shape, Instant::now(), n, draw());
        if tx.send((at, buffer[..n].to_vec())).is_err() {
            break;
        }
    }
    // A cut reset both streams: the writer's next write fails and what is in flight is dropped.
    drop(tx);
    let _ = writer.join();
}

/// Writes each chunk when it arrives; closes the write side when the reader is done.
fn deliver(rx: Receiver<(Instant, Vec<u8>)>, mut to: TcpStream) {
    for (at, bytes) in rx {
        let now = Instant::now();
        if at > now {
            thread::sleep(at - now);
        }
        if to.write_all(&bytes).is_err() {
            return;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_chunk_arrives_after_the_delay_and_its_serial_time() {
        let shape = Shape { delay: 20 * MS, jitter: Duration::ZERO, rate: 1_000_000 };
        let t0 = Instant::now();
        let mut line = Line::new(t0);
        // 10 kB at 1 MB/s is 10 ms on the line, then 20 ms of delay.
        assert_eq!(line.admit(&shape, t0, 10_000, 0.0) - t0, 30 * MS);
        // The next chunk, read at once, waits for the line: 10 ms more.
        assert_eq!(line.admit(&shape, t0, 10_000, 0.0) - t0, 40 * MS);
        // Read after the line went idle, it starts then.
        assert_eq!(line.admit(&shape, t0 + 100 * MS, 1_000, 0.0) - t0, 121 * MS);
    }

    #[test]
    fn jitter_never_lets_a_chunk_overtake_the_one_ahead() {
        let shape = Shape { delay: 10 * MS, jitter: 50 * MS, rate: 0 };
        let t0 = Instant::now();
        let mut line = Line::new(t0);
        let first = line.admit(&shape, t0, 100, 0.99);
        let second = line.admit(&shape, t0 + MS, 100, 0.0);
        assert!(second >= first, "the second chunk came first");
        assert_eq!(first - t0, 10 * MS + (50 * MS).mul_f64(0.99));
        let later = line.admit(&shape, t0 + 200 * MS, 100, 0.5);
        assert_eq!(later - t0, 235 * MS);
    }

    #[test]
    fn draws_are_in_the_unit_interval() {
        assert!((0..1000).map(|_| draw()).all(|d| (0.0..1.0).contains(&d)));
    }
}
