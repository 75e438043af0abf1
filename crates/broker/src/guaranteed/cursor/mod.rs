//! The cursor: serves a durable subscriber's catch-up outside the driver's turns. The delivery
//! core hands the driver a serve order ([`Action::Serve`]: ticks already final, their D and L
//! runs); a cursor serves it on a thread of its own (its priority: [`NICE`]). Its reading
//! half ([`read`]) reads the order's records from the pubend's log a chunk at a time, decodes
//! and filters them with the subscription's filter, and makes the chunk ready, with a GAP in
//! place of each L run; its pushing half (here) queues each chunk whole in the subscriber's
//! outbox in tick order (one lock, one wake of the writer: [`Outbox::push_catch_up`]), waits
//! for room when the outbox fills, and reports "served through T" back to the driver
//! ([`Command::Served`]), which feeds it to the core. The driver's turns (every live
//! guaranteed message) no longer wait for a replay (docs/catch-up.md).
//!
//! A cancel ([`Action::ServeCancel`]) closes the cursor's gate: the gate is held while a chunk
//! is queued, so once the driver has closed it nothing more of the order reaches the outbox.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tidings_delivery::{Action, Input, PubendId, ServeOrder, SubendId, Tick};
use tidings_matching::{Pattern, Selector};
use tidings_wire::{Message, SubId};
use tokio::sync::mpsc;
use tracing::warn;

mod read;

use read::{Chunks, Ready, Source};

use super::driver::Driver;
use super::relay::RELAY_TOPIC;
use super::Command;
use crate::outbox::{GuaranteedPush, Outbox};

/// How long the cursor sleeps after each chunk; zero, as now, only yields its thread. A sleep
/// was tried because on 2 cores a cursor that never paused took one core whole, and the live
/// path (the driver, the sessions) and the catching-up client shared the other; a yield and
/// `[guaranteed] catch_up_rate` (its pace) are what is kept.
const PAUSE: Duration = Duration::from_micros(0);

/// A subscription's filter, as the core's matcher applies it (a relayed topic matches only a
/// relay's reader, which is never served by a cursor).
#[derive(Clone, Debug)]
pub(super) struct Filter {
    pub(super) pattern: Pattern,
    pub(super) selector: Option<Selector>,
}

impl Filter {
    fn matches(&self, message: &Message) -> bool {
        !message.topic().starts_with(RELAY_TOPIC)
            && self.pattern.matches(message.topic())
            && self.selector.as_ref().is_none_or(|s| s.matches(&message.property_view()))
    }
}

/// Open while true; a cursor holds it while it pushes a chunk.
type Gate = Arc<Mutex<bool>>;

/// The cursors running, and the filters they may need.
#[derive(Default)]
pub(super) struct Cursors {
    /// Per (stream, subend): the order served and its gate (open while true).
    running: BTreeMap<(PubendId, SubendId), (u64, Gate)>,
    filters: BTreeMap<SubendId, Filter>,
}

impl Cursors {
    /// Remembers `subend`'s filter (orders for it are filtered with it).
    pub(super) fn insert_filter(&mut self, subend: SubendId, filter: Filter) {
        self.filters.insert(subend, filter);
    }

    /// Forgets `subend`'s filter.
    pub(super) fn remove_filter(&mut self, subend: SubendId) {
        self.filters.remove(&subend);
    }
}

/// What a cursor got through, for the driver.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Served {
    pub(crate) pubend: PubendId,
    pub(crate) subend: SubendId,
    pub(crate) order: u64,
    pub(crate) through: Tick,
    pub(crate) done: bool,
    /// The last tick handed to the outbox, and how many were.
    pub(crate) delivered: Option<Tick>,
    pub(crate) count: u64,
}

impl Driver {
    /// Carries out [`Action::Serve`] and [`Action::ServeCancel`].
    pub(super) fn serve_action(&mut self, action: Action) {
        match action {
            Action::Serve(order) => self.serve(order),
            Action::ServeCancel { pubend, subend, order } => {
                let key = (pubend, subend);
                if self.cursors.running.get(&key).is_some_and(|(id, _)| *id == order) {
                    if let Some((_, gate)) = self.cursors.running.remove(&key) {
                        *gate.lock() = false;
                    }
                }
            }
            _ => {}
        }
    }

    /// Starts a cursor for `order`, or declines it (the core replays it instead) when its
    /// subend is not a client's durable subscription on a log hosted here.
    fn serve(&mut self, order: ServeOrder) {
        let (pubend, subend) = (order.pubend, order.subend);
        let filter = self.cursors.filters.get(&subend).cloned();
        let entry = self.subends.get(&subend).filter(|e| e.durable && !self.relays.is_relay(subend));
        let plain = !self.groups.is_group(subend) && self.relays.reader(subend).is_none();
        let target = entry.and_then(|e| Some((e.id, e.outbox.clone()?)));
        let (Some(filter), Some((id, outbox)), true, true) = (filter, target, plain, self.hosted.contains(&pubend))
        else {
            let through = order.from.prev();
            self.inputs.push_back(Input::SubendServed { pubend, subend, order: order.id, through, done: true });
            return;
        };
        let gate = Arc::new(Mutex::new(true));
        if let Some((_, old)) = self.cursors.running.insert((pubend, subend), (order.id, Arc::clone(&gate))) {
            *old.lock() = false;
        }
        let (store, tx, rate) = (Arc::clone(&self.store), self.tx.clone(), self.engine.settings().catch_up_rate);
        let (from, id_of_order) = (order.from, order.id);
        let source = Source { order: order.clone(), filter, store, id };
        let cursor = Cursor { order, outbox, id, gate, tx, rate };
        let spawned = std::thread::Builder::new().name("tidings-catch-up".into()).spawn(move || {
            lower_priority();
            run(cursor, source);
        });
        if let Err(error) = spawned {
            warn!(%error, "cannot start a catch-up's cursor; the core replays instead");
            self.cursors.running.remove(&(pubend, subend));
            let input = Input::SubendServed { pubend, subend, order: id_of_order, through: from.prev(), done: true };
            self.inputs.push_back(input);
        }
    }

