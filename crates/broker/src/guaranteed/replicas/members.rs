//! The shell's side of membership changes (docs/replication.md, "Membership"): what each group's
//! leader is told to want ([`Input::Membership`] at every tick), brokers forgotten for good
//! (`tidings cell forget`), and a replica that learns it was removed.
//!
//! **Grow.** A group whose members are fewer than its target (`[storage] replicas`, or 3 or the
//! whole cell if smaller, counted over the mates not forgotten) adds a linked mate that is not
//! a member, by name order; the core adds it as a learner, catches it up and promotes it.
//!
//! **Forget.** An operator forgets a broker that is gone for good (its machine lost). The broker
//! that takes the command records it in `<data dir>/cell-forgotten` and tells every linked cell
//! mate (a REPLICA frame of kind FORGET), and tells each mate again whenever its link comes up,
//! so a mate down at the time learns it later. Each broker then drops it from its mates, and the
//! groups it leads remove it and grow again with a linked mate. A linked broker is not forgotten
//! (it is alive: stop it first). Nothing forgets a broker on its own after a long absence: a
//! broker down for a day (a disk swap, a datacenter outage) comes back with its log and catches
//! up from the tail, while a replacement would copy the whole state, and two brokers that each
//! think the other is gone would remove each other; so only the operator, who knows the machine
//! is lost, says so.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;

use tidings_delivery::PubendId;
use tidings_replica::{Membership, ReplicaId};
use tidings_route::BrokerName;
use tidings_store::Token;
use tidings_wire::peer::{PeerFrame, Replica, ReplicaBody};
use tracing::{info, warn};

use super::{replica_id, Replicas};

/// Reads `<data dir>/cell-forgotten`: one replica id a line (none: the file is missing).
pub(super) fn read_forgotten(path: &Path) -> Result<BTreeSet<ReplicaId>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    text.split_whitespace()
        .map(|word| word.parse().map_err(|_| format!("{}: unreadable id {word:?}", path.display())))
        .collect()
}

impl Replicas {
    /// What every group this broker leads should become ([`Input::Membership`]).
    pub(super) fn membership(&self) -> Membership {
        let remembered = self.mates.keys().filter(|id| !self.forgotten.contains(id)).count();
        let target = match self.sizes.replicas {
            0 => (1 + remembered).min(3),
            n => n,
        };
        let mut linked: Vec<&BrokerName> = self
            .mates
            .iter()
            .filter(|(id, m)| !self.forgotten.contains(id) && self.cluster.is_linked(m))
            .map(|(_, m)| m)
            .collect();
        linked.sort();
        Membership {
            target,
            candidates: linked.iter().map(|m| replica_id(m.as_str())).collect(),
            forgotten: self.forgotten.iter().copied().collect(),
        }
    }

    /// An operator forgets `broker` (admin API, `tidings cell forget`): recorded here, told to
    /// every linked mate. `Err` with the reason when it cannot be (this broker, or a linked
    /// one); `Ok` says what happened.
    pub(in crate::guaranteed) fn forget(&mut self, broker: &BrokerName) -> Result<String, String> {
        let id = replica_id(broker.as_str());
        if id == self.me {
            return Err(format!("{broker} is this broker: forget it on another broker of the cell"));
        }
        if self.cluster.is_linked(broker) {
            return Err(format!("{broker} is linked to this broker now: stop it before forgetting it"));
        }
        let new = self.note_forgotten(id)?;
        self.mates.values().for_each(|mate| self.tell_forgotten(mate));
        let groups = self.groups.values().filter(|g| g.replica.members().0.contains(&id)).count();
        Ok(match new {
            true => format!(
                "forgot {broker}: the {groups} replica groups here that have it as a member remove it and grow again with a linked mate\n"
            ),
            false => format!("{broker} was already forgotten here\n"),
        })
    }

    /// An operator takes back the forget of `broker` here (admin API, `tidings cell unforget`):
    /// its links are accepted again. Each broker keeps its own record, and one that still
    /// forgets `broker` tells the others again when a link comes up, so the operator runs it on
    /// every broker of the cell.
    pub(in crate::guaranteed) fn readmit(&mut self, broker: &BrokerName) -> Result<String, String> {
        let id = replica_id(broker.as_str());
        if !self.forgotten.contains(&id) {
            return Ok(format!("{broker} is not forgotten here\n"));
        }
        let rest: String = self.forgotten.iter().filter(|&&f| f != id).map(|f| format!("{f}\n")).collect();
        replace_file(&self.forgotten_path, &rest).map_err(|e| format!("{}: {e}", self.forgotten_path.display()))?;
        self.forgotten.remove(&id);
        self.cluster.readmit_broker(id);
        info!(%broker, "no longer forgotten here: its links are accepted again");
        Ok(format!(
            "{broker} is no longer forgotten here: its links are accepted again. Run this on every broker of \
             the cell: one that still forgets {broker} tells the others again when a link comes up\n"
        ))
    }

