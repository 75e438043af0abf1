//! The one measurement engine behind throughput, flood, latency and content runs: it connects
//! the subscribers, probes until every route is up (probes are distinct from data), numbers
//! every message ([`mark`]), counts what each subscriber received by identity ([`tally`]) and
//! waits for stragglers the same way for every experiment (and as the peer harness does).
//!
//! What a run does with each first copy (keep its arrival time, its latency...) is a [`Sink`];
//! the engine hands back each subscriber's [`Tally`] and sink when the run ends.

pub mod access;
pub mod mark;
pub mod tally;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use tidings_client::{now_us, Client, Delivery, PendingAck, SubscribeOptions, Subscription, Transport};
use tidings_wire::{Message, Property};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use access::Access;
pub use mark::{payload, Mark, MARK_BYTES, PROBE};
pub use tally::{Accounting, Seen, Tally};

/// What a run keeps of each first copy of a data message.
pub trait Sink: Send + 'static {
    /// Message `mark.number` arrived for the first time, at `at`.
    fn first(&mut self, mark: Mark, delivery: &Delivery, at: Instant);
    /// The run ended (flush anything batched).
    fn finish(&mut self) {}
}

/// Keeps nothing beyond the tally.
impl Sink for () {
    fn first(&mut self, _: Mark, _: &Delivery, _: Instant) {}
}

/// Who subscribes, and to what.
#[derive(Debug, Clone)]
pub struct Subscribers {
    /// One broker address per subscriber; each subscriber has its own connection.
    pub addrs: Vec<String>,
    /// What each subscribes to.
    pub options: SubscribeOptions,
    /// TCP or UDP.
    pub transport: Transport,
    /// Deliveries each client may hold for the application (client default when `None`).
    pub capacity: Option<usize>,
    /// Client names are `{name}-{i}`.
    pub name: String,
    /// Data messages the run will number (0..expected).
    pub expected: u64,
    /// Durable subscriptions, named `{durable}-{i}` (each subscriber its own name, as only
    /// one client may hold a name); `None`: as `options` says.
    pub durable: Option<String>,
    /// TLS and login of every subscriber's client.
    pub access: Access,
}

impl Subscribers {
    /// `count` subscribers to `topic` at `addr` over TCP.
    pub fn at(addr: &str, count: usize, topic: &str, expected: u64) -> Subscribers {
        Subscribers {
            addrs: vec![addr.to_string(); count],
            options: SubscribeOptions::new(topic),
            transport: Transport::Tcp,
            capacity: None,
            name: "bench-sub".into(),
            expected,
            durable: None,
            access: Access::default(),
        }
    }
}

/// How long to wait for stragglers once publishing ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// Stop after this long without progress...
    pub idle: Duration,
    /// ...or this long in all.
    pub max: Duration,
}

#[derive(Default)]
struct Progress {
    received: AtomicU64,
    duplicates: AtomicU64,
    probed: AtomicBool,
    ended: AtomicBool,
}

/// Connected subscribers, counting.
pub struct Engine<S: Sink> {
    clients: Vec<Client>,
    progress: Vec<Arc<Progress>>,
    tasks: Vec<JoinHandle<(Tally, S)>>,
    stop: watch::Sender<bool>,
    /// Seconds it took to connect and subscribe everyone.
    pub setup_secs: f64,
}

impl<S: Sink> Engine<S> {
    /// Connects and subscribes every subscriber (64 at a time), each with the sink `sink(i)`.
    pub async fn connect(spec: &Subscribers, mut sink: impl FnMut(usize) -> S) -> anyhow::Result<Engine<S>> {
        let started = Instant::now();
        let connected: Vec<(Client, Subscription)> = stream::iter(spec.addrs.clone().into_iter().enumerate())
            .map(|(i, addr)| subscribe(spec, i, addr))
            .buffered(64)
            .try_collect()
            .await?;
        let (stop, _) = watch::channel(false);
        let mut engine = Engine { clients: Vec::new(), progress: Vec::new(), tasks: Vec::new(), stop, setup_secs: 0.0 };
        for (i, (client, subscription)) in connected.into_iter().enumerate() {
            let progress = Arc::new(Progress::default());
            let task =
                receive(subscription, Tally::new(spec.expected), sink(i), progress.clone(), engine.stop.subscribe());
            engine.tasks.push(tokio::spawn(task));
            engine.progress.push(progress);
            engine.clients.push(client);
        }
        engine.setup_secs = started.elapsed().as_secs_f64();
        Ok(engine)
    }

    /// Publishes probes on `topic` every 20 ms until every subscriber has heard one: interest
    /// has reached the publisher's broker, through a network too. Returns how many probes were
    /// published (brokers count them with the data). Probes carry `properties`, for subscribers
    /// with selectors.
    pub async fn probe(
        &self,
        publisher: &Client,
        topic: &str,
        properties: &[Property],
        size: usize,
        timeout: Duration,
    ) -> anyhow::Result<u64> {
        let deadline = Instant::now() + timeout;
        let probe = Message::new(topic, properties, payload(PROBE, 0, size), now_us())?;
        let mut sent = 0;
        while Instant::now() < deadline {
            publisher.publish_message(probe.clone()).await?;
            publisher.flush().await?;
            sent += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.progress.iter().all(|p| p.probed.load(Ordering::Relaxed)) {
                // Probes still in flight never count as data, but let them land before callers
                // read the brokers' counters.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(sent);
            }
        }
        let ready = self.progress.iter().filter(|p| p.probed.load(Ordering::Relaxed)).count();
        anyhow::bail!("only {ready} of {} subscribers heard the publisher within {timeout:?}", self.progress.len())
    }

