//! `tidings sub`: subscribe and print deliveries, as text or one JSON object per line.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine;
use serde_json::{json, Map};
use tidings_bench::parse::at_least_one;
use tidings_client::{Checkpoint, Delivery, Event, SubscribeOptions};
use tidings_wire::{DeliveryMode, Value};

/// Prints every delivery; with `--count N`, exits 0 after N.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings sub 'prices.>'                             # every topic under prices
  tidings sub 'prices.*' 'news.>' --json             # several patterns, one JSON object per line
  tidings sub 'prices.>' --where \"sym = 'IBM' AND price > 100\"
  tidings sub 'orders.>' --guaranteed --count 10     # exactly once, in order; exit after 10
  tidings sub 'orders.>' --durable billing --json    # kept while away; resumes where it stopped
  tidings sub 'jobs.>' --queue workers               # one member of 'workers' gets each message
  tidings sub 'jobs.>' --queue workers --guaranteed  # a work queue: each acknowledged once
  tidings sub 'jobs.>' --queue w --queue-key user    # one user's jobs to one member
  tidings durable rm billing                         # delete it (or UNSUBSCRIBE from a client)")]
pub(crate) struct Args {
    #[command(flatten)]
    server: super::server::ServerArgs,
    /// Topic patterns: `*` matches one level, `>` all remaining levels. One subscription each.
    #[arg(required = true, num_args = 1.., value_parser = pattern)]
    patterns: Vec<String>,
    /// Selector over message properties, e.g. "sym = 'IBM' AND price > 100" (for every pattern).
    #[arg(long = "where", value_name = "SELECTOR")]
    selector: Option<String>,
    /// Exit after this many deliveries.
    #[arg(long, value_parser = at_least_one::<u64>)]
    count: Option<u64>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// Guaranteed delivery: every matching message published after the subscription is
    /// confirmed arrives exactly once, in tick order per pubend; `--json` lines add `pubend`
    /// and `tick`, and a gap notice prints as `{"gap":true,"pubend","from","to","subscription"}`.
    #[arg(long)]
    guaranteed: bool,
    /// A durable subscription named NAME (implies --guaranteed; one pattern): the broker keeps
    /// it and its messages while no client holds it, and `tidings sub --durable NAME` again
    /// prints everything after the last line this command printed, exactly once, in order,
    /// even if the broker was killed in between. The command keeps its place in a checkpoint
    /// file (see --checkpoint), saved after each batch of lines is flushed and before it is
    /// acknowledged; SIGTERM and SIGINT end it after saving. The name stays after exit;
    /// delete it with `tidings durable rm NAME`.
    #[arg(long, value_name = "NAME", value_parser = durable_name)]
    durable: Option<String>,
    /// With --durable: the checkpoint file. Default: $XDG_STATE_HOME/tidings/checkpoints/
    /// (else ~/.local/state/tidings/checkpoints/), named for the server and NAME.
    #[arg(long, value_name = "FILE", requires = "durable")]
    checkpoint: Option<std::path::PathBuf>,
    /// Join the queue group GROUP: each matching message goes to ONE member of the group,
    /// network-wide (members at the publisher's broker first, else the nearest broker with
    /// members), not to every member; plain subscribers still get their copy. A member whose
    /// queue is behind is skipped, not waited for. With --guaranteed (one pattern; a broker
    /// without links): a work queue kept by the broker across restarts; each printed message
    /// is acknowledged once printed, and what a member that exits or dies did not acknowledge
    /// goes to another member, flagged redelivered (`"redelivered": true` with --json).
    #[arg(long, value_name = "GROUP", value_parser = group_name, conflicts_with = "durable")]
    queue: Option<String>,
    /// With --queue: messages with the same value of the property PROPERTY go to the same
    /// member while it lives and keeps up (one behind is skipped for the value's next member);
    /// a member leaving moves only its own values. With --guaranteed, a member keeps up while
    /// its window of unacknowledged messages has room. Not `--key`: that is the TLS key file
    /// (`--tls-key`), which every command takes.
    #[arg(long, value_name = "PROPERTY", requires = "queue")]
    queue_key: Option<String>,
}

/// A queue group name as the broker accepts it (a usage error otherwise).
fn group_name(text: &str) -> Result<String, String> {
    tidings_wire::check_group_name(text).map(|()| text.to_string())
}

/// A durable name as the broker accepts it (a usage error otherwise).
fn durable_name(text: &str) -> Result<String, String> {
    tidings_broker::guaranteed::durable::check_name(text).map(|()| text.to_string()).map_err(|n| n.text)
}

fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Str(s) => json!(s),
        Value::Int(i) => json!(i),
        Value::Float(x) => json!(x),
        Value::Bool(b) => json!(b),
    }
}

/// Properties as one JSON object (the first of a repeated key wins, as selectors see them);
/// shared by `sub --json` and `pub --guaranteed --json`, so a checker reads both alike.
pub(crate) fn properties_json(properties: &[tidings_wire::Property]) -> serde_json::Value {
    let mut map = Map::new();
    for p in properties {
        map.entry(p.key.clone()).or_insert_with(|| value_json(&p.value));
    }
    serde_json::Value::Object(map)
}

