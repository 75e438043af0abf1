//! `tidings cell forget`: an operator removes a broker from its cell for good (its machine is
//! lost, a new broker with another name replaces it), through the admin port of any broker of
//! the cell. That broker tells its cell mates, and every replica group that has the forgotten
//! broker as a member removes it and grows again with a linked mate (docs/replication.md,
//! "Membership"), as NATS's `nats server raft peer-remove` does for its streams. From then on
//! the cell refuses the forgotten broker's links. `tidings cell unforget`, run on every broker
//! of the cell, takes that back, for a name to be used again by a broker with a fresh data
//! directory.

use std::process::ExitCode;

use super::login::AdminArgs;

/// `cell` subcommands.
#[derive(clap::Subcommand)]
pub(crate) enum Which {
    /// Remove a broker from the cell for good: every replica group that has it as a member
    /// removes it and adds a linked cell mate in its place. Refused for a broker linked now.
    Forget(ForgetArgs),
    /// Take back `cell forget` on one broker: it accepts the broker's links again. Run it on
    /// every broker of the cell (one that still forgets the broker tells the others again), and
    /// start the broker on a fresh data directory.
    Unforget(ForgetArgs),
}

/// `cell forget` and `cell unforget` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings cell forget p3                       # on the broker whose admin port is 127.0.0.1:6465
  tidings cell forget p3 --admin 10.0.0.7:6465  # any broker of p3's cell
  tidings cell unforget p3 --admin 10.0.0.7:6465  # on each broker of the cell, to use the name again")]
pub(crate) struct ForgetArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The broker's name (`--name` it ran with).
    broker: String,
}

pub(crate) fn run(which: &Which) -> anyhow::Result<ExitCode> {
    match which {
        Which::Forget(args) => change(args, "forget"),
        Which::Unforget(args) => change(args, "unforget"),
    }
}

fn change(args: &ForgetArgs, what: &str) -> anyhow::Result<ExitCode> {
    if args.broker.is_empty() || args.broker.chars().any(|c| c.is_control() || c.is_whitespace() || c == '/') {
        return Err(super::UsageError(format!("{:?} is not a broker name", args.broker)).into());
    }
    args.admin.client()?.change("POST", &format!("/cell/{what}/{}", args.broker))
}
