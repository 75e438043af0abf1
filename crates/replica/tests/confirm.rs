//! A leader's confirmations (`GroupSettings::confirm_lead`, `Action::Confirmed`): the host's
//! engine tells silence only up to the last one, so a confirmation must never come for a time
//! at which another replica could already lead (docs/replication.md, "Silence").
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use tidings_replica::{GroupSettings, ReplicaId};

const ALL: [ReplicaId; 3] = [1, 2, 3];

/// A leader confirms its lead at every tick while a quorum answers; cut off, it confirms no
/// time after its last answered heartbeat, and the successor confirms only times after it won.
#[test]
fn a_leader_confirms_only_while_a_quorum_answers_and_never_past_its_successors_election() {
    let mut c = Cluster::with(3, |settings| GroupSettings { confirm_lead: true, hand_back: false, ..settings });
    c.run(30, &ALL);
    let first = c.leader().expect("a leader");
    let before_cut = c.now;
    c.run(10, &ALL);
    let mine: Vec<u64> = c.confirmed.iter().filter(|(id, ..)| *id == first).map(|&(_, at, _)| at).collect();
    assert!(mine.len() >= 8, "a confirmation a tick: {mine:?}");
    assert!(mine.iter().any(|&at| at > before_cut), "{mine:?}");

    // Cut off: its heartbeats go nowhere, a mate takes over.
    let cut_at = c.now;
    c.cut.insert(first);
    c.confirmed.clear();
    c.run(60, &ALL);
    let successor = c.leader().filter(|&l| l != first).expect("a mate leads");
    let stale: Vec<_> = c.confirmed.iter().filter(|(id, ..)| *id == first).collect();
    assert!(stale.is_empty(), "the cut-off leader confirmed a time after it was cut off at {cut_at}: {stale:?}");
    let new: Vec<u64> = c.confirmed.iter().filter(|(id, ..)| *id == successor).map(|&(_, at, _)| at).collect();
    assert!(!new.is_empty(), "the successor confirms its lead");
    assert!(new.iter().all(|&at| at > cut_at), "the successor confirmed a time before it could lead: {new:?}");
}
