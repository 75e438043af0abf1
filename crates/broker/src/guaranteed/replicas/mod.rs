//! The broker's replica groups (issue 40, `docs/replication.md`): each pubend this broker hosts
//! while it has cell mates is one Raft group ([`tidings_replica::ReplicaGroup`]) among the first
//! `[storage] replicas` brokers of its cell, and this broker also holds the groups of its cell
//! mates' pubends. This module is the groups' shell: their journals in one `tidings-store` under
//! `<data dir>/replicas` (one store pubend per group), the snapshots their checkpoints name in a
//! second one under `<data dir>/replica-snapshots` (its own writer and syncs, so that writing a
//! large snapshot never holds the journal's syncs, which every acknowledgement waits for:
//! `Action::SaveSnapshot`), their messages as REPLICA frames in the
//! cell links' guaranteed lanes, their ticks from the driver's loop, and the membership of each
//! group in `<data dir>/replica-groups`. What a group decides for publishers (acknowledged,
//! refused) goes back to the driver as [`Outcome`]s; `gate` is the driver's side, `inbox` the
//! mates' messages, stepped once a turn.
//!
//! Membership: the host picks the voters when it creates the group (itself first, then its
//! linked cell mates by name), and these creation voters travel with every frame as the group's
//! identity, so a mate learns a group from its first message. Every creation voter starts a
//! group with an empty journal by fencing (`ReplicaGroup::rejoin`): its mates' terms tell a new
//! group (all 0) from a wiped disk. The current members are the group's own (raft conf changes,
//! `members`): a broker outside the creation voters learns the group from its leader's first
//! message as an added learner.

mod completions;
mod depose;
mod gate;
mod inbox;
mod members;
mod serve;
mod show;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_delivery::{PubendId, PublisherId};
use tidings_replica::{Action, Envelope, GroupSettings, Input, Journal, ReplicaGroup, ReplicaId};
use tidings_route::{BrokerName, CellName};
use tidings_store::{Completion, CompletionSink, Store, Token};
use tidings_wire::peer::{PeerFrame, Replica};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

pub(super) use serve::Seeds;

use super::{Command, GuaranteedError};
use crate::cluster::Cluster;
use completions::Pending;

/// One raft tick: heartbeats every 2 (200 ms), elections after 10 to 10 + rank (1 to 1.3 s).
pub(super) const TICK: Duration = Duration::from_millis(100);

/// A broker's replica id in every group: raft-rs's peer id, the same on every broker.
pub(super) fn replica_id(name: &str) -> ReplicaId {
    crate::cluster::broker_id(name)
}

pub(super) use tidings_node::gate::Outcome;

struct Group {
    replica: ReplicaGroup,
    journal: Journal,
    voters: Vec<ReplicaId>,
    /// A journal write failed: no later write is reported synced (that would vouch for it).
    failed: bool,
    /// How this replica started here (`ReplicaGroupState::started`).
    started: &'static str,
}

/// Hands the journal writer's completions to the driver.
struct Sink(mpsc::UnboundedSender<Command>);

impl CompletionSink for Sink {
    fn complete(&mut self, group: Vec<Completion>) {
        let _ = self.0.send(Command::ReplicaSynced(group));
    }
}

/// Every replica group on this broker.
pub(crate) struct Replicas {
    cluster: Arc<Cluster>,
    me: ReplicaId,
    cell: CellName,
    /// `[storage] replicas` (0: 3, or the whole cell if smaller), `replica_compact_bytes`,
    /// `replica_snapshot_chunk`, `replica_max_snapshot` and `replica_snapshot_window`.
    sizes: crate::config::ReplicaSizes,
    /// Cell mates ever linked, by replica id (the forgotten ones too: their names still name
    /// their pubends).
    mates: BTreeMap<ReplicaId, BrokerName>,
    /// Brokers removed from the cell for good (`tidings cell forget`), kept in
    /// `<data dir>/cell-forgotten`: never a candidate, removed from every group this broker
    /// leads (see `members`).
    forgotten: std::collections::BTreeSet<ReplicaId>,
    forgotten_path: PathBuf,
    store: Store,
    /// The snapshots the journals' checkpoints name, saved apart ([`Journal::save`]).
    snapshots: Store,
    groups: BTreeMap<PubendId, Group>,
    membership: PathBuf,
    /// Writes in flight in either store, by token.
    tokens: BTreeMap<u64, Pending>,
    /// Groups this broker was removed from since it started: their late frames do not make it
    /// join again.
    left: std::collections::BTreeSet<PubendId>,
    /// Messages received this turn of the driver, per group in arrival order: stepped together
    /// at the turn's end ([`Replicas::deliver`]), so a follower sent several appends meanwhile
    /// writes its journal once for all of them.
    inbox: BTreeMap<PubendId, Vec<(ReplicaId, Envelope)>>,
    next_token: u64,
    next_tick: Instant,
}

