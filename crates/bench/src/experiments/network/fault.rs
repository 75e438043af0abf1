//! Re-convergence: in `gryphon-fig3.toml` a publisher at p1 sends every millisecond to a
//! subscriber at s1 through one of the two bundle brokers b1, b2. The one carrying the traffic
//! is crashed (SIGKILL: the kernel resets its connections, so its peers know at once), then, in
//! a fresh network, stalled (SIGSTOP: nothing is said, and missed heartbeats must find it).
//! The figure is the longest gap in deliveries at s1. A stalled broker is always continued,
//! and every network is stopped when it is dropped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use tidings_admin::{send_signal, Signal};
use tidings_client::Client;

use super::NetRow;
use super::{Checks, Key, Params, TIDINGS};
use crate::metrics::{self, scrape_all};
use crate::network::Network as BrokerNetwork;
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
pub(super) async fn run(ctx: &Context, p: &Params, table: &mut Vec<NetRow>, checks: &mut Checks) -> anyhow::Result<()> {
    for (i, fault) in [Fault::Crash, Fault::Stall].into_iter().enumerate() {
        let dir = ctx.scratch(&format!("network-fault-{i}"))?;
        let net =
            BrokerNetwork::up(&ctx.tidings, &ctx.topologies.join(&p.fault.0), &dir, Duration::from_secs(60)).await?;
        let gap = once(&net, p, fault).await?;
        let at = format!("{} of {}", fault.label(), gap.carrier);
        let what =
            format!("{at}: {} deliveries after the fault, the last {} ms before the end", gap.after, gap.tail_ms);
        checks.resumed.record(gap.resumed, what);
        let key = Key::new("reconvergence", TIDINGS, at.clone(), 0, 1);
        let l = &gap.losses;
        let (lost, sent, at_fault, counted, unexplained) = (l.lost, l.sent, l.at_fault, l.counted, l.unexplained);
        let mut what = format!(
            "{at}: {lost} lost of {sent} sent, {at_fault} in the fault window, {counted} counted as dropped by the \
             surviving brokers, {unexplained} unexplained"
        );
        if unexplained > 0 {
            what.push_str(&format!(" (outside the window: {})", l.outside_described()));
        }
        checks.fault_losses.record(unexplained == 0, what);
        key.put(table, "longest_gap_ms", gap.longest_ms);
        key.put(table, "lost", l.lost as f64);
        key.put(table, "sent", l.sent as f64);
        key.put(table, "lost_in_fault_window", l.at_fault as f64);
        key.put(table, "drops_counted_by_survivors", l.counted);
        key.put(table, "lost_unexplained", l.unexplained as f64);
        ctx.step(format!("{at}: longest gap {:.0} ms", gap.longest_ms));
    }
    Ok(())
}

/// What one fault did to the deliveries.
struct Gap {
    carrier: String,
    longest_ms: f64,
    losses: Losses,
    after: usize,
    tail_ms: f64,
    resumed: bool,
}

async fn once(net: &BrokerNetwork, p: &Params, fault: Fault) -> anyhow::Result<Gap> {
    let (_, publisher_at, subscriber_at, bundle) = &p.fault;
    let subscriber = Client::builder(net.broker(subscriber_at)?.tcp.as_str()).no_reconnect().connect().await?;
    let subscription = subscriber.subscribe("bench.fault").await?;
    let publisher = Client::builder(net.broker(publisher_at)?.tcp.as_str()).no_reconnect().connect().await?;
    let log = Log::default();
    // Aborted when dropped, so that an early return leaves neither running.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(receive(subscription, log.clone()));
    let pacer = tasks.spawn(pace(publisher, log.clone()));
    let admins = |names: &[&String]| -> anyhow::Result<Vec<String>> {
        names.iter().map(|b| net.broker(b)?.admin_addr()).collect()
    };
    anyhow::ensure!(wait_for_traffic(&log.arrivals).await, "no delivery reached {subscriber_at} within 10 s");
    let scrapes = scrape_all(admins(&bundle.iter().collect::<Vec<_>>())?).await?;
    let carried: Vec<f64> = scrapes.iter().map(|s| s.sum(metrics::LINK_MESSAGES_IN)).collect();
    let busiest = carried.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
    let carrier = net.broker(&bundle[busiest])?;
    let pid = carrier.process_id()?;
    // The brokers that stay up: what they count as dropped during the fault.
    let survivors: Vec<&String> =
        [publisher_at, subscriber_at].into_iter().chain(bundle.iter().filter(|b| **b != carrier.name)).collect();
    let counted_before = scrape_all(admins(&survivors)?).await?;
    let (before, sent_before) = (count(&log.arrivals), count(&log.sends));
    let faulted = Faulted::inject(pid, fault)?;
    let failed = Instant::now();
    tokio::time::sleep(p.fault_window).await;
    let end = Instant::now();
    pacer.abort();
    // What was published by the end has had time to arrive: nothing more came for 300 ms.
    settle(&log.arrivals, Duration::from_millis(300), Duration::from_secs(5)).await;
    // The record is taken while a stalled carrier is still stopped: once continued, it forwards
    // what it held, and those late copies (numbers from inside the outage) would split the run
    // of losses in two and make its second half look unexplained (CI saw 213 so).
    let arrived: Vec<(u64, Instant)> = log.arrivals.lock().map(|a| a.clone()).unwrap_or_default();
    let sends: Vec<Instant> = log.sends.lock().map(|s| s.clone()).unwrap_or_default();
    let counted_after = scrape_all(admins(&survivors)?).await?;
    drop(faulted);
    let counted = [metrics::DROPS, metrics::LINK_DROPS, metrics::ROUTE_DROPS]
        .iter()
        .map(|name| counted_after.iter().zip(&counted_before).map(|(a, b)| a.delta(b, name)).sum::<f64>())
        .sum::<f64>();
    drop(tasks);
    let _ = subscriber.close().await;
    let watched: Vec<Instant> =
        arrived[before.saturating_sub(1)..].iter().map(|&(_, t)| t).filter(|&t| t <= end).collect();
    let mut gap = summarize(carrier.name.clone(), failed, end, &watched);
    gap.losses = attribute(&arrived, &sends, sent_before as u64, failed, counted);
    Ok(gap)
}

