//! One module per subcommand.

pub(crate) mod bench;
mod bench_store;
pub(crate) mod broker;
pub(crate) mod cell;
pub(crate) mod docs;
pub(crate) mod durable;
pub(crate) mod info;
mod login;
pub(crate) mod net;
pub(crate) mod passwd;
pub(crate) mod ping;
pub(crate) mod publish;
mod publish_guaranteed;
pub(crate) mod request;
mod server;
pub(crate) mod subscribe;
mod subscribe_durable;
mod subscribe_queue;

use std::process::ExitCode;
use std::sync::OnceLock;

/// The log's level, changeable while the process runs (a broker's SIGHUP).
pub(crate) struct LogLevel {
    /// Replaces the filter; false if the log is gone.
    pub(crate) set: Box<dyn Fn(tracing_subscriber::EnvFilter) -> bool + Send + Sync>,
    /// Set by `--log-level` or `RUST_LOG`, which a config file does not override.
    pub(crate) pinned: bool,
}

/// Set once logging starts.
pub(crate) static LOG_LEVEL: OnceLock<LogLevel> = OnceLock::new();

/// A log filter from `text`; a bad one is a usage error naming where it came from.
pub(crate) fn log_filter(text: &str, from: &str) -> Result<tracing_subscriber::EnvFilter, UsageError> {
    tracing_subscriber::EnvFilter::try_new(text).map_err(|e| UsageError(format!("{from} {text:?}: {e}")))
}

/// A command line that cannot work as written (a bad topic, property or option): exit status 2,
/// as for clap's own usage errors; a failure to reach or use a broker exits 1.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

/// Prints an error once and picks the exit status: 2 for usage errors, 0 when stdout was
/// closed by its reader (`tidings sub | head`: the reader has what it wanted; output goes
/// through [`outln`], which returns that error instead of panicking), else 1.
pub(crate) fn exit_with(error: &anyhow::Error) -> ExitCode {
    let broken_pipe = error
        .chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {}", render(error));
    if error.chain().any(|c| c.is::<UsageError>()) {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}

/// The error and its causes, each said once: a context that already quotes its cause (as
/// `cannot bind 127.0.0.1:80: Address already in use` does) does not get it repeated.
fn render(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

pub(crate) use tidings_bench::outln;

/// Takes over SIGTERM and SIGINT now (their default would end the process at once) and returns
/// a future that completes when either arrives, for a command that must finish what it was
/// doing before it exits.
pub(crate) fn terminated() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use anyhow::Context;
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_quoted_by_its_context_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        let error = anyhow::Error::new(io).context("cannot bind 127.0.0.1:80: Address already in use");
        assert_eq!(render(&error), "cannot bind 127.0.0.1:80: Address already in use");
        let error = anyhow::anyhow!("refused").context("cannot connect to b1");
        assert_eq!(render(&error), "cannot connect to b1: refused");
    }
}
