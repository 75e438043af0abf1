//! Seed 002's method: one publisher sends a fixed number of messages as fast as the client
//! accepts them and notes when each send returned (On); every subscriber notes when the
//! application received each message (In). Throughput while message n passes is then
//! STn = M / (On - On-M) and RTn = M / (In - In-M) ([`crate::stats::window_rates`]).
//!
//! Message n carries n in its first 8 payload bytes, so a subscriber knows which message it got
//! and can tell losses, duplicates and reordering apart. Before the timed run the publisher
//! sends probe messages until every subscriber has seen one (as the peer harness does), which
//! also covers interest travelling across a broker network.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use tidings_client::{now_us, Client, Subscription};
use tidings_wire::Message;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The sequence number of probe messages (never counted).
pub const PROBE: u64 = u64::MAX;

/// What to run.
#[derive(Debug, Clone)]
pub struct FloodSpec {
    /// The publisher's broker (TCP).
    pub publisher: String,
    /// One broker address per subscriber (TCP); each subscriber has its own connection.
    pub subscribers: Vec<String>,
    /// Payload bytes (at least 8).
    pub size: usize,
    /// Messages to send.
    pub count: u64,
    /// Topic.
    pub topic: String,
    /// Stop waiting for stragglers after this long without progress...
    pub idle: Duration,
    /// ...or this long after publishing ended.
    pub drain: Duration,
}

/// What one subscriber saw.
#[derive(Debug, Clone)]
pub struct Received {
    /// Seconds (since the publish start) at which message n arrived; NaN if it never did.
    pub times: Vec<f64>,
    /// Messages received (first copies).
    pub count: u64,
    /// Messages the broker reported dropping for this subscriber.
    pub missed: u64,
    /// Deliveries whose number was not above the previous one's.
    pub out_of_order: u64,
    /// Second copies of a message.
    pub duplicates: u64,
    /// The stream ended before the end of the run (the error, if any).
    pub ended: Option<String>,
}

impl Received {
    /// Time of the last first-copy arrival, seconds since the publish start.
    pub fn last(&self) -> Option<f64> {
        self.times.iter().copied().filter(|t| t.is_finite()).reduce(f64::max)
    }

    /// Peer-harness rate: received / (last receive - publish start).
    pub fn mean_rate(&self) -> f64 {
        match self.last() {
            Some(last) if last > 0.0 => self.count as f64 / last,
            _ => 0.0,
        }
    }
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct FloodRun {
    /// Messages sent.
    pub sent: u64,
    /// Seconds since the publish start at which each send returned.
    pub send_times: Vec<f64>,
    /// Seconds until `flush` returned.
    pub publish_secs: f64,
    /// One per subscriber, in the spec's order.
    pub subscribers: Vec<Received>,
}

impl FloodRun {
    /// All deliveries / (latest receive - publish start), the peer harness's aggregate.
    pub fn aggregate_rate(&self) -> f64 {
        let total: u64 = self.subscribers.iter().map(|s| s.count).sum();
        let last = self.subscribers.iter().filter_map(Received::last).fold(0.0, f64::max);
        if last > 0.0 {
            total as f64 / last
        } else {
            0.0
        }
    }

    /// Deliveries that never arrived.
    pub fn lost(&self) -> u64 {
        let received: u64 = self.subscribers.iter().map(|s| s.count).sum();
        (self.sent * self.subscribers.len() as u64).saturating_sub(received)
    }
}

struct Shared {
    received: AtomicU64,
    probed: AtomicBool,
}

/// Connected clients, probed and ready to run.
pub struct Flood {
    spec: FloodSpec,
    publisher: Client,
    clients: Vec<Client>,
    shared: Vec<Arc<Shared>>,
    tasks: Vec<JoinHandle<Received>>,
    start: watch::Sender<Option<Instant>>,
    stop: watch::Sender<bool>,
}

impl Flood {
    /// Connects every subscriber and the publisher, and probes until every subscriber hears
    /// the publisher (at most `probe_timeout`).
    pub async fn connect(spec: FloodSpec, probe_timeout: Duration) -> anyhow::Result<Flood> {
        anyhow::ensure!(spec.size >= 8, "messages need at least 8 bytes for their number");
        let (start, _) = watch::channel(None);
        let (stop, _) = watch::channel(false);
        let mut flood = Flood {
            publisher: client(&spec.publisher, "flood-pub").await?,
            clients: Vec::new(),
            shared: Vec::new(),
            tasks: Vec::new(),
            start,
            stop,
            spec,
        };
        for (i, addr) in flood.spec.subscribers.clone().iter().enumerate() {
            let c = client(addr, &format!("flood-sub-{i}")).await?;
            let subscription = c.subscribe(&flood.spec.topic).await?;
            let shared = Arc::new(Shared { received: AtomicU64::new(0), probed: AtomicBool::new(false) });
            let task = receive(
                subscription,
                flood.spec.count,
                shared.clone(),
                flood.start.subscribe(),
                flood.stop.subscribe(),
            );
            flood.tasks.push(tokio::spawn(task));
            flood.shared.push(shared);
            flood.clients.push(c);
        }
        flood.probe(probe_timeout).await?;
        Ok(flood)
    }

