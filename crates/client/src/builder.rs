//! Client settings and the builder that collects them.

use std::time::Duration;

use tidings_wire::{PublisherId, DEFAULT_MAX_FRAME};

use crate::backoff::Backoff;
use crate::client::Client;
use crate::error::ClientError;

/// Which socket the client speaks over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// One TCP connection: ordered, reliable, reconnects.
    #[default]
    Tcp,
    /// UDP datagrams: no connection, loss possible; requests are retried and subscriptions
    /// renewed by a keepalive.
    Udp,
}

/// Every setting of a client. Built by [`ClientBuilder`]; the defaults are documented on its
/// methods.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) addr: String,
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) reconnect: Option<Backoff>,
    pub(crate) max_frame: usize,
    pub(crate) subscription_capacity: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) reconnect_wait: Duration,
    pub(crate) max_pending_bytes: usize,
    pub(crate) read_buffer: usize,
    pub(crate) udp_ttl: Duration,
    pub(crate) udp_retry_interval: Duration,
    pub(crate) udp_recv_buffer: usize,
    pub(crate) publisher: PublisherId,
    pub(crate) pubend: String,
    pub(crate) guaranteed_window: usize,
    pub(crate) auth: tidings_wire::HelloAuth,
    /// What the builder was told about TLS; loaded into `tls` by `connect`.
    pub(crate) tls_settings: crate::tls::TlsSettings,
    pub(crate) tls: Option<crate::tls::Tls>,
    /// Whether the addresses brokers tell (SERVERS) stay out of the server list.
    pub(crate) ignore_told_servers: bool,
}

/// Configures and opens a [`Client`].
///
/// ```no_run
/// use std::time::Duration;
/// use tidings_client::{Backoff, Client, Transport};
///
/// # async fn demo() -> Result<(), tidings_client::ClientError> {
/// let client = Client::builder("127.0.0.1:4222")
///     .name("line3-sensors")
///     .transport(Transport::Tcp)
///     .reconnect(Backoff { initial: Duration::from_millis(50), max: Duration::from_secs(2), max_attempts: Some(30) })
///     .subscription_capacity(4096)
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct ClientBuilder {
    config: Config,
}

impl ClientBuilder {
    /// Starts from the defaults for a broker at `addr` (`"host:port"`, or anything that
    /// displays as one, such as a `SocketAddr`). The name is resolved at every (re)connect.
    /// `tls://host:port` asks for TLS (see [`tls_ca`](Self::tls_ca)).
    pub fn new(addr: impl std::fmt::Display) -> ClientBuilder {
        let (addr, tls) = crate::tls::strip_scheme(&addr.to_string());
        ClientBuilder {
            config: Config {
                addr,
                name: "tidings-client".to_string(),
                transport: Transport::Tcp,
                reconnect: Some(Backoff::default()),
                max_frame: DEFAULT_MAX_FRAME,
                subscription_capacity: 65_536,
                connect_timeout: Duration::from_secs(5),
                request_timeout: Duration::from_secs(10),
                reconnect_wait: Duration::from_secs(5),
                max_pending_bytes: 4 * 1024 * 1024,
                read_buffer: 128 * 1024,
                udp_ttl: Duration::from_secs(30),
                udp_retry_interval: Duration::from_millis(250),
                udp_recv_buffer: 2 << 20,
                publisher: PublisherId(rand::random()),
                pubend: String::new(),
                guaranteed_window: 256,
                auth: tidings_wire::HelloAuth::None,
                tls_settings: crate::tls::TlsSettings { on: tls, ..Default::default() },
                tls: None,
                ignore_told_servers: false,
            },
        }
    }

    /// Keeps the server list to the addresses given here: the addresses a broker tells of its
    /// cell mates (SERVERS, `docs/replication.md`, "Clients") are not tried on reconnect, as
    /// NATS's `ignore_discovered_servers`. Default: they are tried after the given ones, so a
    /// client given one broker of a replicated cell fails over to its mates.
    pub fn ignore_told_servers(mut self) -> ClientBuilder {
        self.config.ignore_told_servers = true;
        self
    }

