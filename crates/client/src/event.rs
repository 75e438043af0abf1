//! What happens to a client's connection, for applications that want to know.

use std::time::Duration;

use crate::error::ClientError;

/// A change in the client's connection, from [`Client::events`](crate::Client::events).
///
/// Events are broadcast: a receiver that falls more than 64 events behind loses the oldest
/// (tokio's `RecvError::Lagged`), the client never waits for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ConnectionEvent {
    /// A (re)connection completed its handshake; every live subscription has been re-sent.
    Connected {
        /// The broker's name from WELCOME.
        server_name: String,
    },
    /// The connection dropped; the client reconnects if configured to.
    Disconnected {
        /// Why.
        error: ClientError,
        /// Best-effort publishes still in the client's write buffer, discarded unsent. Those
        /// already written to the socket may be lost too; their number cannot be known.
        unsent_publishes: u64,
    },
    /// A reconnect attempt is about to be made after `delay`.
    Reconnecting {
        /// 1 for the first attempt after a disconnect.
        attempt: u32,
        /// The backoff delay before it.
        delay: Duration,
    },
    /// The broker answered something with ERROR (over UDP the session stays).
    Refused {
        /// The refusal.
        error: ClientError,
    },
    /// The client is closed for good; streams have ended.
    Closed {
        /// `None` after [`Client::close`](crate::Client::close) or when every handle was
        /// dropped; otherwise why the client gave up.
        error: Option<ClientError>,
    },
}
