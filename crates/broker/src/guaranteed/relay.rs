//! Durable subscriptions stored in their own cell (`[durable] store = "cell"`, the seed's
//! double replication, issue 40 part 4; `docs/replication.md`, "Durable subscriptions stored
//! in the cell").
//!
//! Each such durable subscription `d` is two durable subends here:
//! - its *relay* (durable name `$relay:d`, the client's filter): every delivery, from any
//!   origin pubend, is republished into the pubend `$relay.d` of this broker, replicated in
//!   the cell like any pubend, under a publisher id derived from the relay pubend and the
//!   origin pubend and the origin tick as sequence number. The relay acknowledges the origin
//!   (its checkpoint) only once the relay pubend acknowledged the republish, which for a
//!   replicated pubend means its group's quorum synced it. A gap the origin reports is
//!   republished as a gap marker, so it reaches the subscriber as a gap, never as silence.
//! - its *reader* (the name `d` the client holds): attached only to `$relay.d`, where it
//!   takes every message (the relay filtered them already); the topic's reserved prefix
//!   (`$relay.d.`, under [`RELAY_TOPIC`]) is stripped on delivery and a gap marker goes out as
//!   a GAP frame. Its routing filter is `$relay.d.>`, so the relay pubend's records reach it
//!   wherever the pubend is served.
//!
//! So a catch-up reads from this cell's log, even while the publishers' cell is unreachable.
//! The relay publishes like a client, through an internal connection ([`loopback`]) whose
//! answers come back as [`Command::RelayAnswer`]: the publish path (retry table, refusals,
//! the replica gate) is the clients' own. Clients cannot publish a topic under
//! [`RELAY_TOPIC`], a property under [`GAP`]'s prefix, or to a pubend named `$relay.*`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tidings_delivery::{PubendId, SubendId, Tick, TickRange};
use tidings_wire::{Frame, GuaranteedPublish, Message, Notice, Property, PublisherId, ReasonCode, Value};
use tokio::io::AsyncReadExt;
use tracing::{info, warn};

use super::driver::Driver;
use super::relay_book::RelayBook;
use super::Command;
use crate::outbox::Outbox;

/// The first level of every relayed topic (`$relay.<durable name>.<topic>`); clients may not
/// publish under it.
pub const RELAY_TOPIC: &str = "$relay.";
/// The prefix of a relay pubend's name (`$relay.<durable name>`, also the prefix of its
/// topics); clients may not publish to it.
pub const RELAY_PUBEND: &str = "$relay.";
/// The prefix of a relay's own durable name (`$relay:<durable name>`: no client name has `$`).
const RELAY_NAME: &str = "$relay:";
/// The property of a gap marker: the origin's lost ticks, `"<from>-<to>"`. Clients may not
/// set a property starting with `$relay`.
pub const GAP: &str = "$relay-gap";
/// Republishes one relay has in flight before the origin's stream to it pauses (as a full
/// outbox pauses a client's); it resumes at half. Bounds what a relay holds during a catch-up.
const WINDOW: usize = 256;
/// How long after a refusal a relay sends its unacknowledged republishes again.
const RESEND_AFTER: std::time::Duration = std::time::Duration::from_millis(200);
/// How long a relay with republishes in flight waits for any answer before it sends them
/// again (its watch, [`Driver::relay_watched`]). Answers come in milliseconds, and a publish
/// held for a leader is refused after 5 s (`replicas::gate`), so a longer silence means a
/// republish nobody will answer.
const UNANSWERED_AFTER: std::time::Duration = std::time::Duration::from_secs(6);

/// Whether a client's publish names something reserved for relays: refused if so.
pub fn reserved_publish(publish: &GuaranteedPublish) -> Option<Notice> {
    let why = if publish.pubend.starts_with(RELAY_PUBEND) {
        format!("the pubend name {:?} is reserved for durable subscriptions stored in a cell", publish.pubend)
    } else if publish.message.topic().starts_with(RELAY_TOPIC) {
        format!("topics under {RELAY_TOPIC:?} are reserved for durable subscriptions stored in a cell")
    } else {
        return None;
    };
    Some(Notice::new(ReasonCode::InvalidTopic, why))
}

