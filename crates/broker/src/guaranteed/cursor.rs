//! The cursor: serves a durable subscriber's catch-up outside the driver's turns. The delivery
//! core hands the driver a serve order ([`Action::Serve`]: ticks already final, their D and L
//! runs); a cursor on a thread of its own (its priority: [`NICE`]) reads the order's
//! records from the pubend's log a
//! chunk at a time, filters them with the subscription's filter, pushes them to the subscriber's
//! outbox in tick order (and each L run as a GAP in its place), waits for room when the outbox
//! fills, and reports "served through T" back to the driver ([`Command::Served`]), which feeds
//! it to the core. The driver's turns (every live guaranteed message) no longer wait for a
//! replay (docs/catch-up.md).
//!
//! A cancel ([`Action::ServeCancel`]) closes the cursor's gate: the gate is held while a chunk
//! is pushed, so once the driver has closed it nothing more of the order reaches the outbox.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tidings_delivery::{Action, Input, PubendId, ServeOrder, SubendId, Tick, TickRange};
use tidings_matching::{Pattern, Selector};
use tidings_store::{ReadItem, Store};
use tidings_wire::{Frame, Gap, Message, SubId};
use tokio::sync::mpsc;
use tracing::warn;

use super::driver::Driver;
use super::relay::RELAY_TOPIC;
use super::Command;
use crate::outbox::{GuaranteedPush, Outbox};

/// Records read from the log, filtered and pushed per chunk (the gate is held that long).
const CHUNK: usize = 256;

/// How long the cursor sleeps after each chunk: with 2 cores, a cursor that never paused took
/// one core whole, and the live path (the driver, the sessions) and the catching-up client
/// shared the other.
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
        let cursor = Cursor { order, filter, outbox, id, gate, store, tx, rate };
        let spawned = std::thread::Builder::new().name("tidings-catch-up".into()).spawn(move || {
            lower_priority();
            run(cursor);
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

/// One order being served.
struct Cursor {
    order: ServeOrder,
    filter: Filter,
    outbox: Arc<Outbox>,
    id: SubId,
    gate: Gate,
    store: Arc<Store>,
    tx: mpsc::UnboundedSender<Command>,
    /// `[guaranteed] catch_up_rate`: at most this many D ticks a second (0: no bound).
    rate: u64,
}

/// The order's D ticks and L runs, in tick order.
enum Item {
    Data(Tick),
    Lost(TickRange),
}

/// Why a chunk stopped.
enum Stop {
    /// The whole chunk went out.
    Chunk,
    /// The outbox is full: wait for room, then go on.
    Full,
    /// The order cannot go on (cancelled, the connection closed, a record missing or damaged).
    End,
}

fn run(cursor: Cursor) {
    let order = &cursor.order;
    let mut items = order.runs.iter().flat_map(|run| match run.lost {
        true => vec![Item::Lost(run.range)],
        false => (run.range.from.0..=run.range.to.0).map(|t| Item::Data(Tick(t))).collect(),
    });
    let mut report = Served {
        pubend: order.pubend,
        subend: order.subend,
        order: order.id,
        through: order.from.prev(),
        done: false,
        delivered: None,
        count: 0,
    };
    let mut next = items.next();
    let mut read_from = order.from;
    let (started, mut walked) = (Instant::now(), 0u64);
    while next.is_some() {
        let (records, chunk_end) = match read(&cursor, read_from) {
            Ok(chunk) => chunk,
            Err(()) => break,
        };
        let records_read = records.len() as u64;
        let mut records = records.into_iter().peekable();
        loop {
            match push(&cursor, &mut next, &mut items, (&mut records, chunk_end), &mut report) {
                Stop::Chunk => break,
                Stop::Full if wait_for_room(&cursor.outbox) => {}
                Stop::Full | Stop::End => return finish(&cursor, report),
            }
        }
        read_from = chunk_end.next();
        walked += records_read;
        let _ = cursor.tx.send(Command::Served(progress(&mut report)));
        pace(cursor.rate, started, walked);
    }
    if next.is_none() {
        report.through = order.to;
    }
    finish(&cursor, report)
}

/// Reads up to [`CHUNK`] records from `from` on; returns them and the tick the chunk covers to
/// (the order's end when the log holds no more in it). Damaged records are left out: the tick
/// they stand for is then missing, and the order stops there.
fn read(cursor: &Cursor, from: Tick) -> Result<(Vec<(Tick, bytes::Bytes)>, Tick), ()> {
    let order = &cursor.order;
    let wanted = tidings_store::TickRange { first: tidings_store::Tick(from.0), last: tidings_store::Tick(order.to.0) };
    let items = cursor.store.read(tidings_store::PubendId(order.pubend.0), wanted, CHUNK).map_err(|error| {
        warn!(%error, pubend = order.pubend.0, "a catch-up's read of the pubend log failed; the core replays the rest");
    })?;
    let full = items.len() >= CHUNK;
    let mut records = Vec::with_capacity(items.len());
    let mut end = order.to;
    for item in items {
        match item {
            ReadItem::Data(record) => {
                end = Tick(record.tick.0);
                records.push((end, record.payload));
            }
            ReadItem::Lost(range) => end = Tick(range.last.0),
        }
    }
    Ok((records, if full { end } else { order.to }))
}

/// Pushes the order's items up to `chunk_end` (records in hand), under the gate.
fn push(
    cursor: &Cursor,
    next: &mut Option<Item>,
    items: &mut impl Iterator<Item = Item>,
    (records, chunk_end): (&mut std::iter::Peekable<std::vec::IntoIter<(Tick, bytes::Bytes)>>, Tick),
    report: &mut Served,
) -> Stop {
    let gate = cursor.gate.lock();
    if !*gate {
        return Stop::End;
    }
    let pubend = tidings_wire::PubendId(cursor.order.pubend.0);
    while let Some(item) = next.as_ref() {
        match *item {
            Item::Lost(range) if range.from <= chunk_end => {
                let (from, to) = (tidings_wire::Tick(range.from.0), tidings_wire::Tick(range.to.0));
                cursor.outbox.push_frame(&Frame::Gap(Gap { id: cursor.id, pubend, from, to }));
                report.through = range.to;
            }
            Item::Data(tick) if tick <= chunk_end => {
                while records.next_if(|(t, _)| *t < tick).is_some() {}
                let Some((_, payload)) = records.next_if(|(t, _)| *t == tick) else { return Stop::End };
                let message = match Message::decode(payload) {
                    Ok(message) => message,
                    Err(error) => {
                        warn!(%error, tick = tick.0, "a logged message does not decode; not delivered");
                        report.through = tick;
                        *next = items.next();
                        continue;
                    }
                };
                if cursor.filter.matches(&message) {
                    match cursor.outbox.push_guaranteed(cursor.id, pubend, tidings_wire::Tick(tick.0), &message) {
                        GuaranteedPush::Closed => return Stop::End,
                        GuaranteedPush::Queued => {}
                        GuaranteedPush::QueuedFull => {
                            (report.through, report.delivered, report.count) = (tick, Some(tick), report.count + 1);
                            *next = items.next();
                            return Stop::Full;
                        }
                    }
                    (report.delivered, report.count) = (Some(tick), report.count + 1);
                }
                report.through = tick;
            }
            _ => return Stop::Chunk,
        }
        *next = items.next();
    }
    Stop::Chunk
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
