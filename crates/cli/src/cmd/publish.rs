//! `tidings pub`: publish one message, or many as a load generator.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use tidings_bench::parse::{above_zero, at_least_one};
use tidings_client::{now_us, PublisherId};
use tidings_wire::{Message, Property, Value};

/// Values are typed by their look: integer, float, true/false, else string. Quote a value
/// (`-p "code='042'"`) to force a string.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings pub prices.ibm 'IBM 120.5' -p sym=IBM -p price=120.5
  tidings pub sensors.t1 --file reading.bin          # a binary payload from a file
  some-producer | tidings pub logs.app --file -      # the payload from standard input
  tidings pub load.test --count 100000 --rate 5000 --size 256
  tidings pub status.door open --retain              # new subscribers get it first
  tidings pub orders.new '{\"id\":7}' --guaranteed --json   # wait until it is on disk")]
pub(crate) struct Args {
    #[command(flatten)]
    server: super::server::ServerArgs,
    /// Topic to publish on (dot-separated levels, no wildcards).
    #[arg(value_parser = topic)]
    topic: String,
    /// Payload text (empty when omitted).
    #[arg(conflicts_with = "file")]
    payload: Option<String>,
    /// Read the payload from this file (any bytes); `-` reads standard input to its end.
    #[arg(long, value_name = "PATH")]
    file: Option<std::path::PathBuf>,
    /// A property, KEY=VALUE; repeatable.
    #[arg(short = 'p', long = "prop", value_name = "KEY=VALUE", value_parser = parse_property)]
    properties: Vec<Property>,
    /// Number of messages to publish.
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u64>)]
    count: u64,
    /// Messages per second (absolute schedule); unlimited when omitted.
    #[arg(long, value_name = "MSGS_PER_SEC", value_parser = above_zero)]
    rate: Option<f64>,
    /// Pad the payload to this many bytes.
    #[arg(long, value_name = "BYTES", value_parser = at_least_one::<usize>)]
    size: Option<usize>,
    /// Keep this message as the topic's retained value: every broker of the network keeps it
    /// and gives it to each new matching subscription before any live message (`sub --json`
    /// lines show `"retained": true`). An empty payload clears the topic's value. With
    /// --guaranteed, the publisher's broker also keeps it on disk before acknowledging it, so it
    /// survives that broker's restart.
    #[arg(long)]
    retain: bool,
    /// Guaranteed delivery: wait for the broker's acknowledgement of every publish (on disk),
    /// adding the properties `seq` and `publisher`; exit non-zero if any was not acknowledged.
    #[arg(long)]
    guaranteed: bool,
    /// With --guaranteed: the pubend (ordered stream) to publish on; the broker's default
    /// pubend (`default`) when omitted.
    #[arg(long, value_name = "NAME", requires = "guaranteed")]
    pubend: Option<String>,
    /// With --guaranteed: publishes in flight before the next waits.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "guaranteed", value_parser = at_least_one::<usize>)]
    window: usize,
    /// With --guaranteed: one JSON line per acknowledged publish (pubend, tick, seq, publisher,
    /// topic, properties).
    #[arg(long, requires = "guaranteed")]
    json: bool,
}

/// Parses `KEY=VALUE` into a typed property.
pub(crate) fn parse_property(text: &str) -> Result<Property, String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!("{text:?} is not KEY=VALUE"));
    };
    if key.is_empty() {
        return Err(format!("{text:?} has an empty key"));
    }
    Ok(Property { key: key.to_string(), value: Value::from_cli(value) })
}

/// A topic as the broker accepts it (checked here so a typo is a usage error, exit 2).
pub(crate) fn topic(text: &str) -> Result<String, String> {
    tidings_matching::Topic::parse(text).map(|_| text.to_string()).map_err(|e| e.to_string())
}

