//! The `--server` and `--udp` options every client command shares, and the connection they
//! describe.

use std::time::Duration;

use anyhow::Context;
use tidings_client::{Client, ClientBuilder, Transport};

/// Which broker to talk to, and how.
#[derive(clap::Args)]
pub(crate) struct ServerArgs {
    /// Broker address: HOST, HOST:PORT, tidings://HOST:PORT or tls://HOST:PORT (TLS; port 6464
    /// when omitted); several, comma-separated (a,b,c), are tried in turn at every (re)connect:
    /// failover in a cell.
    #[arg(long, short, env = "TIDINGS_SERVER", default_value_t = default_server(), value_name = "ADDRESS",
          value_parser = server_address)]
    pub(crate) server: String,
    /// Use UDP instead of TCP.
    #[arg(long)]
    pub(crate) udp: bool,
    /// Try only the --server addresses on reconnect, not the cell mates the broker tells of.
    #[arg(long)]
    pub(crate) ignore_told_servers: bool,
    /// With --udp: the broker's `[udp] session_ttl`; the client renews its subscriptions
    /// every third of it, so it must not be longer than the broker's.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) udp_ttl: Duration,
    /// Give up connecting (handshake included) after this long, e.g. 500ms or 10s.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub(crate) connect_timeout: Duration,
    #[command(flatten)]
    pub(crate) login: super::login::LoginArgs,
}

impl ServerArgs {
    /// Connects a client named `name` to the broker.
    pub(crate) async fn connect(&self, name: &str) -> anyhow::Result<Client> {
        self.connect_with(self.builder(name)).await
    }

    /// The builder [`ServerArgs::connect`] uses, for commands that set more options.
    pub(crate) fn builder(&self, name: &str) -> ClientBuilder {
        let transport = if self.udp { Transport::Udp } else { Transport::Tcp };
        let mut builder = Client::builder(self.server.as_str())
            .name(name)
            .transport(transport)
            .connect_timeout(self.connect_timeout)
            .udp_ttl(self.udp_ttl);
        if self.ignore_told_servers {
            builder = builder.ignore_told_servers();
        }
        let login = &self.login;
        if let Some(ca) = &login.tls_ca {
            builder = builder.tls_ca(ca);
        }
        if let (Some(cert), Some(key)) = (&login.tls_cert, &login.tls_key) {
            builder = builder.tls_identity(cert, key);
        }
        match (&login.user, &login.password, &login.token) {
            (Some(user), Some(password), _) => builder.password(user, password),
            (_, _, Some(token)) => builder.token(token),
            _ => builder,
        }
    }

    /// Connects with `builder`.
    pub(crate) async fn connect_with(&self, builder: ClientBuilder) -> anyhow::Result<Client> {
        builder.connect().await.with_context(|| format!("cannot connect to {}", self.server))
    }
}

/// The server address a client command uses when `--server` is not given.
fn default_server() -> String {
    format!("127.0.0.1:{}", tidings_broker::DEFAULT_PORT)
}

/// Accepts a comma-separated list of [`one_address`]es (the client tries them in turn, so a
/// publisher fails over to a cell mate); returns them as `host:port,host:port`.
fn server_address(text: &str) -> Result<String, String> {
    let list: Result<Vec<String>, String> = text.split(',').map(one_address).collect();
    Ok(list?.join(","))
}

/// Accepts `host`, `host:port`, `[v6]:port` and `tidings://host:port`, as users of other
/// brokers' tools type them; returns `host:port`, or `tls://host:port` for TLS (which the
/// client library reads).
fn one_address(text: &str) -> Result<String, String> {
    let (rest, scheme) = match text.split_once("://") {
        Some(("tidings", rest)) => (rest, ""),
        Some(("tls", rest)) => (rest, "tls://"),
        Some((scheme, _)) => {
            return Err(format!("unknown scheme {scheme:?} (use tidings://HOST:PORT, tls://HOST:PORT or HOST:PORT)"))
        }
        None => (text, ""),
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains(char::is_whitespace) {
        return Err(format!("{text:?} is not HOST, HOST:PORT or tidings://HOST:PORT"));
    }
    let has_port = match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
            port.parse::<u16>().map_err(|_| format!("{port:?} in {text:?} is not a port"))?;
            true
        }
        _ => false,
    };
    if has_port {
        Ok(format!("{scheme}{rest}"))
    } else {
        Ok(format!("{scheme}{rest}:{}", tidings_broker::DEFAULT_PORT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_host_host_port_or_a_tidings_url() {
        assert_eq!(server_address("localhost"), Ok("localhost:6464".to_string()));
        assert_eq!(server_address("10.0.0.1:7000"), Ok("10.0.0.1:7000".to_string()));
        assert_eq!(server_address("tidings://b1:7000"), Ok("b1:7000".to_string()));
        assert_eq!(server_address("tidings://b1/"), Ok("b1:6464".to_string()));
        assert_eq!(server_address("[::1]:7000"), Ok("[::1]:7000".to_string()));
        assert_eq!(server_address("tls://b1:7000"), Ok("tls://b1:7000".to_string()));
        assert_eq!(server_address("tls://b1"), Ok("tls://b1:6464".to_string()));
        assert!(server_address("nats://b1:4222").unwrap_err().contains("scheme"));
        assert!(server_address("b1:http").unwrap_err().contains("not a port"));
        assert!(server_address("").is_err());
        assert_eq!(server_address("a:1,tidings://b:2,c"), Ok("a:1,b:2,c:6464".to_string()));
        assert!(server_address("a:1,,b:2").is_err(), "a blank entry is a typo, not a broker");
    }
}
