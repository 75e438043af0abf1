//! A well-behaved client beside an attack: it publishes on a topic of its own and times each
//! delivery back to itself, so a test can say what the attack cost everyone else (the
//! hardening issue's measure: a healthy subscriber keeps its latency and loses nothing).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_wire::{DeliveryMode, Frame, Message, Ping, SubId, Subscribe};

use crate::RawConnection;

/// How long the neighbour waits for one delivery before it counts it lost.
const PATIENCE: Duration = Duration::from_secs(5);

/// Pause between round trips.
const EVERY: Duration = Duration::from_millis(5);

/// What the neighbour saw.
#[derive(Debug, Clone)]
pub struct NeighbourReport {
    /// Round trips completed.
    pub rounds: usize,
    /// Publishes whose delivery did not come back within 5 s (or at all).
    pub lost: usize,
    /// The 99th percentile round trip.
    pub p99: Duration,
    /// The slowest round trip.
    pub max: Duration,
}

impl std::fmt::Display for NeighbourReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} round trips, p99 {:?}, max {:?}, {} lost", self.rounds, self.p99, self.max, self.lost)
    }
}

/// Below this, a p99 is not compared with twice the idle one: a debug build on a shared
/// two-core machine jitters by tens of milliseconds with nothing attacking it.
const FLOOR: Duration = Duration::from_millis(50);

impl NeighbourReport {
    /// Panics unless the neighbour lost nothing during `what` and kept its p99 within twice
    /// its `idle` one (or under 50 ms); prints both either way, as the measure of the attack.
    pub fn assert_unharmed(&self, idle: &NeighbourReport, what: &str) {
        eprintln!("neighbour during {what}: {self}; idle: {idle}");
        assert_eq!(self.lost, 0, "the neighbour lost a delivery during {what}: {self}");
        assert!(self.rounds >= 1, "the neighbour never got a round trip through during {what}: {self}");
        let bound = (idle.p99 * 2).max(FLOOR);
        assert!(self.p99 <= bound, "the neighbour's p99 during {what} passed {bound:?}: {self}; idle: {idle}");
    }
}

/// A publishing and subscribing client on its own thread, until [`Neighbour::stop`].
pub struct Neighbour {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<NeighbourReport>,
}

impl Neighbour {
    /// Connects to the broker at `addr`, subscribes to a topic of its own and starts its round
    /// trips (publish, then wait for the delivery), one every 5 ms.
    pub fn start(addr: &str) -> std::io::Result<Neighbour> {
        let mut c = RawConnection::handshake(addr)?;
        let topic = format!("neighbour.{}", std::process::id());
        let subscribe = Subscribe {
            queue_key: None,
            id: SubId(1),
            mode: DeliveryMode::BestEffort,
            pattern: topic.clone(),
            selector: None,
            durable: None,
            group: None,
        };
        c.send(&Frame::Subscribe(subscribe))?;
        c.send(&Frame::Ping(Ping { nonce: 1 }))?;
        loop {
            if matches!(c.expect(PATIENCE)?, Frame::Pong(_)) {
                break;
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || round_trips(c, &topic, &flag));
        Ok(Neighbour { stop, thread })
    }

    /// Runs for `time`, then stops: the neighbour alone, as a baseline.
    pub fn measure(addr: &str, time: Duration) -> std::io::Result<NeighbourReport> {
        let n = Neighbour::start(addr)?;
        std::thread::sleep(time);
        Ok(n.stop())
    }

    /// Stops and reports.
    pub fn stop(self) -> NeighbourReport {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(NeighbourReport { rounds: 0, lost: 1, p99: PATIENCE, max: PATIENCE })
    }
}

fn round_trips(mut c: RawConnection, topic: &str, stop: &AtomicBool) -> NeighbourReport {
    let mut times = Vec::new();
    let mut lost = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(message) = Message::new(topic, &[], Bytes::from_static(b"ok"), 0) else { break };
        let sent = Instant::now();
        if c.send(&Frame::Publish(message)).is_err() {
            lost += 1;
            break;
        }
        match c.expect(PATIENCE) {
            Ok(Frame::Deliver(_)) => times.push(sent.elapsed()),
            _ => {
                lost += 1;
                break;
            }
        }
        std::thread::sleep(EVERY);
    }
    times.sort_unstable();
    let at = |q: f64| times.get(((times.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied();
    NeighbourReport {
        rounds: times.len(),
        lost,
        p99: at(0.99).unwrap_or_default(),
        max: times.last().copied().unwrap_or_default(),
    }
}

/// Runs `attack` on a thread of its own under the kernel's idle scheduling policy
/// (`SCHED_IDLE`) and returns what it returns. An attacker's client runs on its own machine;
/// here it shares two cores with the broker and the [`Neighbour`], and its own busy loop
/// (thousands of handshakes, a flood of publishes) would delay the neighbour's thread and the
/// broker's whatever the broker does. Nice 19 is not enough: the scheduler still lets a
/// nice-19 thread finish its slice (3-4 ms were measured with `perf sched`) before a woken
/// thread runs, while a `SCHED_IDLE` thread gives way at once. So the neighbour's round trips
/// measure what the attack does to the broker, the hardening issue's question. (A library,
/// `thread-priority`, because the workspace forbids the unsafe call.)
pub fn attack<T: Send>(attack: impl FnOnce() -> T + Send) -> T {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
                // Needs no privilege; if it fails the attack still runs, only less politely
                // (and the neighbour's figure says so).
                let me = thread_priority::thread_native_id();
                let _ = thread_priority::set_thread_priority_and_policy(me, ThreadPriority::Min, idle);
                attack()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
