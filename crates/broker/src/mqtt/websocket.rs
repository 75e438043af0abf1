//! MQTT over WebSocket (`[mqtt] websocket`, MQTT 5.0 §6), for browsers and MQTT.js: an HTTP
//! upgrade on any path (MQTT.js asks for `/mqtt`), the `mqtt` subprotocol (or the older
//! `mqttv3.1`) echoed, then binary messages carrying the MQTT byte stream ([`WsBytes`]), served
//! by the same connection code as the TCP listener, with its limits, users and permissions.
//! With `[tls] mqtt` on, the upgrade runs inside TLS (`wss://`).
//!
//! Whatever is not an MQTT WebSocket upgrade is answered with an HTTP 400 naming what is wrong
//! and closed, so someone pointing curl or a browser at the port learns what it serves.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::WebSocketStream;
use tracing::debug;

use super::ws_bytes::WsBytes;
use crate::context::Context;
use crate::tls::{Accepted, BoxRead, BoxWrite};

/// The subprotocols MQTT clients offer: `mqtt` (MQTT-6.0.0-3), and `mqttv3.1`, which some
/// 3.1-era clients still send.
const SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];

/// Room past the largest MQTT packet for one WebSocket message: a message may hold several
/// small packets after a large one, but a client must not make the broker buffer much more
/// than a packet.
const MESSAGE_SLACK: usize = 64 * 1024;

/// A connection the upgrade runs over: TCP, or TLS over TCP.
trait Duplex: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Duplex for T {}

/// Serves one connection to the WebSocket listener: TLS when `tls`, the upgrade, then MQTT.
/// `redirect`: a connection past the limit, to be told where to go at CONNECT.
pub(super) async fn open(stream: TcpStream, shared: Arc<Context>, ((registry, redirect), (tls, place)): super::Doors) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let limit = shared.config.limits.handshake_timeout;
    let mut certificate = None;
    let stream: Box<dyn Duplex> = match tls {
        None => Box::new(stream),
        // Boxed, as the upgrade: steps taken once leave no room in the connection's task.
        Some(tls) => match Box::pin(tls.accept(stream, limit)).await {
            Accepted::Tls(stream) => {
                certificate = crate::tls::client_names(&stream);
                stream
            }
            Accepted::Plaintext(mut stream) => {
                tracing::info!(%peer, "plaintext HTTP on a wss listener; refused");
                let _ = refuse(&mut stream, "this port speaks MQTT over WebSocket inside TLS: use wss://").await;
                return;
            }
            Accepted::Failed => return,
        },
    };
    let max_message = shared.config.limits.max_frame.saturating_add(MESSAGE_SLACK);
    let Some(ws) = Box::pin(upgrade(stream, limit, max_message, &peer)).await else { return };
    let (reader, writer) = tokio::io::split(WsBytes::new(ws));
    let (reader, writer): (BoxRead, BoxWrite) = (Box::new(reader), Box::new(writer));
    let peer = format!("{peer} ws");
    let stream = super::Stream { reader, writer, peer, certificate, websocket: true, redirect, place };
    // Not boxed, as for TCP: the upgrade is, so the task holds little beside the connection.
    super::connection(stream, shared, registry).await;
}

/// Runs the HTTP upgrade within `limit`; `None` (after answering why, when it can) if it fails.
async fn upgrade<S: Duplex>(
    mut stream: S,
    limit: Duration,
    max_message: usize,
    peer: &str,
) -> Option<WebSocketStream<S>> {
    let config = WebSocketConfig::default().max_message_size(Some(max_message)).max_frame_size(Some(max_message));
    // Borrowed, so that a request tungstenite rejects without answering can still be answered.
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(&mut stream, choose_subprotocol, Some(config));
    match tokio::time::timeout(limit, handshake).await {
        Ok(Ok(_)) => {}
        Ok(Err(WsError::Http(response))) => {
            debug!(%peer, status = %response.status(), "WebSocket upgrade refused");
            return None;
        }
        Ok(Err(WsError::Protocol(problem))) => {
            debug!(%peer, %problem, "not a WebSocket upgrade");
            let _ = refuse(
                &mut stream,
                &format!("not a WebSocket upgrade ({problem}); this port serves MQTT over WebSocket"),
            )
            .await;
            return None;
        }
        Ok(Err(error)) => {
            debug!(%peer, %error, "WebSocket upgrade failed");
            return None;
        }
        Err(_) => {
            debug!(%peer, "no WebSocket upgrade within the handshake timeout");
            return None;
        }
    }
    // The handshake read nothing past the request (tungstenite refuses a tail), so the stream
    // picks up exactly where the upgrade left it.
    Some(WebSocketStream::from_raw_socket(stream, Role::Server, Some(config)).await)
}

