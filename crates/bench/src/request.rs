//! Request/reply round trips (issue 41's measure): one requester and one echoing responder,
//! in-process clients of the broker(s) under test. Two phases, as the peer harness's `req`
//! mode runs them for NATS: sequential round trips for the duration (each one's time, from
//! before the request is sent to when its answer is handed back), then `in_flight` requests
//! outstanding at once on the same client for the duration (completed requests per second).
//! Every request that failed (timeout, no responders, a closed client) is counted, so a
//! number never hides a request that went unanswered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use tidings_client::{Client, ClientError};

/// What to measure.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// Request (and so reply) payload bytes.
    pub size: usize,
    /// Length of each phase.
    pub duration: Duration,
    /// Requests outstanding at once in the second phase.
    pub in_flight: usize,
    /// One request's longest wait for its answer.
    pub timeout: Duration,
    /// The subject the responder answers on.
    pub subject: String,
}

impl Default for RequestSpec {
    fn default() -> RequestSpec {
        RequestSpec {
            size: 128,
            duration: Duration::from_secs(5),
            in_flight: 100,
            timeout: Duration::from_secs(5),
            subject: "bench.req".into(),
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RequestResult {
    /// Sequential round trips completed.
    pub sequential: u64,
    /// Their median, in µs.
    pub p50_us: f64,
    /// Their 99th percentile, in µs.
    pub p99_us: f64,
    /// The slowest, in µs.
    pub max_us: f64,
    /// Their mean, in µs.
    pub mean_us: f64,
    /// Requests completed in the in-flight phase.
    pub concurrent: u64,
    /// Completed requests per second with `in_flight` outstanding.
    pub requests_s: f64,
    /// Requests that got no answer in time, both phases.
    pub timeouts: u64,
    /// Requests that failed otherwise (no responders, closed), both phases.
    pub errors: u64,
}

/// Runs both phases: the requester at `requester`, the responder at `responder` (the same
/// broker, or another of a network for a round trip through two brokers).
pub async fn run(requester: &str, responder: &str, spec: &RequestSpec) -> anyhow::Result<RequestResult> {
    let answering = Client::builder(responder).name("bench-responder").no_reconnect().connect().await?;
    let mut requests = answering.subscribe(&spec.subject).await?;
    let echo = answering.clone();
    let responder_task = tokio::spawn(async move {
        while let Some(request) = requests.recv().await {
            if echo.reply(&request, request.payload.clone()).await.is_err() {
                break;
            }
        }
    });
    let client = Client::builder(requester).name("bench-requester").no_reconnect().connect().await?;
    let payload = Bytes::from(vec![0x5a; spec.size]);
    let outcome = measure(&client, spec, &payload).await;
    let _ = client.close().await;
    let _ = answering.close().await;
    responder_task.abort();
    outcome
}

async fn measure(client: &Client, spec: &RequestSpec, payload: &Bytes) -> anyhow::Result<RequestResult> {
    warm_up(client, spec, payload).await?;
    let failures = Failures::default();
    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed() < spec.duration {
        let sent = Instant::now();
        match client.request(&spec.subject, payload.clone(), spec.timeout).await {
            Ok(_) => times.push(sent.elapsed().as_nanos() as u64),
            Err(e) => failures.count(&e),
        }
    }
    let completed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..spec.in_flight)
        .map(|_| {
            let (client, payload, spec) = (client.clone(), payload.clone(), spec.clone());
            let (completed, failures) = (completed.clone(), failures.clone());
            tokio::spawn(async move {
                while start.elapsed() < spec.duration {
                    match client.request(&spec.subject, payload.clone(), spec.timeout).await {
                        Ok(_) => _ = completed.fetch_add(1, Ordering::Relaxed),
                        Err(e) => failures.count(&e),
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await?;
    }
    let concurrent = completed.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    Ok(summarize(times, concurrent, secs, &failures))
}

/// Requests until one is answered (the responder's interest may still be on its way through
/// the network: those first requests get "no responders"), for at most 30 s, then 100 more
/// so both clients' paths are warm.
async fn warm_up(client: &Client, spec: &RequestSpec, payload: &Bytes) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.request(&spec.subject, payload.clone(), spec.timeout).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("warm-up request: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => anyhow::bail!("no answer to a request within 30 s: {e}"),
        }
    }
    for _ in 0..100 {
        client.request(&spec.subject, payload.clone(), spec.timeout).await?;
    }
    Ok(())
}

/// Failed requests, by kind, shared by the in-flight workers.
#[derive(Debug, Clone, Default)]
struct Failures {
    timeouts: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
}

impl Failures {
    fn count(&self, error: &ClientError) {
        let counter = if matches!(error, ClientError::Timeout { .. }) { &self.timeouts } else { &self.errors };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn summarize(mut times: Vec<u64>, concurrent: u64, secs: f64, failures: &Failures) -> RequestResult {
    times.sort_unstable();
    let mean = times.iter().map(|&t| t as f64).sum::<f64>() / times.len().max(1) as f64 / 1e3;
    RequestResult {
        sequential: times.len() as u64,
        p50_us: rank_us(&times, 50.0),
        p99_us: rank_us(&times, 99.0),
        max_us: rank_us(&times, 100.0),
        mean_us: if times.is_empty() { f64::NAN } else { mean },
        concurrent,
        requests_s: concurrent as f64 / secs.max(1e-9),
        timeouts: failures.timeouts.load(Ordering::Relaxed),
        errors: failures.errors.load(Ordering::Relaxed),
    }
}

/// The `p`th percentile of sorted nanoseconds, in µs, by the nearest rank the peer harness
/// uses (`ceil(p / 100 * n) - 1`), so both sides' percentiles are the same statistic.
pub fn rank_us(sorted_ns: &[u64], p: f64) -> f64 {
    let Some(last) = sorted_ns.len().checked_sub(1) else { return f64::NAN };
    let rank = ((p / 100.0 * sorted_ns.len() as f64).ceil() as usize).saturating_sub(1).min(last);
    sorted_ns[rank] as f64 / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_harness_nearest_rank() {
        let ns: Vec<u64> = (1..=200).map(|i| i * 1000).collect();
        // ceil(0.99 * 200) - 1 = 197: the 198th value, 198 µs (not 199, as a rounded rank gives).
        assert_eq!(rank_us(&ns, 99.0), 198.0);
        assert_eq!(rank_us(&ns, 50.0), 100.0);
        assert_eq!(rank_us(&ns, 100.0), 200.0);
        assert!(rank_us(&[], 50.0).is_nan());
    }

    #[test]
    fn timeouts_and_other_failures_are_counted_apart() {
        let f = Failures::default();
        f.count(&ClientError::Timeout { operation: "waiting for a reply", after: Duration::from_secs(1) });
        f.count(&ClientError::Closed);
        f.count(&ClientError::NoResponders { subject: "x".into() });
        let r = summarize(vec![3000, 1000, 2000], 10, 2.0, &f);
        assert_eq!((r.timeouts, r.errors, r.sequential, r.requests_s), (1, 2, 3, 5.0));
        assert_eq!((r.p50_us, r.max_us, r.mean_us), (2.0, 3.0, 2.0));
    }
}
