//! What `/state` shows of the replica groups (`tidings info` prints it): each group's members
//! (voters and learners, by broker name), leader, term, log positions, snapshot traffic and, on
//! the leader, each follower's lag.

use tidings_replica::ReplicaId;

use super::Replicas;

impl Replicas {
    /// A broker's name for a replica id: its own, a mate's, else the id.
    pub(super) fn name(&self, id: ReplicaId) -> String {
        match id == self.me {
            true => self.cluster.name().to_string(),
            false => self.mates.get(&id).map_or_else(|| id.to_string(), |m| m.to_string()),
        }
    }

    /// Every group's standing, for `/state` and the metrics.
    pub(in crate::guaranteed) fn states(&self) -> Vec<crate::guaranteed::ReplicaGroupState> {
        let name = |id: ReplicaId| self.name(id);
        self.groups
            .iter()
            .map(|(pubend, group)| {
                let status = group.replica.status();
                let mut lag: Vec<(String, u64)> = status.lag.iter().map(|&(id, behind)| (name(id), behind)).collect();
                lag.sort();
                crate::guaranteed::ReplicaGroupState {
                    pubend: format!("{:016x}", pubend.0),
                    // The creation order (host first) while the members are the creation voters.
                    voters: match status.voters.len() == group.voters.len()
                        && group.voters.iter().all(|v| status.voters.contains(v))
                    {
                        true => group.voters.iter().map(|&v| name(v)).collect(),
                        false => status.voters.iter().map(|&v| name(v)).collect(),
                    },
                    learners: status.learners.iter().map(|&v| name(v)).collect(),
                    leader: status.leader.map(name),
                    term: status.term,
                    last_index: status.last_index,
                    commit: status.commit,
                    applied: status.applied,
                    first_index: status.first_index,
                    log_bytes: status.log_bytes,
                    snapshots_taken: status.snapshots.taken,
                    snapshots_sent: status.snapshots.sent,
                    snapshots_received: status.snapshots.received,
                    snapshots_refused: status.snapshots.refused,
                    snapshots_too_large: status.snapshots.too_large,
                    snapshot_chunks_sent: status.snapshots.chunks_sent,
                    snapshot_chunks_queued: status.snapshots.chunks_queued,
                    snapshot_chunks_received: status.snapshots.chunks_received,
                    snapshot_chunks_refused: status.snapshots.chunks_refused,
                    fenced: status.fenced,
                    started: group.started,
                    lag,
                }
            })
            .collect()
    }
}
