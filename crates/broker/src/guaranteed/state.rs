//! What `/state` shows of guaranteed delivery: every pubend with a stream here (hosted or
//! remote), its route and where its stream stands, and the number of guaranteed subscriptions.
//! The driver refreshes a snapshot at most every [`EVERY`], so the admin endpoint never waits
//! for (or locks) the engine.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use tidings_delivery::PubendId;

use super::driver::Driver;

/// How often the snapshot is refreshed at most.
pub(super) const EVERY: Duration = Duration::from_millis(250);

/// Most nack ranges shown per broker asking: enough to see where knowledge is missing, and a
/// bound on the snapshot however fragmented a stream's curiosity is.
pub(super) const NACK_RANGES: usize = 8;

/// Guaranteed delivery at this broker, for `/state`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GuaranteedState {
    /// Guaranteed subscriptions (subends).
    pub subends: usize,
    /// Every pubend with a stream here.
    pub pubends: Vec<PubendState>,
    /// Durable subscriptions, held by a client or not.
    pub durables: Vec<DurableState>,
    /// The replica groups this broker is in (docs/replication.md).
    pub replicas: Vec<ReplicaGroupState>,
    /// Per guaranteed queue group kept here, its members at other brokers (no connection here
    /// lists them, so `/subsz` shows them from this).
    pub remote_members: BTreeMap<String, Vec<RemoteMemberState>>,
}

/// A guaranteed queue group member at another broker, as its group's home knows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RemoteMemberState {
    /// Its broker.
    pub broker: String,
    /// Its number there (its subscription's subend at that broker).
    pub member: u64,
}

/// One pubend's replica group as this broker sees it.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaGroupState {
    /// The pubend, as 16 hex digits.
    pub pubend: String,
    /// The voters as applied here (broker names; a replica id when the broker is not known
    /// here): the creation voters, host first, until a membership change; then in name order.
    pub voters: Vec<String>,
    /// The learners as applied here: members added and still catching up (snapshot and log
    /// tail), in no quorum until promoted (docs/replication.md, "Membership").
    pub learners: Vec<String>,
    /// The leader this broker last heard from.
    pub leader: Option<String>,
    /// Its term here.
    pub term: u64,
    /// Its log's last index here.
    pub last_index: u64,
    /// Its commit index as known here.
    pub commit: u64,
    /// Applied here.
    pub applied: u64,
    /// True while this replica is behind its wipe fences (it may not vote yet).
    pub fenced: bool,
    /// On the leader: each follower and the entries it lacks.
    pub lag: Vec<(String, u64)>,
    /// The first index its log holds here (compacted into a snapshot below).
    pub first_index: u64,
    /// The bytes of the entries its log holds here.
    pub log_bytes: u64,
    /// Snapshots taken here (compactions).
    pub snapshots_taken: u64,
    /// Snapshots sent from here to followers behind the first index.
    pub snapshots_sent: u64,
    /// Snapshots received and installed here.
    pub snapshots_received: u64,
    /// Snapshots received and refused here (corrupt or foreign).
    pub snapshots_refused: u64,
    /// Compactions skipped here because the state was over the maximum snapshot.
    pub snapshots_too_large: u64,
    /// Chunks of snapshots sent from here (a snapshot over one REPLICA frame's chunk size).
    pub snapshot_chunks_sent: u64,
    /// Chunks of snapshots queued here for mates and not sent yet: a level, non-zero while a
    /// snapshot is in flight (a window unacknowledged at a time, `[storage] replica_snapshot_window`).
    pub snapshot_chunks_queued: u64,
    /// Chunks of snapshots received and kept for assembly here.
    pub snapshot_chunks_received: u64,
    /// Chunks refused here (out of order, stale, of another snapshot, over the maximum), each
    /// dropping the assembly under way.
    pub snapshot_chunks_refused: u64,
    /// How this replica started on this broker: `journal` (restarted from its journal: its
    /// last checkpoint, the snapshot that names, and the writes after it), `rebuilt` (its
    /// journal was damaged or could not restart it: rebuilt from its mates, never served), or
    /// `new` (an empty journal: a new group, an added replica or a wiped disk).
    pub started: &'static str,
}

/// One durable subscription, for `/state` and `tidings durable ls`.
#[derive(Clone, Debug, Serialize)]
pub struct DurableState {
    /// Its name.
    pub name: String,
    /// Its pattern.
    pub pattern: String,
    /// Its selector, if any.
    pub selector: Option<String>,
    /// Whether a client holds it now.
    pub held: bool,
    /// Per pubend: where it stands.
    pub pubends: Vec<DurableStream>,
}

/// Where a durable subscription stands in one pubend's stream.
#[derive(Clone, Debug, Serialize)]
pub struct DurableStream {
    /// The pubend, as 16 hex digits.
    pub pubend: String,
    /// The last tick its clients acknowledged.
    pub acked: u64,
    /// The checkpoint in the store: the log is held for everything after it.
    pub checkpoint: u64,
    /// How far the checkpoint is behind the stream's doubt horizon, in milliseconds of the
    /// pubend's clock (0 when caught up).
    pub behind_ms: u64,
    /// Whether this checkpoint is what holds the stream's acknowledgement (and so the pubend's
    /// log) where it is.
    pub pins: bool,
}

