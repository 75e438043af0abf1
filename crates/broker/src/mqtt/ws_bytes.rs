//! A WebSocket seen as the byte stream MQTT expects (MQTT 5.0 §6): binary messages in are read
//! as bytes, whatever the packet boundaries (a packet may span messages and a message may hold
//! several), and each write goes out as one binary message. So the MQTT connection code serves
//! a WebSocket client unchanged, through the same `AsyncRead`/`AsyncWrite` halves as TCP or TLS.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

/// The close frame sent to a client that sent a text message: MQTT over WebSocket is binary
/// (MQTT-6.0.0-1), and 1003 is WebSocket's "cannot accept this data type".
fn text_refused() -> CloseFrame {
    CloseFrame { code: CloseCode::Unsupported, reason: "MQTT over WebSocket takes binary messages only".into() }
}

/// The byte stream of one MQTT-over-WebSocket connection.
pub(super) struct WsBytes<S> {
    ws: WebSocketStream<S>,
    /// What is left of the last binary message, not read yet.
    pending: Bytes,
    /// Why the connection is being refused, sent as the close frame on shutdown: a read side
    /// that finds a text message cannot write, so it leaves the reason for the writer's close.
    refusal: Option<CloseFrame>,
}

impl<S> WsBytes<S> {
    /// Wraps a WebSocket whose handshake is done.
    pub(super) fn new(ws: WebSocketStream<S>) -> WsBytes<S> {
        WsBytes { ws, pending: Bytes::new(), refusal: None }
    }
}

/// A WebSocket error as an I/O error; a connection already closed reads as the end of stream.
fn io_error(error: WsError) -> io::Error {
    match error {
        WsError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    }
}

/// Whether `error` only says the WebSocket is closed (by us or the peer): the end, not a fault.
fn closed(error: &WsError) -> bool {
    matches!(error, WsError::ConnectionClosed | WsError::AlreadyClosed)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                None | Some(Ok(Message::Close(_))) => return Poll::Ready(Ok(())),
                Some(Err(e)) if closed(&e) => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                Some(Ok(Message::Binary(bytes))) => self.pending = bytes,
                Some(Ok(Message::Text(_))) => {
                    self.refusal = Some(text_refused());
                    let refused = "a text message on MQTT over WebSocket (binary only)";
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, refused)));
                }
                // Pings are answered by tungstenite itself; pongs and raw frames carry no MQTT.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(io_error)?;
        Pin::new(&mut self.ws).start_send(Message::Binary(Bytes::copy_from_slice(buf))).map_err(io_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(io_error)
    }

    /// Closes the WebSocket (with the refusal's code, if any), then the stream under it.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.refusal.is_some() {
            match ready!(Pin::new(&mut self.ws).poll_ready(cx)) {
                Ok(()) => {
                    let frame = self.refusal.take();
                    if let Err(e) = Pin::new(&mut self.ws).start_send(Message::Close(frame)) {
                        if !closed(&e) {
                            return Poll::Ready(Err(io_error(e)));
                        }
                    }
                }
                Err(e) if closed(&e) => self.refusal = None,
                Err(e) => return Poll::Ready(Err(io_error(e))),
            }
        }
        match ready!(Pin::new(&mut self.ws).poll_close(cx)) {
            Err(e) if !closed(&e) => Poll::Ready(Err(io_error(e))),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::protocol::Role;

    /// A server-side `WsBytes` and the client's raw WebSocket, over an in-memory pipe.
    async fn pair() -> (WsBytes<tokio::io::DuplexStream>, WebSocketStream<tokio::io::DuplexStream>) {
        let (server, client) = tokio::io::duplex(4096);
        let server = WebSocketStream::from_raw_socket(server, Role::Server, None).await;
        let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        (WsBytes::new(server), client)
    }

    #[tokio::test]
    async fn messages_read_as_one_byte_stream_whatever_their_boundaries() {
        let (mut server, mut client) = pair().await;
        // One packet over two messages, then two packets in one message.
        for part in [&[0x10u8, 0x02][..], &[0x00, 0x01], &[0xC0, 0x00, 0xE0, 0x00]] {
            client.send(Message::Binary(Bytes::copy_from_slice(part))).await.unwrap();
        }
        client.send(Message::Ping(Bytes::from_static(b"p"))).await.unwrap();
        client.close(None).await.unwrap();
        let mut read = Vec::new();
        server.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, [0x10, 0x02, 0x00, 0x01, 0xC0, 0x00, 0xE0, 0x00]);
    }

    #[tokio::test]
    async fn each_write_is_one_binary_message_and_shutdown_closes_normally() {
        let (mut server, mut client) = pair().await;
        server.write_all(&[0x20, 0x02, 0x00, 0x00]).await.unwrap();
        server.flush().await.unwrap();
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Binary(Bytes::from_static(&[0x20, 0x02, 0x00, 0x00]))
        );
        server.shutdown().await.unwrap();
        assert!(matches!(client.next().await.unwrap().unwrap(), Message::Close(None)));
    }

    #[tokio::test]
    async fn a_text_message_is_an_error_and_the_close_says_1003() {
        let (mut server, mut client) = pair().await;
        client.send(Message::text("CONNECT")).await.unwrap();
        let mut byte = [0u8; 1];
        let err = server.read(&mut byte).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        server.shutdown().await.unwrap();
        match client.next().await.unwrap().unwrap() {
            Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Unsupported),
            other => panic!("expected a close frame with 1003, got {other:?}"),
        }
    }
}
