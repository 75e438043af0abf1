//! What the two stores' completions finish (`Replicas::synced`): a journal write synced, which
//! the group learns in order (and, for a checkpoint, the journal's prefix and the snapshots
//! saved before it released), or a part of a snapshot being saved apart, whose next part goes
//! out only then (one 1 MiB part a group commit of the snapshots' store, `Journal::save`) and
//! whose last tells the group the snapshot is saved.

use std::collections::BTreeMap;

use tidings_delivery::PubendId;
use tidings_replica::Input;
use tidings_store::{Completion, Token};
use tracing::{error, warn};

use super::{Outcome, Replicas};

/// What a store's completion finishes.
pub(super) enum Pending {
    /// A journal record of a group: on a write's last record its number, and what the write
    /// releases once synced if it is a checkpoint (the journal's prefix, the snapshots' store's).
    Journal {
        pubend: PubendId,
        number: Option<u64>,
        release: Option<tidings_store::Tick>,
        release_saved: Option<tidings_store::Tick>,
    },
    /// A part of a group's snapshot saved apart, and the parts after it (last first): one
    /// part a group, so that no sync of the snapshots' store is long (`Journal::save`); the
    /// snapshot is saved once `rest` is empty.
    Saved { pubend: PubendId, index: u64, rest: Vec<tidings_store::Record> },
}

impl Replicas {
    /// Journal writes and snapshot saves completed: each group learns its last write synced,
    /// in order, and its snapshot saved.
    pub(in crate::guaranteed) fn synced(&mut self, completions: &[Completion]) -> Vec<Outcome> {
        let mut last: BTreeMap<PubendId, u64> = BTreeMap::new();
        let mut saved = Vec::new();
        for completion in completions {
            // A release's completion too: nothing waits for it.
            let Some(pending) = self.tokens.remove(&completion.token.0) else { continue };
            let pubend = match &pending {
                Pending::Journal { pubend, .. } | Pending::Saved { pubend, .. } => *pubend,
            };
            let Some(group) = self.groups.get_mut(&pubend) else { continue };
            if let Err(e) = &completion.result {
                error!(pubend = pubend.0, error = %e, "a replica journal write failed: the replica stops acknowledging");
                group.failed = true;
            }
            if group.failed {
                continue;
            }
            let (number, release, release_saved) = match pending {
                Pending::Journal { number, release, release_saved, .. } => (number, release, release_saved),
                Pending::Saved { index, rest, .. } if rest.is_empty() => {
                    saved.push((pubend, index));
                    continue;
                }
                Pending::Saved { index, rest, .. } => {
                    self.save_next(pubend, index, rest);
                    continue;
                }
            };
            // A snapshot part (`carry_out`): its write's last record reports it.
            let Some(number) = number else { continue };
            last.insert(pubend, number);
            // A synced checkpoint holds everything the records before it held (`Journal`),
            // and it names its snapshot: the ones saved before it are not needed.
            let store_pubend = tidings_store::PubendId(pubend.0);
            for (store, tick) in [(&self.store, release), (&self.snapshots, release_saved)] {
                let Some(tick) = tick else { continue };
                self.next_token += 1;
                if let Err(e) = store.release(Token(self.next_token), store_pubend, tick) {
                    warn!(pubend = pubend.0, error = %e, "a replica journal did not take a release");
                }
            }
        }
        let mut outcomes: Vec<Outcome> =
            last.into_iter().flat_map(|(pubend, number)| self.handle(pubend, Input::Persisted { number })).collect();
        for (pubend, index) in saved {
            outcomes.extend(self.handle(pubend, Input::SnapshotSaved { index }));
        }
        outcomes
    }

    /// Appends the next part of a snapshot being saved (`rest`, last first): the one after it
    /// waits for its sync.
    pub(super) fn save_next(&mut self, pubend: PubendId, index: u64, mut rest: Vec<tidings_store::Record>) {
        let Some(group) = self.groups.get_mut(&pubend) else { return };
        let Some(part) = rest.pop() else { return };
        self.next_token += 1;
        if let Err(e) = self.snapshots.append(Token(self.next_token), part) {
            error!(pubend = pubend.0, error = %e, "the replica snapshots' store did not take a snapshot");
            group.failed = true;
            return;
        }
        self.tokens.insert(self.next_token, Pending::Saved { pubend, index, rest });
    }
}