/// One relay: the durable subscription it serves and what it republished.
struct Relay {
    pubend_name: String,
    pubend: PubendId,
    book: RelayBook,
    /// The internal connection its republishes are answered on.
    outbox: Arc<Outbox>,
    /// Publisher id to origin pubend.
    origins: BTreeMap<u64, PubendId>,
    /// Whether a watch is set ([`Driver::relay_watched`]).
    watched: bool,
}

/// Every relay and reader of this broker.
#[derive(Default)]
pub(super) struct Relays {
    /// `[durable] store = "cell"`: new durable subscriptions get a relay.
    pub(super) enabled: bool,
    relays: BTreeMap<SubendId, Relay>,
    /// Reader subend to its relay pubend and that pubend's name.
    readers: BTreeMap<SubendId, (PubendId, String)>,
    /// Relay pubends.
    pubends: BTreeSet<PubendId>,
    /// Republishes decided during the engine's turn, sent after it: (relay, origin, seq, message).
    pending: Vec<(SubendId, PubendId, u64, Message)>,
    /// Resends already scheduled.
    resends: BTreeSet<(SubendId, PubendId)>,
}

impl Relays {
    /// Whether `subend` is a relay.
    pub(super) fn is_relay(&self, subend: SubendId) -> bool {
        self.relays.contains_key(&subend)
    }

    /// The relay pubend a reader reads, if `subend` is one.
    pub(super) fn reader(&self, subend: SubendId) -> Option<PubendId> {
        self.readers.get(&subend).map(|(pubend, _)| *pubend)
    }

    /// Unwraps a message of a reader's relay pubend (`None`: `subend` is not a reader).
    pub(super) fn unwrap_for(&self, subend: SubendId, message: &Message) -> Option<Option<Reading>> {
        let (_, name) = self.readers.get(&subend)?;
        Some(unwrap(name, message))
    }

    /// Whether `subend` attaches to `pubend`'s stream: a reader only to its relay pubend,
    /// other subends to every pubend but relay pubends.
    pub(super) fn attaches(&self, subend: SubendId, pubend: PubendId) -> bool {
        match self.readers.get(&subend) {
            Some(&(relay, _)) => relay == pubend,
            None => !self.pubends.contains(&pubend),
        }
    }
}

/// The relay's durable name for durable subscription `name`.
fn relay_name(name: &str) -> String {
    format!("{RELAY_NAME}{name}")
}

/// What a reader's client gets for a message of its relay pubend.
pub(super) enum Reading {
    /// The origin's message, its topic as published.
    Message(Message),
    /// A gap marker: the origin lost ticks here.
    Gap,
}

/// The topic a relay pubend named `pubend_name` carries `topic` under.
fn relayed_topic(pubend_name: &str, topic: &str) -> String {
    format!("{pubend_name}.{topic}")
}

/// Unwraps a message of relay pubend `pubend_name` for its reader.
fn unwrap(pubend_name: &str, message: &Message) -> Option<Reading> {
    if message.property(GAP).is_some() {
        return Some(Reading::Gap);
    }
    let topic = message.topic().strip_prefix(pubend_name)?.strip_prefix('.')?;
    Message::new(topic, &message.properties(), message.payload(), message.sent_us()).ok().map(Reading::Message)
}

/// The routing filter of a reader of relay pubend `pubend_name`: its relayed topics.
fn reader_filter(pubend_name: &str) -> Option<crate::cluster::RouteFilter> {
    let pattern = tidings_matching::Pattern::parse(&format!("{pubend_name}.>")).ok()?;
    Some(crate::cluster::RouteFilter::new(pattern, None))
}

impl Driver {
    /// The publisher id a relay republishes `origin`'s ticks under: the same after a restart.
    fn relay_publisher(relay_pubend: &str, origin: PubendId) -> u64 {
        tidings_wire::PubendId::derive(relay_pubend, &origin.0.to_string()).0
    }

    /// Registers relay `relay` of durable subscription `name` (created or restored).
    fn add_relay(&mut self, relay: SubendId, name: &str) {
        let pubend_name = format!("{RELAY_PUBEND}{name}");
        let pubend = self.pubend_id(&pubend_name);
        let outbox = loopback(relay, self.tx.clone());
        self.relays.pubends.insert(pubend);
        let entry =
            Relay { pubend_name, pubend, book: RelayBook::default(), outbox, origins: BTreeMap::new(), watched: false };
        self.relays.relays.insert(relay, entry);
    }

