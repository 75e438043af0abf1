use std::collections::BTreeMap;

use super::*;

const P: PubendId = PubendId(1);
const Q: PubendId = PubendId(2);
const A: MemberId = MemberId(1);
const B: MemberId = MemberId(2);
const C: MemberId = MemberId(3);

fn leased(queue: &mut WorkQueue<u64>) -> Vec<Lease<u64>> {
    let mut out = Vec::new();
    queue.dispatch(&mut out);
    out
}

fn who(leases: &[Lease<u64>]) -> Vec<(MemberId, u64)> {
    leases.iter().map(|l| (l.member, l.tick.0)).collect()
}

#[test]
fn each_message_goes_to_one_member_round_robin_within_their_windows() {
    let mut q = WorkQueue::default();
    q.join(A, 2);
    q.join(B, 1);
    for t in 1..=5 {
        q.offer(P, Tick(t), t);
    }
    let first = leased(&mut q);
    assert_eq!(who(&first), [(A, 1), (B, 2), (A, 3)], "round robin, none past its window");
    assert_eq!(q.depth(), (2, 3));
    assert!(leased(&mut q).is_empty(), "nobody has room");
    assert_eq!(q.ack(B, P, Tick(2)), Ok(None), "tick 1 is still open: the group acknowledges nothing");
    assert_eq!(who(&leased(&mut q)), [(B, 4)]);
}

#[test]
fn the_group_acknowledges_only_below_the_oldest_open_tick() {
    let mut q = WorkQueue::default();
    q.join(A, 10);
    q.join(B, 10);
    for t in [10, 20, 30] {
        q.offer(P, Tick(t), t);
    }
    assert_eq!(who(&leased(&mut q)), [(A, 10), (B, 20), (A, 30)]);
    assert_eq!(q.ack(A, P, Tick(30)), Ok(None));
    assert_eq!(q.ack(A, P, Tick(10)), Ok(Some(Tick(19))), "up to the still-open 20");
    assert_eq!(q.ack(B, P, Tick(20)), Ok(Some(Tick(30))), "everything delivered is done");
}

#[test]
fn only_the_member_holding_a_tick_releases_it_and_only_once() {
    let mut q = WorkQueue::default();
    q.join(A, 1);
    q.join(B, 1);
    q.offer(P, Tick(5), 5);
    assert_eq!(who(&leased(&mut q)), [(A, 5)]);
    assert_eq!(q.ack(B, P, Tick(5)), Err(AckRefused::NotLeased));
    assert_eq!(q.ack(C, P, Tick(5)), Err(AckRefused::UnknownMember));
    assert_eq!(q.ack(A, P, Tick(5)), Ok(Some(Tick(5))));
    assert_eq!(q.ack(A, P, Tick(5)), Err(AckRefused::NotLeased), "a second ack changes nothing");
}

#[test]
fn a_member_that_leaves_gives_its_leases_back_flagged_to_the_next_member_first() {
    let mut q = WorkQueue::default();
    q.join(A, 2);
    q.join(B, 2);
    for t in 1..=6 {
        q.offer(if t % 2 == 0 { Q } else { P }, Tick(t), t);
    }
    assert_eq!(who(&leased(&mut q)), [(A, 1), (B, 2), (A, 3), (B, 4)]);
    assert_eq!(q.ack(A, P, Tick(1)), Ok(Some(Tick(2))), "P: 1 done, 3 open");
    assert_eq!(q.leave(A), 1, "A held 3");
    q.join(C, 4);
    let again = leased(&mut q);
    assert_eq!(who(&again), [(C, 3), (C, 5), (C, 6)], "the returned one first, then the rest in order");
    assert!(again[0].redelivered && !again[1].redelivered && !again[2].redelivered);
    assert_eq!(q.ack(A, P, Tick(3)), Err(AckRefused::UnknownMember), "a gone member's late ack is no ack");
    assert_eq!(q.ack(C, P, Tick(3)), Ok(Some(Tick(4))), "up to the still-open 5");
    assert_eq!(q.ack(C, P, Tick(5)), Ok(Some(Tick(5))));
}

#[test]
fn a_backlog_stays_in_the_logs_while_no_member_has_room_or_none_is_left() {
    let mut q: WorkQueue<u64> = WorkQueue::default();
    assert!(!q.wants_more(), "no member: the core keeps the messages");
    q.join(A, 1);
    for t in 1..=READY_BOUND as u64 {
        assert!(q.wants_more());
        q.offer(P, Tick(t), t);
    }
    assert!(!q.wants_more(), "the bound is reached");
    leased(&mut q);
    assert!(q.wants_more(), "one went to the member");
    q.offer(P, Tick(1), 1);
    assert_eq!(q.depth(), (READY_BOUND - 1, 1), "a tick offered again is ignored");
}

