//! Ground truth of a guaranteed-delivery run, shared by every simulated broker's layer and the
//! driver: what was made durable at each pubend (the only source of Expected), the
//! subscribers with their start ticks and what they received, the publishers, and the
//! invariant checks I3-I5 that are judged as actions happen.

use std::collections::{BTreeMap, BTreeSet};

use tidings_delivery::{Message, PubendId, SubendId, Tick, TickRange};
use tidings_route::matching::{Probe, RouteFilter};
use tidings_route::{BrokerName, CellName, Filter};

/// One guaranteed subscriber.
#[derive(Clone, Debug)]
pub struct Subscriber {
    /// Its broker (node index).
    pub node: usize,
    /// Its filter.
    pub filter: RouteFilter,
    /// Gone (unsubscribed, or its broker crashed: non-durable subscribers end with it).
    pub gone: bool,
    /// σ per pubend, from the barrier confirmation (or the late start of a pubend it did not
    /// report).
    pub starts: BTreeMap<PubendId, Tick>,
    /// Per pubend, the highest tick assigned anywhere when the start was given: every tick
    /// above it is published after the subscription was confirmed, and owed if it matches,
    /// whatever the start (`judge_promised`).
    pub promised: BTreeMap<PubendId, Tick>,
    /// The pubends it started on late (its barrier did not report them): their start is a
    /// clock reading less a margin, so what was published between it and the confirmation
    /// may or may not come (routes toward this broker were not in place yet): any of them, in
    /// order and once, and everything published after the confirmation.
    pub late: BTreeSet<PubendId>,
    /// Ticks delivered per pubend, in order.
    pub delivered: BTreeMap<PubendId, Vec<Tick>>,
    /// The barrier request that confirms it.
    pub barrier: Option<u64>,
    /// A durable subscriber's client and checkpoints (`None`: non-durable).
    pub durable: Option<Durable>,
}

/// What a durable subscriber has beyond a plain one: its client (which outlives the
/// subscriber's broker, and may be away) and the checkpoint store of that broker (durable
/// across its crashes). `Subscriber::delivered` holds what the application accepted: a
/// redelivery of a tick at or below the last one it received is skipped, as a real client does.
#[derive(Clone, Debug, Default)]
pub struct Durable {
    /// The client is connected to its broker (its subend unblocked).
    pub connected: bool,
    /// Per pubend, the stored checkpoint: every tick up to it was acknowledged by the
    /// application and that acknowledgement is durable at the broker.
    pub checkpoint: BTreeMap<PubendId, Tick>,
    /// Redeliveries the client skipped (ticks at or below the last it received).
    pub skipped: u64,
}

/// One publish of a guaranteed publisher: its sequence number and message id.
#[derive(Clone, Copy, Debug)]
pub struct Publish {
    /// Sequence number (retries repeat it).
    pub seq: u64,
    /// The message (an index into [`World::probes`]).
    pub msg: u64,
    /// Acknowledged by the broker (durable).
    pub acked: bool,
}

/// The shared state of a run.
#[derive(Default)]
pub struct World {
    /// Every message's routing probe, by message id (the payload carries the id).
    pub probes: Vec<Probe>,
    /// The guaranteed pubends, by hosting node.
    pub pubends: BTreeMap<usize, PubendId>,
    /// Per pubend: every tick made durable, with its message (never removed: Expected).
    pub durable: BTreeMap<PubendId, BTreeMap<Tick, u64>>,
    /// Per pubend and message: the tick it was made durable at, to catch a retry logged twice.
    pub logged_at: BTreeMap<(PubendId, u64), Tick>,
    /// Per pubend: the highest tick ever assigned (durable or not).
    pub assigned: BTreeMap<PubendId, Tick>,
    /// Guaranteed subscribers.
    pub subs: BTreeMap<SubendId, Subscriber>,
    /// Per publishing node: its publishes in order.
    pub publishes: BTreeMap<usize, Vec<Publish>>,
    /// Cell index of each node (delivery's `CellId` across cells).
    pub cell_of: Vec<u32>,
    /// Open connections (lower, higher), as the driver last saw them.
    pub links: BTreeSet<(usize, usize)>,
    /// A wire whose delivery frames are all lost while set (a blackout of one link's data).
    pub blackout: Option<(usize, usize)>,
    /// Safety violations, first first.
    pub violations: Vec<String>,
    /// Starts per node (seeds each incarnation's store-delay randomness).
    pub starts: BTreeMap<usize, u64>,
    /// Broker names by node index.
    pub names: Vec<BrokerName>,
    /// Cell names by delivery cell index (the index of [`World::cell_of`]).
    pub cell_names: Vec<CellName>,
    /// Per node, the last barrier confirmation (number, start ticks) of its incarnation.
    pub confirmed: BTreeMap<usize, (u64, Vec<(PubendId, Tick)>)>,
    /// Figures for the report.
    pub stats: Stats,
}

