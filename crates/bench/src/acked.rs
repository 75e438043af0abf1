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

/// Publishes at `target` as fast as the window allows and measures the acknowledgements.
pub async fn run(target: &Target, spec: &AckedSpec) -> anyhow::Result<AckedResult> {
    let client = Client::builder(&target.tcp).guaranteed_window(spec.window).connect().await?;
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
    let _ = client.close().await;
    let secs = last.unwrap_or(started).duration_since(started).as_secs_f64();
    let acked = histogram.len();
    Ok(AckedResult {
        published,
        acked,
        errors: errors + send_errors,
        secs,
        acked_rate: if secs > 0.0 { acked as f64 / secs } else { 0.0 },
        mean_us: histogram.mean(),
        p50_us: histogram.value_at_quantile(0.5),
        p99_us: histogram.value_at_quantile(0.99),
        max_us: histogram.max(),
    })
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
