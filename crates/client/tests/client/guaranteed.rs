//! Guaranteed publishing against the fake broker: the window, acknowledgements, refusals, and
//! a publish whose acknowledgement was lost with its connection.

use std::time::Duration;

use bytes::Bytes;
use tidings_client::{Backoff, Client, ClientBuilder, ClientError, PubendId, PublisherId, ReasonCode, Transport};

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