    /// Registers `reader` as the reader of durable subscription `name`'s relay pubend.
    /// Its routing filter goes into the summaries: when a mate serves the relay pubend (it
    /// took it over), its records still reach the reader here, never judged F for it.
    fn add_reader(&mut self, reader: SubendId, name: &str) {
        let pubend_name = format!("{RELAY_PUBEND}{name}");
        let pubend = self.pubend_id(&pubend_name);
        if let (Some(net), Some(filter)) = (&self.net, reader_filter(&pubend_name)) {
            net.cluster.subscribe(filter);
        }
        self.relays.pubends.insert(pubend);
        self.relays.readers.insert(reader, (pubend, pubend_name));
    }

    /// A reader goes: its routing filter too.
    fn remove_reader(&mut self, reader: SubendId) {
        let Some((_, pubend_name)) = self.relays.readers.remove(&reader) else { return };
        if let (Some(net), Some(filter)) = (&self.net, reader_filter(&pubend_name)) {
            net.cluster.unsubscribe(filter);
        }
    }

    /// Adds a subend's filter to the matcher: a reader takes every message of its relay pubend.
    pub(super) fn insert_filter(
        &mut self,
        subend: SubendId,
        pattern: tidings_matching::Pattern,
        selector: Option<tidings_matching::Selector>,
    ) {
        match self.relays.reader(subend) {
            Some(pubend) => self.engine.matcher_mut().insert_reader(subend, pubend),
            None => {
                let filter = super::cursor::Filter { pattern: pattern.clone(), selector: selector.clone() };
                self.cursors.insert_filter(subend, filter);
                self.engine.matcher_mut().insert(subend, pattern, selector);
            }
        }
    }

    /// At restart, before the stored durable subscriptions are attached: `names` (name,
    /// subend) are all of them; relays are registered, and the subscriptions that have one
    /// become its readers.
    pub(super) fn restore_relays(&mut self, names: &[(String, SubendId)]) {
        let relayed: BTreeSet<&str> = names.iter().filter_map(|(name, _)| name.strip_prefix(RELAY_NAME)).collect();
        for (name, subend) in names {
            match name.strip_prefix(RELAY_NAME) {
                Some(served) => self.add_relay(*subend, served),
                None if relayed.contains(name.as_str()) => self.add_reader(*subend, name),
                None => {}
            }
        }
    }

    /// A relay restored from the store runs at once: held, never blocked.
    pub(super) fn relay_entry_restored(&mut self, subend: SubendId) {
        if self.relays.is_relay(subend) {
            self.durables.checkpoints.hold(subend);
            if let Some(entry) = self.subends.get_mut(&subend) {
                entry.blocked = false;
            }
        }
    }

