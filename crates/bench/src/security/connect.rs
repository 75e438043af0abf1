//! Connection setup, counted: `sequential` connections one after another, then `workers`
//! connecting at once for a while. One connection is what a client pays before its first
//! publish: TCP, the TLS handshake, HELLO with user and password, and the broker's WELCOME
//! (its connect acknowledgement, sent once the password verified); then the client closes.
//! The peer harness's `-mode connect` counts the same for NATS (CONNECT + PING, until PONG).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tidings_client::Client;

use crate::engine::Access;
use crate::stats::quantile;

/// What to count.
#[derive(Debug, Clone)]
pub struct ConnectSpec {
    /// Connections one after another.
    pub sequential: usize,
    /// Clients connecting at once in the second phase, each in a loop.
    pub workers: usize,
    /// How long the second phase runs.
    pub duration: Duration,
    /// TLS and login.
    pub access: Access,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectResult {
    /// Sequential connections that got their WELCOME.
    pub sequential: u64,
    /// Their rate, connections/s.
    pub sequential_conn_s: f64,
    /// Median setup time, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Connections the workers completed.
    pub concurrent: u64,
    /// Their rate, connections/s.
    pub concurrent_conn_s: f64,
    /// Connections refused or failed in either phase (each is a failed measurement).
    pub errors: u64,
}

/// Counts connection setups to `addr`.
pub async fn run(addr: &str, spec: &ConnectSpec) -> anyhow::Result<ConnectResult> {
    let mut errors = 0u64;
    let mut times = Vec::with_capacity(spec.sequential);
    let start = Instant::now();
    for _ in 0..spec.sequential {
        let began = Instant::now();
        match once(addr, &spec.access).await {
            Ok(()) => times.push(began.elapsed().as_micros() as u64),
            Err(e) => {
                if errors == 0 {
                    eprintln!("connect: {e:#}");
                }
                errors += 1;
            }
        }
    }
    let sequential_secs = start.elapsed().as_secs_f64().max(1e-9);
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deadline = Instant::now() + spec.duration;
    let concurrent_start = Instant::now();
    let tasks: Vec<_> = (0..spec.workers)
        .map(|_| {
            let (addr, access, done, failed) = (addr.to_string(), spec.access.clone(), done.clone(), failed.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let counter = if once(&addr, &access).await.is_ok() { &done } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let concurrent_secs = concurrent_start.elapsed().as_secs_f64().max(1e-9);
    let concurrent = done.load(Ordering::Relaxed);
    Ok(ConnectResult {
        sequential: times.len() as u64,
        sequential_conn_s: times.len() as f64 / sequential_secs,
        p50_us: quantile(&times, 0.50).map_or(f64::NAN, |v| v as f64),
        p99_us: quantile(&times, 0.99).map_or(f64::NAN, |v| v as f64),
        concurrent,
        concurrent_conn_s: concurrent as f64 / concurrent_secs,
        errors: errors + failed.load(Ordering::Relaxed),
    })
}

/// One connection: connected means WELCOME arrived (the builder's `connect` returns then).
async fn once(addr: &str, access: &Access) -> anyhow::Result<()> {
    let builder = Client::builder(addr).name("bench-conn").no_reconnect().connect_timeout(Duration::from_secs(10));
    let client = access.apply(builder).connect().await?;
    let _ = client.close().await;
    Ok(())
}
