//! Guaranteed publishing against the fake broker: the window, acknowledgements, refusals, and
//! a publish whose acknowledgement was lost with its connection; guaranteed subscriptions,
//! their acknowledgements, and the gap a re-subscription after a lost connection reports.

// Test setup helpers: a panic here fails the test that called them, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use tidings_client::{
    Backoff, Client, ClientBuilder, ClientError, DeliveryMode, Event, Position, PubendId, PublisherId, ReasonCode,
    SubscribeOptions, Tick, Transport,
};

use crate::fake::{bounded, Behaviour, TcpBroker, UdpBroker};

fn fast(broker: &TcpBroker) -> ClientBuilder {
    Client::builder(broker.addr)
        .reconnect(Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(50), max_attempts: None })
        .request_timeout(Duration::from_secs(3))
}

#[tokio::test]
async fn guaranteed_publishes_are_acknowledged_in_sequence_within_the_window() {
    let broker = TcpBroker::start().await;
    let client =
        bounded("connect", fast(&broker).publisher_id(PublisherId(42)).guaranteed_window(16).connect()).await.unwrap();
    let mut pending = Vec::new();
    for i in 0..500u32 {
        let message = tidings_client::Message::new("g.t", &[], Bytes::from(i.to_be_bytes().to_vec()), 0).unwrap();
        pending.push(bounded("send", client.send_guaranteed(message)).await.unwrap());
        assert!(client.guaranteed_in_flight() <= 16, "the window holds at most 16 publishes");
    }
    let mut last_tick = 0;
    for (i, ack) in pending.into_iter().enumerate() {
        let receipt = bounded("ack", ack).await.unwrap();
        assert_eq!((receipt.publisher, receipt.seq, receipt.pubend), (PublisherId(42), i as u64 + 1, PubendId(1)));
        assert!(receipt.tick.0 > last_tick, "ticks increase with the sequence");
        last_tick = receipt.tick.0;
    }
    let log = broker.shared.lock().log.clone();
    assert_eq!(log.len(), 500);
    assert!(log.iter().enumerate().all(|(i, (id, seq, payload))| *id == PublisherId(42)
        && *seq == i as u64 + 1
        && payload[..] == (i as u32).to_be_bytes()));
    assert_eq!(client.guaranteed_in_flight(), 0);
}

#[tokio::test]
async fn a_publish_whose_acknowledgement_was_lost_is_sent_again_and_logged_once() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let receipt = bounded("publish", client.publish_guaranteed("g.unacked", &[], Bytes::from_static(b"x")))
        .await
        .expect("the retry after the reconnect is acknowledged");
    assert_eq!(receipt.seq, 1);
    let state = broker.shared.lock();
    assert!(state.accepted >= 2, "the first connection dropped before the acknowledgement");
    assert_eq!(state.log.len(), 1, "the retry was recognised, not logged again");
    let sent = state.received.iter().filter(|(_, f)| matches!(f, tidings_wire::Frame::GuaranteedPublish(_))).count();
    assert!(sent >= 2, "the publish was sent on both connections");
}

#[tokio::test]
async fn a_refused_publish_fails_with_the_reason_and_frees_its_place() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).guaranteed_window(1).connect()).await.unwrap();
    let refused = bounded("refused", client.publish_guaranteed("g.refuse", &[], Bytes::new())).await;
    assert!(matches!(refused, Err(ref e) if e.reason() == Some(ReasonCode::InvalidTopic)), "{refused:?}");
    let ok = bounded("next", client.publish_guaranteed("g.ok", &[], Bytes::new())).await.unwrap();
    assert_eq!(ok.seq, 2, "the refused publish used its number; the window place came back");
    assert!(client.is_connected(), "a refusal does not close the session");
}

#[tokio::test]
async fn closing_the_client_fails_every_publish_still_waiting() {
    let broker = TcpBroker::start_with(Behaviour { stall: true, ..Behaviour::default() }).await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let message = tidings_client::Message::new("g.t", &[], Bytes::new(), 0).unwrap();
    let pending = bounded("send", client.send_guaranteed(message)).await.unwrap();
    bounded("close", client.close()).await.unwrap();
    assert!(matches!(bounded("outcome", pending).await, Err(ClientError::Closed)));
}

#[tokio::test]
async fn guaranteed_publishing_over_udp_is_refused_by_the_client() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", Client::builder(broker.addr).transport(Transport::Udp).connect()).await.unwrap();
    let err = client.publish_guaranteed("g.t", &[], Bytes::new()).await.unwrap_err();
    assert!(matches!(err, ClientError::Unsupported { transport: "UDP", .. }), "{err}");
}