    /// Creates durable subscription `spec` with its relay: the reader first, so the relay's
    /// barrier (asked after the reader's) confirms it only once the reader is confirmed too,
    /// and the reader then starts on the relay pubend before anything is republished there.
    pub(super) fn create_relayed(
        &mut self,
        reader: SubendId,
        id: tidings_wire::SubId,
        spec: super::durable::DurableSpec,
        filter: (tidings_matching::Pattern, Option<tidings_matching::Selector>),
        outbox: Arc<Outbox>,
    ) -> Result<(), Notice> {
        if !self.replicas.as_ref().is_some_and(|r| r.has_mates()) {
            self.durables.claims.lock().remove(&spec.name);
            let why = "durable.store = \"cell\": no cell mate of this broker is linked to hold a replica of the \
                       subscription's copy; subscribe again once its cell is up";
            return Err(Notice::new(ReasonCode::StorageUnavailable, why));
        }
        let name = spec.name.clone();
        self.add_reader(reader, &name);
        if let Err(notice) = self.create_durable_here(reader, id, spec.clone(), filter.clone(), Some(outbox)) {
            self.remove_reader(reader);
            return Err(notice);
        }
        let relay = SubendId(self.next_subend.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        self.add_relay(relay, &name);
        let relay_spec = super::durable::DurableSpec { name: relay_name(&name), ..spec };
        if let Err(notice) = self.create_durable_here(relay, tidings_wire::SubId(0), relay_spec, filter, None) {
            if let Some(gone) = self.relays.relays.remove(&relay) {
                gone.outbox.finish();
            }
            self.delete_durable(reader);
            return Err(notice);
        }
        info!(name, "durable subscription stored in the cell (relay started)");
        Ok(())
    }

    /// Durable subscription `name` was deleted: its relay goes too (its reader, if it is one).
    pub(super) fn relay_deleted(&mut self, subend: SubendId, name: &str) {
        self.remove_reader(subend);
        if let Some(relay) = self.relays.relays.remove(&subend) {
            relay.outbox.finish();
            return;
        }
        let relay = self.durables.by_name.get(&relay_name(name)).map(|d| d.subend);
        if let Some(relay) = relay {
            self.delete_durable(relay);
        }
    }

    /// A delivery to relay `relay`: republished into its pubend after this turn.
    pub(super) fn relay_deliver(&mut self, relay: SubendId, origin: PubendId, tick: Tick, payload: Bytes) {
        self.durable_delivered(relay, origin, tick);
        let Some(pubend_name) = self.relays.relays.get(&relay).map(|r| r.pubend_name.clone()) else { return };
        let relayed = Message::decode(payload).ok().and_then(|message| {
            let topic = relayed_topic(&pubend_name, message.topic());
            Message::new(&topic, &message.properties(), message.payload(), message.sent_us()).ok()
        });
        let message = match relayed {
            Some(message) => message,
            None => {
                // Cannot be republished as it is (its topic too long with the prefix): its reader
                // is told a gap, not silence.
                warn!(pubend = origin.0, tick = tick.0, "a message cannot be relayed; its reader gets a gap");
                return self.relay_gap(relay, origin, TickRange { from: tick, to: tick });
            }
        };
        self.relay_send(relay, origin, tick.0, message);
    }

    /// The origin reported ticks `range` lost to relay `relay`: a gap marker is republished at
    /// its last tick.
    pub(super) fn relay_gap(&mut self, relay: SubendId, origin: PubendId, range: TickRange) {
        // Held like a delivery: the checkpoint does not pass it before its marker is stored.
        self.durable_delivered(relay, origin, range.to);
        info!(
            relay = relay.0,
            pubend = origin.0,
            from = range.from.0,
            to = range.to.0,
            "ticks lost upstream relayed as a gap"
        );
        let Some(pubend_name) = self.relays.relays.get(&relay).map(|r| r.pubend_name.clone()) else { return };
        let lost = Property { key: GAP.into(), value: Value::Str(format!("{}-{}", range.from.0, range.to.0)) };
        match Message::new(&relayed_topic(&pubend_name, "gap"), &[lost], Bytes::new(), 0) {
            Ok(marker) => self.relay_send(relay, origin, range.to.0, marker),
            Err(error) => warn!(%error, "a gap marker does not encode"),
        }
    }

    fn relay_send(&mut self, relay: SubendId, origin: PubendId, seq: u64, message: Message) {
        let Some(entry) = self.relays.relays.get_mut(&relay) else { return };
        // While a resend of this origin is due (a republish was refused), a new one waits in the
        // book and goes with the resend, after every lower one: sent now, it could be logged
        // ahead of them, and the pubend would then answer them as retries, never logging them.
        // (A client does the same: it drops the connection at a refusal and sends its window
        // again in order.)
        let resend_due = self.relays.resends.contains(&(relay, origin));
        if entry.book.send(origin, seq, message.as_bytes().clone()) && !resend_due {
            self.relays.pending.push((relay, origin, seq, message));
        }
        if entry.book.in_flight() >= WINDOW {
            if let Some(subend) = self.subends.get_mut(&relay).filter(|e| !e.blocked) {
                subend.blocked = true;
                self.inputs.push_back(tidings_delivery::Input::OutboxFull { subend: relay });
            }
        }
    }

    /// Sends the republishes decided during the engine's turn (called after it).
    pub(super) fn relay_pending(&mut self) {
        for (relay, origin, seq, message) in std::mem::take(&mut self.relays.pending) {
            self.relay_publish(relay, origin, seq, message);
        }
    }

    fn relay_publish(&mut self, relay: SubendId, origin: PubendId, seq: u64, message: Message) {
        let Some(entry) = self.relays.relays.get_mut(&relay) else { return };
        let publisher = Self::relay_publisher(&entry.pubend_name, origin);
        entry.origins.insert(publisher, origin);
        let publish = GuaranteedPublish {
            publisher: PublisherId(publisher),
            seq,
            pubend: entry.pubend_name.clone(),
            home: None,
            message,
        };
        let reply = Arc::clone(&entry.outbox);
        let watch = (!entry.watched).then(|| entry.book.answers());
        entry.watched = true;
        if let Some(answers) = watch {
            self.relay_watch(relay, answers);
        }
        self.admit(publish, reply);
    }

    fn relay_watch(&self, relay: SubendId, answers: u64) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(UNANSWERED_AFTER).await;
            let _ = tx.send(Command::RelayWatch { relay, answers });
        });
    }

    /// Relay `relay`'s watch, set when it had had `answers` answers: if none came since and
    /// republishes are in flight, they are sent again, in order, as after a refusal. Every
    /// publish the gate takes is answered (`tidings_node::gate`); the watch keeps a relay live
    /// should one not be, and says so, so the path can be traced (the nemesis's seed 625 on
    /// `gryphon-fig3-double`, docs/replication.md). A resend is safe: the pubend's retry
    /// table answers a republish it logged.
    pub(super) fn relay_watched(&mut self, relay: SubendId, answers: u64) {
        let Some(entry) = self.relays.relays.get_mut(&relay) else { return };
        entry.watched = false;
        let stalled = entry.book.stalled(answers);
        let (in_flight, now) = (entry.book.in_flight(), entry.book.answers());
        for origin in stalled {
            if self.relays.resends.contains(&(relay, origin)) {
                continue;
            }
            warn!(
                relay = relay.0,
                pubend = origin.0,
                in_flight,
                after_s = UNANSWERED_AFTER.as_secs(),
                "a relay's republishes went unanswered: sending them again"
            );
            self.metrics.relay_resends_unanswered.inc();
            self.relay_resend(relay, origin);
        }
        if let Some(entry) = self.relays.relays.get_mut(&relay).filter(|e| !e.watched && e.book.in_flight() > 0) {
            entry.watched = true;
            self.relay_watch(relay, now);
        }
    }

    /// An answer to one of relay `relay`'s republishes.
    pub(super) fn relay_answer(&mut self, relay: SubendId, frame: Frame) {
        let Some(entry) = self.relays.relays.get_mut(&relay) else { return };
        if matches!(frame, Frame::PublishAck(_) | Frame::PublishRefused(_)) {
            entry.book.answered();
        }
        match frame {
            Frame::PublishAck(ack) => {
                let Some(&origin) = entry.origins.get(&ack.publisher.0) else { return };
                if ack.pubend.0 != entry.pubend.0 {
                    warn!(relay = relay.0, pubend = ack.pubend.0, "a relay's republish acknowledged by another pubend");
                }
                let acked = entry.book.acked(origin, ack.seq);
                let room = entry.book.in_flight() <= WINDOW / 2;
                if let Some(tick) = acked {
                    self.durable_ack(relay, origin, tick);
                }
                if let Some(subend) = self.subends.get_mut(&relay).filter(|e| room && e.blocked) {
                    subend.blocked = false;
                    self.feed(tidings_delivery::Input::OutboxReady { subend: relay });
                }
            }
            Frame::PublishRefused(refused) => {
                let Some(&origin) = entry.origins.get(&refused.publisher.0) else { return };
                let pubend = entry.pubend;
                tracing::debug!(relay = relay.0, seq = refused.seq, reason = %refused.reason.text, "relay republish refused");
                if self.relays.resends.insert((relay, origin)) {
                    // Once per resend, not once per refused republish.
                    self.claim_relay_lead(pubend);
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(RESEND_AFTER).await;
                        let _ = tx.send(Command::RelayResend { relay, origin });
                    });
                }
            }
            _ => {}
        }
    }

    /// A mate serves relay pubend `pubend` (it took it over while this broker was away): only
    /// this broker's relay feeds it, so the lead is asked back (`Input::ClaimLead`); the mate
    /// hands it over once this replica holds the whole log, and closes the pubend as any
    /// deposed host does.
    fn claim_relay_lead(&mut self, pubend: PubendId) {
        if let Some(replicas) = self.replicas.as_mut().filter(|r| r.led_by_mate(pubend).is_some()) {
            info!(pubend = pubend.0, "a mate leads a relay pubend of this broker; asking for the lead back");
            let outcomes = replicas.handle(pubend, tidings_replica::Input::ClaimLead);
            self.replica_outcomes(outcomes);
        }
    }

    /// After a refusal: everything of `origin` relay `relay` has not had acknowledged, again,
    /// in order (the pubend takes a publisher's numbers only in order).
    pub(super) fn relay_resend(&mut self, relay: SubendId, origin: PubendId) {
        self.relays.resends.remove(&(relay, origin));
        let Some(entry) = self.relays.relays.get(&relay) else { return };
        // The book keeps each republish as sent, so these decode.
        let unacked: Vec<(u64, Message)> = entry
            .book
            .unacked(origin)
            .into_iter()
            .filter_map(|(seq, bytes)| Some((seq, Message::decode(bytes).ok()?)))
            .collect();
        for (seq, message) in unacked {
            self.relay_publish(relay, origin, seq, message);
        }
    }
}

