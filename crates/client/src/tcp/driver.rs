//! One task per TCP client: it runs the reader and the writer of the current connection, and
//! when the connection drops, reconnects.

use std::sync::Arc;

use bytes::BytesMut;
use tidings_wire::{frame::needed, Frame, Hello, Welcome, PROTOCOL_VERSION};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{lookup_host, TcpStream};
use tokio::time::{sleep, timeout};
use tracing::debug;

use super::stream::{Reader, Stream, Writer};
use super::{Take, TcpLink};
use crate::backoff::{Backoff, Schedule};
use crate::builder::Config;
use crate::error::ClientError;
use crate::event::ConnectionEvent;
use crate::inbox::Inbox;
use crate::now_us;
use crate::shared::{Link, Shared};

/// A connection past its handshake, with any bytes read after the WELCOME.
struct Connection {
    stream: Stream,
    read_buf: BytesMut,
    welcome: Welcome,
}

/// Opens the first connection and starts the client's task.
pub(crate) async fn connect(config: Config) -> Result<Arc<Shared>, ClientError> {
    let user = addresses(&config.addr).map(String::from).enumerate().collect();
    let (connection, index) = open(&config, user, None).await?;
    let link = Arc::new(TcpLink::new(config.max_pending_bytes));
    let shared = Arc::new(Shared::new(config, Link::Tcp(link.clone())));
    shared.failover.connected(index);
    link.go_up(&shared, &connection.welcome)?;
    tokio::spawn(drive(shared.clone(), link, connection));
    Ok(shared)
}

/// Connects and says HELLO, within `connect_timeout` per address. `addr` may list several
/// brokers, `a,b,c` (failover, `docs/replication.md`, "Takeover"): each is tried in turn, from
/// the first, at the first connection and at every reconnect, so the client reaches the first
/// live broker of the list; a guaranteed publisher then sends its window again there. After a
/// broker refused a guaranteed publish as unavailable (it does not lead the pubend), the tries
/// start just past it (`failover.rs`). The list grows by the addresses brokers tell the client
/// (SERVERS), after the user's. A client whose durable subscriptions live at `home` passes over
/// any other broker (`Shared::durable_home`). Returns the connection and the entry it reached.
async fn open(
    config: &Config,
    order: Vec<(usize, String)>,
    home: Option<String>,
) -> Result<(Connection, usize), ClientError> {
    let limit = config.connect_timeout;
    let mut last = None;
    for (index, addr) in order {
        match timeout(limit, open_one(&addr, config)).await {
            Ok(Ok(connection)) => match &home {
                Some(home) if *home != connection.welcome.server_name => {
                    let broker = connection.welcome.server_name.clone();
                    debug!(%addr, %broker, %home, "passing over a broker that does not hold the durable subscriptions");
                    last = Some(ClientError::NotHome { broker, home: home.clone() });
                }
                _ => return Ok((connection, index)),
            },
            Ok(Err(error)) => last = Some(error),
            Err(_) => last = Some(ClientError::Timeout { operation: "connect", after: limit }),
        }
    }
    Err(last.unwrap_or_else(|| ClientError::NoAddress { addr: config.addr.clone() }))
}

/// The addresses of a `a,b,c` list, in order, without blanks.
pub(crate) fn addresses(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|addr| !addr.is_empty())
}

async fn open_one(addr: &str, config: &Config) -> Result<Connection, ClientError> {
    let mut last = None;
    for addr in lookup_host(addr).await? {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                let stream = match &config.tls {
                    Some(tls) => Stream::Tls(Box::new(tls.connect(stream).await?)),
                    None => Stream::Plain(stream),
                };
                return handshake(stream, config).await;
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.map(ClientError::from).unwrap_or_else(|| ClientError::NoAddress { addr: addr.to_string() }))
}

async fn handshake(mut stream: Stream, config: &Config) -> Result<Connection, ClientError> {
    let mut out = BytesMut::new();
    Frame::Hello(Hello { version: PROTOCOL_VERSION, client_name: config.name.clone(), auth: config.auth.clone() })
        .encode(&mut out)?;
    stream.write_all(&out).await?;
    stream.flush().await?;
    let mut read_buf = BytesMut::with_capacity(config.read_buffer);
    loop {
        if let Some(detail) = foreign_protocol(&read_buf) {
            return Err(ClientError::Protocol { detail });
        }
        if let Some(frame) = Frame::decode(&mut read_buf, config.max_frame)? {
            return match frame {
                Frame::Welcome(welcome) if welcome.version == PROTOCOL_VERSION => {
                    Ok(Connection { stream, read_buf, welcome })
                }
                Frame::Welcome(w) => Err(ClientError::VersionMismatch { ours: PROTOCOL_VERSION, theirs: w.version }),
                Frame::Error(notice) => Err(ClientError::refused(&notice)),
                Frame::Disconnect(notice) => Err(ClientError::disconnected(&notice)),
                other => Err(ClientError::Protocol { detail: format!("{:?} before WELCOME", other.frame_type()) }),
            };
        }
        if stream.read_buf(&mut read_buf).await? == 0 {
            return Err(ClientError::ConnectionLost);
        }
    }
}

