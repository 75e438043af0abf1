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
    assert_eq!(first, Pushed { queued: true, was_empty: true, charge: size(), ..Pushed::default() });
    let second = q.push(&sub, &numbered(2), &l);
    assert!(second.queued && !second.was_empty);
    assert_eq!((q.bytes, q.held), (2 * size(), 2 * size()));
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
    q.push(&sub, &numbered(1), &l);
    let mut batch = VecDeque::new();
    q.take(&mut batch, &l);
    q.push(&sub, &numbered(2), &l);
    assert_eq!(q.cut(), size(), "the queued delivery goes; the batch being written stays held");
    assert_eq!(q.held, size());
    assert_eq!(q.written(size()), size());
    q.push(&sub, &numbered(3), &l);
    let (items, _, held) = q.discard();
    assert_eq!((items.len(), held, q.held), (1, size(), 0));
}
