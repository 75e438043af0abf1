//! `tidings req` and `tidings reply`: request/reply from the command line, the requester's
//! and the responder's halves.

use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use serde_json::json;
use tidings_bench::parse::at_least_one;
use tidings_client::ClientError;
use tidings_wire::Property;

use super::publish::{parse_property, topic};
use super::subscribe::{delivery_json, delivery_text, report_connection_changes};

/// Sends one request and prints the first reply; exits 1 at once with "no responders" when
/// nothing in the network subscribes to SUBJECT, and after --timeout when nobody answered.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings reply time.now --exec date &         # a responder
  tidings req time.now ''                      # prints the reply
  tidings req svc.echo hello --json --timeout 500ms")]
pub(crate) struct ReqArgs {
    #[command(flatten)]
    server: super::server::ServerArgs,
    /// The subject (a topic, no wildcards) the responders subscribe to.
    #[arg(value_parser = topic)]
    subject: String,
    /// Request payload (empty when omitted).
    payload: Option<String>,
    /// A property, KEY=VALUE; repeatable.
    #[arg(short = 'p', long = "prop", value_name = "KEY=VALUE", value_parser = parse_property)]
    properties: Vec<Property>,
    /// How long to wait for a reply, e.g. 500ms or 2s.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Print the reply as one JSON object (the fields of `sub --json`, plus `reply_to`, the
    /// subject the reply came on, and `rtt_us`).
    #[arg(long)]
    json: bool,
    /// Send this many requests, one after another, and print only the round trips'
    /// distribution (answered or "no responders" alike); exits 1 unless every one was answered.
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u64>, conflicts_with = "json")]
    count: u64,
}

pub(crate) async fn req(args: ReqArgs) -> anyhow::Result<ExitCode> {
    let client = args.server.connect("tidings-req").await?;
    let payload = Bytes::from(args.payload.clone().unwrap_or_default());
    if args.count > 1 {
        let code = round_trips(&client, &args, payload).await;
        let _ = client.close().await;
        return code;
    }
    let started = Instant::now();
    let reply = client.request_with(&args.subject, &args.properties, payload, args.timeout).await;
    let rtt = started.elapsed();
    let _ = client.close().await;
    let reply = match reply {
        Ok(reply) => reply,
        Err(ClientError::NoResponders { subject }) => {
            eprintln!("error: no responders for {subject} (answered in {} us)", rtt.as_micros());
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e).with_context(|| format!("request on {} failed", args.subject)),
    };
    let line = if args.json {
        let mut obj = delivery_json(&reply);
        obj["reply_to"] = json!(reply.topic);
        obj["rtt_us"] = json!(rtt.as_micros() as u64);
        obj.to_string()
    } else {
        String::from_utf8_lossy(&reply.payload).into_owned()
    };
    super::outln!("{line}")?;
    Ok(ExitCode::SUCCESS)
}

/// `req --count N`: N requests in a row, then `min/p50/p99/max` of their round trips.
async fn round_trips(client: &tidings_client::Client, args: &ReqArgs, payload: Bytes) -> anyhow::Result<ExitCode> {
    let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut answered, mut none) = (0u64, 0u64);
    for _ in 0..args.count {
        let started = Instant::now();
        match client.request_with(&args.subject, &args.properties, payload.clone(), args.timeout).await {
            Ok(_) => answered += 1,
            Err(ClientError::NoResponders { .. }) => none += 1,
            Err(e) => return Err(e).with_context(|| format!("request on {} failed", args.subject)),
        }
        histogram.saturating_record((started.elapsed().as_micros() as u64).max(1));
    }
    super::outln!(
        "{} requests: {answered} answered, {none} no responders; round trip min {} us, p50 {} us, p99 {} us, max {} us",
        args.count,
        histogram.min(),
        histogram.value_at_quantile(0.5),
        histogram.value_at_quantile(0.99),
        histogram.max()
    )?;
    Ok(if answered == args.count { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Answers every request on SUBJECT (a pattern): with its own payload (--echo), or with the
/// standard output of a command given the request's payload on standard input (--exec).
/// Prints each request answered, as `sub` prints deliveries.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings reply svc.echo --echo
  tidings reply 'svc.upper' --exec 'tr a-z A-Z' --json
  tidings reply time.now --exec date --count 1")]
pub(crate) struct ReplyArgs {
    #[command(flatten)]
    server: super::server::ServerArgs,
    /// The subject (a pattern: `*` and `>` work) to answer requests on.
    #[arg(value_parser = super::subscribe::pattern)]
    subject: String,
    /// Answer with the request's own payload.
    #[arg(long, conflicts_with = "exec", required_unless_present = "exec")]
    echo: bool,
    /// Answer with what `sh -c CMD` prints, the request's payload on its standard input.
    #[arg(long, value_name = "CMD")]
    exec: Option<String>,
    /// Exit after answering this many requests.
    #[arg(long, value_parser = at_least_one::<u64>)]
    count: Option<u64>,
    /// Print each request as one JSON object (the fields of `sub --json`, `reply_to` included).
    #[arg(long)]
    json: bool,
}

pub(crate) async fn reply(args: ReplyArgs) -> anyhow::Result<ExitCode> {
    let client = args.server.connect("tidings-reply").await?;
    let _reconnects = report_connection_changes(&client, &args.server.server);
    let mut requests =
        client.subscribe(&args.subject).await.with_context(|| format!("subscribe to {:?} refused", args.subject))?;
    let mut answered = 0u64;
    while let Some(request) = requests.recv().await {
        if request.reply_to().is_none() {
            continue; // a plain publish on the subject: nobody to answer
        }
        let answer = match &args.exec {
            Some(command) => run(command, &request.payload).await?,
            None => request.payload.clone(),
        };
        client.reply(&request, answer).await?;
        let line = if args.json { delivery_json(&request).to_string() } else { delivery_text(&request) };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
        answered += 1;
        if args.count.is_some_and(|n| answered >= n) {
            let _ = client.close().await;
            return Ok(ExitCode::SUCCESS);
        }
    }
    anyhow::bail!("the subscription ended after {answered} requests (connection closed)")
}

/// Runs `sh -c command` with `input` on its standard input; its standard output is the answer.
/// On a blocking thread: the runtime's workers keep serving the connection meanwhile.
async fn run(command: &str, input: &Bytes) -> anyhow::Result<Bytes> {
    let (command, input) = (command.to_string(), input.clone());
    tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new("sh")
            .args(["-c", &command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {command:?}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input closes the pipe early: not an error.
            let _ = stdin.write_all(&input);
        }
        let output = child.wait_with_output().with_context(|| format!("{command:?} failed"))?;
        Ok(Bytes::from(output.stdout))
    })
    .await
    .context("the command's thread failed")?
}