/// Counts over a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Deliveries judged against Expected.
    pub deliveries: u64,
    /// Frames sent by the delivery engines.
    pub frames: u64,
    /// Releases judged (I4).
    pub releases: u64,
    /// Data sends judged against the pubend's log (I3).
    pub data_judged: u64,
    /// Final claims judged (I2).
    pub finals_judged: u64,
    /// Subscribers that gave up on a barrier that never listed every pubend.
    pub unconfirmed: u64,
    /// Redeliveries durable clients skipped (received before, not yet checkpointed).
    pub skipped: u64,
    /// Checkpoints the durable subscribers' brokers made durable.
    pub checkpoints: u64,
    /// Crashes of brokers hosting a durable subscriber (at any moment).
    pub shb_crashes: u64,
    /// Times a durable subscriber's client went away.
    pub clients_away: u64,
    /// Serve orders the modelled cursor served (`cursor`), and of those, ones that had live
    /// ticks delivered by the walk while they waited (the seam).
    pub orders_served: u64,
    /// See `orders_served`.
    pub orders_at_a_moved_seam: u64,
    /// Nack messages sent upstream, summed over the engines alive at the end.
    pub nacks_sent: u64,
    /// Ticks nacked upstream, summed over the engines alive at the end.
    pub nack_ticks_sent: u64,
    /// Ticks a downstream nack asked for that an upstream nack already covered.
    pub nack_ticks_absorbed: u64,
    /// Delivery frames relayed sideways through a cell mate (towards the mate holding the
    /// link, or from it back to the broker the frame is for).
    pub sideways: u64,
    /// Child-edge verdicts the routers gave the engines: D.
    pub edges_data: u64,
    /// Child-edge verdicts the routers gave the engines: F.
    pub edges_final: u64,
    /// Subscriptions started late on a pubend their barrier did not report (its home
    /// unreachable): the broker's `late_start`.
    pub late_starts: u64,
    /// Of those, the starts an empty data directory's floor (its start time) raised.
    pub empty_floors: u64,
    /// Child-edge verdicts the routers gave the engines: unsure (summary not vouched, no
    /// router, or a child the router does not see).
    pub edges_unsure: u64,
}

impl Stats {
    /// Adds another run's figures.
    pub fn add(&mut self, other: &Stats) {
        self.deliveries += other.deliveries;
        self.frames += other.frames;
        self.releases += other.releases;
        self.data_judged += other.data_judged;
        self.finals_judged += other.finals_judged;
        self.unconfirmed += other.unconfirmed;
        self.skipped += other.skipped;
        self.checkpoints += other.checkpoints;
        self.shb_crashes += other.shb_crashes;
        self.clients_away += other.clients_away;
        self.orders_served += other.orders_served;
        self.orders_at_a_moved_seam += other.orders_at_a_moved_seam;
        self.nack_ticks_sent += other.nack_ticks_sent;
        self.nacks_sent += other.nacks_sent;
        self.nack_ticks_absorbed += other.nack_ticks_absorbed;
        self.sideways += other.sideways;
        self.edges_data += other.edges_data;
        self.edges_final += other.edges_final;
        self.edges_unsure += other.edges_unsure;
        self.late_starts += other.late_starts;
        self.empty_floors += other.empty_floors;
    }
}

