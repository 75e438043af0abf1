//! Re-convergence: in `gryphon-fig3.toml` a publisher at p1 sends every millisecond to a
//! subscriber at s1 through one of the two bundle brokers b1, b2. The one carrying the traffic
//! is crashed (SIGKILL: the kernel resets its connections, so its peers know at once), then, in
//! a fresh network, stalled (SIGSTOP: nothing is said, and missed heartbeats must find it).
//! The figure is the longest gap in deliveries at s1. A stalled broker is always continued,
//! and every network is stopped when it is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use tidings_client::Client;
use tidings_testkit::{send_signal, Signal};

use super::{Checks, Key, Params, TIDINGS};
use crate::metrics::{self, scrape_all};
use crate::network::Network as BrokerNetwork;
use crate::suite::table::Table;
use crate::suite::Context;

/// How the carrying broker fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL.
    Crash,
    /// SIGSTOP, continued when the measurement ends.
    Stall,
}

impl Fault {
    fn label(self) -> &'static str {
        match self {
            Fault::Crash => "crash (SIGKILL)",
            Fault::Stall => "stall (SIGSTOP)",
        }
    }
}

/// A broker that was sent a fault; a stalled one is continued on drop, whatever happened
/// meanwhile.
struct Faulted {
    pid: u32,
    fault: Fault,
}

impl Faulted {
    fn inject(pid: u32, fault: Fault) -> anyhow::Result<Faulted> {
        let signal = match fault {
            Fault::Crash => Signal::Kill,
            Fault::Stall => Signal::Stop,
        };
        let faulted = Faulted { pid, fault };
        send_signal(pid, signal).map_err(|e| anyhow::anyhow!("{signal:?} to {pid} failed: {e}"))?;
        Ok(faulted)
    }
}

impl Drop for Faulted {
    fn drop(&mut self) {
        if self.fault == Fault::Stall {
            let _ = send_signal(self.pid, Signal::Cont);
        }
    }
}

/// Both faults, each on a fresh network.
pub(super) async fn run(ctx: &Context, p: &Params, table: &mut Table, checks: &mut Checks) -> anyhow::Result<()> {
    for (i, fault) in [Fault::Crash, Fault::Stall].into_iter().enumerate() {
        let dir = ctx.scratch(&format!("network-fault-{i}"))?;
        let net =
            BrokerNetwork::up(&ctx.tidings, &ctx.topologies.join(&p.fault.0), &dir, Duration::from_secs(60)).await?;
        let gap = once(&net, p, fault).await?;
        let at = format!("{} of {}", fault.label(), gap.carrier);
        checks.resumed.record(
            gap.resumed,
            format!("{at}: {} deliveries after the fault, the last {} ms before the end", gap.after, gap.tail_ms),
        );
        let key = Key::new("reconvergence", TIDINGS, at.clone(), 0, 1);
        key.put(table, "longest_gap_ms", gap.longest_ms)?;
        key.put(table, "lost", gap.lost as f64)?;
        key.put(table, "sent", gap.sent as f64)?;
        ctx.step(format!("{at}: longest gap {:.0} ms", gap.longest_ms));
    }
    Ok(())
}

/// What one fault did to the deliveries.
struct Gap {
    carrier: String,
    longest_ms: f64,
    sent: u64,
    lost: u64,
    after: usize,
    tail_ms: f64,
    resumed: bool,
}

/// Tasks aborted when dropped, so that an early return leaves none running.
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

