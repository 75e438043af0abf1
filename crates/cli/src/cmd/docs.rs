//! `tidings completions SHELL` and `tidings man`: shell completions and manual pages generated
//! from the same clap definitions as `--help`, so they cannot drift from the command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// `completions` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings completions bash > ~/.local/share/bash-completion/completions/tidings
  tidings completions zsh > ~/.zfunc/_tidings")]
pub(crate) struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `man` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings man | man -l -                 # read the main page now
  tidings man --out /usr/local/share/man/man1")]
pub(crate) struct ManArgs {
    /// Write tidings.1 and one page per command (tidings-net-up.1, ...) into this directory
    /// instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Prints the completion script for a shell.
pub(crate) fn completions(args: &CompletionArgs, mut command: clap::Command) -> anyhow::Result<ExitCode> {
    // Into a buffer first: clap_complete panics on a write error, and a closed stdout must end
    // the command quietly like any other.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "tidings", &mut script);
    std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the main manual page, or writes every page into a directory.
pub(crate) fn man(args: &ManArgs, command: clap::Command) -> anyhow::Result<ExitCode> {
    match &args.out {
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(command).render(&mut out)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write pages into {}", dir.display()))?;
            crate::cmd::outln!("manual pages written to {}", dir.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
