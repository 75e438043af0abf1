//! Seed 002's method: one publisher sends a fixed number of messages as fast as the client
//! accepts them and notes when each send returned (On); every subscriber notes when the
//! application received each message (In). Throughput while message n passes is then
//! STn = M / (On - On-M) and RTn = M / (In - In-M) ([`crate::stats::window_rates`]).
//!
//! The run goes through the measurement engine ([`crate::engine`]): message n carries n at the
//! front of its payload, so a subscriber knows which message it got and can tell losses,
//! duplicates and reordering apart. Before the timed run the publisher sends probe messages
//! until every subscriber has seen one (as the peer harness does), which also covers interest
//! travelling across a broker network.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tidings_client::{now_us, Client, Delivery};
use tidings_wire::Message;

use crate::engine::{payload, Drain, Engine, Mark, Sink, Subscribers, Tally, MARK_BYTES};

/// What to run.
#[derive(Debug, Clone)]
pub struct FloodSpec {
    /// The publisher's broker (TCP).
    pub publisher: String,
    /// One broker address per subscriber (TCP); each subscriber has its own connection.
    pub subscribers: Vec<String>,
    /// Payload bytes (at least 16: the mark).
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
    /// Its account by identity: first copies, second copies, order, whether its stream ended.
    pub tally: Tally,
}

impl Received {
    /// A clean subscriber's record of `times` (NaN: never arrived), for tests of what is
    /// computed from it.
    #[cfg(test)]
    pub(crate) fn of_times(times: Vec<f64>) -> Received {
        let mut tally = Tally::default();
        tally.count = times.iter().filter(|t| t.is_finite()).count() as u64;
        Received { times, tally }
    }

    /// Time of the last first-copy arrival, seconds since the publish start.
    pub fn last(&self) -> Option<f64> {
        self.times.iter().copied().filter(|t| t.is_finite()).reduce(f64::max)
    }

    /// Peer-harness rate: received / (last receive - publish start).
    pub fn mean_rate(&self) -> f64 {
        match self.last() {
            Some(last) if last > 0.0 => self.tally.count as f64 / last,
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
    /// One per subscriber, in the spec's order.
    pub subscribers: Vec<Received>,
}

impl FloodRun {
    /// All deliveries / (latest receive - publish start), the peer harness's aggregate.
    pub fn aggregate_rate(&self) -> f64 {
        let total: u64 = self.subscribers.iter().map(|s| s.tally.count).sum();
        let last = self.subscribers.iter().filter_map(Received::last).fold(0.0, f64::max);
        if last > 0.0 {
            total as f64 / last
        } else {
            0.0
        }
    }

    /// Deliveries that never arrived.
    pub fn lost(&self) -> u64 {
        let received: u64 = self.subscribers.iter().map(|s| s.tally.count).sum();
        (self.sent * self.subscribers.len() as u64).saturating_sub(received)
    }
}

/// Keeps each first copy's arrival time, seconds since the publish start.
struct Times {
    start: Arc<OnceLock<Instant>>,
    times: Vec<f64>,
}

impl Sink for Times {
    fn first(&mut self, mark: Mark, _: &Delivery, at: Instant) {
        let origin = *self.start.get_or_init(|| at);
        if let Some(t) = self.times.get_mut(mark.number as usize) {
            *t = at.saturating_duration_since(origin).as_secs_f64();
        }
    }
}

/// Connected clients, probed and ready to run.
pub struct Flood {
    spec: FloodSpec,
    publisher: Client,
    engine: Engine<Times>,
    start: Arc<OnceLock<Instant>>,
}

impl Flood {
    /// Connects every subscriber and the publisher, and probes until every subscriber hears
    /// the publisher (at most `probe_timeout`).
    pub async fn connect(spec: FloodSpec, probe_timeout: Duration) -> anyhow::Result<Flood> {
        anyhow::ensure!(spec.size >= MARK_BYTES, "messages need at least {MARK_BYTES} bytes for their mark");
        let publisher = Client::builder(spec.publisher.as_str()).name("flood-pub").no_reconnect().connect().await?;
        let subscribers = Subscribers {
            addrs: spec.subscribers.clone(),
            name: "flood-sub".into(),
            ..Subscribers::at("", 0, &spec.topic, spec.count)
        };
        let start = Arc::new(OnceLock::new());
        let count = spec.count as usize;
        let engine =
            Engine::connect(&subscribers, |_| Times { start: start.clone(), times: vec![f64::NAN; count] }).await?;
        engine.probe(&publisher, &spec.topic, &[], spec.size, probe_timeout).await?;
        Ok(Flood { spec, publisher, engine, start })
    }

    /// Publishes, waits for the subscribers, closes every client.
    pub async fn run(self) -> anyhow::Result<FloodRun> {
        let mut send_times = Vec::with_capacity(self.spec.count as usize);
        let start = *self.start.get_or_init(Instant::now);
        for n in 0..self.spec.count {
            let message = Message::new(&self.spec.topic, &[], payload(n, 0, self.spec.size), now_us())?;
            self.publisher.publish_message(message).await?;
            send_times.push(start.elapsed().as_secs_f64());
        }
        self.publisher.flush().await?;
        self.engine.drain(self.spec.count, Drain { idle: self.spec.idle, max: self.spec.drain }).await;
        let finished = self.engine.finish().await?.into_iter();
        let subscribers = finished.map(|(tally, times)| Received { times: times.times, tally }).collect();
        let _ = self.publisher.close().await;
        Ok(FloodRun { sent: self.spec.count, send_times, subscribers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_the_peer_harness() {
        let sub = Received::of_times;
        let run = FloodRun {
            sent: 4,
            send_times: vec![0.0, 0.1, 0.2, 0.3],
            subscribers: vec![sub(vec![0.1, 0.2, 0.3, 0.4]), sub(vec![0.1, f64::NAN, 0.3, 0.8])],
        };
        assert_eq!(run.subscribers[0].mean_rate(), 10.0);
        assert_eq!(run.lost(), 1);
        assert!((run.aggregate_rate() - 7.0 / 0.8).abs() < 1e-9);
    }
}