async fn once(net: &BrokerNetwork, p: &Params, fault: Fault) -> anyhow::Result<Gap> {
    let (_, publisher_at, subscriber_at, bundle) = &p.fault;
    let subscriber = Client::builder(net.broker(subscriber_at)?.tcp.as_str()).no_reconnect().connect().await?;
    let mut subscription = subscriber.subscribe("bench.fault").await?;
    let publisher = Client::builder(net.broker(publisher_at)?.tcp.as_str()).no_reconnect().connect().await?;
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let published = Arc::new(AtomicU64::new(0));
    let receiver = tokio::spawn({
        let arrivals = arrivals.clone();
        async move {
            while subscription.next().await.is_some() {
                if let Ok(mut a) = arrivals.lock() {
                    a.push(Instant::now());
                }
            }
        }
    });
    // Publish every millisecond on an absolute schedule; the gap in deliveries is the outage.
    let pacer = tokio::spawn({
        let published = published.clone();
        async move {
            let start = tokio::time::Instant::now();
            let mut n = 0u64;
            while publisher.publish("bench.fault", Bytes::from(n.to_be_bytes().to_vec())).await.is_ok() {
                n += 1;
                published.store(n, Ordering::Relaxed);
                tokio::time::sleep_until(start + Duration::from_millis(n)).await;
            }
        }
    });
    let tasks = Tasks(vec![receiver, pacer]);
    let admins: Vec<String> = bundle
        .iter()
        .map(|b| net.broker(b)?.admin.clone().ok_or_else(|| anyhow::anyhow!("{b} has no admin")))
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(wait_for_traffic(&arrivals).await, "no delivery reached {subscriber_at} within 10 s");
    let scrapes = scrape_all(admins).await?;
    let carried: Vec<f64> = scrapes.iter().map(|s| s.sum(metrics::LINK_MESSAGES_IN)).collect();
    let busiest = carried.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
    let carrier = net.broker(&bundle[busiest])?;
    let pid = carrier.pid.ok_or_else(|| anyhow::anyhow!("network.json gives no pid for {}", carrier.name))?;
    let (before, sent_before) = (count(&arrivals), published.load(Ordering::Relaxed));
    let faulted = Faulted::inject(pid, fault)?;
    let failed = Instant::now();
    tokio::time::sleep(p.fault_window).await;
    let end = Instant::now();
    tasks.0[1].abort();
    // What was published by the end has had time to arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(faulted);
    let arrived: Vec<Instant> = arrivals.lock().map(|a| a.clone()).unwrap_or_default();
    drop(tasks);
    let _ = subscriber.close().await;
    let sent = published.load(Ordering::Relaxed) - sent_before;
    let received = (arrived.len() - before) as u64;
    let watched: Vec<Instant> = arrived[before.saturating_sub(1)..].iter().copied().filter(|&t| t <= end).collect();
    let mut gap = summarize(carrier.name.clone(), failed, end, &watched);
    (gap.sent, gap.lost) = (sent, sent.saturating_sub(received));
    Ok(gap)
}

/// Deliveries so far.
fn count(arrivals: &Mutex<Vec<Instant>>) -> usize {
    arrivals.lock().map(|a| a.len()).unwrap_or(0)
}

/// Waits (at most 10 s) until deliveries flow, then 300 ms more so the carrier's counters show it.
async fn wait_for_traffic(arrivals: &Mutex<Vec<Instant>>) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(arrivals) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    count(arrivals) > 0
}

/// The longest gap between consecutive deliveries from the last one before the fault to the end
/// of the window (the end counts as a delivery, so deliveries that never resume show as a gap to
/// it). What was sent and lost is filled in by the caller.
fn summarize(carrier: String, failed: Instant, end: Instant, watched: &[Instant]) -> Gap {
    let after = watched.iter().filter(|&&t| t > failed).count();
    let mut times = watched.to_vec();
    times.push(end);
    let longest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    let tail = end - watched.last().copied().unwrap_or(failed);
    Gap {
        carrier,
        longest_ms: longest.as_secs_f64() * 1e3,
        sent: 0,
        lost: 0,
        after,
        tail_ms: tail.as_secs_f64() * 1e3,
        resumed: after > 0 && tail < Duration::from_millis(100),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_spans_the_outage_and_an_unresumed_stream_counts_to_the_end() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let watched = [ms(0), ms(1), ms(2), ms(800), ms(801), ms(1000)];
        let g = summarize("b1".into(), ms(2), ms(1000), &watched);
        assert_eq!((g.longest_ms.round(), g.after, g.resumed), (798.0, 3, true));
        let g = summarize("b1".into(), ms(2), ms(3000), &watched[..3]);
        assert_eq!((g.longest_ms.round(), g.after, g.resumed), (2998.0, 0, false));
    }
}