    async fn probe(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let probe = Message::new(&self.spec.topic, &[], payload(PROBE, self.spec.size), now_us())?;
        while Instant::now() < deadline {
            self.publisher.publish_message(probe.clone()).await?;
            self.publisher.flush().await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.shared.iter().all(|s| s.probed.load(Ordering::Relaxed)) {
                tokio::time::sleep(Duration::from_millis(100)).await; // let in-flight probes land
                return Ok(());
            }
        }
        let ready = self.shared.iter().filter(|s| s.probed.load(Ordering::Relaxed)).count();
        anyhow::bail!("only {ready} of {} subscribers heard the publisher within {timeout:?}", self.shared.len())
    }

    /// Publishes, waits for the subscribers, closes every client.
    pub async fn run(self) -> anyhow::Result<FloodRun> {
        let mut send_times = Vec::with_capacity(self.spec.count as usize);
        let start = Instant::now();
        self.start.send_replace(Some(start));
        for n in 0..self.spec.count {
            let message = Message::new(&self.spec.topic, &[], payload(n, self.spec.size), now_us())?;
            self.publisher.publish_message(message).await?;
            send_times.push(start.elapsed().as_secs_f64());
        }
        self.publisher.flush().await?;
        let publish_secs = start.elapsed().as_secs_f64();
        self.drain().await;
        self.stop.send_replace(true);
        let mut subscribers = Vec::new();
        for task in self.tasks {
            subscribers.push(task.await?);
        }
        for c in self.clients.iter().chain([&self.publisher]) {
            let _ = c.close().await;
        }
        Ok(FloodRun { sent: self.spec.count, send_times, publish_secs, subscribers })
    }

    async fn drain(&self) {
        let expected = self.spec.count * self.shared.len() as u64;
        let deadline = Instant::now() + self.spec.drain;
        let (mut last_total, mut last_progress) = (u64::MAX, Instant::now());
        while Instant::now() < deadline {
            let total: u64 = self.shared.iter().map(|s| s.received.load(Ordering::Relaxed)).sum();
            if total >= expected {
                return;
            }
            if total != last_total {
                (last_total, last_progress) = (total, Instant::now());
            } else if last_progress.elapsed() >= self.spec.idle {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn client(addr: &str, name: &str) -> anyhow::Result<Client> {
    Ok(Client::builder(addr).name(name).no_reconnect().connect().await?)
}

/// `size` bytes: `n` little-endian, then zeros.
pub fn payload(n: u64, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(8));
    b.put_u64_le(n);
    b.resize(size.max(8), 0);
    b.freeze()
}

/// The number in a payload, if it has one.
pub fn number(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?))
}

async fn receive(
    mut subscription: Subscription,
    count: u64,
    shared: Arc<Shared>,
    mut start: watch::Receiver<Option<Instant>>,
    mut stop: watch::Receiver<bool>,
) -> Received {
    let mut r = Received {
        times: vec![f64::NAN; count as usize],
        count: 0,
        missed: 0,
        out_of_order: 0,
        duplicates: 0,
        ended: None,
    };
    let mut previous: Option<u64> = None;
    let mut origin: Option<Instant> = None;
    loop {
        let delivery = tokio::select! {
            d = subscription.next() => d,
            _ = stop.changed() => break,
        };
        let Some(d) = delivery else {
            r.ended = Some(subscription.error().map(|e| e.to_string()).unwrap_or_else(|| "closed".into()));
            break;
        };
        let now = Instant::now();
        r.missed += u64::from(d.missed);
        match number(&d.payload) {
            Some(PROBE) | None => shared.probed.store(true, Ordering::Relaxed),
            Some(n) => {
                let origin = *origin.get_or_insert_with(|| start.borrow_and_update().unwrap_or(now));
                if previous.is_some_and(|p| n <= p) {
                    r.out_of_order += 1;
                }
                previous = Some(n);
                match r.times.get_mut(n as usize) {
                    Some(t) if t.is_nan() => {
                        *t = now.saturating_duration_since(origin).as_secs_f64();
                        r.count += 1;
                        shared.received.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => r.duplicates += 1,
                }
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_their_number() {
        let p = payload(42, 100);
        assert_eq!(p.len(), 100);
        assert_eq!(number(&p), Some(42));
        assert_eq!(number(&p[..4]), None);
        assert_eq!(payload(1, 2).len(), 8);
    }

    #[test]
    fn rates_follow_the_peer_harness() {
        let sub = |times: Vec<f64>| Received {
            count: times.iter().filter(|t| t.is_finite()).count() as u64,
            times,
            missed: 0,
            out_of_order: 0,
            duplicates: 0,
            ended: None,
        };
        let run = FloodRun {
            sent: 4,
            send_times: vec![0.0, 0.1, 0.2, 0.3],
            publish_secs: 0.3,
            subscribers: vec![sub(vec![0.1, 0.2, 0.3, 0.4]), sub(vec![0.1, f64::NAN, 0.3, 0.8])],
        };
        assert_eq!(run.subscribers[0].mean_rate(), 10.0);
        assert_eq!(run.lost(), 1);
        assert!((run.aggregate_rate() - 7.0 / 0.8).abs() < 1e-9);
    }
}