/// An internal connection for relay `relay`'s republishes: what the driver answers on it
/// (PUBLISH_ACK, PUBLISH_REFUSED) is written by the clients' own writer into an in-memory
/// pipe, read back, and handed to the driver as [`Command::RelayAnswer`].
fn loopback(relay: SubendId, tx: tokio::sync::mpsc::UnboundedSender<Command>) -> Arc<Outbox> {
    let metrics = crate::metrics::Metrics::new(&mut prometheus_client::registry::Registry::default());
    let outbox = Outbox::new(Default::default(), metrics, &crate::budget::QueueBudget::new(0));
    let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(crate::outbox::write_stream(ours, Arc::clone(&outbox)));
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            loop {
                match Frame::decode(&mut buf, usize::MAX) {
                    Ok(Some(frame)) => {
                        if tx.send(Command::RelayAnswer { relay, frame }).is_err() {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(error) => {
                        warn!(%error, "a relay's answer does not decode");
                        return;
                    }
                }
            }
            match theirs.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    outbox
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(pubend: &str, topic: &str) -> GuaranteedPublish {
        let message = Message::new(topic, &[], Bytes::from_static(b"x"), 0).unwrap();
        GuaranteedPublish { publisher: PublisherId(1), seq: 1, pubend: pubend.into(), home: None, message }
    }

    #[test]
    fn clients_cannot_publish_to_a_relay_pubend_nor_under_the_relay_topic() {
        assert!(reserved_publish(&publish("$relay.d", "k.a")).is_some());
        assert!(reserved_publish(&publish("", "$relay.k.a")).is_some());
        assert!(reserved_publish(&publish("orders", "k.a")).is_none());
    }

    #[test]
    fn a_relayed_message_unwraps_to_its_topic_and_a_marker_to_a_gap() {
        let props = [Property::new("n", 3i64)];
        let relayed = Message::new("$relay.d.k.a", &props, Bytes::from_static(b"p"), 9).unwrap();
        let Some(Reading::Message(m)) = unwrap("$relay.d", &relayed) else { panic!("not a message") };
        assert_eq!((m.topic(), m.payload(), m.sent_us()), ("k.a", Bytes::from_static(b"p"), 9));
        assert_eq!(m.properties(), props.to_vec());
        let lost = Property { key: GAP.into(), value: Value::Str("4-5".into()) };
        let marker = Message::new(&relayed_topic("$relay.d", "gap"), &[lost], Bytes::new(), 0).unwrap();
        assert!(matches!(unwrap("$relay.d", &marker), Some(Reading::Gap)));
        for foreign in ["k.a", "$relay.dd.k.a"] {
            let foreign = Message::new(foreign, &[], Bytes::new(), 0).unwrap();
            assert!(unwrap("$relay.d", &foreign).is_none(), "not this relay's topic: {}", foreign.topic());
        }
        assert_eq!(reader_filter("$relay.d").map(|f| f.text().pattern.clone()), Some("$relay.d.>".to_string()));
    }
}
