//! The outbox with its lock, budget and writers' hand-over: what reaches the wire.

use std::sync::atomic::AtomicBool;

use bytes::BytesMut;
use tidings_wire::{GuaranteedDeliver, DELIVER_HEADER_LEN};

use super::encode::encode_batch;
use super::queue::MAX_BATCH;
use super::*;
use crate::config::OverflowPolicy;

fn outbox(max_messages: usize) -> Arc<Outbox> {
    let limits = SlowConsumer { max_messages, ..SlowConsumer::default() };
    Outbox::new(limits, Metrics::new(&mut prometheus_client::registry::Registry::default()), &QueueBudget::new(0))
}

fn message() -> Message {
    Message::new("t", &[], Bytes::from_static(b"p"), 0).unwrap()
}

#[test]
fn guaranteed_deliveries_are_queued_past_the_limit_and_say_when_it_is_reached() {
    let o = outbox(2);
    assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(1), &message()), GuaranteedPush::Queued);
    assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(2), &message()), GuaranteedPush::QueuedFull);
    assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(3), &message()), GuaranteedPush::QueuedFull);
    let mut batch = VecDeque::new();
    assert_eq!(o.take(&mut batch), None);
    assert_eq!(batch.len(), 3, "nothing guaranteed was dropped");
}

#[test]
fn whoever_waits_for_room_is_told_when_the_writer_takes_the_queue() {
    let o = outbox(1);
    o.push_guaranteed(SubId(1), PubendId(1), Tick(1), &message());
    let told = Arc::new(AtomicBool::new(false));
    let flag = told.clone();
    o.when_room(Box::new(move || flag.store(true, Ordering::SeqCst)));
    assert!(!told.load(Ordering::SeqCst), "the queue is still full");
    o.take(&mut VecDeque::new());
    assert!(told.load(Ordering::SeqCst));
    let again = Arc::new(AtomicBool::new(false));
    let flag = again.clone();
    o.when_room(Box::new(move || flag.store(true, Ordering::SeqCst)));
    assert!(again.load(Ordering::SeqCst), "an empty queue has room at once");
}

#[test]
fn the_writer_takes_a_long_queue_a_bounded_batch_at_a_time_and_its_bytes_with_it() {
    let o = outbox(65_536);
    for tick in 0..2_500 {
        o.push_guaranteed(SubId(1), PubendId(1), Tick(tick), &message());
    }
    o.push_frame(&Frame::Ping(tidings_wire::Ping { nonce: 1 }));
    let (queued, bytes) = o.depth();
    assert_eq!(queued, 2_501);
    let mut taken = Vec::new();
    let mut batch = VecDeque::new();
    while o.depth().0 > 0 {
        assert_eq!(o.take(&mut batch), None);
        let charged: usize = batch.iter().map(Item::charged).sum();
        taken.push((batch.len(), charged));
        batch.clear();
    }
    assert_eq!(taken.iter().map(|t| t.0).collect::<Vec<_>>(), [MAX_BATCH, MAX_BATCH, 2_501 - 2 * MAX_BATCH]);
    assert_eq!(taken.iter().map(|t| t.1).sum::<usize>(), bytes, "the bytes left with the batches");
    assert_eq!(o.depth(), (0, 0));
}

#[test]
fn a_closing_queue_takes_no_guaranteed_delivery() {
    let o = outbox(8);
    o.close_with(&Frame::Ping(tidings_wire::Ping { nonce: 1 }));
    assert_eq!(o.push_guaranteed(SubId(1), PubendId(1), Tick(1), &message()), GuaranteedPush::Closed);
}

#[test]
fn a_guaranteed_delivery_is_written_as_gdeliver() {
    let o = outbox(8);
    o.push_guaranteed(SubId(4), PubendId(5), Tick(6), &message());
    let mut batch = VecDeque::new();
    o.take(&mut batch);
    let (mut scratch, mut chunks) = (BytesMut::new(), VecDeque::new());
    assert_eq!(encode_batch(&mut batch, &mut scratch, &mut chunks).0, 1);
    let mut wire: BytesMut = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let frame = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap().unwrap();
    let expected =
        GuaranteedDeliver { id: SubId(4), pubend: PubendId(5), tick: Tick(6), message: message(), redelivered: false };
    assert_eq!(frame, Frame::GuaranteedDeliver(expected));
}

