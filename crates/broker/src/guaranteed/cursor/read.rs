//! The cursor's reading half: reads an order's records from the log a chunk at a time,
//! decodes and filters them, and makes each chunk ready to queue ([`Chunks`]). Nothing here
//! touches the outbox: what reaches the subscriber is decided under the gate by the pusher.
//!
//! The chunks are read on the pusher's thread, one after the other. A reader thread of its own
//! a chunk or two ahead (a bounded channel) was tried once the pushes were batched: on the
//! 2-core machine, busy with other work, it caught up no faster (1.07 M against 1.31 M msg/s,
//! medians of 3, 2026-12-01), the payloads then being allocated on one thread and freed on
//! others (mimalloc's page search was a third of the reader's time, `perf`).

use bytes::Bytes;
use std::sync::Arc;
use tidings_delivery::{ServeOrder, ServeRun, Tick, TickRange};
use tidings_store::{ReadItem, Store};
use tidings_wire::{Frame, Gap, Message, SubId};
use tracing::warn;

use super::Filter;
use crate::outbox::CatchUpItem;

/// Records read from the log per chunk (the pusher holds the gate while it queues one).
const CHUNK: usize = 256;

/// What the reading half needs of an order.
pub(super) struct Source {
    pub(super) order: ServeOrder,
    pub(super) filter: Filter,
    pub(super) store: Arc<Store>,
    /// The subscription's id (in the GAP frames).
    pub(super) id: SubId,
}

/// One chunk made ready to queue, and what the report says once it is queued.
pub(super) struct Ready {
    pub(super) items: Vec<CatchUpItem>,
    /// The order is served through this tick once the chunk is queued.
    pub(super) through: Tick,
    /// The last tick handed out in the chunk (or before it), and how many the chunk hands out.
    pub(super) delivered: Option<Tick>,
    pub(super) count: u64,
    /// Records read for it (what the rate bound counts).
    pub(super) walked: u64,
    /// The order's last chunk: once it is queued the order is served to its end.
    pub(super) last: bool,
    /// A record the order needs is missing: the order stops after this chunk.
    pub(super) short: bool,
}

/// An order's chunks, in tick order. They end after the last chunk, after a chunk that stopped
/// short, or early when a read failed (the order then ends where its report stands).
pub(super) struct Chunks {
    source: Source,
    items: std::iter::Peekable<Box<dyn Iterator<Item = Item> + Send>>,
    /// Where the chunk before left the report.
    through: Tick,
    delivered: Option<Tick>,
    read_from: Tick,
    ended: bool,
}

impl Chunks {
    /// The chunks of `source`'s order.
    pub(super) fn new(source: Source) -> Chunks {
        let order = &source.order;
        let (through, read_from) = (order.from.prev(), order.from);
        let items = items(order.runs.clone()).peekable();
        Chunks { source, items, through, delivered: None, read_from, ended: false }
    }
}

impl Iterator for Chunks {
    type Item = Ready;

    fn next(&mut self) -> Option<Ready> {
        if self.ended {
            return None;
        }
        let Ok((records, chunk_end)) = read(&self.source, self.read_from) else {
            self.ended = true;
            return None;
        };
        let mut ready = prepare(&self.source, &mut self.items, records, chunk_end, (self.through, self.delivered));
        (self.through, self.delivered) = (ready.through, ready.delivered);
        ready.last = self.items.peek().is_none();
        self.ended = ready.last || ready.short;
        self.read_from = chunk_end.next();
        Some(ready)
    }
}

/// The order's D ticks and L runs, in tick order.
#[derive(Clone, Copy)]
enum Item {
    Data(Tick),
    Lost(TickRange),
}

impl Item {
    fn first(&self) -> Tick {
        match *self {
            Item::Data(tick) => tick,
            Item::Lost(range) => range.from,
        }
    }
}

/// The order's items, one by one (a D run's ticks are not listed up front: an order holds up
/// to 16,384).
fn items(runs: Vec<ServeRun>) -> Box<dyn Iterator<Item = Item> + Send> {
    Box::new(runs.into_iter().flat_map(|run| {
        let (range, lost) = (run.range, run.lost);
        let last = if lost { range.from.0 } else { range.to.0 };
        (range.from.0..=last).map(move |t| if lost { Item::Lost(range) } else { Item::Data(Tick(t)) })
    }))
}

/// Reads up to [`CHUNK`] records from `from` on; returns them and the tick the chunk covers to
/// (the order's end when the log holds no more in it). Damaged records are left out: the tick
/// they stand for is then missing, and the order stops there.
fn read(source: &Source, from: Tick) -> Result<(Vec<(Tick, Bytes)>, Tick), ()> {
    let order = &source.order;
    let wanted = tidings_store::TickRange { first: tidings_store::Tick(from.0), last: tidings_store::Tick(order.to.0) };
    let items = source.store.read(tidings_store::PubendId(order.pubend.0), wanted, CHUNK).map_err(|error| {
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

/// Decodes and filters the order's items up to `chunk_end` (records in hand) into a chunk: a
/// delivery for each D tick that passes the filter, a GAP for each L run in its place. A
/// record that does not decode is left out (and logged); a missing one ends the chunk short.
/// `(through, delivered)`: where the chunk before left the report.
fn prepare(
    source: &Source,
    items: &mut std::iter::Peekable<impl Iterator<Item = Item>>,
    records: Vec<(Tick, Bytes)>,
    chunk_end: Tick,
    (through, delivered): (Tick, Option<Tick>),
) -> Ready {
    let pubend = tidings_wire::PubendId(source.order.pubend.0);
    let walked = records.len() as u64;
    let items_out = Vec::with_capacity(records.len());
    let mut ready = Ready { items: items_out, through, delivered, count: 0, walked, last: false, short: false };
    let mut records = records.into_iter().peekable();
    while let Some(item) = items.peek().copied().filter(|item| item.first() <= chunk_end) {
        match item {
            Item::Lost(range) => {
                let (from, to) = (tidings_wire::Tick(range.from.0), tidings_wire::Tick(range.to.0));
                if let Ok(bytes) = Frame::Gap(Gap { id: source.id, pubend, from, to }).to_bytes() {
                    ready.items.push(CatchUpItem::Frame(bytes));
                }
                ready.through = range.to;
            }
            Item::Data(tick) => {
                while records.next_if(|(t, _)| *t < tick).is_some() {}
                let Some((_, payload)) = records.next_if(|(t, _)| *t == tick) else {
                    ready.short = true;
                    return ready;
                };
                match Message::decode(payload) {
                    Ok(message) if source.filter.matches(&message) => {
                        ready.items.push(CatchUpItem::Deliver(tidings_wire::Tick(tick.0), message));
                        (ready.delivered, ready.count) = (Some(tick), ready.count + 1);
                    }
                    Ok(_) => {}
                    Err(error) => warn!(%error, tick = tick.0, "a logged message does not decode; not delivered"),
                }
                ready.through = tick;
            }
        }
        items.next();
    }
    ready
}