fn payload(args: &Args) -> anyhow::Result<Bytes> {
    let mut p = match &args.file {
        Some(path) if path.as_os_str() == "-" => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
                .context("cannot read standard input")?;
            BytesMut::from(&bytes[..])
        }
        Some(path) => {
            BytesMut::from(&std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?[..])
        }
        None => BytesMut::from(args.payload.as_deref().unwrap_or("").as_bytes()),
    };
    if let Some(size) = args.size {
        if p.len() < size {
            p.resize(size, b'x');
        }
    }
    Ok(p.freeze())
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut properties = args.properties.clone();
    if args.retain {
        properties.push(Property::new(tidings_wire::RETAIN, true));
    }
    let payload = payload(&args)?;
    let interval = args.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    if args.guaranteed {
        return guaranteed(&args, properties, payload, interval).await;
    }
    let client = args.server.connect("tidings-pub").await?;
    let mut events = client.events();
    let started = Instant::now();
    for i in 0..args.count {
        if let Some(interval) = interval {
            let due = started + interval.mul_f64(i as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let message = Message::new(&args.topic, &properties, payload.clone(), now_us())?;
        client.publish_message(message).await?;
    }
    client.flush().await?;
    let elapsed = started.elapsed().as_secs_f64();
    if args.count > 1 {
        let rate = args.count as f64 / elapsed.max(1e-9);
        eprintln!(
            "published {} messages of {} B in {:.3} s: {:.0} msg/s, {:.2} MB/s",
            args.count,
            payload.len(),
            elapsed,
            rate,
            rate * payload.len() as f64 / 1e6
        );
    }
    client.close().await?;
    Ok(report_drops(&mut events, args.count, &args.server.server))
}

/// Says what connection drops cost a best-effort run: the publishes discarded unsent (exit
/// status 1), and that those written just before a drop may be lost too, uncounted.
fn report_drops(
    events: &mut tokio::sync::broadcast::Receiver<tidings_client::ConnectionEvent>,
    count: u64,
    server: &str,
) -> ExitCode {
    let (mut drops, mut unsent) = (0u64, 0u64);
    while let Ok(event) = events.try_recv() {
        if let tidings_client::ConnectionEvent::Disconnected { unsent_publishes, .. } = event {
            drops += 1;
            unsent += unsent_publishes;
        }
    }
    if drops == 0 {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "the connection to {server} dropped {drops} time(s): {unsent} of {count} messages were never sent; \
         messages written just before a drop may be lost as well (best effort cannot count them)"
    );
    if unsent > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn guaranteed(
    args: &Args,
    properties: Vec<Property>,
    payload: Bytes,
    interval: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    if args.udp_requested() {
        return Err(super::UsageError("--guaranteed needs TCP: drop --udp".into()).into());
    }
    let publisher = PublisherId(rand::random());
    let builder = args
        .server
        .builder("tidings-pub")
        .publisher_id(publisher)
        .pubend(args.pubend.clone().unwrap_or_default())
        .guaranteed_window(args.window);
    let client = args.server.connect_with(builder).await?;
    // Drops and returns of the connection on stderr: unacknowledged publishes are sent again
    // after a reconnect, and a user watching a run should see why it paused.
    let _reconnects = super::subscribe::report_connection_changes(&client, &args.server.server);
    let run = super::publish_guaranteed::Run {
        client,
        publisher,
        topic: &args.topic,
        properties,
        payload,
        count: args.count,
        interval,
        json: args.json,
    };
    super::publish_guaranteed::run(run).await
}

impl Args {
    fn udp_requested(&self) -> bool {
        self.server.udp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_typed_by_their_look() {
        assert_eq!(parse_property("price=120").unwrap().value, Value::Int(120));
        assert_eq!(parse_property("sym=IBM").unwrap().value, Value::Str("IBM".into()));
        assert_eq!(parse_property("code='042'").unwrap().value, Value::Str("042".into()));
        assert_eq!(parse_property("eq=a=b").unwrap().value, Value::Str("a=b".into()));
        assert!(parse_property("novalue").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_property("=1").is_err());
    }
}