    /// A cursor's report: its deliveries are counted, then the core is told.
    pub(super) fn served(&mut self, served: Served) {
        let Served { pubend, subend, order, through, done, delivered, count } = served;
        let key = (pubend, subend);
        if self.cursors.running.get(&key).is_none_or(|(id, _)| *id != order) {
            return;
        }
        if done {
            self.cursors.running.remove(&key);
        }
        self.metrics.deliveries.inc_by(count);
        self.metrics.catch_up_served.inc_by(count);
        if let Some(tick) = delivered {
            self.durable_delivered(subend, pubend, tick);
        }
        self.feed(Input::SubendServed { pubend, subend, order, through, done });
    }
}

/// One order being served: the pushing half (the reading half is a [`Source`]).
struct Cursor {
    order: ServeOrder,
    outbox: Arc<Outbox>,
    id: SubId,
    gate: Gate,
    tx: mpsc::UnboundedSender<Command>,
    /// `[guaranteed] catch_up_rate`: at most this many D ticks a second (0: no bound).
    rate: u64,
}

/// Queues the order's chunks in order, reporting after each, until the order is served, a
/// chunk cannot be queued, or the chunks stop (a failed read, a missing record): the order
/// then ends where the report stands.
fn run(cursor: Cursor, source: Source) {
    let order = &cursor.order;
    let mut report = Served {
        pubend: order.pubend,
        subend: order.subend,
        order: order.id,
        through: order.from.prev(),
        done: false,
        delivered: None,
        count: 0,
    };
    let (started, mut walked) = (Instant::now(), 0u64);
    for ready in Chunks::new(source) {
        walked += ready.walked;
        let last = ready.last;
        let Some(full) = queue(&cursor, ready, &mut report) else { break };
        if last {
            report.through = order.to;
            break;
        }
        let _ = cursor.tx.send(Command::Served(progress(&mut report)));
        if full && !wait_for_room(&cursor.outbox) {
            break;
        }
        pace(cursor.rate, started, walked);
    }
    finish(&cursor, report)
}

/// Queues a chunk under the gate, one lock of the outbox and one wake of its writer, and moves
/// the report over it. Returns whether the outbox is now full, or `None` when the order cannot
/// go on (cancelled, the connection closed, the chunk stopped short).
fn queue(cursor: &Cursor, ready: Ready, report: &mut Served) -> Option<bool> {
    let gate = cursor.gate.lock();
    if !*gate {
        return None;
    }
    let pubend = tidings_wire::PubendId(cursor.order.pubend.0);
    let pushed = match ready.items.is_empty() {
        true => GuaranteedPush::Queued,
        false => cursor.outbox.push_catch_up(cursor.id, pubend, ready.items),
    };
    drop(gate);
    if pushed == GuaranteedPush::Closed {
        return None;
    }
    (report.through, report.delivered, report.count) = (ready.through, ready.delivered, report.count + ready.count);
    (!ready.short).then_some(pushed == GuaranteedPush::QueuedFull)
}

/// Waits until the outbox has room; false if it never will (the connection closed).
fn wait_for_room(outbox: &Outbox) -> bool {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    outbox.when_room(Box::new(move || {
        let _ = tx.send(());
    }));
    rx.recv().is_ok() && !outbox.is_finished()
}

/// The report so far, its delivery count taken.
fn progress(report: &mut Served) -> Served {
    let count = std::mem::take(&mut report.count);
    Served { delivered: report.delivered, count, ..*report }
}

fn finish(cursor: &Cursor, mut report: Served) {
    report.done = true;
    let _ = cursor.tx.send(Command::Served(report));
}

/// The cursor's nice value. Above 0, live traffic (the driver, the sessions, the log's writer,
/// all at nice 0) gets a core before the catch-up while the machine is busy; but at nice 10 on
/// a machine loaded by other work (load 10-25 on 2 cores) the catch-up fell to 66-158 k msg/s
/// and the live p99 did not improve (`tidings bench catch-up`, 2026-12-01), so it stays 0.
/// `TIDINGS_CATCH_UP_NICE` (0 to 19) sets it, for measuring.
const NICE: i32 = 0;

/// Lowers the calling thread's priority to [`NICE`] (a thread's own nice value on Linux; not
/// lowering it is no error: the catch-up then shares the cores evenly).
fn lower_priority() {
    let nice = std::env::var("TIDINGS_CATCH_UP_NICE").ok().and_then(|v| v.parse().ok()).unwrap_or(NICE);
    if let Err(error) = rustix::process::setpriority_process(None, nice.clamp(0, 19)) {
        warn!(%error, "a catch-up's cursor runs at normal priority");
    }
}

/// Gives the live path a core between chunks, and keeps to the rate bound: `walked` records
/// read since `started` may not run ahead of `rate` a second.
fn pace(rate: u64, started: Instant, walked: u64) {
    let due = (rate > 0).then(|| started + Duration::from_secs_f64(walked as f64 / rate as f64));
    match due.map(|due| due.saturating_duration_since(Instant::now())) {
        Some(wait) if !wait.is_zero() => std::thread::sleep(wait),
        _ if PAUSE.is_zero() => std::thread::yield_now(),
        _ => std::thread::sleep(PAUSE),
    }
}