/// Decodes a payload into its message id.
pub fn message_of(payload: &[u8]) -> Option<u64> {
    payload.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
}

impl World {
    /// Whether a connection is open between two nodes.
    pub fn linked(&self, a: usize, b: usize) -> bool {
        self.links.contains(&(a.min(b), a.max(b)))
    }

    /// Whether a subscriber's filter passes a message.
    pub fn wants(&self, sub: &Subscriber, msg: u64) -> bool {
        self.probes.get(msg as usize).is_some_and(|probe| sub.filter.matches(probe))
    }

    pub(super) fn violation(&mut self, text: String) {
        self.violations.push(text);
    }

    /// `msg` is durable at `tick` of `pubend`: it joins the truth. A message durable at two
    /// ticks is a retry logged twice (T4), which subscribers would get twice.
    pub(super) fn made_durable(&mut self, pubend: PubendId, tick: Tick, msg: u64) {
        self.durable.entry(pubend).or_default().insert(tick, msg);
        let first = *self.logged_at.entry((pubend, msg)).or_insert(tick);
        if first != tick {
            self.violation(format!("msg {msg} is logged twice at {pubend:?}: {first:?} and {tick:?} (T4)"));
        }
    }

    /// The ticks `sub` is owed on `pubend` in `[from, to]`, in order.
    pub(super) fn owed(&self, sub: &Subscriber, pubend: PubendId, from: Tick, to: Tick) -> Vec<Tick> {
        let Some(first) = first_owed(sub, pubend) else { return Vec::new() };
        let from = from.max(first);
        if from > to {
            return Vec::new();
        }
        let Some(log) = self.durable.get(&pubend) else { return Vec::new() };
        log.range(from..=to).filter(|(_, &msg)| self.wants(sub, msg)).map(|(&t, _)| t).collect()
    }

    /// Whether `tick` of `pubend` may be `sub`'s next delivery after `last`: the next tick
    /// owed, or, on a pubend started late, any wanted tick from the start that was published
    /// before the confirmation, with nothing owed before it.
    pub(super) fn may_deliver(&self, sub: &Subscriber, pubend: PubendId, last: Option<Tick>, tick: Tick) -> bool {
        let owed = self.owed(sub, pubend, last.map_or(Tick(0), Tick::next), tick);
        if owed == [tick] {
            return true;
        }
        let wanted = self.durable.get(&pubend).and_then(|log| log.get(&tick)).is_some_and(|&msg| self.wants(sub, msg));
        let early = sub.late.contains(&pubend)
            && sub.starts.get(&pubend).is_some_and(|&s| s <= tick)
            && first_owed(sub, pubend).is_some_and(|first| tick < first);
        owed.is_empty() && early && wanted && last.is_none_or(|last| last < tick)
    }

    /// I5 at every delivery: the subscriber's sequence stays a prefix of Expected. (A durable
    /// subscriber's deliveries are judged when its client receives them: `judge_received`.)
    pub fn judge_delivery(&mut self, node: usize, subend: SubendId, pubend: PubendId, tick: Tick, msg: Option<u64>) {
        self.stats.deliveries += 1;
        let Some(sub) = self.subs.get(&subend) else {
            return self.violation(format!("delivery to unknown subend {subend:?} at node {node}"));
        };
        if sub.node != node || sub.gone {
            return self
                .violation(format!("{subend:?} (gone {}) got {pubend:?} tick {tick:?} at node {node}", sub.gone));
        }
        let truth = self.durable.get(&pubend).and_then(|log| log.get(&tick)).copied();
        if truth.is_none() || truth != msg {
            return self
                .violation(format!("{subend:?} got {pubend:?} tick {tick:?} msg {msg:?}; the log holds {truth:?}"));
        }
        let last = sub.delivered.get(&pubend).and_then(|d| d.last()).copied();
        if !self.may_deliver(sub, pubend, last, tick) {
            let owed = self.owed(sub, pubend, last.map_or(Tick(0), Tick::next), tick);
            let text = format!(
                "I5: {subend:?} at node {node} got {pubend:?} tick {tick:?} after {last:?} (start {:?}{}); Expected from there: {owed:?}",
                sub.starts.get(&pubend),
                late_note(sub, pubend)
            );
            return self.violation(text);
        }
        if let Some(sub) = self.subs.get_mut(&subend) {
            sub.delivered.entry(pubend).or_default().push(tick);
        }
    }