    /// The name sent in HELLO, shown in the broker's logs. Default `tidings-client`.
    pub fn name(mut self, name: impl Into<String>) -> ClientBuilder {
        self.config.name = name.into();
        self
    }

    /// Logs in as `user` with `password` (a broker with a users file refuses a session
    /// without credentials). Sent in clear in HELLO: use it over TLS outside a trusted network.
    pub fn password(mut self, user: impl Into<String>, password: impl Into<String>) -> ClientBuilder {
        self.config.auth = tidings_wire::HelloAuth::Password { user: user.into(), password: password.into() };
        self
    }

    /// Logs in with a bearer token instead of a password.
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.config.auth = tidings_wire::HelloAuth::Token(token.into());
        self
    }

    /// Speaks TLS to the broker, trusting the CA certificates (PEM) in `path` to have signed
    /// the broker's certificate, which must also name the host of the address. Implies TLS
    /// (as does a `tls://` address, which needs this CA all the same). TCP only.
    pub fn tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> ClientBuilder {
        self.config.tls_settings.on = true;
        self.config.tls_settings.ca = Some(path.into());
        self
    }

    /// The client's own certificate chain and private key (PEM files), for a broker that
    /// requires client certificates (`[tls] ca`).
    pub fn tls_identity(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> ClientBuilder {
        self.config.tls_settings.identity = Some((cert.into(), key.into()));
        self
    }

    /// TCP (default) or UDP.
    pub fn transport(mut self, transport: Transport) -> ClientBuilder {
        self.config.transport = transport;
        self
    }

    /// Reconnect after an unexpected TCP disconnect with this schedule. Default:
    /// [`Backoff::default`] (100 ms doubling to 5 s, forever).
    pub fn reconnect(mut self, backoff: Backoff) -> ClientBuilder {
        self.config.reconnect = Some(backoff);
        self
    }

    /// Never reconnect: the first lost connection closes the client, and subscription
    /// streams end with the reason in [`Subscription::error`](crate::Subscription::error).
    pub fn no_reconnect(mut self) -> ClientBuilder {
        self.config.reconnect = None;
        self
    }

    /// The largest frame accepted from the broker (type byte and body). Default 8 MiB.
    /// What the client may send is the broker's limit, learned from WELCOME.
    pub fn max_frame(mut self, bytes: usize) -> ClientBuilder {
        self.config.max_frame = bytes;
        self
    }

    /// Deliveries buffered per subscription before the reader waits for the application,
    /// which in turn makes the broker's queue for this client fill (TCP backpressure). The
    /// reader hands deliveries over one socket read at a time, so one read's worth may exceed
    /// a small capacity. Default 65,536; at least 1.
    pub fn subscription_capacity(mut self, deliveries: usize) -> ClientBuilder {
        self.config.subscription_capacity = deliveries.max(1);
        self
    }

    /// Limit for opening a connection, handshake included. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.config.connect_timeout = timeout;
        self
    }

    /// Limit for a PONG to come back to `subscribe`, `ping`, `flush` and `unsubscribe`.
    /// Default 10 s.
    pub fn request_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.config.request_timeout = timeout;
        self
    }

    /// How long calls made while a TCP connection is down wait for the reconnect before
    /// failing with [`ClientError::Timeout`]. Default 5 s.
    pub fn reconnect_wait(mut self, wait: Duration) -> ClientBuilder {
        self.config.reconnect_wait = wait;
        self
    }

    /// High-water mark of the TCP write buffer: `publish` waits while more than this is
    /// waiting to be written. Default 4 MiB.
    pub fn max_pending_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.config.max_pending_bytes = bytes.max(1);
        self
    }

    /// Bytes the TCP reader asks the socket for at a time. Default 128 KiB.
    pub fn read_buffer(mut self, bytes: usize) -> ClientBuilder {
        self.config.read_buffer = bytes.max(4096);
        self
    }

    /// The broker's UDP subscription lifetime; the keepalive renews every subscription each
    /// third of it. Must match the broker's setting (default 30 s).
    pub fn udp_ttl(mut self, ttl: Duration) -> ClientBuilder {
        self.config.udp_ttl = ttl;
        self
    }

    /// Over UDP, requests are re-sent at this interval until answered or
    /// [`request_timeout`](Self::request_timeout) runs out. Default 250 ms.
    pub fn udp_retry_interval(mut self, interval: Duration) -> ClientBuilder {
        self.config.udp_retry_interval = interval;
        self
    }

    /// Over UDP, the socket's receive buffer in bytes (`SO_RCVBUF`; Linux caps it at
    /// `net.core.rmem_max`). It is what holds the broker's datagrams while this process waits
    /// for a CPU: the kernel's default (about 200 KiB, some 90 datagrams) was a tenth of a
    /// second of a busy subscriber's traffic, and a client descheduled longer lost the rest
    /// silently. Default 2 MiB: seconds of traffic at 1,000 msg/s.
    pub fn udp_recv_buffer(mut self, bytes: usize) -> ClientBuilder {
        self.config.udp_recv_buffer = bytes;
        self
    }

    /// The id guaranteed publishes are sent under. Default: random per client. The broker
    /// drops a `(publisher, seq)` it already logged, so only one client at a time may use an
    /// id, and a restarted publisher that reuses one must continue its sequence numbers.
    pub fn publisher_id(mut self, id: PublisherId) -> ClientBuilder {
        self.config.publisher = id;
        self
    }

    /// The pubend (publishing endpoint, one ordered stream hosted by the broker) guaranteed
    /// publishes go to. Default: empty, the broker's default pubend.
    pub fn pubend(mut self, name: impl Into<String>) -> ClientBuilder {
        self.config.pubend = name.into();
        self
    }

    /// Guaranteed publishes in flight (sent, not yet acknowledged) before the next one
    /// waits. Default 256; at least 1.
    pub fn guaranteed_window(mut self, publishes: usize) -> ClientBuilder {
        self.config.guaranteed_window = publishes.max(1);
        self
    }

    /// Opens the connection (TCP: connect, HELLO, WELCOME; UDP: HELLO until WELCOME).
    /// A failure here is returned, not retried: reconnecting applies to established clients.
    pub async fn connect(mut self) -> Result<Client, ClientError> {
        if self.config.tls_settings.on && self.config.transport == Transport::Udp {
            return Err(ClientError::Unsupported { operation: "TLS", transport: "UDP" });
        }
        self.config.tls = crate::tls::Tls::load(&self.config.tls_settings, &self.config.addr)?;
        Client::open(self.config).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documentation() {
        let c = ClientBuilder::new("localhost:4222").config;
        assert_eq!(c.addr, "localhost:4222");
        assert_eq!(c.transport, Transport::Tcp);
        assert_eq!(c.reconnect, Some(Backoff::default()));
        assert_eq!(c.subscription_capacity, 65_536);
        assert_eq!(c.max_pending_bytes, 4 * 1024 * 1024);
        assert_eq!(c.udp_ttl, Duration::from_secs(30));
    }

    #[test]
    fn settings_are_kept_and_sizes_have_a_floor() {
        let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        let c = ClientBuilder::new(addr).name("x").transport(Transport::Udp).no_reconnect().subscription_capacity(0);
        let c = c.config;
        assert_eq!(c.addr, "127.0.0.1:9");
        assert_eq!(c.name, "x");
        assert_eq!(c.transport, Transport::Udp);
        assert_eq!(c.reconnect, None);
        assert_eq!(c.subscription_capacity, 1);
    }
}
