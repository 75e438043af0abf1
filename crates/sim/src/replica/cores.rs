//! The world's side of the replicas' delivery cores (`core`, in the core modes): what the group
//! decided goes to the core as the broker's group shell reports it (`Outcome`s), the core's
//! effects go back to the network, the group and the judge, and each core takes a turn.

use tidings_node::gate::Outcome;
use tidings_replica::{Action, Input, ReplicaId};

use crate::replica::core::{Core, Effect, PUBEND};
use crate::replica::world::{Packet, World};

impl World {
    /// Starts a replica's delivery core on its log, in `core` mode.
    pub(super) fn start_core(&mut self, id: ReplicaId) {
        if !self.core {
            return;
        }
        let seed = self.rng.next_u64();
        let Some(node) = self.nodes.get_mut(&id) else { return };
        match Core::start(&mut node.log, self.mutation, seed) {
            Ok(core) => node.core = Some(core),
            Err(e) => self.judge.broken = Some(format!("replica {id}'s core cannot start: {e}")),
        }
    }

    /// Hands the core what the group at `id` decided for publishers (`Outcome`s, as the
    /// broker's group shell reports them) and carries out what it asks.
    pub(super) fn decide(&mut self, id: ReplicaId) {
        if self.decided.is_empty() {
            return;
        }
        let decided = std::mem::take(&mut self.decided);
        let Some(node) = self.nodes.get_mut(&id) else { return };
        let (Some(group), Some(core)) = (node.group.as_ref(), node.core.as_mut()) else { return };
        let leads = group.leading().is_some();
        let key = |publisher, seq| (PUBEND, tidings_delivery::PublisherId(publisher), seq);
        let outcomes = decided
            .into_iter()
            .filter_map(|action| match action {
                Action::Acked { publisher, seq, tick } => Some(Outcome::Acked { key: key(publisher, seq), tick }),
                Action::Refused { publisher, seq, .. } => {
                    Some(Outcome::Refused { key: key(publisher, seq), why: String::new(), leads })
                }
                Action::BecameLeader { .. } => Some(Outcome::Leads(PUBEND)),
                Action::Confirmed { at } => Some(Outcome::Confirmed { pubend: PUBEND, at }),
                _ => None,
            })
            .collect();
        let effects = core.outcomes(&mut node.log, self.now, outcomes);
        self.effects(id, effects);
    }

    /// Carries out what a replica's core asks.
    fn effects(&mut self, id: ReplicaId, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Reply { publisher, action } => {
                    self.send(Packet::Reply { from: id, publisher, action: *action })
                }
                Effect::Propose(records) => {
                    self.batched += records.len();
                    self.input(id, Input::PublishAllAt(records));
                }
                Effect::Delivered { tick, key, opened } => self.judge.delivered(id, opened, tick, key),
                Effect::Opened { found: false } => self.core_counts.0 += 1,
                Effect::Opened { found: true } => self.core_counts.1 += 1,
                Effect::Closed => self.core_counts.2 += 1,
                Effect::Broken(message) => self.judge.fail(format!("replica {id}'s core: {message}")),
            }
        }
    }

    /// A publish reaches replica `to`'s core.
    pub(super) fn core_publish(&mut self, to: ReplicaId, publisher: u64, seq: u64) {
        let now = self.now;
        let Some(node) = self.nodes.get_mut(&to) else { return };
        let (Some(group), Some(core)) = (node.group.as_ref(), node.core.as_mut()) else { return };
        let leads = group.leading().is_some();
        let effects = core.publish(&mut node.log, now, leads, publisher, seq);
        self.effects(to, effects);
    }

    /// One turn of every running core, and its log's due sync.
    pub(crate) fn core_turns(&mut self) {
        let now = self.now;
        for id in self.ids.clone() {
            if self.stalled(id) {
                continue;
            }
            let Some(node) = self.nodes.get_mut(&id) else { continue };
            let (Some(group), Some(core)) = (node.group.as_ref(), node.core.as_mut()) else { continue };
            let mut effects = core.sync(&mut node.log, now);
            effects.extend(core.turn(&mut node.log, now, group));
            self.effects(id, effects);
        }
    }

    /// Whether the replica that leads has the pubend open (`core` mode's quiet end).
    pub(crate) fn core_settled(&self) -> bool {
        let hosted = |id: &ReplicaId| self.nodes[id].core.as_ref().is_some_and(Core::hosted);
        !self.core || self.leader().is_some_and(|id| hosted(&id))
    }
}