/// One pubend's stream at this broker.
#[derive(Clone, Debug, Serialize)]
pub struct PubendState {
    /// The pubend, as 16 hex digits.
    pub pubend: String,
    /// Whether this broker hosts it (its log is here).
    pub hosted: bool,
    /// Where acks and nacks go (broker names), empty at the home.
    pub upstream: Vec<String>,
    /// The brokers the stream is sent to (entries of child cells, and mates).
    pub children: Vec<String>,
    /// Every tick up to this one is final and delivered here.
    pub done: u64,
    /// The doubt horizon.
    pub horizon: u64,
    /// What this stream last acknowledged upstream (at the home: released).
    pub acked: u64,
    /// At the home: the log's release prefix.
    pub release: Option<u64>,
    /// At the home: the next tick a publish gets at the earliest.
    pub next_tick: Option<u64>,
    /// Payloads cached.
    pub cached: usize,
    /// At the home: bytes of records its log keeps (what `[retention] max_bytes` limits).
    pub log_bytes: Option<u64>,
    /// How far the doubt horizon trails the pubend's clock as estimated here (its ticks are
    /// its wall clock), in milliseconds: while idle up to the pubend's silence period; more
    /// means knowledge is not arriving (a cut link, a stalled upstream).
    pub horizon_lag_ms: u64,
    /// At the home: how long the oldest message the log still holds has waited for every
    /// subscriber's acknowledgement, in milliseconds (at most: it counts from the tick after
    /// the release prefix); 0 once everything logged is released.
    pub release_lag_ms: Option<u64>,
    /// The largest lag of a local guaranteed subscription (how far what it was handed trails
    /// the pubend's clock), in milliseconds; 0 with none.
    pub subend_lag_ms_max: u64,
    /// Local guaranteed subscriptions handed less than the stream knows, up to its doubt
    /// horizon (a full outbox, a catch-up in progress, a durable subscription's client away).
    pub subends_behind: usize,
    /// At the home: publishes acknowledged so far, retries included (the web view's publish
    /// rate is its growth per second).
    pub published: Option<u64>,
    /// Who is asking for which ticks and has no answer yet: this broker of its upstream (its
    /// doubt), then each downstream broker of this one; brokers asking nothing are left out.
    pub nacks: Vec<NackRanges>,
}

/// Tick ranges one broker asked for (or is about to) and has no answer for yet: a stream
/// stalled on missing knowledge shows here as ranges that stay, where the nack counters only
/// grow.
#[derive(Clone, Debug, Serialize)]
pub struct NackRanges {
    /// The broker asking.
    pub broker: String,
    /// The first [`NACK_RANGES`] ranges, first and last tick each, in tick order.
    pub ranges: Vec<(u64, u64)>,
    /// Whether more ranges follow those listed.
    pub more: bool,
}

impl Driver {
    /// The snapshot the admin endpoint reads.
    pub(super) fn shared_state(&self) -> std::sync::Arc<parking_lot::Mutex<GuaranteedState>> {
        std::sync::Arc::clone(&self.state)
    }

    /// Refreshes the `/state` snapshot if it is older than [`EVERY`].
    pub(super) fn snapshot(&mut self) {
        if self.snapshot_at.is_some_and(|at| at.elapsed() < EVERY) {
            return;
        }
        self.snapshot_at = Some(Instant::now());
        let pubends = self.pubends().into_iter().filter_map(|pubend| self.pubend_state(pubend)).collect();
        let durables = self.durables.by_name.iter().map(|(name, durable)| self.durable_state(name, durable)).collect();
        let replicas = self.replicas.as_ref().map(|r| r.states()).unwrap_or_default();
        for group in &replicas {
            let label = super::metrics::PubendLabel { pubend: group.pubend.clone() };
            self.metrics.replica_term.get_or_create(&label).set(group.term as i64);
            self.metrics.replica_commit.get_or_create(&label).set(group.commit as i64);
            let leading = group.leader.as_deref() == Some(self.broker.as_str());
            self.metrics.replica_leading.get_or_create(&label).set(i64::from(leading));
            let lag = group.lag.iter().map(|(_, behind)| *behind).max().unwrap_or(0);
            self.metrics.replica_lag_max.get_or_create(&label).set(lag as i64);
            self.metrics.replica_first_index.get_or_create(&label).set(group.first_index as i64);
            self.metrics.replica_log_bytes.get_or_create(&label).set(group.log_bytes as i64);
            let queued = group.snapshot_chunks_queued as i64;
            self.metrics.replica_snapshot_chunks_queued.get_or_create(&label).set(queued);
            let events = [
                ("taken", group.snapshots_taken),
                ("sent", group.snapshots_sent),
                ("received", group.snapshots_received),
                ("refused", group.snapshots_refused),
                ("too_large", group.snapshots_too_large),
                ("chunks_sent", group.snapshot_chunks_sent),
                ("chunks_received", group.snapshot_chunks_received),
                ("chunks_refused", group.snapshot_chunks_refused),
            ];
            for (event, count) in events {
                let label = super::metrics::SnapshotLabel { pubend: group.pubend.clone(), event: event.into() };
                self.metrics.replica_snapshots.get_or_create(&label).set(count as i64);
            }
        }
        let remote_members = self.groups.remote_members();
        *self.state.lock() =
            GuaranteedState { subends: self.subends.len(), pubends, durables, replicas, remote_members };
    }