/// What the publisher sent and the subscriber received, by message number.
#[derive(Clone, Default)]
struct Log {
    /// When message n was published (index n).
    sends: Arc<Mutex<Vec<Instant>>>,
    /// Message numbers as they arrived, with the time.
    arrivals: Arc<Mutex<Vec<(u64, Instant)>>>,
}

async fn receive(mut subscription: tidings_client::Subscription, log: Log) {
    while let Some(d) = subscription.next().await {
        let n = d.payload.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
        if let (Some(n), Ok(mut a)) = (n, log.arrivals.lock()) {
            a.push((n, Instant::now()));
        }
    }
}

/// Publishes message n every millisecond on an absolute schedule; the gap in deliveries is the
/// outage.
async fn pace(publisher: Client, log: Log) {
    let start = tokio::time::Instant::now();
    let mut n = 0u64;
    loop {
        if let Ok(mut s) = log.sends.lock() {
            s.push(Instant::now());
        }
        if publisher.publish("bench.fault", Bytes::from(n.to_be_bytes().to_vec())).await.is_err() {
            return;
        }
        n += 1;
        tokio::time::sleep_until(start + Duration::from_millis(n)).await;
    }
}

/// How long after `kill()` returns a fault may take to show: a signal stops or kills a
/// multi-threaded broker only once the thread that takes it is scheduled, and on a loaded
/// machine its other threads can forward a few more messages meanwhile. (CI saw one message
/// sent after the SIGSTOP delivered, then the 535 lost behind it.)
const TAKES_EFFECT: Duration = Duration::from_millis(50);

/// Best-effort losses at a fault, by identity: every message sent from `first` on that never
/// arrived is either *in the fault window* or outside it, where the surviving brokers must have
/// counted it as dropped (`counted`). The window is the run of messages from the first one
/// lost, if it was sent before the fault took effect (`failed` + [`TAKES_EFFECT`]), to the first
/// one delivered after it: what the failed broker held, or what was routed to it before the
/// network re-converged. A second run of losses, or a first one that starts later, is outside.
fn attribute(arrived: &[(u64, Instant)], sends: &[Instant], first: u64, failed: Instant, counted: f64) -> Losses {
    let got: std::collections::BTreeSet<u64> = arrived.iter().map(|&(n, _)| n).collect();
    let sent = sends.len() as u64;
    let missing: Vec<u64> = (first..sent).filter(|n| !got.contains(n)).collect();
    let window = match missing.first() {
        Some(&start) if sends.get(start as usize).is_some_and(|&t| t <= failed + TAKES_EFFECT) => {
            start..got.range(start..).next().copied().unwrap_or(sent)
        }
        _ => 0..0,
    };
    let at_fault = missing.iter().filter(|n| window.contains(n)).count() as u64;
    let lost = missing.len() as u64;
    let since_fault = |n: u64| sends[n as usize].saturating_duration_since(failed);
    let outside = missing.iter().filter(|n| !window.contains(n)).map(|&n| (n, since_fault(n))).collect();
    Losses {
        window,
        outside,
        sent: sent - first,
        lost,
        at_fault,
        counted,
        unexplained: (lost - at_fault).saturating_sub(counted as u64),
    }
}

