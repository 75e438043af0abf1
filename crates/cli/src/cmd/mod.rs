//! One module per subcommand.

pub(crate) mod bench;
pub(crate) mod broker;
pub(crate) mod net;
pub(crate) mod ping;
pub(crate) mod publish;
pub(crate) mod subscribe;

use tidings_broker::DEFAULT_PORT;

/// The server address a client command uses when `--server` is not given.
pub(crate) fn default_server() -> String {
    format!("127.0.0.1:{DEFAULT_PORT}")
}
