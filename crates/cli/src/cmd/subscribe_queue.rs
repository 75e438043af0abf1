//! `tidings sub --queue GROUP --guaranteed`: a member of a guaranteed queue group (a worker of
//! a work queue), printed line by line.
//!
//! Why a loop of its own: a member acknowledges each message it finished, one by one, and what
//! it did not acknowledge goes to another member when it leaves (flagged `redelivered`). Here
//! "finished" is "printed": each line is written, and its acknowledgement is sent only once the
//! output holding it is flushed (whenever nothing more is buffered, and before exit), so a
//! member killed at any point leaves no message acknowledged that it did not print. A message
//! printed but not yet acknowledged when it dies is printed again by another member, flagged:
//! at least once, as any work queue.

use std::io::Write;
use std::process::ExitCode;

use tidings_client::{Event, Subscription};

use super::subscribe::{delivery_json, delivery_text, gap_line};

/// The loop; `count` ends it after that many deliveries.
pub(crate) async fn run(
    client: &tidings_client::Client,
    mut subscription: Subscription,
    json: bool,
    count: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut seen = 0u64;
    let mut stop = Box::pin(super::terminated()?);
    let closed = loop {
        let event = match subscription.try_next_event() {
            Some(event) => Some(event),
            None => {
                out.flush()?;
                subscription.flush_acks();
                tokio::select! {
                    event = subscription.next_event() => event,
                    () = &mut stop => break false,
                }
            }
        };
        let Some(event) = event else { break true };
        match &event {
            Event::Message(delivery) => {
                let line = if json { delivery_json(delivery).to_string() } else { delivery_text(delivery) };
                writeln!(out, "{line}")?;
                seen += 1;
                if let Some(position) = delivery.position {
                    subscription.ack(position);
                }
            }
            Event::Gap(gap) => writeln!(out, "{}", gap_line(gap, json))?,
        }
        if count.is_some_and(|n| seen >= n) {
            break false;
        }
    };
    out.flush()?;
    subscription.flush_acks();
    drop(out);
    if subscription.redelivered() > 0 {
        eprintln!(
            "{} deliveries another member had left unacknowledged (printed, flagged redelivered)",
            subscription.redelivered()
        );
    }
    if closed {
        anyhow::bail!("the queue group subscription ended after {seen} deliveries (connection closed)");
    }
    // Close sends the acknowledgements queued, unless the broker is away.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), client.close()).await;
    Ok(ExitCode::SUCCESS)
}