/// Many members, some leaving mid-stream with work in hand: every message is acknowledged
/// exactly once in total, by a member that held it, and the group's acknowledgement ends at
/// the last tick, never passing a tick some member still had to do.
#[test]
fn with_members_dying_every_message_is_done_exactly_once_and_nothing_is_acknowledged_early() {
    let mut q = WorkQueue::default();
    let mut next_member = 0;
    let mut live: Vec<MemberId> = Vec::new();
    let mut join = |q: &mut WorkQueue<u64>, live: &mut Vec<MemberId>| {
        next_member += 1;
        let id = MemberId(next_member);
        q.join(id, 1 + (next_member as usize % 3));
        live.push(id);
    };
    for _ in 0..3 {
        join(&mut q, &mut live);
    }
    let mut done: BTreeMap<u64, usize> = BTreeMap::new();
    let mut group_ack = Tick(0);
    let mut redelivered = 0;
    let mut held: Vec<Lease<u64>> = Vec::new();
    let (total, mut offered) = (500u64, 0u64);
    let mut step = 0u64;
    while done.len() < total as usize {
        step += 1;
        if offered < total && q.wants_more() {
            offered += 1;
            q.offer(P, Tick(offered), offered);
        }
        let mut out = Vec::new();
        q.dispatch(&mut out);
        redelivered += out.iter().filter(|l| l.redelivered).count();
        held.extend(out);
        if step.is_multiple_of(37) && live.len() > 1 {
            let gone = live.remove((step as usize / 37) % live.len());
            q.leave(gone);
            held.retain(|l| l.member != gone);
            join(&mut q, &mut live);
        } else if let Some(lease) = (!held.is_empty()).then(|| held.remove((step as usize * 7) % held.len())) {
            if let Some(prefix) = q.ack(lease.member, lease.pubend, lease.tick).unwrap() {
                assert!(prefix > group_ack);
                group_ack = prefix;
            }
            *done.entry(lease.message).or_default() += 1;
            let open_below = held.iter().any(|l| l.tick <= group_ack);
            assert!(!open_below, "the group acknowledged a tick a member still holds");
        }
        assert!(step < 100_000, "stuck at {} of {total}", done.len());
    }
    assert!(done.values().all(|n| *n == 1), "each done once");
    assert_eq!(done.len(), total as usize);
    assert!(redelivered > 0, "members left with work in hand");
    assert_eq!(group_ack, Tick(total), "the group acknowledged everything, in the end");
}

#[test]
fn a_keyed_group_keeps_each_key_on_one_member_and_a_leaving_member_moves_only_its_keys() {
    let mut q = WorkQueue::default();
    for member in [A, B, C] {
        q.join(member, 1000);
    }
    let owners = |q: &mut WorkQueue<u64>, from: u64| -> BTreeMap<u64, MemberId> {
        for t in from..from + 300 {
            q.offer_keyed(P, Tick(t), t, Some(tidings_wire::hash::mix(t % 30)));
        }
        let mut owner = BTreeMap::new();
        for lease in leased(q) {
            let key = lease.message % 30;
            assert_eq!(*owner.entry(key).or_insert(lease.member), lease.member, "key {key} on two members");
            assert!(!lease.redelivered || lease.member != B);
        }
        owner
    };
    let first = owners(&mut q, 1);
    for member in [A, B, C] {
        assert!(first.values().any(|m| *m == member), "{member:?} got no key of 30: {first:?}");
    }
    // B leaves with its leases: they and its keys go to A or C; A's and C's keys stay.
    let given_back = q.leave(B);
    assert!(given_back > 0);
    let back = leased(&mut q);
    assert!(back.iter().all(|l| l.redelivered && first[&(l.message % 30)] == B && l.member != B));
    let second = owners(&mut q, 1000);
    for (key, member) in &first {
        match *member == B {
            true => assert_ne!(second[key], B),
            false => assert_eq!(second[key], *member, "key {key} moved though its member stayed"),
        }
    }
    // A full member is passed over for the key's next member, not waited for.
    let mut q = WorkQueue::default();
    q.join(A, 1);
    q.join(B, 1);
    q.offer_keyed(P, Tick(1), 1, Some(7));
    q.offer_keyed(P, Tick(2), 2, Some(7));
    let both = leased(&mut q);
    assert_eq!(both.len(), 2);
    assert_ne!(both[0].member, both[1].member);
}
