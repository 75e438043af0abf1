//! Acknowledged publishing (issue 13's first figure): one guaranteed publisher keeps a window
//! of publishes in flight against a fresh broker whose pubend log syncs every group before it
//! acknowledges (`[storage] fsync = always`, the default), and counts what came back.
//!
//! Clock points, the same as the peer harness's JetStream mode (`runJS`, async): a publish's
//! latency runs from just before the client is asked to send it (so a wait for room in the
//! window is included) to the moment its acknowledgement is taken by the measuring task; the
//! rate is acknowledged publishes over the time from the first send to the last ack.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;
use tidings_client::{now_us, Client, ClientError, Message, PendingAck};
use tokio::sync::mpsc;

use crate::target::Target;

/// One point of the measurement.
#[derive(Debug, Clone)]
pub struct AckedSpec {
    /// Payload bytes.
    pub size: usize,
    /// Publishes in flight.
    pub window: usize,
    /// Publishing time (the last acks are still waited for).
    pub duration: Duration,
    /// Publish cap.
    pub max: u64,
    /// Best effort instead: each publish followed by a PING barrier (the window is not used),
    /// the round trip a one-at-a-time guaranteed publish is compared with.
    pub best_effort: bool,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct AckedResult {
    /// Publishes sent.
    pub published: u64,
    /// Publishes acknowledged.
    pub acked: u64,
    /// Publishes refused or failed.
    pub errors: u64,
    /// From the first send to the last acknowledgement.
    pub secs: f64,
    /// Acknowledged publishes per second.
    pub acked_rate: f64,
    /// Ack latency, µs.
    pub mean_us: f64,
    /// Median ack latency, µs.
    pub p50_us: u64,
    /// 99th percentile ack latency, µs.
    pub p99_us: u64,
    /// Largest ack latency, µs.
    pub max_us: u64,
    /// Context switches of the broker's threads over the run (`None`: a broker this run did
    /// not start), and of this process's: thread hand-offs per publish (issue 45, part 3).
    pub broker_switches: Option<u64>,
    /// Context switches of this process (the publishing client) over the run.
    pub client_switches: u64,
}

/// A scratch data directory for the broker, removed on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    /// A fresh directory under `parent` (on the disk to be measured).
    pub fn new(parent: &std::path::Path, what: &str) -> anyhow::Result<ScratchDir> {
        let dir = parent.join(format!("tidings-bench-{what}-{}-{}", std::process::id(), now_us()));
        std::fs::create_dir_all(&dir)?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts a fresh broker with its pubend log in a scratch directory under `parent`, on its
/// defaults or on `config`.
pub fn spawn_broker(
    exe: &std::path::Path,
    parent: &std::path::Path,
    config: Option<&std::path::Path>,
) -> anyhow::Result<(Target, ScratchDir)> {
    let dir = ScratchDir::new(parent, "acked")?;
    let data = dir.0.display().to_string();
    let config = config.map(|c| c.display().to_string());
    let mut args = vec!["--data", &data];
    if let Some(config) = &config {
        args.extend(["--config", config]);
    }
    let target = Target::spawn(exe, &args)?;
    Ok((target, dir))
}

/// Publishes at `target` as fast as the window allows and measures the acknowledgements (or,
/// under `best_effort`, the PING barriers).
pub async fn run(target: &Target, spec: &AckedSpec) -> anyhow::Result<AckedResult> {
    let client = Client::builder(&target.tcp).guaranteed_window(spec.window).connect().await?;
    let me = std::process::id();
    let switches = |pid: Option<u32>| pid.map(crate::cpu::context_switches);
    let (broker_before, client_before) = (switches(target.pid()), crate::cpu::context_switches(me));
    let (histogram, errors, published, started, last) = match spec.best_effort {
        true => barriers(&client, spec).await?,
        false => guaranteed(&client, spec).await?,
    };
    let (broker_after, client_after) = (switches(target.pid()), crate::cpu::context_switches(me));
    let _ = client.close().await;
    let secs = last.unwrap_or(started).duration_since(started).as_secs_f64();
    let acked = histogram.len();
    Ok(AckedResult {
        published,
        acked,
        errors,
        secs,
        acked_rate: if secs > 0.0 { acked as f64 / secs } else { 0.0 },
        mean_us: histogram.mean(),
        p50_us: histogram.value_at_quantile(0.5),
        p99_us: histogram.value_at_quantile(0.99),
        max_us: histogram.max(),
        broker_switches: broker_before.zip(broker_after).map(|(b, a)| a.saturating_sub(b)),
        client_switches: client_after.saturating_sub(client_before),
    })
}

/// What a publishing loop measured: the latencies, errors, publishes sent, and when it started
/// and took its last answer.
type Measured = (Histogram<u64>, u64, u64, Instant, Option<Instant>);

/// Guaranteed publishes with up to the window in flight, their acks taken by a collector task.
async fn guaranteed(client: &Client, spec: &AckedSpec) -> anyhow::Result<Measured> {
    let (tx, rx) = mpsc::channel::<(Instant, PendingAck)>(spec.window * 4);
    let collector = tokio::spawn(collect(rx, Histogram::new_with_bounds(1, 100_000_000, 3)?));
    let payload = Bytes::from(vec![0x5a; spec.size]);
    let started = Instant::now();
    let deadline = started + spec.duration;
    let mut published = 0u64;
    let mut send_errors = 0u64;
    while published < spec.max && Instant::now() < deadline {
        let message = Message::new("acked.bench", &[], payload.clone(), now_us())?;
        let t = Instant::now();
        match client.send_guaranteed(message).await {
            Ok(pending) => {
                published += 1;
                if tx.send((t, pending)).await.is_err() {
                    break;
                }
            }
            Err(ClientError::Closed) => anyhow::bail!("the broker closed the connection"),
            Err(_) => send_errors += 1,
        }
    }
    drop(tx);
    let (histogram, errors, last) = collector.await?;
    Ok((histogram, errors + send_errors, published, started, last))
}

/// Best-effort publishes one at a time, each followed by a PING barrier: the same round trip
/// to the broker and back as a guaranteed publish at window 1, without the log.
async fn barriers(client: &Client, spec: &AckedSpec) -> anyhow::Result<Measured> {
    let mut histogram = Histogram::new_with_bounds(1, 100_000_000, 3)?;
    let payload = Bytes::from(vec![0x5a; spec.size]);
    let started = Instant::now();
    let deadline = started + spec.duration;
    let (mut published, mut errors, mut last) = (0u64, 0u64, None);
    while published < spec.max && Instant::now() < deadline {
        let message = Message::new("acked.bench", &[], payload.clone(), now_us())?;
        let t = Instant::now();
        let sent = client.publish_message(message).await;
        published += 1;
        match sent {
            Ok(()) => match client.flush().await {
                Ok(()) => {
                    let now = Instant::now();
                    histogram.saturating_record(now.duration_since(t).as_micros() as u64);
                    last = Some(now);
                }
                Err(_) => errors += 1,
            },
            Err(ClientError::Closed) => anyhow::bail!("the broker closed the connection"),
            Err(_) => errors += 1,
        }
    }
    Ok((histogram, errors, published, started, last))
}

/// Takes the acknowledgements in publish order (the broker acknowledges in order, per pubend).
async fn collect(
    mut rx: mpsc::Receiver<(Instant, PendingAck)>,
    mut histogram: Histogram<u64>,
) -> (Histogram<u64>, u64, Option<Instant>) {
    let mut errors = 0u64;
    let mut last = None;
    while let Some((sent, pending)) = rx.recv().await {
        match tokio::time::timeout(Duration::from_secs(30), pending).await {
            Ok(Ok(_receipt)) => {
                let now = Instant::now();
                histogram.saturating_record(now.duration_since(sent).as_micros() as u64);
                last = Some(now);
            }
            Ok(Err(_)) | Err(_) => errors += 1,
        }
    }
    (histogram, errors, last)
}