    fn durable_state(&self, name: &str, durable: &super::durable::Durable) -> DurableState {
        let per_ms = self.engine.settings().ticks_per_ms.max(1);
        let checkpoints = &self.durables.checkpoints;
        let empty = BTreeMap::new();
        let (acked, saved) = checkpoints.of(durable.subend).unwrap_or((&empty, &empty));
        let pubends = saved
            .iter()
            .map(|(pubend, checkpoint)| {
                let view = self.engine.inspect(*pubend);
                let horizon = view.as_ref().map_or(checkpoint.0, |v| v.horizon().0.saturating_sub(1));
                let acked_here = view.as_ref().map_or(0, |v| v.acked().0);
                DurableStream {
                    pubend: format!("{:016x}", pubend.0),
                    acked: acked.get(pubend).map_or(checkpoint.0, |t| t.0),
                    checkpoint: checkpoint.0,
                    behind_ms: horizon.saturating_sub(checkpoint.0) / per_ms,
                    pins: acked_here <= checkpoint.0 && checkpoint.0 < horizon,
                }
            })
            .collect();
        DurableState {
            name: name.to_string(),
            pattern: durable.record.pattern.clone(),
            selector: durable.record.selector.clone(),
            held: checkpoints.is_held(durable.subend),
            pubends,
        }
    }

    /// The nacks of one stream here: this broker's, then its downstream brokers'.
    fn nack_ranges(&self, view: &tidings_delivery::StreamView<'_>) -> Vec<NackRanges> {
        let name = |id: tidings_delivery::BrokerId| {
            self.net.as_ref().and_then(|net| net.broker_name(id)).unwrap_or_else(|| format!("broker #{}", id.0))
        };
        let (wanted, more) = view.wanted(NACK_RANGES);
        let asked = view.asked(NACK_RANGES).into_iter().map(|(id, ranges, more)| (name(id), ranges, more));
        std::iter::once((self.broker.to_string(), wanted, more))
            .chain(asked)
            .filter(|(_, ranges, _)| !ranges.is_empty())
            .map(|(broker, ranges, more)| NackRanges {
                broker,
                ranges: ranges.iter().map(|range| (range.from.0, range.to.0)).collect(),
                more,
            })
            .collect()
    }

    fn pubend_state(&self, pubend: PubendId) -> Option<PubendState> {
        let view = self.engine.inspect(pubend)?;
        let (upstream, children) = self.net.as_ref().map(|net| net.route_names(pubend)).unwrap_or_default();
        let settings = self.engine.settings();
        let clock = settings.ticks(super::driver::now().0);
        let lag_ms = |tick: tidings_delivery::Tick| clock.saturating_sub(tick.0) / settings.ticks_per_ms.max(1);
        let positions: Vec<_> = self.subends.keys().filter_map(|&subend| view.subend_position(subend)).collect();
        // The lag gauges are set here, with the snapshot, so they are as fresh as `/state`.
        let label = super::metrics::PubendLabel { pubend: format!("{:016x}", pubend.0) };
        let horizon_lag_ms = lag_ms(view.horizon());
        // Zero once everything logged is released; else the age of the oldest tick still held.
        let logged = self.publishes.synced_prefix(pubend).unwrap_or_default();
        let release_lag_ms = view.release().map(|release| match release < logged {
            true => lag_ms(tidings_delivery::Tick(release.0 + 1)),
            false => 0,
        });
        let subend_lag_ms_max = positions.iter().min().map_or(0, |&lowest| lag_ms(lowest));
        self.metrics.horizon_lag_ms.get_or_create(&label).set(horizon_lag_ms as i64);
        self.metrics.subend_lag_ms_max.get_or_create(&label).set(subend_lag_ms_max as i64);
        if let Some(lag) = release_lag_ms {
            self.metrics.release_lag_ms.get_or_create(&label).set(lag as i64);
        }
        let hosted = self.hosted.contains(&pubend);
        Some(PubendState {
            published: hosted.then(|| self.metrics.pubend_acked.count(pubend.0, "publish")),
            nacks: self.nack_ranges(&view),
            horizon_lag_ms,
            release_lag_ms,
            subend_lag_ms_max,
            subends_behind: positions.iter().filter(|&&position| position.0 + 1 < view.horizon().0).count(),
            pubend: label.pubend,
            hosted,
            upstream,
            children,
            done: view.done().0,
            horizon: view.horizon().0,
            acked: view.acked().0,
            release: view.release().map(|t| t.0),
            next_tick: view.next_tick().map(|t| t.0),
            cached: view.cached(),
            log_bytes: hosted.then(|| self.retained.get(&pubend).map_or(0, |r| r.bytes())),
        })
    }
}
