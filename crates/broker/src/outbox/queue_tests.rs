//! The queue's rules, without a lock, a runtime or a socket.

use super::*;

#[derive(Default)]
struct Sub(AtomicU32);

impl Subscription for Sub {
    fn missed(&self) -> &AtomicU32 {
        &self.0
    }
}

fn limits(max_messages: usize, policy: OverflowPolicy) -> SlowConsumer {
    SlowConsumer { max_messages, policy, ..SlowConsumer::default() }
}

fn numbered(n: u8) -> Message {
    Message::new("t", &[], Bytes::from(vec![n]), 0).unwrap()
}

fn size() -> usize {
    DELIVER_HEADER_LEN + numbered(0).encoded_len()
}

/// The payloads and `missed` counts of the deliveries in `items`.
fn deliveries(items: &VecDeque<Item<Sub>>) -> Vec<(u8, u32)> {
    items
        .iter()
        .filter_map(|item| match item {
            Item::Deliver(_, message, missed) => Some((message.payload()[0], *missed)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_push_charges_its_bytes_and_says_when_the_writer_must_wake() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(8, OverflowPolicy::Drop);
    let first = q.push(&sub, &numbered(1), &l);
    assert_eq!(first, Pushed { queued: true, was_empty: true, charge: BUDGET_RESERVE, ..Pushed::default() });
    let second = q.push(&sub, &numbered(2), &l);
    assert!(second.queued && !second.was_empty);
    assert_eq!(second.charge, 0, "the first push's reserve covers the next");
    assert_eq!((q.bytes, q.held), (2 * size(), 2 * size()));
    assert_eq!(q.charged_total(), BUDGET_RESERVE);
}

#[test]
fn the_reserve_is_given_back_once_the_queue_drains_and_kept_while_it_is_busy() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(1 << 20, OverflowPolicy::Drop);
    // More than one reserve's worth: charges come a reserve at a time, never more than needed.
    let n = 2 * BUDGET_RESERVE / size() + 3;
    let mut charged: usize = (0..n).map(|i| q.push(&sub, &numbered(i as u8), &l).charge).sum();
    assert_eq!(charged % BUDGET_RESERVE, 0);
    assert!(charged >= n * size() && charged < n * size() + BUDGET_RESERVE, "{charged}");
    assert_eq!(q.charged_total(), charged);
    while !q.items.is_empty() {
        q.take(&mut VecDeque::new(), &l);
    }
    charged += q.push(&sub, &numbered(0), &l).charge;
    let mut refunded = q.written(n * size());
    assert!(q.spare <= BUDGET_RESERVE, "a busy queue keeps at most one reserve");
    assert_eq!(q.charged_total(), size() + q.spare, "what is queued stays charged");
    q.take(&mut VecDeque::new(), &l);
    refunded += q.written(size());
    assert_eq!(q.charged_total(), 0, "a drained queue holds nothing against the budget");
    assert_eq!(refunded, charged, "every byte charged is refunded once");
}

#[test]
fn past_half_full_a_push_is_congested_unless_the_queue_was_given_up_on() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(4, OverflowPolicy::Drop);
    assert!(!q.push(&sub, &numbered(1), &l).congested);
    assert!(!q.push(&sub, &numbered(2), &l).congested, "half full is not past half");
    assert!(q.push(&sub, &numbered(3), &l).congested);
    q.slow = true;
    assert!(!q.push(&sub, &numbered(4), &l).congested, "a slow queue holds no publisher back");
}

#[test]
fn the_drop_policy_drops_the_new_delivery_and_the_next_one_queued_carries_the_count() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(2, OverflowPolicy::Drop);
    q.push(&sub, &numbered(1), &l);
    q.push(&sub, &numbered(2), &l);
    let dropped = q.push(&sub, &numbered(3), &l);
    assert_eq!((dropped.queued, dropped.dropped, dropped.charge), (false, 1, 0));
    assert_eq!(dropped.warn_dropped, Some(1), "the first drop is named in the log");
    assert_eq!(q.push(&sub, &numbered(4), &l).warn_dropped, None, "the next within 10 s is not");
    let mut batch = VecDeque::new();
    q.take(&mut batch, &l);
    q.push(&sub, &numbered(5), &l);
    let mut newer = VecDeque::new();
    q.take(&mut newer, &l);
    assert_eq!(deliveries(&batch), [(1, 0), (2, 0)]);
    assert_eq!(deliveries(&newer), [(5, 2)]);
}

