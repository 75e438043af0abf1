//! The `--server` and `--udp` options every client command shares, and the connection they
//! describe.

use anyhow::Context;
use tidings_client::{Client, ClientBuilder, Transport};

/// Which broker to talk to, and how.
#[derive(clap::Args)]
pub(crate) struct ServerArgs {
    /// Broker address.
    #[arg(long, short, default_value_t = default_server(), value_name = "HOST:PORT")]
    pub(crate) server: String,
    /// Use UDP instead of TCP.
    #[arg(long)]
    pub(crate) udp: bool,
}

impl ServerArgs {
    /// Connects a client named `name` to the broker.
    pub(crate) async fn connect(&self, name: &str) -> anyhow::Result<Client> {
        self.connect_with(self.builder(name)).await
    }

    /// The builder [`ServerArgs::connect`] uses, for commands that set more options.
    pub(crate) fn builder(&self, name: &str) -> ClientBuilder {
        let transport = if self.udp { Transport::Udp } else { Transport::Tcp };
        Client::builder(self.server.as_str()).name(name).transport(transport)
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