/// The upgrade's callback: answers with `mqtt` if the client offered it, else `mqttv3.1`, or
/// refuses the upgrade (400) when it offered none (MQTT-6.0.0-3, MQTT-6.0.0-4).
#[allow(clippy::result_large_err)] // tungstenite's callback signature
fn choose_subprotocol(request: &Request, mut response: Response) -> Result<Response, ErrorResponse> {
    let offered: Vec<&str> = request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    match SUBPROTOCOLS.into_iter().find(|known| offered.contains(known)) {
        Some(chosen) => {
            response.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(chosen));
            Ok(response)
        }
        None => {
            let why =
                format!("MQTT over WebSocket needs the subprotocol \"mqtt\" (or \"mqttv3.1\"); offered: {offered:?}\n");
            let mut refusal = ErrorResponse::new(Some(why));
            *refusal.status_mut() = StatusCode::BAD_REQUEST;
            Err(refusal)
        }
    }
}

/// Answers a request that is not an MQTT WebSocket upgrade with a 400 saying `why`.
async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, why: &str) -> std::io::Result<()> {
    let body = format!("{why}\n");
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await
    .unwrap_or(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Sends `request` to [`upgrade`] and returns what came back before the server's end, and
    /// whether the upgrade went through.
    async fn answer_to(request: &str) -> (String, bool) {
        let (server, mut client) = tokio::io::duplex(8192);
        let upgrading = tokio::spawn(async move {
            let ws = upgrade(server, Duration::from_secs(5), 1 << 20, "test").await;
            ws.is_some()
        });
        client.write_all(request.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 4096];
        let n = client.read(&mut answer).await.unwrap();
        let upgraded = upgrading.await.unwrap();
        (String::from_utf8_lossy(&answer[..n]).into_owned(), upgraded)
    }

    fn upgrade_request(protocols: &str) -> String {
        format!(
            "GET /mqtt HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{protocols}\r\n"
        )
    }

    #[tokio::test]
    async fn the_mqtt_subprotocol_is_echoed_and_mqttv3_1_accepted() {
        for (offered, chosen) in [("mqtt", "mqtt"), ("chat, mqtt", "mqtt"), ("mqttv3.1", "mqttv3.1")] {
            let (answer, upgraded) =
                answer_to(&upgrade_request(&format!("Sec-WebSocket-Protocol: {offered}\r\n"))).await;
            assert!(upgraded, "{offered}: {answer}");
            assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
            // RFC 6455's example key.
            assert!(answer.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{answer}");
            let line = format!("sec-websocket-protocol: {chosen}\r\n");
            assert!(answer.to_ascii_lowercase().contains(&line), "{offered}: {answer}");
        }
    }

    #[tokio::test]
    async fn an_upgrade_without_the_mqtt_subprotocol_is_refused_saying_so() {
        for protocols in ["", "Sec-WebSocket-Protocol: chat\r\n"] {
            let (answer, upgraded) = answer_to(&upgrade_request(protocols)).await;
            assert!(!upgraded);
            assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
            assert!(answer.contains("needs the subprotocol \"mqtt\""), "{answer}");
        }
    }

    #[tokio::test]
    async fn a_request_that_is_not_an_upgrade_gets_a_400_naming_the_port() {
        let (answer, upgraded) = answer_to("GET / HTTP/1.1\r\nHost: b\r\n\r\n").await;
        assert!(!upgraded);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("not a WebSocket upgrade"), "{answer}");
        assert!(answer.contains("serves MQTT over WebSocket"), "{answer}");
    }
}