/// The JSON contract of `sub --json`: topic, properties, payload or payload_base64, sent_us,
/// latency_us, plus subscription and missed; a request adds reply_to, a retained value
/// `retained: true`; guaranteed deliveries add pubend, tick and
/// redelivered (true when the broker delivered that tick to this subscription before).
pub(crate) fn delivery_json(d: &Delivery) -> serde_json::Value {
    let mut obj = Map::new();
    obj.insert("topic".into(), json!(d.topic));
    obj.insert("properties".into(), properties_json(&d.properties));
    match std::str::from_utf8(&d.payload) {
        Ok(text) => obj.insert("payload".into(), json!(text)),
        Err(_) => {
            obj.insert("payload_base64".into(), json!(base64::engine::general_purpose::STANDARD.encode(&d.payload)))
        }
    };
    obj.insert("sent_us".into(), json!(d.sent_us));
    obj.insert("received_us".into(), json!(d.received_us));
    obj.insert("latency_us".into(), json!(d.received_us.saturating_sub(d.sent_us)));
    obj.insert("subscription".into(), json!(d.subscription.0));
    obj.insert("missed".into(), json!(d.missed));
    if let Some(reply_to) = d.reply_to() {
        obj.insert("reply_to".into(), json!(reply_to));
    }
    if d.retained() {
        obj.insert("retained".into(), json!(true));
    }
    if let Some(position) = d.position {
        obj.insert("pubend".into(), json!(position.pubend.to_string()));
        obj.insert("tick".into(), json!(position.tick.0));
        obj.insert("redelivered".into(), json!(d.redelivered));
    }
    serde_json::Value::Object(obj)
}

pub(crate) fn delivery_text(d: &Delivery) -> String {
    let props: Vec<String> = d.properties.iter().map(|p| format!("{}={}", p.key, p.value)).collect();
    let payload = String::from_utf8_lossy(&d.payload);
    let missed = if d.missed > 0 { format!(" (missed {})", d.missed) } else { String::new() };
    let missed = if d.redelivered { format!("{missed} (redelivered)") } else { missed };
    format!(
        "[{}] {}{}{} latency {} us",
        d.topic,
        payload,
        if props.is_empty() { String::new() } else { format!(" {{{}}}", props.join(", ")) },
        missed,
        d.received_us.saturating_sub(d.sent_us)
    )
}

/// Says on stderr when the connection changes (stdout stays deliveries only): connected,
/// disconnected and why, each reconnect attempt, and reconnected with the subscriptions re-sent.
/// Each reconnect is also handed back, for a gap line on stdout.
pub(crate) fn report_connection_changes(
    client: &tidings_client::Client,
    server: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (reconnected, reconnects) = tokio::sync::mpsc::unbounded_channel();
    use tidings_client::ConnectionEvent;
    let name = client.server_name().unwrap_or_default();
    eprintln!("connected to {server} (broker {name:?})");
    let mut events = client.events();
    let server = server.to_string();
    tokio::spawn(async move {
        let mut down = false;
        while let Ok(event) = events.recv().await {
            match event {
                ConnectionEvent::Connected { server_name } if down => {
                    eprintln!("reconnected to {server} (broker {server_name:?}); subscriptions and unacknowledged work sent again");
                    down = false;
                    let _ = reconnected.send(());
                }
                ConnectionEvent::Connected { .. } => {}
                ConnectionEvent::Disconnected { error, .. } => {
                    eprintln!("disconnected from {server}: {error}");
                    down = true;
                }
                ConnectionEvent::Reconnecting { attempt, delay } => {
                    eprintln!("reconnecting to {server} (attempt {attempt}, in {} ms)", delay.as_millis());
                }
                ConnectionEvent::Refused { error } => eprintln!("refused by {server}: {error}"),
                ConnectionEvent::Closed { error: Some(error) } => eprintln!("gave up on {server}: {error}"),
                // Closed without error, and kinds a newer client may add.
                _ => {}
            }
        }
    });
    reconnects
}

/// A pattern as the broker accepts it (checked here so a typo is a usage error, exit 2).
pub(crate) fn pattern(text: &str) -> Result<String, String> {
    tidings_matching::Pattern::parse(text).map(|_| text.to_string()).map_err(|e| e.to_string())
}