/// Names the protocol a server answered in when it is not tidings, so a client pointed at the
/// wrong port is told so instead of getting a frame-size error from the first bytes.
fn foreign_protocol(first: &[u8]) -> Option<String> {
    if first.starts_with(b"HTTP/") {
        Some("the server answered in HTTP: this looks like the admin port, not the client port".into())
    } else if first.starts_with(b"INFO {") {
        Some("the server answered as a NATS server, not a tidings broker".into())
    } else {
        None
    }
}

/// The client's task: serve a connection until it ends, then reconnect or finish.
async fn drive(shared: Arc<Shared>, link: Arc<TcpLink>, mut connection: Connection) {
    loop {
        let Some(error) = serve(&shared, &link, connection).await else {
            return shared.finish(None);
        };
        debug!(%error, "connection ended");
        if !link.go_down(&shared, &error) {
            return shared.finish(None);
        }
        let Some(backoff) = shared.config.reconnect else {
            return shared.finish(Some(error));
        };
        match reconnect(&shared, &link, backoff, error).await {
            Ok(next) => connection = next,
            Err(error) => return shared.finish(error),
        }
    }
}

/// Runs reader and writer until one ends. `None`: the client closed (orderly).
async fn serve(shared: &Shared, link: &TcpLink, connection: Connection) -> Option<ClientError> {
    let Connection { stream, read_buf, .. } = connection;
    let (reader, writer) = stream.split();
    tokio::select! {
        () = shared.stopped() => None,
        error = read_loop(shared, reader, read_buf) => Some(error),
        result = write_loop(link, writer) => result.err(),
    }
}

/// Reads into a large buffer and handles every whole frame in it; returns why it stopped.
async fn read_loop(shared: &Shared, mut reader: Reader, mut buf: BytesMut) -> ClientError {
    let max_frame = shared.config.max_frame;
    let chunk = shared.config.read_buffer;
    let mut read_us = now_us();
    let mut inbox = Inbox::default();
    loop {
        loop {
            match Frame::decode(&mut buf, max_frame) {
                Ok(Some(frame)) => {
                    if let Some(error) = shared.handle_inbound(frame, read_us, &mut inbox) {
                        shared.hand_over(&mut inbox).await;
                        return error;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    shared.hand_over(&mut inbox).await;
                    return e.into();
                }
            }
        }
        shared.hand_over(&mut inbox).await;
        // Room for the rest of a large frame, and never less than half a chunk per read.
        let want = needed(&buf).unwrap_or(0).max(chunk / 2);
        if buf.capacity() - buf.len() < want {
            buf.reserve(want.max(chunk));
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => return ClientError::ConnectionLost,
            Ok(_) => read_us = now_us(),
            Err(e) => return e.into(),
        }
    }
}

/// Writes whatever is buffered, one write per batch. `Ok` after an orderly close.
async fn write_loop(link: &TcpLink, mut writer: Writer) -> Result<(), ClientError> {
    let mut spare = BytesMut::with_capacity(64 * 1024);
    loop {
        match link.take(&mut spare) {
            Take::Batch => {
                writer.write_all(&spare).await?;
                // TLS holds the last record until flushed; plaintext has nothing to flush.
                writer.flush().await?;
                spare.clear();
            }
            Take::Empty => link.writer_wake.notified().await,
            Take::Closing => {
                writer.shutdown().await?;
                return Ok(());
            }
        }
    }
}

/// Reconnects with backoff. `Err(None)`: the client was closed meanwhile.
async fn reconnect(
    shared: &Shared,
    link: &TcpLink,
    backoff: Backoff,
    mut last: ClientError,
) -> Result<Connection, Option<ClientError>> {
    let seed = now_us() ^ (u64::from(std::process::id()) << 32);
    let mut schedule = Schedule::new(backoff, seed);
    while let Some(delay) = schedule.next_delay() {
        shared.emit(ConnectionEvent::Reconnecting { attempt: schedule.attempts(), delay });
        let attempt = async {
            sleep(delay).await;
            open(&shared.config, shared.failover.order(), shared.durable_home()).await
        };
        let result = tokio::select! {
            () = shared.stopped() => return Err(None),
            result = attempt => result,
        };
        match result {
            Ok((connection, index)) => {
                shared.failover.connected(index);
                return match link.go_up(shared, &connection.welcome) {
                    Ok(()) => Ok(connection),
                    Err(_) => Err(None),
                };
            }
            Err(error) => {
                debug!(%error, attempt = schedule.attempts(), "reconnect failed");
                last = error;
            }
        }
    }
    Err(Some(ClientError::ReconnectFailed { attempts: schedule.attempts(), last: Box::new(last) }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_server_list_is_tried_in_order_without_blanks() {
        let list: Vec<&str> = super::addresses(" a:1, b:2,,c:3 ").collect();
        assert_eq!(list, ["a:1", "b:2", "c:3"]);
        assert_eq!(super::addresses("h:4222").collect::<Vec<_>>(), ["h:4222"]);
    }
}