    /// A mate told us `broker` is forgotten (a REPLICA frame of kind FORGET).
    pub(in crate::guaranteed) fn forgotten_received(&mut self, from: &BrokerName, broker: ReplicaId) {
        if broker == self.me {
            // Its journals stay: dropping them before its removal commits would be a wipe.
            let why = format!(
                "{}{}: {from} says `tidings cell forget {}` was run",
                crate::cluster::FORGOTTEN,
                self.cell,
                self.cluster.name()
            );
            return self.cluster.told_forgotten(&why);
        }
        if let Err(e) = self.note_forgotten(broker) {
            warn!(%from, error = %e, "a forgotten broker could not be recorded");
        }
    }

    /// Why this broker's cell refused it (`tidings cell forget` was run for it), while it does:
    /// the gate then refuses guaranteed publishes (`gate`).
    pub(super) fn forgotten_here(&self) -> Option<String> {
        self.cluster.forgotten_here()
    }

    /// Records `id` as forgotten (durably, before anything relies on it); `Ok(false)` if it
    /// already was.
    fn note_forgotten(&mut self, id: ReplicaId) -> Result<bool, String> {
        if self.forgotten.contains(&id) {
            return Ok(false);
        }
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.forgotten_path)?;
            writeln!(file, "{id}")?;
            file.sync_all()
        };
        write().map_err(|e| format!("{}: {e}", self.forgotten_path.display()))?;
        self.forgotten.insert(id);
        self.cluster.forget_brokers([id]);
        info!(broker = %self.name(id), "forgotten in the cell: no longer a replica mate");
        Ok(true)
    }

    /// Tells `mate` every broker forgotten here.
    pub(super) fn tell_forgotten(&self, mate: &BrokerName) {
        for &broker in &self.forgotten {
            let frame = PeerFrame::Replica(Replica {
                pubend: tidings_wire::PubendId(0),
                voters: Vec::new(),
                body: ReplicaBody::Forget { broker },
            });
            if let Ok(bytes) = frame.to_bytes() {
                // A link that does not take it now is told again when it comes back up.
                let _ = self.cluster.send_guaranteed(mate, bytes);
            }
        }
    }

    /// This replica applied its own removal from `pubend`'s group: the group stops here, its
    /// journal is released, and the group leaves `replica-groups` (a restart does not bring it
    /// back).
    pub(super) fn removed(&mut self, pubend: PubendId) {
        let Some(group) = self.groups.remove(&pubend) else { return };
        self.left.insert(pubend);
        info!(pubend = pubend.0, "removed from the pubend's replica group: its journal is dropped");
        self.next_token += 1;
        let store_pubend = tidings_store::PubendId(pubend.0);
        if let Err(e) = self.store.release(Token(self.next_token), store_pubend, group.journal.last_tick()) {
            warn!(pubend = pubend.0, error = %e, "the removed replica's journal was not released");
        }
        let saved = group.journal.last_saved_tick();
        self.next_token += 1;
        if let Err(e) =
            (saved.0 > 0).then(|| self.snapshots.release(Token(self.next_token), store_pubend, saved)).transpose()
        {
            warn!(pubend = pubend.0, error = %e, "the removed replica's snapshots were not released");
        }
        if let Err(e) = self.rewrite_membership() {
            warn!(pubend = pubend.0, error = %e, "replica-groups still names a group this broker left");
        }
    }

    /// Writes `replica-groups` anew with the groups this broker is in, through a temporary file
    /// renamed over it.
    fn rewrite_membership(&self) -> std::io::Result<()> {
        let text: String = self
            .groups
            .iter()
            .map(|(pubend, group)| {
                let words: Vec<String> =
                    std::iter::once(pubend.0).chain(group.voters.iter().copied()).map(|n| n.to_string()).collect();
                words.join(" ") + "\n"
            })
            .collect();
        replace_file(&self.membership, &text)
    }
}

/// Writes `path` anew with `text`, through a temporary file synced and renamed over it.
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let temporary = path.with_extension("new");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}