/// Connects and makes the one subscription of `--durable` or a guaranteed `--queue` member
/// (`what` names it if refused), reporting connection changes on stderr.
async fn subscribe_one(
    args: &Args,
    options: SubscribeOptions,
    what: &str,
) -> anyhow::Result<(tidings_client::Client, tidings_client::Subscription)> {
    let client = args.server.connect("tidings-sub").await?;
    drop(report_connection_changes(&client, &args.server.server));
    let subscription = client.subscribe_with(options).await.with_context(|| format!("{what} refused"))?;
    Ok((client, subscription))
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(text) = &args.selector {
        if let Err(e) = tidings_matching::Selector::parse(text) {
            eprint!("invalid selector\n{}", e.render(text));
            return Ok(ExitCode::from(2));
        }
    }
    if args.durable.is_some() && args.patterns.len() != 1 {
        eprintln!("error: --durable takes exactly one pattern");
        return Ok(ExitCode::from(2));
    }
    if let Some(name) = &args.durable {
        let path = match &args.checkpoint {
            Some(path) => path.clone(),
            None => super::subscribe_durable::default_path(&args.server.server, name)?,
        };
        let resume = super::subscribe_durable::load(&path)?;
        let options = SubscribeOptions::new(&args.patterns[0]).durable(name).explicit_acks().resume_from(resume);
        let options = match &args.selector {
            Some(selector) => options.selector(selector),
            None => options,
        };
        let what = format!("durable subscription {name:?} to {:?}", args.patterns[0]);
        let (client, subscription) = subscribe_one(&args, options, &what).await?;
        let run = super::subscribe_durable::Run { json: args.json, count: args.count, checkpoint: &path };
        return super::subscribe_durable::run(&client, subscription, run).await;
    }
    if let (Some(group), true) = (&args.queue, args.guaranteed) {
        if args.patterns.len() != 1 {
            eprintln!("error: --queue with --guaranteed takes exactly one pattern (the group's)");
            return Ok(ExitCode::from(2));
        }
        let options = SubscribeOptions::new(&args.patterns[0]).queue(group).explicit_acks();
        let options = SubscribeOptions { queue_key: args.queue_key.clone(), ..options };
        let options = SubscribeOptions { mode: DeliveryMode::Guaranteed, selector: args.selector.clone(), ..options };
        let what = format!("guaranteed queue group {group:?} on {:?}", args.patterns[0]);
        let (client, subscription) = subscribe_one(&args, options, &what).await?;
        return super::subscribe_queue::run(&client, subscription, args.json, args.count).await;
    }
    let client = args.server.connect("tidings-sub").await?;
    let mut reconnects = report_connection_changes(&client, &args.server.server);
    let mut subscriptions = Vec::new();
    let mut ids = Vec::new();
    for pattern in &args.patterns {
        let options = SubscribeOptions {
            mode: if args.guaranteed { DeliveryMode::Guaranteed } else { DeliveryMode::BestEffort },
            selector: args.selector.clone(),
            group: args.queue.clone(),
            queue_key: args.queue_key.clone(),
            ..SubscribeOptions::new(pattern)
        };
        // Guaranteed: a tick this command printed already (a subscription set up again after
        // a reconnect may start below it) is skipped and counted, not printed twice.
        let options = if args.guaranteed { options.resume_from(Checkpoint::new()) } else { options };
        let subscription =
            client.subscribe_with(options).await.with_context(|| format!("subscribe to {pattern:?} refused"))?;
        ids.push(subscription.id());
        // Each subscription as a stream of its events, so all of them are read as they come.
        // Each event comes with how many deliveries were skipped since the one before.
        subscriptions.push(Box::pin(futures::stream::unfold(subscription, |mut s| async move {
            let before = s.skipped();
            s.next_event().await.map(|event| ((event, s.skipped() - before), s))
        })));
    }
    let mut events = futures::stream::select_all(subscriptions);
    let mut seen = 0u64;
    let mut skipped = 0u64;
    let mut out = std::io::stdout().lock();
    let ended = loop {
        let event = tokio::select! {
            event = futures::StreamExt::next(&mut events) => event,
            Some(()) = reconnects.recv(), if !args.guaranteed => {
                // Best effort cannot say what the outage cost: say that it may have cost.
                for id in &ids {
                    let line = if args.json {
                        json!({"gap": true, "subscription": id.0, "unknown": true}).to_string()
                    } else {
                        format!("subscription {}: messages published while disconnected may be missing (best effort cannot count them)", id.0)
                    };
                    writeln!(out, "{line}")?;
                }
                out.flush()?;
                continue;
            }
        };
        let Some((event, newly_skipped)) = event else { break false };
        skipped += newly_skipped;
        let delivery = match event {
            Event::Message(delivery) => delivery,
            Event::Gap(gap) => {
                writeln!(out, "{}", gap_line(&gap, args.json))?;
                out.flush()?;
                continue;
            }
        };
        let line = if args.json { delivery_json(&delivery).to_string() } else { delivery_text(&delivery) };
        writeln!(out, "{line}")?;
        out.flush()?;
        seen += 1;
        if args.count.is_some_and(|n| seen >= n) {
            break true;
        }
    };
    if skipped > 0 {
        eprintln!("skipped {skipped} deliveries this command had printed already (delivered again after a reconnect)");
    }
    if !ended {
        anyhow::bail!("the subscription ended after {seen} deliveries (connection closed)")
    }
    let _ = client.close().await;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn gap_line(gap: &tidings_client::GapNotice, json: bool) -> String {
    if json {
        json!({"gap": true, "pubend": gap.pubend.to_string(), "from": gap.from.0, "to": gap.to.0,
            "subscription": gap.subscription.0})
        .to_string()
    } else {
        format!("gap in pubend {}: ticks {}..={} may be missing", gap.pubend, gap.from, gap.to)
    }
}
