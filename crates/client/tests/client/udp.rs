//! The UDP transport against the fake broker.

use std::time::Duration;

use futures::StreamExt;
use tidings_client::{Client, ClientBuilder, ClientError, ReasonCode, Transport};
use tidings_wire::Frame;

use crate::fake::{bounded, UdpBroker};

fn udp(broker: &UdpBroker) -> ClientBuilder {
    Client::builder(broker.addr)
        .name("udp-client")
        .transport(Transport::Udp)
        .udp_retry_interval(Duration::from_millis(30))
        .request_timeout(Duration::from_secs(2))
}

#[tokio::test]
async fn udp_publish_reaches_a_udp_subscriber() {
    let broker = UdpBroker::start().await;
    let subscriber = bounded("connect", udp(&broker).connect()).await.unwrap();
    assert_eq!(subscriber.server_name().as_deref(), Some("fake-udp"));
    let publisher = bounded("connect", udp(&broker).connect()).await.unwrap();
    let mut sub = bounded("subscribe", subscriber.subscribe("sensors.>")).await.unwrap();
    publisher.publish("sensors.a.temp", "19.0").await.unwrap();
    let d = bounded("delivery", sub.next()).await.unwrap();
    assert_eq!((d.subscription, d.topic.as_str(), &d.payload[..]), (sub.id(), "sensors.a.temp", &b"19.0"[..]));
    assert!(bounded("ping", publisher.ping()).await.unwrap() < Duration::from_secs(2));
}

#[tokio::test]
async fn udp_requests_are_retried_until_the_pong_arrives() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", udp(&broker).connect()).await.unwrap();
    broker.shared.lock().drop_pings = 2;
    let sub = bounded("subscribe", client.subscribe("lossy")).await.unwrap();
    let state = broker.shared.lock();
    assert_eq!(state.subscribes_for(sub.id()), 3, "sent twice into the void, then answered");
    assert_eq!(state.live_subscriptions(), 1, "a repeated SUBSCRIBE is a renewal");
}

#[tokio::test]
async fn udp_keepalive_renews_every_subscription() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", udp(&broker).udp_ttl(Duration::from_millis(150)).connect()).await.unwrap();
    let a = bounded("subscribe a", client.subscribe("a")).await.unwrap();
    let b = bounded("subscribe b", client.subscribe("b")).await.unwrap();
    broker
        .shared
        .wait_until("two renewals each", |s| s.subscribes_for(a.id()) >= 3 && s.subscribes_for(b.id()) >= 3)
        .await;
    let pings = broker.shared.lock().received.iter().filter(|(_, f)| matches!(f, Frame::Ping(_))).count();
    assert!(pings >= 4, "keepalive sends a PING too ({pings})");
}

#[tokio::test]
async fn udp_refusal_is_returned_from_subscribe() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", udp(&broker).connect()).await.unwrap();
    let err = bounded("subscribe", client.subscribe("x.invalid")).await.unwrap_err();
    assert_eq!(err.reason(), Some(ReasonCode::InvalidPattern), "{err:?}");
    assert_eq!(client.subscription_count(), 0);
    bounded("still usable", client.subscribe("x.ok")).await.unwrap();
}

#[tokio::test]
async fn udp_unsubscribe_and_close_tell_the_broker() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", udp(&broker).connect()).await.unwrap();
    let a = bounded("subscribe", client.subscribe("a")).await.unwrap();
    let mut b = bounded("subscribe", client.subscribe("b")).await.unwrap();
    bounded("unsubscribe", a.unsubscribe()).await.unwrap();
    assert_eq!(broker.shared.lock().live_subscriptions(), 1);
    bounded("close", client.close()).await.unwrap();
    broker.shared.wait_until("DISCONNECT", |s| s.live_subscriptions() == 0).await;
    assert!(bounded("stream end", b.next()).await.is_none());
    assert!(b.error().is_none());
    assert!(matches!(client.publish("a", "late").await, Err(ClientError::Closed)));
}

#[tokio::test]
async fn udp_connect_times_out_when_nobody_answers() {
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let builder = Client::builder(silent.local_addr().unwrap())
        .transport(Transport::Udp)
        .udp_retry_interval(Duration::from_millis(20))
        .connect_timeout(Duration::from_millis(200));
    let err = bounded("connect", builder.connect()).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn udp_subscriptions_come_back_after_a_broker_restart() {
    let broker = UdpBroker::start().await;
    let client = bounded("connect", udp(&broker).udp_ttl(Duration::from_millis(90)).connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("r.>")).await.unwrap();
    broker.shared.lock().forget_subscriptions();
    broker.shared.wait_until("renewed by the keepalive", |s| s.live_subscriptions() == 1).await;
    client.publish("r.1", "back").await.unwrap();
    assert_eq!(&bounded("delivery", sub.next()).await.unwrap().payload[..], b"back");
}
