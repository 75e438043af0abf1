//! The host keeps its pubend while it lives (`Input::HostLink`, docs/replication.md,
//! "Takeover"): a broker turns hand-back off so that a successor keeps the pubend it took over,
//! so nothing may give a live host's lead to a mate in the first place. A mate whose fence or
//! disk finished before the host's would otherwise win a new group's first election and open
//! the pubend while its host still serves its publishers.
#![allow(clippy::expect_used)] // helpers outside #[test] functions: a failed step is a failed test

mod cluster;

use cluster::Cluster;
use tidings_replica::{GroupSettings, Input, ReplicaId};

const ALL: [ReplicaId; 3] = [1, 2, 3];
const MATES: [ReplicaId; 2] = [2, 3];

/// The broker's settings: the successor keeps the lead (no hand-back).
fn broker_group() -> Cluster {
    Cluster::with(3, |settings| GroupSettings { hand_back: false, ..settings })
}

/// The mates' links: to the host and to each other, or to each other only.
fn host_link(c: &mut Cluster, up: bool) {
    for mate in MATES {
        let linked = ALL.iter().copied().filter(|&id| id != mate && (up || id != 1)).collect();
        c.input(mate, Input::Links { up: linked });
    }
}

/// A mate took the lead while the host was cut off, and keeps it once the host is back and
/// linked: the group, the successor and the other mate.
fn a_mate_leads_with_the_host_back() -> (Cluster, ReplicaId, ReplicaId) {
    let mut c = broker_group();
    c.cut.insert(1);
    host_link(&mut c, false);
    c.run(30, &ALL);
    let successor = c.leader().expect("a mate leads while the host is cut off");
    assert_ne!(successor, 1);
    c.cut.remove(&1);
    host_link(&mut c, true);
    c.input(1, Input::Links { up: MATES.to_vec() });
    c.run(10, &ALL);
    assert_eq!(c.leader(), Some(successor), "the successor keeps the lead when the host is back");
    let other = MATES.into_iter().find(|&m| m != successor).expect("two mates");
    (c, successor, other)
}

/// The host's clock starts 8 ticks late (its creation fence or its disk was slower): its mates,
/// told it is linked, hold their campaigns back, and the host wins the first election and keeps
/// it. Without the hold, mate 2 campaigns at its 11th tick, before the host's 10th, and wins.
#[test]
fn a_mate_ahead_of_a_linked_host_does_not_take_the_first_election() {
    let mut c = broker_group();
    host_link(&mut c, true);
    c.run_ticking(8, &ALL, &MATES);
    c.run(60, &ALL);
    assert_eq!(c.leaders, vec![(1, 1)], "only the host ever led");
    for mate in MATES {
        assert!(c.groups[&mate].serving().is_none(), "mate {mate} offers no state to serve from");
    }
    c.publish(1, 7, 1);
    c.run(5, &ALL);
    assert_eq!(c.acks.len(), 1, "the host acknowledges");
}

/// Once the host's link is down (it died or is cut off), a mate takes over at once: a few
/// ticks, not a whole election timeout (10 ticks and more).
#[test]
fn a_host_whose_link_drops_while_it_leads_is_taken_over_within_a_few_ticks() {
    let mut c = broker_group();
    host_link(&mut c, true);
    c.run(15, &ALL);
    assert_eq!(c.leader(), Some(1));
    c.cut.insert(1);
    host_link(&mut c, false);
    c.run(4, &ALL);
    let successor = c.leader().expect("a successor leads within four ticks");
    assert_ne!(successor, 1);
}

/// A linked host that never campaigns (its disk stalls, or it waits behind its wipe fence)
/// holds its mates back for one more election timeout, not for ever.
#[test]
fn a_linked_host_that_cannot_campaign_holds_its_mates_back_one_timeout_at_most() {
    let mut c = broker_group();
    host_link(&mut c, true);
    c.run_ticking(19, &ALL, &MATES);
    assert_eq!(c.leader(), None, "held back while the host is linked");
    c.run_ticking(6, &ALL, &MATES);
    let leader = c.leader().expect("a mate leads after the hold");
    assert_ne!(leader, 1);
}

/// A mate leads (the host was cut off at the election) and keeps the lead once the host is back;
/// then that leader dies. The host sees the drop at its tick and campaigns at once. The other
/// mate saw the drop too but has not ticked since: told its links (as the broker does before
/// every message), it is out of the lease at once and grants the host's pre-vote, so the host
/// leads while that mate's clock stands still. Were it still inside the lease, it would ignore
/// the pre-vote and the group would stay leaderless for a whole election timeout (seen: about
/// one process takeover in three took a second).
#[test]
fn a_follower_that_saw_its_leader_drop_grants_a_pre_vote_before_its_own_next_tick() {
    let (mut c, successor, other) = a_mate_leads_with_the_host_back();
    c.cut.insert(successor);
    c.input(1, Input::Links { up: vec![other] });
    c.input(other, Input::Links { up: vec![1] });
    c.run_ticking(2, &ALL, &[1]);
    assert_eq!(c.leader(), Some(1), "the host leads within two of its ticks, the other mate not ticking");
}

/// A mate leads, and the host misses an entry it commits with the other mate; then that leader
/// dies. The host sees the drop and campaigns at once, but cannot win: the other mate holds the
/// newer entry and refuses it. That mate must not hold its own campaign back for the host: it
/// leads within a few ticks. Held back (one more election timeout, 10 ticks), the process
/// takeover test took 1.1-1.6 s in about one kill of four.
#[test]
fn a_mate_does_not_hold_back_for_a_host_whose_log_is_behind_its_own() {
    let (mut c, successor, other) = a_mate_leads_with_the_host_back();
    // The host's messages are lost while the two mates commit one more entry.
    c.cut.insert(1);
    c.publish(successor, 7, 1);
    c.run(2, &ALL);
    assert_eq!(c.acks.len(), 1, "the two mates commit the entry");
    c.cut.remove(&1);
    c.cut.insert(successor);
    c.input(1, Input::Links { up: vec![other] });
    c.input(other, Input::Links { up: vec![1] });
    c.run(6, &ALL);
    assert_eq!(c.leader(), Some(other), "the mate holding the newer entry leads within six ticks");
}

/// A host back after a mate took its lead asks for it back (`Input::ClaimLead`, a relay
/// pubend's host: only it feeds the pubend) and gets it; a mate asking does nothing, and
/// without the ask the successor keeps the lead (`a_mate_leads_with_the_host_back`).
#[test]
fn a_host_that_claims_its_lead_back_gets_it_and_a_mate_claiming_does_not() {
    let (mut c, successor, other) = a_mate_leads_with_the_host_back();
    c.input(other, Input::ClaimLead);
    c.run(10, &ALL);
    assert_eq!(c.leader(), Some(successor), "a mate's claim moves nothing");
    c.input(1, Input::ClaimLead);
    c.run(10, &ALL);
    assert_eq!(c.leader(), Some(1), "the host leads again");
    c.publish(1, 7, 1);
    c.run(5, &ALL);
    assert_eq!(c.acks.len(), 1, "and acknowledges");
}