    /// Distinct data messages received so far, all subscribers.
    pub fn received(&self) -> u64 {
        self.progress.iter().map(|p| p.received.load(Ordering::Relaxed)).sum()
    }

    /// Second and later copies of a data message received so far, per subscriber (in the
    /// order they were given): a run that must deliver exactly once reads them while it runs,
    /// where [`Engine::finish`]'s tallies come only at the end.
    pub fn duplicates(&self) -> Vec<u64> {
        self.progress.iter().map(|p| p.duplicates.load(Ordering::Relaxed)).collect()
    }

    /// Waits until every subscriber has messages 0..sent or has ended, or `drain` says stop.
    pub async fn drain(&self, sent: u64, drain: Drain) {
        let each = |e: &Self| {
            e.progress.iter().all(|p| p.ended.load(Ordering::Relaxed) || p.received.load(Ordering::Relaxed) >= sent)
        };
        self.drain_until(each, drain).await
    }

    /// Waits until `done` holds, or `drain` says stop: a queue group's members share the
    /// messages, so it waits for all of them together rather than each.
    pub async fn drain_until(&self, done: impl Fn(&Self) -> bool, drain: Drain) {
        let deadline = Instant::now() + drain.max;
        let (mut last, mut last_progress) = (u64::MAX, Instant::now());
        while Instant::now() < deadline {
            if done(self) {
                return;
            }
            let now = self.received();
            if now != last {
                (last, last_progress) = (now, Instant::now());
            } else if last_progress.elapsed() >= drain.idle {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops counting, closes every subscriber's client, and returns what each received.
    pub async fn finish(self) -> anyhow::Result<Vec<(Tally, S)>> {
        self.stop.send_replace(true);
        let mut out = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            out.push(task.await?);
        }
        stream::iter(self.clients.iter())
            .for_each_concurrent(256, |c| async move {
                let _ = c.close().await;
            })
            .await;
        Ok(out)
    }
}

async fn subscribe(spec: &Subscribers, i: usize, addr: String) -> anyhow::Result<(Client, Subscription)> {
    let builder =
        Client::builder(addr.as_str()).name(format!("{}-{i}", spec.name)).transport(spec.transport).no_reconnect();
    let mut builder = spec.access.apply(builder);
    if let Some(capacity) = spec.capacity {
        builder = builder.subscription_capacity(capacity);
    }
    let client = builder.connect().await?;
    let options = match &spec.durable {
        Some(prefix) => spec.options.clone().durable(format!("{prefix}-{i}")),
        None => spec.options.clone(),
    };
    let subscription = client.subscribe_with(options).await?;
    Ok((client, subscription))
}

async fn receive<S: Sink>(
    mut subscription: Subscription,
    mut tally: Tally,
    mut sink: S,
    progress: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
) -> (Tally, S) {
    loop {
        let delivery = tokio::select! {
            d = subscription.next() => d,
            _ = stop.changed() => break,
        };
        let Some(d) = delivery else {
            tally.ended = Some(subscription.error().map(|e| e.to_string()).unwrap_or_else(|| "closed".into()));
            progress.ended.store(true, Ordering::Relaxed);
            break;
        };
        let at = Instant::now();
        let mark = mark::read(&d.payload);
        match tally.record(mark.map(|m| m.number), d.missed, at) {
            Seen::First => {
                progress.received.fetch_add(1, Ordering::Relaxed);
                if let Some(mark) = mark {
                    sink.first(mark, &d, at);
                }
            }
            Seen::Probe => progress.probed.store(true, Ordering::Relaxed),
            Seen::Duplicate => {
                progress.duplicates.fetch_add(1, Ordering::Relaxed);
            }
            Seen::Foreign => {}
        }
    }
    sink.finish();
    (tally, sink)
}

/// Publishes messages numbered from 0 on `topic` as fast as `publisher` accepts them, until
/// `max` or `duration` (checked every 1024), then flushes: the one flat-out publishing loop
/// of the throughput and queue runs. Returns how many were sent.
pub async fn publish_flat_out(
    publisher: &Client,
    topic: &str,
    properties: &[Property],
    size: usize,
    max: u64,
    duration: Duration,
) -> anyhow::Result<u64> {
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < max {
        publisher.publish_message(Message::new(topic, properties, payload(sent, 0, size), now_us())?).await?;
        sent += 1;
        if sent.is_multiple_of(1024) && start.elapsed() >= duration {
            break;
        }
    }
    publisher.flush().await?;
    Ok(sent)
}

/// Waits for every guaranteed publish's acknowledgement sent down `rx` (each for at most 30 s):
/// (acknowledged, failed). Run as its own task beside a publishing loop, so the loop keeps the
/// client's window full instead of waiting on each acknowledgement.
pub async fn count_acks(mut rx: mpsc::UnboundedReceiver<PendingAck>) -> (u64, u64) {
    let (mut acked, mut failed) = (0, 0);
    while let Some(pending) = rx.recv().await {
        match tokio::time::timeout(Duration::from_secs(30), pending).await {
            Ok(Ok(_)) => acked += 1,
            _ => failed += 1,
        }
    }
    (acked, failed)
}
