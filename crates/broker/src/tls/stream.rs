//! Streams that may or may not be TLS, for the code that reads and writes connections.
//!
//! The native client read loop waits for readiness and then reads without waiting, so that it
//! takes buffer memory only once bytes are there (see `read_buffer`); [`ReadSide`] keeps that
//! shape, with the plain TCP half as it was (monomorphized: no cost) and [`TlsRead`], which
//! decrypts into a small buffer of its own when readiness is awaited. MQTT and links read
//! and write through boxed halves ([`BoxRead`], [`BoxWrite`]): one indirect call per read or
//! write, beside the system call.

use std::future::Future;
use std::io;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadHalf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;

/// A connection's read half, plaintext or TLS.
pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// A connection's write half, plaintext or TLS. TLS buffers what it encrypts: flush after
/// each batch of writes.
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// The most a TLS read decrypts ahead: one TLS record.
const TLS_RECORD: usize = 16 * 1024;

/// A read half the native client loop can wait on, then read from without waiting.
pub(crate) trait ReadSide: Send + 'static {
    /// Resolves when [`try_read_buf`](Self::try_read_buf) may find bytes (or the end).
    /// Cancel safe: used in `select!`.
    fn ready(&mut self) -> impl Future<Output = io::Result<()>> + Send;
    /// Moves what can be read now into `buf`'s spare capacity; `WouldBlock` when nothing is
    /// there, `Ok(0)` at the end of the stream.
    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize>;
}

impl ReadSide for OwnedReadHalf {
    fn ready(&mut self) -> impl Future<Output = io::Result<()>> + Send {
        self.readable()
    }

    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        OwnedReadHalf::try_read_buf(self, buf)
    }
}

/// The read half of a TLS connection, decrypting ahead into `pending` while readiness is
/// awaited (at most a record's worth: the memory an idle TLS client costs besides rustls').
pub(crate) struct TlsRead {
    inner: ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>,
    pending: BytesMut,
    ended: bool,
}

impl TlsRead {
    /// The read half of `stream` (whose write half is written elsewhere).
    pub(crate) fn new(inner: ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>) -> TlsRead {
        TlsRead { inner, pending: BytesMut::new(), ended: false }
    }
}

impl ReadSide for TlsRead {
    async fn ready(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() || self.ended {
            return Ok(());
        }
        self.pending.reserve(TLS_RECORD);
        // `read_buf` is cancel safe: nothing is lost if another branch wins.
        if self.inner.read_buf(&mut self.pending).await? == 0 {
            self.ended = true;
        }
        Ok(())
    }

    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if self.pending.is_empty() {
            return match self.ended {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            };
        }
        let room = (buf.capacity() - buf.len()).max(1);
        let n = room.min(self.pending.len());
        buf.extend_from_slice(&self.pending.split_to(n));
        if self.pending.is_empty() {
            // Give the record buffer back: an idle TLS client holds none of it.
            self.pending = BytesMut::new();
        }
        Ok(n)
    }
}
