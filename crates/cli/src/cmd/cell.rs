//! `tidings cell forget`: an operator removes a broker from its cell for good (its machine is
//! lost, a new broker with another name replaces it), through the admin port of any broker of
//! the cell. That broker tells its cell mates, and every replica group that has the forgotten
//! broker as a member removes it and grows again with a linked mate (docs/replication.md,
//! "Membership"), as NATS's `nats server raft peer-remove` does for its streams.

use std::process::ExitCode;

use super::login::AdminArgs;

/// `cell` subcommands.
#[derive(clap::Subcommand)]
pub(crate) enum Which {
    /// Remove a broker from the cell for good: every replica group that has it as a member
    /// removes it and adds a linked cell mate in its place. Refused for a broker linked now.
    Forget(ForgetArgs),
}

/// `cell forget` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings cell forget p3                       # on the broker whose admin port is 127.0.0.1:6465
  tidings cell forget p3 --admin 10.0.0.7:6465  # any broker of p3's cell")]
pub(crate) struct ForgetArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The broker's name (`--name` it ran with).
    broker: String,
}

pub(crate) fn run(which: &Which) -> anyhow::Result<ExitCode> {
    match which {
        Which::Forget(args) => forget(args),
    }
}

fn forget(args: &ForgetArgs) -> anyhow::Result<ExitCode> {
    if args.broker.is_empty() || args.broker.chars().any(|c| c.is_control() || c.is_whitespace() || c == '/') {
        return Err(super::UsageError(format!("{:?} is not a broker name", args.broker)).into());
    }
    args.admin.client()?.change("POST", &format!("/cell/forget/{}", args.broker))
}