impl Replicas {
    /// Opens the journals and restarts every group this broker was in; `None` when this broker
    /// takes part in no network or `[storage] replicas` is 1.
    pub(super) fn open(
        data_dir: &Path,
        (options, fs, sizes): (tidings_store::Options, Arc<dyn tidings_store::Fs>, crate::config::ReplicaSizes),
        cluster: Arc<Cluster>,
        tx: mpsc::UnboundedSender<Command>,
    ) -> Result<Option<Replicas>, GuaranteedError> {
        if !cluster.is_enabled() || sizes.replicas == 1 {
            return Ok(None);
        }
        let fail = |e: String| GuaranteedError::Replicas(e);
        // No pacing of the journal's syncs (`[storage] linger`): it counts records, and a
        // journal record is already a whole `Ready` (a turn's publishes, see `gate`), so a few
        // records a group are not a slow stream, and a paced sync would add up to the linger
        // to every acknowledgement, on the leader and on each follower.
        let options = tidings_store::Options { linger: Duration::ZERO, ..options };
        let (store, _) = Store::open_with(Arc::clone(&fs), &data_dir.join("replicas"), options, Sink(tx.clone()))
            .map_err(|e| fail(e.to_string()))?;
        // Large writes nobody waits on: no zeros ahead of them (`Options::fill_ahead`).
        let saves = tidings_store::Options { fill_ahead: false, ..options };
        let (snapshots, _) = Store::open_with(fs, &data_dir.join("replica-snapshots"), saves, Sink(tx))
            .map_err(|e| fail(e.to_string()))?;
        let me = replica_id(cluster.name().as_str());
        let forgotten = members::read_forgotten(&data_dir.join("cell-forgotten")).map_err(fail)?;
        // Before any link task starts: a forgotten broker is never linked.
        cluster.forget_brokers(forgotten.iter().copied());
        let mut replicas = Replicas {
            me,
            cell: cluster.cell().clone(),
            cluster,
            sizes,
            mates: BTreeMap::new(),
            forgotten,
            forgotten_path: data_dir.join("cell-forgotten"),
            store,
            snapshots,
            groups: BTreeMap::new(),
            membership: data_dir.join("replica-groups"),
            tokens: BTreeMap::new(),
            left: Default::default(),
            inbox: BTreeMap::new(),
            next_token: 0,
            next_tick: Instant::now(),
        };
        let text = match std::fs::read_to_string(&replicas.membership) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(fail(format!("{}: {e}", replicas.membership.display()))),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let numbers: Result<Vec<u64>, _> = line.split_whitespace().map(str::parse).collect();
            match numbers.ok().and_then(|n| Some((*n.first()?, n.get(1..)?.to_vec()))) {
                // A journal that cannot be read keeps this replica out of its group (the others
                // go on); the broker serves everything else. A damaged one rejoins (`start`).
                Some((pubend, voters)) => {
                    if let Err(e) = replicas.start(PubendId(pubend), voters, None) {
                        error!(error = %e, "a replica group cannot restart here");
                    }
                }
                None => return Err(fail(format!("{}: unreadable line {line:?}", replicas.membership.display()))),
            }
        }
        Ok(Some(replicas))
    }

    /// Starts this broker's replica of a group from its journal: fencing if it is empty and
    /// this broker is a creation voter; as a member added in the leader's term `added` if it
    /// is not (an added member whose journal is empty waits for the leader's next message).
    fn start(&mut self, pubend: PubendId, voters: Vec<ReplicaId>, added: Option<u64>) -> Result<(), String> {
        // The successor of a dead host keeps the pubend it took over (docs/replication.md,
        // "Takeover"): handing the lead back would leave two brokers serving it. A live host
        // keeps the lead because its mates hold back their campaigns while it is linked
        // (`Input::Links`, fed at every tick).
        // Followers learn the commit index from the next append or heartbeat, not from an
        // append of its own per commit (`GroupSettings::broadcast_commit`).
        let settings = GroupSettings {
            hand_back: false,
            broadcast_commit: false,
            confirm_lead: true,
            exact_ticks: true,
            compact_bytes: self.sizes.compact_bytes,
            snapshot_chunk: self.sizes.snapshot_chunk,
            max_snapshot: self.sizes.max_snapshot,
            snapshot_window: self.sizes.snapshot_window,
            ..GroupSettings::new(self.me, voters.clone())
        };
        let store_pubend = tidings_store::PubendId(pubend.0);
        let (journal, recovered, mut damaged) = Journal::open_or_wipe(&self.store, &self.snapshots, store_pubend)
            .map_err(|e| format!("pubend {}: {e}", pubend.0))?;
        // A damaged journal, or one whose log cannot restart a replica (a broken snapshot), is
        // never served: the replica counts as wiped and rebuilds from its mates behind the
        // rejoin fences, and the damaged records are released first.
        let creation = voters.contains(&self.me);
        let mut started = if damaged.is_some() { "rebuilt" } else { "new" };
        let replica = match recovered.map(|recovered| ReplicaGroup::restart(settings.clone(), recovered)) {
            Some(Ok(replica)) => {
                started = "journal";
                replica
            }
            None if !creation => match added {
                Some(term) => ReplicaGroup::added(settings, term).map_err(|e| format!("pubend {}: {e}", pubend.0))?,
                None => {
                    info!(pubend = pubend.0, "an added replica with an empty journal waits for its leader");
                    return Ok(());
                }
            },
            Some(Err(e)) => {
                error!(pubend = pubend.0, error = %e, "a replica journal cannot restart its replica: rebuilt from the mates");
                damaged = Some(journal.last_tick());
                started = "rebuilt";
                ReplicaGroup::rejoin(settings).map_err(|e| format!("pubend {}: {e}", pubend.0))?
            }
            None => ReplicaGroup::rejoin(settings).map_err(|e| format!("pubend {}: {e}", pubend.0))?,
        };
        if let Some(tick) = damaged {
            error!(pubend = pubend.0, up_to = tick.0, "a replica journal is damaged: released, rebuilt from the mates");
            self.next_token += 1;
            self.store
                .release(Token(self.next_token), store_pubend, tick)
                .map_err(|e| format!("pubend {}: {e}", pubend.0))?;
            if journal.last_saved_tick().0 > 0 {
                self.next_token += 1;
                self.snapshots
                    .release(Token(self.next_token), store_pubend, journal.last_saved_tick())
                    .map_err(|e| format!("pubend {}: {e}", pubend.0))?;
            }
        }
        info!(pubend = pubend.0, ?voters, "replica group started");
        self.groups.insert(pubend, Group { replica, journal, voters, failed: false, started });
        Ok(())
    }

    /// Joins a group for the first time: its membership is made durable before anything else;
    /// `added`: the leader's term, when this broker is not a creation voter.
    fn join(&mut self, pubend: PubendId, voters: Vec<ReplicaId>, added: Option<u64>) -> Result<(), String> {
        let line = std::iter::once(pubend.0).chain(voters.iter().copied()).map(|n| n.to_string()).collect::<Vec<_>>();
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.membership)?;
            writeln!(file, "{}", line.join(" "))?;
            file.sync_all()
        };
        write().map_err(|e| format!("{}: {e}", self.membership.display()))?;
        self.start(pubend, voters, added)
    }

    /// A link to `peer` of `cell` came up: a cell mate may hold replicas of our pubends. It is
    /// told every broker forgotten here (one it missed while down learns them now); a
    /// forgotten broker is never a mate again.
    pub(super) fn peer_up(&mut self, peer: &BrokerName, cell: &CellName) {
        if *cell != self.cell {
            return;
        }
        let id = replica_id(peer.as_str());
        if self.forgotten.contains(&id) {
            // Refused at the handshake since; a link that came up just before its forget.
            warn!(%peer, "a broker forgotten in this cell is linked: never a member of a group again");
        }
        self.mates.insert(id, peer.clone());
        self.tell_forgotten(peer);
    }

    /// Whether a cell mate ever linked here: a new pubend would then be a group.
    pub(super) fn has_mates(&self) -> bool {
        !self.mates.is_empty()
    }

    /// Whether `pubend`'s log is a group here.
    pub(super) fn is_replicated(&self, pubend: PubendId) -> bool {
        self.groups.contains_key(&pubend)
    }

    /// Makes a new pubend of this broker a group: `Ok(false)` if it stays on this broker alone
    /// (no cell mate ever linked), `Err` if its replicas are not linked now.
    pub(super) fn create(&mut self, pubend: PubendId) -> Result<bool, String> {
        // The size and mates a group grows to (`members`): no forgotten broker among them.
        let tidings_replica::Membership { target: size, candidates: linked, .. } = self.membership();
        if size <= 1 {
            return Ok(false);
        }
        if linked.len() + 1 < size {
            return Err(format!("{} of the {size} replicas a new pubend needs are linked", linked.len() + 1));
        }
        let voters = std::iter::once(self.me).chain(linked.into_iter().take(size - 1));
        self.join(pubend, voters.collect(), None)?;
        Ok(true)
    }

    /// `Err` with the reason when fewer replicas than a quorum are linked.
    pub(super) fn quorum_reachable(&self, pubend: PubendId) -> Result<(), String> {
        let Some(group) = self.groups.get(&pubend) else { return Ok(()) };
        let (voters, _) = group.replica.members();
        let live = voters
            .iter()
            .filter(|&&v| v == self.me || self.mates.get(&v).is_some_and(|m| self.cluster.is_linked(m)))
            .count();
        let quorum = voters.len() / 2 + 1;
        match live >= quorum {
            true => Ok(()),
            false => {
                Err(format!("{live} of the pubend's {} replicas are reachable, a quorum is {quorum}", voters.len()))
            }
        }
    }

    /// The linked mate that leads `pubend`'s group, if another broker does: a publisher here
    /// is refused at once with its name, and moves there (a client with a server list), rather
    /// than held in case this broker is elected.
    pub(super) fn led_by_mate(&self, pubend: PubendId) -> Option<&BrokerName> {
        let group = self.groups.get(&pubend)?;
        let leader = group.replica.status().leader.filter(|&l| l != self.me)?;
        self.mates.get(&leader).filter(|m| self.cluster.is_linked(m))
    }

    /// Whether this broker leads `pubend`'s group now.
    pub(super) fn leads(&self, pubend: PubendId) -> bool {
        self.groups.get(&pubend).is_some_and(|g| g.replica.leading().is_some())
    }

    /// The groups this broker may open the pubend of now, with their state (see `serve`): its
    /// own pubends, and a mate's it leads (takeover: the pubend's home moves here, `homes`). A
    /// mate leads only once the host was unlinked at its election (`Input::Links`).
    pub(super) fn serving(&self) -> impl Iterator<Item = (PubendId, &tidings_replica::PubendReplica)> {
        self.groups.iter().filter_map(|(&pubend, group)| Some((pubend, group.replica.serving()?.1)))
    }

    /// Feeds one input to a group and carries out what it says.
    pub(super) fn handle(&mut self, pubend: PubendId, input: Input) -> Vec<Outcome> {
        let now = super::driver::now().0;
        let Some(group) = self.groups.get_mut(&pubend) else { return Vec::new() };
        let actions = group.replica.handle(now, input);
        self.carry_out(pubend, actions)
    }

    /// Ticks every group when a tick is due.
    pub(super) fn tick(&mut self) -> Vec<Outcome> {
        if Instant::now() < self.next_tick {
            return Vec::new();
        }
        self.next_tick = Instant::now() + TICK;
        let pubends: Vec<(PubendId, Vec<ReplicaId>)> =
            self.groups.iter().map(|(&pubend, group)| (pubend, self.linked(group))).collect();
        let membership = self.membership();
        let mut outcomes = Vec::new();
        for (pubend, up) in pubends {
            outcomes.extend(self.handle(pubend, Input::Links { up }));
            outcomes.extend(self.handle(pubend, Input::Tick));
            // The leader changes the members; a fencing replica learns whom not to wait for.
            outcomes.extend(self.handle(pubend, Input::Membership(membership.clone())));
        }
        outcomes
    }

    /// The mates of `group` linked now (creation voters and current members): its mates hold
    /// back their campaigns while its host (its first voter) is linked, and a follower
    /// campaigns at once when its leader's link drops.
    fn linked(&self, group: &Group) -> Vec<ReplicaId> {
        let linked = |id: &&ReplicaId| self.mates.get(id).is_some_and(|m| self.cluster.is_linked(m));
        let (voters, learners) = group.replica.members();
        let mut all: Vec<ReplicaId> =
            group.voters.iter().chain(&voters).chain(&learners).filter(linked).copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// When the next tick is due.
    pub(super) fn next_tick(&self) -> Instant {
        self.next_tick
    }

    /// Carries out a group's actions; what concerns publishers goes back to the driver.
    fn carry_out(&mut self, pubend: PubendId, actions: Vec<Action>) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for action in actions {
            match action {
                Action::Send { to, msg } => self.send(pubend, to, &msg),
                Action::Persist(write) => {
                    let Some(group) = self.groups.get_mut(&pubend) else { continue };
                    // A checkpoint's large snapshot is several records, its write the last:
                    // only that one's completion reports the write synced (`synced`).
                    let records = group.journal.records(&write);
                    let release = Journal::release_below(&write, &records);
                    let release_saved = group.journal.saved_release_below(&write);
                    let last = records.len().saturating_sub(1);
                    for (i, record) in records.into_iter().enumerate() {
                        self.next_token += 1;
                        let pending = match i == last {
                            true => Pending::Journal { pubend, number: Some(write.number), release, release_saved },
                            false => Pending::Journal { pubend, number: None, release: None, release_saved: None },
                        };
                        if let Err(e) = self.store.append(Token(self.next_token), record) {
                            error!(pubend = pubend.0, error = %e, "the replica journal did not take a write");
                            group.failed = true;
                            break;
                        }
                        self.tokens.insert(self.next_token, pending);
                    }
                }
                // Its own store, its own syncs: the journal's go on meanwhile.
                Action::SaveSnapshot { index, data, .. } => {
                    let Some(group) = self.groups.get_mut(&pubend) else { continue };
                    let mut parts = group.journal.save(index, &data);
                    parts.reverse();
                    self.save_next(pubend, index, parts);
                }
                // The host's own pubend log holds what it published; the replicas' applied
                // state is what a pubend not open here is opened from (`serve`).
                Action::Apply(_) => {}
                Action::Acked { publisher, seq, tick } => {
                    outcomes.push(Outcome::Acked { key: (pubend, PublisherId(publisher), seq), tick })
                }
                Action::Refused { publisher, seq, leader } => {
                    let why = match leader.and_then(|l| self.mates.get(&l)) {
                        Some(name) => format!("this broker does not lead the pubend's replica group ({name} does)"),
                        None if self.leads(pubend) => {
                            "the replica group has passed the tick this broker's log gave the publish".to_string()
                        }
                        None => "the pubend's replica group has no leader yet".to_string(),
                    };
                    let key = (pubend, PublisherId(publisher), seq);
                    outcomes.push(Outcome::Refused { key, why, leads: self.leads(pubend) });
                }
                Action::BecameLeader { term } => {
                    info!(pubend = pubend.0, term, "leads its replica group");
                    outcomes.push(Outcome::Leads(pubend));
                }
                Action::LostLeadership { term } => info!(pubend = pubend.0, term, "no longer leads its replica group"),
                Action::Confirmed { at } => outcomes.push(Outcome::Confirmed { pubend, at }),
                Action::Dropped { from, reason } => {
                    let from = self.mates.get(&from).map_or_else(|| from.to_string(), |m| m.to_string());
                    warn!(%from, pubend = pubend.0, %reason, "a replica message refused before raft: dropped");
                }
                Action::TooLarge { bytes, max } => warn!(
                    pubend = pubend.0,
                    bytes,
                    max,
                    "a replica group's state is over [storage] replica_max_snapshot: its log is not compacted until releases shrink it"
                ),
                Action::Fault { reason } => error!(pubend = pubend.0, %reason, "a replica group broke an invariant"),
                Action::Members { voters, learners } => {
                    let names = |ids: &[ReplicaId]| ids.iter().map(|&id| self.name(id)).collect::<Vec<_>>();
                    info!(pubend = pubend.0, voters = ?names(&voters), learners = ?names(&learners), "replica group members changed");
                }
                Action::Removed => self.removed(pubend),
            }
        }
        outcomes
    }

    fn send(&self, pubend: PubendId, to: ReplicaId, msg: &Envelope) {
        let (Some(name), Some(group)) = (self.mates.get(&to), self.groups.get(&pubend)) else { return };
        let body = match msg.to_wire() {
            Ok(body) => body,
            Err(e) => return warn!(pubend = pubend.0, error = %e, "a replica message could not be encoded"),
        };
        let frame = PeerFrame::Replica(Replica {
            pubend: tidings_wire::PubendId(pubend.0),
            voters: group.voters.clone(),
            body,
        });
        match frame.to_bytes() {
            // A message a down link does not take is lost; raft sends again.
            Ok(bytes) => drop(self.cluster.send_guaranteed(name, bytes)),
            Err(e) => warn!(pubend = pubend.0, error = %e, "a replica frame could not be encoded"),
        }
    }
}