    /// I3 and the sender's half of I2 for one message a broker sends: Data carries exactly
    /// the pubend's durable record (facts originate at the PHB); final claims cover only ticks
    /// the sender holds as final (`is_final`).
    pub fn judge_send(&mut self, from: usize, message: &Message, is_final: impl Fn(Tick, Tick) -> bool) {
        if let Message::Data { pubend, tick, payload, .. } = message {
            self.stats.data_judged += 1;
            let truth = self.durable.get(pubend).and_then(|log| log.get(tick)).copied();
            if truth.is_none() || truth != message_of(payload) {
                self.violation(format!("I3: Data {pubend:?} tick {tick:?} sent, the log holds {truth:?}"));
            }
        }
        for (pubend, range) in finals_of(message) {
            self.stats.finals_judged += 1;
            if !is_final(range.from, range.to) {
                let (first, upto) = (range.from, range.to);
                let text = format!("I2: F claimed for {pubend:?} [{first:?}, {upto:?}] while Q at the sender");
                return self.violation(format!("{text} by node {from}: {message:?}"));
            }
        }
    }

    /// The receiver's half of I2, for a message node `to` takes (its tree tag is the one `to`
    /// routes the pubend by; an F judged under another tree is dropped there): its final
    /// claims cover no tick a live, started subscriber at `to` is owed.
    pub fn judge_receipt(&mut self, from: usize, to: usize, message: &Message) {
        for (pubend, range) in finals_of(message) {
            if let Some(text) = self.owed_at(to, pubend, range) {
                return self.violation(format!("{text} by node {from}: {message:?}"));
            }
        }
    }

    /// Why final `range` of `pubend` told to node `to` is a lie, if it is: a live, started
    /// subscriber there is owed a tick in it.
    fn owed_at(&self, to: usize, pubend: PubendId, range: TickRange) -> Option<String> {
        let (from, upto) = (range.from, range.to);
        let owed: Vec<(SubendId, Vec<Tick>)> = self
            .subs
            .iter()
            .filter(|(_, sub)| sub.node == to && !sub.gone)
            .map(|(&id, sub)| (id, self.owed(sub, pubend, from, upto)))
            .filter(|(_, owed)| !owed.is_empty())
            .collect();
        let (id, owed) = owed.first()?;
        Some(format!("I2: F sent for {pubend:?} [{from:?}, {upto:?}] to node {to}, which {id:?} is owed {owed:?}"))
    }

    /// I4 at every release of a pubend's log: no live started subscriber is still owed a
    /// tick at or below the release prefix (a durable one: above its stored checkpoint).
    pub fn judge_release(&mut self, pubend: PubendId, release: Tick) {
        self.stats.releases += 1;
        let mut failed = None;
        for (&id, sub) in self.subs.iter().filter(|(_, sub)| !sub.gone) {
            let last = sub.delivered.get(&pubend).and_then(|d| d.last()).copied();
            // A durable subscriber is owed again everything above its checkpoint (what it
            // received since comes again after a crash of its broker).
            let last = match &sub.durable {
                Some(durable) => durable.checkpoint.get(&pubend).copied(),
                None => last,
            };
            let from = last.map_or(Tick(0), Tick::next);
            let owed = self.owed(sub, pubend, from, release);
            if !owed.is_empty() {
                failed = Some(format!(
                    "I4: {pubend:?} released through {release:?} while {id:?} at node {} is still owed {owed:?} (start {:?}{}, delivered up to {last:?})",
                    sub.node,
                    sub.starts.get(&pubend),
                    late_note(sub, pubend)
                ));
                break;
            }
        }
        if let Some(text) = failed {
            self.violation(text);
        }
    }

