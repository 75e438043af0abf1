//! One module per subcommand.

pub(crate) mod bench;
mod bench_store;
pub(crate) mod broker;
pub(crate) mod net;
pub(crate) mod ping;
pub(crate) mod publish;
mod publish_guaranteed;
mod server;
pub(crate) mod subscribe;