/// Where a fault's losses went.
#[derive(Debug, Clone, Default, PartialEq)]
struct Losses {
    /// The fault window's message numbers.
    window: std::ops::Range<u64>,
    /// The messages lost outside it, each with when it was sent after the fault.
    outside: Vec<(u64, Duration)>,
    /// Messages published from the fault on... (and the moments before it).
    sent: u64,
    /// ...of which never delivered.
    lost: u64,
    /// Lost messages sent inside the fault window (attributed to the fault).
    at_fault: u64,
    /// Drops the surviving brokers counted meanwhile.
    counted: f64,
    /// Lost outside the window and not counted by any broker.
    unexplained: u64,
}

impl Losses {
    /// The losses outside the window, for a failed check to say where to look: the window, then
    /// each run of consecutive numbers with when its first was sent after the fault.
    fn outside_described(&self) -> String {
        let mut runs: Vec<(u64, u64, Duration)> = Vec::new();
        for &(n, at) in &self.outside {
            match runs.last_mut() {
                Some(run) if run.1 + 1 == n => run.1 = n,
                _ => runs.push((n, n, at)),
            }
        }
        let runs: Vec<String> =
            runs.iter().map(|(a, b, at)| format!("{a}-{b} sent {} ms after the fault", at.as_millis())).collect();
        format!("window {}-{}; {}", self.window.start, self.window.end, runs.join(", "))
    }
}

/// Entries so far.
fn count<T>(log: &Mutex<Vec<T>>) -> usize {
    log.lock().map(|a| a.len()).unwrap_or(0)
}

/// Waits until no delivery arrived for `quiet`, at most `limit`: a loaded machine may take
/// longer than any fixed pause to deliver the last messages sent, and those are not losses.
async fn settle(arrivals: &Mutex<Vec<(u64, Instant)>>, quiet: Duration, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut seen = count(arrivals);
    while Instant::now() < deadline {
        tokio::time::sleep(quiet).await;
        let now = count(arrivals);
        if now == seen {
            return;
        }
        seen = now;
    }
}

/// Waits (at most 10 s) until deliveries flow, then 300 ms more so the carrier's counters show it.
async fn wait_for_traffic(arrivals: &Mutex<Vec<(u64, Instant)>>) -> bool {
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
        losses: Losses::default(),
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

    #[test]
    fn losses_in_the_fault_window_are_attributed_and_others_must_be_counted() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let sends: Vec<Instant> = (0..10).map(ms).collect();
        // 0-3 arrive before the fault at 4 ms; 4-6 are lost with the failed broker; 8 is lost
        // after deliveries resumed at 7 ms (outside the window).
        let arrived: Vec<(u64, Instant)> =
            [0, 1, 2, 3, 7, 9].iter().map(|&n| (n, ms(n) + Duration::from_micros(300))).collect();
        let l = attribute(&arrived, &sends, 0, ms(4), 0.0);
        assert_eq!((l.sent, l.lost, l.at_fault, l.unexplained), (10, 4, 3, 1));
        assert_eq!(l.outside_described(), "window 4-7; 8-8 sent 4 ms after the fault");
        let l = attribute(&arrived, &sends, 0, ms(4), 1.0);
        assert_eq!(l.unexplained, 0, "a drop a surviving broker counted explains the late loss");
    }

    #[test]
    fn a_fault_that_takes_effect_a_moment_late_still_owns_the_run_it_swallowed() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let sends: Vec<Instant> = (0..700).map(ms).collect();
        // The signal at 4 ms; the broker's threads still forwarded 4 and 5, then 6-599 were lost
        // until the network re-converged; 650 was lost later, uncounted.
        let arrived: Vec<(u64, Instant)> = (0..700)
            .filter(|n| !(6..600).contains(n) && *n != 650)
            .map(|n| (n, ms(n) + Duration::from_micros(300)))
            .collect();
        let l = attribute(&arrived, &sends, 0, ms(4), 0.0);
        assert_eq!((l.lost, l.at_fault, l.unexplained), (595, 594, 1));
        // A first loss long after the fault is not the fault's.
        let late: Vec<(u64, Instant)> = (0..700).filter(|&n| n != 300).map(|n| (n, ms(n))).collect();
        let l = attribute(&late, &sends, 0, ms(4), 0.0);
        assert_eq!((l.lost, l.at_fault, l.unexplained), (1, 0, 1));
    }
}