    /// Whether every live started subscriber has everything it is owed of `pubend` so far.
    pub fn caught_up(&self, pubend: PubendId) -> bool {
        self.subs.values().filter(|sub| !sub.gone).all(|sub| {
            let last = sub.delivered.get(&pubend).and_then(|d| d.last()).copied();
            self.owed(sub, pubend, last.map_or(Tick(0), Tick::next), Tick(u64::MAX)).is_empty()
        })
    }

    /// The promise a start makes: every message published after the subscription was
    /// confirmed is owed. A start above a tick that was assigned after it (a late start on a
    /// clock ahead of the pubend's, or a floor above what was published since) would drop
    /// such a message from Expected, where [`World::judge_complete`] cannot see it.
    pub fn judge_promised(&self) -> Result<(), String> {
        for (&id, sub) in &self.subs {
            for (pubend, (&promised, &start)) in
                sub.promised.iter().filter_map(|(p, t)| Some((p, (t, sub.starts.get(p)?))))
            {
                let Some(log) = self.durable.get(pubend) else { continue };
                let Some(below) = TickRange::new(promised.next(), start.prev()) else { continue };
                let skipped: Vec<Tick> = log
                    .range(below.from..=below.to)
                    .filter(|(_, &msg)| self.wants(sub, msg))
                    .map(|(&t, _)| t)
                    .take(5)
                    .collect();
                if !skipped.is_empty() {
                    return Err(format!(
                        "{id:?} at node {} started {pubend:?} at {start:?}, above {skipped:?} published after its confirmation (the highest tick then was {promised:?})",
                        sub.node
                    ));
                }
            }
        }
        Ok(())
    }

    /// G2 at the end: every live started subscriber got exactly Expected.
    pub fn judge_complete(&self) -> Result<(), String> {
        self.judge_promised()?;
        for (&id, sub) in self.subs.iter().filter(|(_, sub)| !sub.gone) {
            for &pubend in self.pubends.values() {
                if !sub.starts.contains_key(&pubend) {
                    return Err(format!("{id:?} at node {} never got a start tick for {pubend:?}", sub.node));
                }
                let expected = self.owed(sub, pubend, Tick(0), Tick(u64::MAX));
                // What a late start delivered from before its confirmation was judged as it came.
                let first = first_owed(sub, pubend).unwrap_or(Tick(0));
                let got: Vec<Tick> =
                    sub.delivered.get(&pubend).into_iter().flatten().copied().filter(|&t| t >= first).collect();
                if got != expected {
                    let missing: Vec<&Tick> = expected.iter().filter(|t| !got.contains(t)).take(5).collect();
                    return Err(format!(
                        "G2: {id:?} at node {} got {} of {} owed on {pubend:?}; first missing {missing:?}",
                        sub.node,
                        got.len(),
                        expected.len()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// How a late start reads in a violation: the highest tick when it was given.
pub(super) fn late_note(sub: &Subscriber, pubend: PubendId) -> String {
    match sub.late.contains(&pubend) {
        true => format!(", late, highest tick then {:?}", sub.promised.get(&pubend)),
        false => String::new(),
    }
}

/// The first tick `sub` is owed on `pubend` (`None` before it has a start): its start; on a
/// pubend started late, the first tick published after its confirmation (what came before
/// may come in part: [`Subscriber::late`]).
fn first_owed(sub: &Subscriber, pubend: PubendId) -> Option<Tick> {
    let start = *sub.starts.get(&pubend)?;
    match sub.late.contains(&pubend) {
        true => Some(sub.promised.get(&pubend).map_or(start, |p| start.max(p.next()))),
        false => Some(start),
    }
}

/// The final claims of a downstream message: a Data's brackets, an F silence's ranges.
fn finals_of(message: &Message) -> Vec<(PubendId, TickRange)> {
    match message {
        Message::Data { pubend, tick, final_from, final_to, .. } => {
            [TickRange::new(*final_from, tick.prev()), TickRange::new(tick.next(), *final_to)]
                .into_iter()
                .flatten()
                .map(|range| (*pubend, range))
                .collect()
        }
        Message::Silence { pubend, ranges, kind: tidings_delivery::SilenceKind::Final, .. } => {
            ranges.iter().map(|range| (*pubend, *range)).collect()
        }
        _ => Vec::new(),
    }
}