/// A client with a guaranteed subscription to `g.>` that has published ticks 1..=3 there.
async fn subscribed_with_three_published() -> (TcpBroker, Client, tidings_client::Subscription) {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let options = SubscribeOptions::new("g.>").mode(DeliveryMode::Guaranteed);
    let sub = bounded("subscribe", client.subscribe_with(options)).await.unwrap();
    for i in 0..3u8 {
        bounded("publish", client.publish_guaranteed("g.t", &[], Bytes::from(vec![i]))).await.unwrap();
    }
    (broker, client, sub)
}

fn acks(broker: &TcpBroker) -> Vec<u64> {
    let state = broker.shared.lock();
    state
        .received
        .iter()
        .filter_map(|(_, f)| match f {
            tidings_wire::Frame::DeliveryAck(a) => Some(a.tick.0),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_guaranteed_subscription_is_confirmed_then_delivers_positions_and_acknowledges_them() {
    let (broker, _client, mut sub) = subscribed_with_three_published().await;
    for i in 0..3u8 {
        let d = bounded("delivery", sub.recv()).await.unwrap();
        assert_eq!(d.position, Some(Position { pubend: PubendId(1), tick: Tick(u64::from(i) + 1) }));
        assert_eq!(d.payload[..], [i]);
    }
    broker
        .shared
        .wait_until("the broker hears the acknowledgement of tick 3", |s| {
            s.received.iter().any(|(_, f)| matches!(f, tidings_wire::Frame::DeliveryAck(a) if a.tick == Tick(3)))
        })
        .await;
    assert!(acks(&broker).windows(2).all(|w| w[0] < w[1]), "acknowledgements only advance");
}

#[tokio::test]
async fn a_subscription_set_up_again_after_a_lost_connection_reports_the_ticks_it_may_have_missed() {
    let (broker, client, mut sub) = subscribed_with_three_published().await;
    broker.log_unseen(2);
    broker.close_all(None);
    bounded("reconnect", async {
        while !client.is_connected() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    bounded("resubscribed", broker.shared.wait_until("resubscribed", |s| s.accepted >= 2)).await;
    bounded("publish", client.publish_guaranteed("g.t", &[], Bytes::from_static(b"after"))).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 5 {
        match bounded("event", sub.next_event()).await.unwrap() {
            Event::Message(d) => seen.push(format!("m{}", d.position.unwrap().tick.0)),
            Event::Gap(g) => seen.push(format!("gap{}-{}", g.from.0, g.to.0)),
        }
    }
    assert_eq!(seen, ["m1", "m2", "m3", "gap4-5", "m6"]);
}

#[tokio::test]
async fn guaranteed_subscriptions_over_udp_are_refused_by_the_client() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", Client::builder(broker.addr).transport(Transport::Udp).connect()).await.unwrap();
    let options = SubscribeOptions::new("g.>").mode(DeliveryMode::Guaranteed);
    assert!(matches!(client.subscribe_with(options).await, Err(ClientError::Unsupported { .. })));
}

/// A subscription resumed from the application's checkpoint is not handed what the checkpoint
/// holds: those deliveries are counted as skipped and acknowledged, and the checkpoint moves on
/// with what is handed over (issue 38, failure C: a durable subscriber printed its last lines
/// again after its broker was killed).
#[tokio::test]
async fn a_subscription_resumed_from_a_checkpoint_skips_and_acknowledges_what_it_holds() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut held = tidings_client::Checkpoint::new();
    held.advance(PubendId(1), Tick(2));
    let options = SubscribeOptions::new("g.>").mode(DeliveryMode::Guaranteed).resume_from(held);
    let mut sub = bounded("subscribe", client.subscribe_with(options)).await.unwrap();
    for i in 0..3u8 {
        bounded("publish", client.publish_guaranteed("g.t", &[], Bytes::from(vec![i]))).await.unwrap();
    }
    let d = bounded("delivery", sub.recv()).await.unwrap();
    assert_eq!(d.position, Some(Position { pubend: PubendId(1), tick: Tick(3) }), "ticks 1 and 2 are held");
    assert!(!d.redelivered);
    assert_eq!(sub.skipped(), 2);
    assert_eq!(sub.checkpoint().iter().collect::<Vec<_>>(), [(PubendId(1), Tick(3))]);
    broker
        .shared
        .wait_until("the broker hears tick 3 acknowledged", |s| {
            s.received.iter().any(|(_, f)| matches!(f, tidings_wire::Frame::DeliveryAck(a) if a.tick == Tick(3)))
        })
        .await;
}
