//! A raw frame-level connection, for tests that must send what no real client would.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tidings_wire::{Frame, Hello, DEFAULT_MAX_FRAME};

/// A blocking TCP connection that speaks frames, or bytes.
pub struct RawConnection {
    stream: TcpStream,
    buf: BytesMut,
}

impl RawConnection {
    /// Connects without a handshake.
    pub fn connect(addr: &str) -> std::io::Result<RawConnection> {
        let addr: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        // A broker that stopped reading (a paused reader, a full queue) fails a send, never
        // hangs the test.
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(RawConnection { stream, buf: BytesMut::new() })
    }

    /// Connects and completes the handshake.
    pub fn handshake(addr: &str) -> std::io::Result<RawConnection> {
        let mut c = RawConnection::connect(addr)?;
        c.send(&Frame::Hello(Hello::new("raw")))?;
        match c.expect(Duration::from_secs(5))? {
            Frame::Welcome(_) => Ok(c),
            other => Err(std::io::Error::other(format!("expected WELCOME, got {other:?}"))),
        }
    }

    /// Sends one frame.
    pub fn send(&mut self, frame: &Frame) -> std::io::Result<()> {
        let bytes = frame.to_bytes().map_err(std::io::Error::other)?;
        self.stream.write_all(&bytes)
    }

    /// Sends raw bytes.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads the next frame within `timeout`, passing over SERVERS: a broker in a cell sends
    /// its list after WELCOME and whenever its links change, at no step a test controls.
    pub fn expect(&mut self, timeout: Duration) -> std::io::Result<Frame> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(frame) = Frame::decode(&mut self.buf, DEFAULT_MAX_FRAME).map_err(std::io::Error::other)? {
                if matches!(frame, Frame::Servers(_)) {
                    continue;
                }
                return Ok(frame);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no frame in time"));
            }
            self.stream.set_read_timeout(Some(left))?;
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// True if the peer closes the connection within `timeout` (after any pending frames).
    pub fn expect_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.expect(left) {
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return true,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}
