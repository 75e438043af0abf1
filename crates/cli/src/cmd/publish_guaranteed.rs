//! `tidings pub --guaranteed`: publish with acknowledgements, keeping a window in flight.
//!
//! Each message carries the properties `seq` (its number in this run, from 1, which is also the
//! client's sequence number) and `publisher` (the publisher id, 16 hex digits). With `--json`
//! one line per acknowledged publish: `{"pubend","tick","seq","publisher","topic","properties","acked_us"}`,
//! `properties` being every property of the message as `sub --json` prints them (so a checker
//! can tell whether a subscriber's selector should have let it through), `acked_us` when the
//! acknowledgement was taken, in publish order (Unix µs: a bench reads from it how long a
//! broker failure held its publishers up, as it reads the peer harness's own). The exit
//! status is non-zero if any publish was not acknowledged. These lines are a contract for
//! outside checkers: every acknowledged publish matching a guaranteed subscription confirmed
//! before it was published reaches that subscriber exactly once, in tick order.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use serde_json::json;
use tidings_client::{now_us, Client, ClientError, PublisherId, Receipt};
use tidings_wire::{Message, Property, Value};

/// What a guaranteed run needs besides the common publish options.
pub(crate) struct Run<'a> {
    pub(crate) client: Client,
    pub(crate) publisher: PublisherId,
    pub(crate) topic: &'a str,
    pub(crate) properties: Vec<Property>,
    pub(crate) payload: Bytes,
    pub(crate) count: u64,
    pub(crate) interval: Option<Duration>,
    pub(crate) json: bool,
}

type Outcome = (u64, Vec<Property>, Result<Receipt, ClientError>);

/// Publishes `count` messages and prints each acknowledgement as it comes, in sequence order.
pub(crate) async fn run(run: Run<'_>) -> anyhow::Result<ExitCode> {
    let publisher_text = format!("{}", run.publisher);
    let mut in_flight = FuturesOrdered::new();
    let mut failed = 0u64;
    let mut out = std::io::stdout().lock();
    let started = Instant::now();
    for i in 0..run.count {
        if let Some(interval) = run.interval {
            // Acknowledgements are printed (and `acked_us` stamped) as they come while the next
            // send waits for its time, not when it goes: stamped at the next send, an
            // acknowledgement read just before a broker's SIGKILL looked like its successor's
            // answer, up to one interval later (`tidings bench takeover`).
            let due = tokio::time::sleep_until((started + interval.mul_f64(i as f64)).into());
            tokio::pin!(due);
            loop {
                tokio::select! {
                    biased;
                    Some(outcome) = in_flight.next(), if !in_flight.is_empty() => {
                        failed += report(&mut out, outcome, run.topic, run.json)?;
                    }
                    () = &mut due => break,
                }
            }
        }
        let seq = i + 1;
        let mut properties = run.properties.clone();
        properties.push(Property { key: "seq".into(), value: Value::Int(seq as i64) });
        properties.push(Property { key: "publisher".into(), value: Value::Str(publisher_text.clone()) });
        let message = Message::new(run.topic, &properties, run.payload.clone(), now_us())?;
        let pending = run.client.send_guaranteed(message).await.context("guaranteed publish")?;
        // Only the `--json` line needs them: not kept otherwise.
        let kept = if run.json { properties } else { Vec::new() };
        in_flight.push_back(pending.map(move |outcome| (seq, kept, outcome)));
        while let Some(Some(outcome)) = in_flight.next().now_or_never() {
            failed += report(&mut out, outcome, run.topic, run.json)?;
        }
    }
    while let Some(outcome) = in_flight.next().await {
        failed += report(&mut out, outcome, run.topic, run.json)?;
    }
    let _ = run.client.close().await;
    if failed > 0 {
        eprintln!("{failed} of {} guaranteed publishes were not acknowledged", run.count);
        return Ok(ExitCode::FAILURE);
    }
    if run.count > 1 {
        let elapsed = started.elapsed().as_secs_f64();
        eprintln!("{} acknowledged in {elapsed:.3} s: {:.0} msg/s", run.count, run.count as f64 / elapsed.max(1e-9));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints one outcome; returns 1 if the publish was not acknowledged.
fn report(out: &mut impl Write, (seq, properties, outcome): Outcome, topic: &str, json: bool) -> anyhow::Result<u64> {
    match outcome {
        Ok(receipt) => {
            if json {
                let line = json!({
                    "pubend": receipt.pubend.to_string(),
                    "tick": receipt.tick.0,
                    "seq": receipt.seq,
                    "publisher": receipt.publisher.to_string(),
                    "topic": topic,
                    "properties": super::subscribe::properties_json(&properties),
                    "acked_us": now_us(),
                });
                writeln!(out, "{line}")?;
                out.flush()?;
            }
            Ok(0)
        }
        Err(error) => {
            eprintln!("publish {seq} was not acknowledged: {error}");
            Ok(1)
        }
    }
}