#[test]
fn missed_arrives_on_the_first_delivery_after_the_gap_not_on_an_older_one_still_queued() {
    let o = outbox(2);
    let target = Arc::new(Target::new(SubId(3), Arc::clone(&o)));
    let mut wake = Vec::new();
    let mut push = || o.push(&target, &message(), &mut wake);
    assert_ne!(push(), Push::Dropped);
    assert_ne!(push(), Push::Dropped);
    assert_eq!((push(), push()), (Push::Dropped, Push::Dropped), "the queue holds two");
    let mut older = VecDeque::new();
    o.take(&mut older);
    assert_ne!(o.push(&target, &message(), &mut wake), Push::Dropped);
    let mut newer = VecDeque::new();
    o.take(&mut newer);
    let missed = |batch: &mut VecDeque<Item<Target>>| -> Vec<u32> {
        let (mut scratch, mut chunks) = (BytesMut::new(), VecDeque::new());
        encode_batch(batch, &mut scratch, &mut chunks);
        let mut wire: BytesMut = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut out = Vec::new();
        while let Some(Frame::Deliver(d)) = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap() {
            out.push(d.missed);
        }
        out
    };
    assert_eq!(missed(&mut older), [0, 0], "the deliveries queued before the gap say nothing");
    assert_eq!(missed(&mut newer), [2], "the first one after it says two");
}

#[test]
fn drop_oldest_keeps_the_newest_deliveries_and_counts_what_it_dropped() {
    let limits = SlowConsumer { max_messages: 3, policy: OverflowPolicy::DropOldest, ..SlowConsumer::default() };
    let budget = QueueBudget::new(0);
    let o = Outbox::new(limits, Metrics::new(&mut prometheus_client::registry::Registry::default()), &budget);
    let target = Arc::new(Target::new(SubId(3), Arc::clone(&o)));
    let numbered = |n: u8| Message::new("t", &[], Bytes::from(vec![n]), 0).unwrap();
    let mut wake = Vec::new();
    o.push_frame(&Frame::Ping(tidings_wire::Ping { nonce: 9 }));
    for n in 0..8 {
        assert_eq!(o.push(&target, &numbered(n), &mut wake), Push::Queued, "never dropped nor congested");
    }
    // The queued PING takes one of the three places.
    assert_eq!(o.counts.dropped.load(Ordering::Relaxed), 6);
    let size = DELIVER_HEADER_LEN + numbered(0).encoded_len();
    assert_eq!(o.state.lock().held, 2 * size, "the dropped bytes were refunded");
    assert_eq!(budget.used(), o.held(), "the budget holds what the outbox says it holds");
    let mut batch = VecDeque::new();
    o.take(&mut batch);
    let (mut scratch, mut chunks) = (BytesMut::new(), VecDeque::new());
    encode_batch(&mut batch, &mut scratch, &mut chunks);
    let mut wire: BytesMut = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let mut frames = Vec::new();
    while let Some(frame) = Frame::decode(&mut wire, tidings_wire::DEFAULT_MAX_FRAME).unwrap() {
        frames.push(frame);
    }
    assert!(matches!(frames[0], Frame::Ping(_)), "control frames are never dropped: {frames:?}");
    let delivered: Vec<(u8, u32)> = frames[1..]
        .iter()
        .map(|f| match f {
            Frame::Deliver(d) => (d.message.payload()[0], d.missed),
            other => panic!("{other:?}"),
        })
        .collect();
    let payloads: Vec<u8> = delivered.iter().map(|(n, _)| *n).collect();
    assert_eq!(payloads, [6, 7], "the newest two, in order");
    let reported: u32 = delivered.iter().map(|(_, missed)| missed).sum::<u32>() + target.missed.load(Ordering::Relaxed);
    assert_eq!(reported, 6, "every drop is reported once: {delivered:?}");
}