#[test]
fn drop_oldest_makes_room_by_dropping_the_oldest_delivery_and_never_congests() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(3, OverflowPolicy::DropOldest);
    assert!(q.push_frame(Bytes::from_static(b"ping")), "the first frame finds the queue empty");
    let mut refunded = 0;
    for n in 0..6 {
        let pushed = q.push(&sub, &numbered(n), &l);
        assert!(pushed.queued && !pushed.congested);
        refunded += pushed.refund;
    }
    assert_eq!(refunded, 4 * size(), "the four dropped deliveries are refunded");
    assert_eq!(q.held, 2 * size());
    let mut batch = VecDeque::new();
    q.take(&mut batch, &l);
    assert!(matches!(batch[0], Item::Frame(_)), "control frames are never dropped");
    assert_eq!(deliveries(&batch).iter().map(|d| d.0).collect::<Vec<_>>(), [4, 5]);
    let reported: u32 = deliveries(&batch).iter().map(|d| d.1).sum::<u32>() + sub.0.load(Ordering::Relaxed);
    assert_eq!(reported, 4, "every drop is reported once");
}

#[test]
fn the_disconnect_policy_empties_the_queue_and_closes_it_with_an_error() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(1, OverflowPolicy::Disconnect);
    q.push(&sub, &numbered(1), &l);
    let overflow = q.push(&sub, &numbered(2), &l);
    assert!(overflow.overflowed && !overflow.queued);
    assert_eq!((overflow.refund, q.held, q.items.len()), (size(), 0, 0));
    let mut batch = VecDeque::new();
    let (closing, _) = q.take(&mut batch, &l);
    let mut wire = bytes::BytesMut::from(&closing.unwrap()[..]);
    let frame = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap().unwrap();
    assert!(matches!(frame, Frame::Error(e) if e.reason() == Some(ReasonCode::SlowConsumer)));
}

#[test]
fn guaranteed_deliveries_go_past_the_limit_and_say_when_it_is_reached() {
    let mut q: Queue<Sub> = Queue::default();
    let l = limits(2, OverflowPolicy::Drop);
    let id = (SubId(1), PubendId(1), Tick(1));
    let full: Vec<bool> = (1..=3).map(|n| q.push_guaranteed(id, &numbered(n), &l).1).collect();
    assert_eq!(full, [false, true, true]);
    assert_eq!(q.items.len(), 3, "nothing guaranteed is dropped");
}

#[test]
fn a_slow_queue_is_forgiven_once_the_writer_finds_it_below_a_quarter_full() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(8, OverflowPolicy::Drop);
    for n in 0..3 {
        q.push(&sub, &numbered(n), &l);
    }
    q.slow = true;
    q.take(&mut VecDeque::new(), &l);
    assert!(q.slow, "three of eight is not below a quarter");
    q.take(&mut VecDeque::new(), &l);
    assert!(!q.slow);
}

#[test]
fn what_was_written_cut_or_discarded_is_refunded_once() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(8, OverflowPolicy::Drop);
    let mut charged = q.push(&sub, &numbered(1), &l).charge;
    let mut batch = VecDeque::new();
    q.take(&mut batch, &l);
    charged += q.push(&sub, &numbered(2), &l).charge;
    let mut refunded = q.cut();
    assert_eq!(q.charged_total(), size(), "the queued delivery and the spare go; the batch being written stays held");
    refunded += q.written(size());
    charged += q.push(&sub, &numbered(3), &l).charge;
    let (items, _, held) = q.discard();
    assert_eq!((items.len(), q.charged_total()), (1, 0));
    assert_eq!(refunded + held, charged, "every byte charged is refunded once");
}

#[test]
fn a_delivery_larger_than_the_reserve_charges_what_the_spare_lacks() {
    let (mut q, sub) = (Queue::default(), Arc::new(Sub::default()));
    let l = limits(8, OverflowPolicy::Drop);
    let small = q.push(&sub, &numbered(1), &l).charge;
    let large = Message::new("t", &[], Bytes::from(vec![0; 2 * BUDGET_RESERVE]), 0).unwrap();
    let large_size = DELIVER_HEADER_LEN + large.encoded_len();
    let charged = small + q.push(&sub, &large, &l).charge;
    assert_eq!(charged, size() + large_size, "the spare is used first, and nothing is kept beyond");
    assert_eq!((q.spare, q.charged_total()), (0, charged));
}
