//! `tidings sub --durable NAME`: a durable subscription printed line by line, with the command's
//! own checkpoint file, so the next `sub --durable NAME` prints everything after the last line
//! this one printed, once, in order.
//!
//! Why a file of its own: the broker's record of a durable subscription (its last
//! acknowledgement) trails what it delivered. Acknowledgements go out in batches, and a broker
//! killed before syncing the last ones resumes from an older one: the next run was handed
//! lines this one had printed already, and printed them again (issue 38, failure C). This
//! follows Gryphon's checkpoint token: the consumer keeps its position with its output. The
//! order of each batch is: lines written and flushed to stdout, then the checkpoint file
//! replaced (a temporary file renamed over it), then the acknowledgements sent. SIGTERM and
//! SIGINT end the command after that order completes for what was printed. Only a SIGKILL of
//! `sub` itself between the flush and the rename can leave lines printed that the file does not
//! cover; the next run prints those again, flagged `redelivered`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use tidings_client::{Checkpoint, Event, Position, Subscription};

use super::subscribe::{delivery_json, delivery_text, gap_line};
use super::UsageError;

/// Where `sub --durable NAME` keeps its checkpoint when `--checkpoint` is not given:
/// `$XDG_STATE_HOME/tidings/checkpoints/` (else `~/.local/state/tidings/checkpoints/`), one
/// file per broker address and name.
pub(crate) fn default_path(server: &str, name: &str) -> anyhow::Result<PathBuf> {
    let state = match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
        (Some(dir), _) if !dir.is_empty() => PathBuf::from(dir),
        (_, Some(home)) if !home.is_empty() => PathBuf::from(home).join(".local/state"),
        _ => anyhow::bail!("no $XDG_STATE_HOME or $HOME for the checkpoint file; give --checkpoint FILE"),
    };
    Ok(default_path_in(&state, server, name))
}

/// The checkpoint file for `server` and `name` under the state directory `state`.
fn default_path_in(state: &Path, server: &str, name: &str) -> PathBuf {
    let server: String = server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    state.join("tidings/checkpoints").join(format!("{server}-{name}"))
}

/// The checkpoint stored at `path`, empty if there is none; a file that does not parse is a
/// usage error naming it (it is left as it is).
pub(crate) fn load(path: &Path) -> anyhow::Result<Checkpoint> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            Checkpoint::parse(&text).map_err(|e| UsageError(format!("checkpoint file {}: {e}", path.display())).into())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Checkpoint::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read the checkpoint file {}", path.display())),
    }
}

/// Replaces the checkpoint at `path` whole: written to a temporary file beside it, then renamed
/// over it, so a crash leaves the old checkpoint or the new, never half of one.
fn save(path: &Path, checkpoint: &Checkpoint) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Beside it, named for it and this process: two commands never share a temporary file
    // (`with_extension` would cut a name such as `127.0.0.1_6464-orders` at its first dot).
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".tmp-{}", std::process::id()));
    let temp = PathBuf::from(temp);
    std::fs::write(&temp, checkpoint.to_text())
        .and_then(|()| std::fs::rename(&temp, path))
        .with_context(|| format!("cannot write the checkpoint file {}", path.display()))
}

/// What the loop prints and where it keeps its place.
pub(crate) struct Run<'a> {
    pub(crate) json: bool,
    pub(crate) count: Option<u64>,
    pub(crate) checkpoint: &'a Path,
}

/// The loop: each line written, then (whenever nothing more is buffered, and before exit) the
/// output flushed, the checkpoint saved and the acknowledgements sent.
pub(crate) async fn run(
    client: &tidings_client::Client,
    mut subscription: Subscription,
    run: Run<'_>,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut seen = 0u64;
    let mut saved = subscription.checkpoint().clone();
    let mut stop = Box::pin(super::terminated()?);
    let ended = loop {
        let event = match subscription.try_next_event() {
            Some(event) => Some(event),
            None => {
                settle(&mut out, &mut subscription, &mut saved, run.checkpoint)?;
                tokio::select! {
                    event = subscription.next_event() => event,
                    () = &mut stop => break Ended::Signalled,
                }
            }
        };
        let Some(event) = event else { break Ended::Closed };
        let position = match &event {
            Event::Message(delivery) => {
                let line = if run.json { delivery_json(delivery).to_string() } else { delivery_text(delivery) };
                writeln!(out, "{line}")?;
                seen += 1;
                delivery.position
            }
            Event::Gap(gap) => {
                writeln!(out, "{}", gap_line(gap, run.json))?;
                Some(Position { pubend: gap.pubend, tick: gap.to })
            }
        };
        if let Some(position) = position {
            subscription.ack(position);
        }
        if run.count.is_some_and(|n| seen >= n) {
            break Ended::Counted;
        }
    };
    settle(&mut out, &mut subscription, &mut saved, run.checkpoint)?;
    drop(out);
    report(&subscription);
    match ended {
        Ended::Closed => anyhow::bail!("the durable subscription ended after {seen} deliveries (connection closed)"),
        Ended::Counted | Ended::Signalled => {
            // Not unsubscribed: the name stays for the next run. Close sends what is queued,
            // unless the broker is away (a signal may come while reconnecting).
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), client.close()).await;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Why the loop ended.
enum Ended {
    Counted,
    Signalled,
    Closed,
}

/// Output flushed, then the checkpoint saved if it moved, then the acknowledgements sent.
fn settle(
    out: &mut impl Write,
    subscription: &mut Subscription,
    saved: &mut Checkpoint,
    path: &Path,
) -> anyhow::Result<()> {
    out.flush()?;
    if subscription.checkpoint() != saved {
        save(path, subscription.checkpoint())?;
        saved.clone_from(subscription.checkpoint());
    }
    subscription.flush_acks();
    Ok(())
}

/// Says on stderr what the checkpoint spared and what came again.
fn report(subscription: &Subscription) {
    if subscription.skipped() > 0 {
        eprintln!("skipped {} deliveries the checkpoint file already held", subscription.skipped());
    }
    if subscription.redelivered() > 0 {
        eprintln!("{} deliveries came again (printed, flagged redelivered)", subscription.redelivered());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two checkpoints of one broker address in one directory, saved in turn, each load back
    /// as saved: their temporary files are their own (a shared one, cut at the address's first
    /// dot, made one command's rename fail for the other).
    #[test]
    fn checkpoints_beside_each_other_are_saved_and_loaded_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            default_path_in(dir.path(), "127.0.0.1:6464", "one"),
            default_path_in(dir.path(), "127.0.0.1:6464", "two"),
        );
        let (mut one, mut two) = (Checkpoint::new(), Checkpoint::new());
        one.advance(tidings_client::PubendId(1), tidings_client::Tick(10));
        two.advance(tidings_client::PubendId(2), tidings_client::Tick(20));
        save(&a, &one).unwrap();
        save(&b, &two).unwrap();
        assert_eq!((load(&a).unwrap(), load(&b).unwrap()), (one, two));
        assert_eq!(
            std::fs::read_dir(dir.path().join("tidings/checkpoints")).unwrap().count(),
            2,
            "no temporary file left"
        );
    }

    #[test]
    fn a_checkpoint_file_that_does_not_parse_is_a_usage_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad");
        std::fs::write(&path, "not a checkpoint").unwrap();
        let error = load(&path).unwrap_err();
        assert!(error.downcast_ref::<UsageError>().is_some_and(|e| e.0.contains("bad")), "{error}");
    }
}
