//! The TCP transport against the fake broker.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tidings_client::{
    Backoff, Client, ClientBuilder, ClientError, ConnectionEvent, Property, ReasonCode, SubscribeOptions, Value,
};
use tidings_wire::{Frame, Notice, Ping, WireError};

use crate::fake::{bounded, Behaviour, TcpBroker};

fn fast(broker: &TcpBroker) -> ClientBuilder {
    Client::builder(broker.addr)
        .name("test-client")
        .reconnect(Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(50), max_attempts: None })
        .request_timeout(Duration::from_secs(3))
}

fn payloads(frames: &[Frame]) -> Vec<Bytes> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Publish(m) => Some(m.payload()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn handshake_sends_the_client_name_and_learns_the_server_name() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    assert_eq!(client.server_name().as_deref(), Some("fake-broker"));
    assert!(client.is_connected());
    assert_eq!(broker.shared.lock().hellos, ["test-client"]);
}

#[tokio::test]
async fn publishes_arrive_in_order_and_flush_waits_for_all_of_them() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    for i in 0..2_000u32 {
        client.publish("load.test", Bytes::from(i.to_be_bytes().to_vec())).await.unwrap();
    }
    bounded("flush", client.flush()).await.unwrap();
    let got = payloads(&broker.shared.lock().frames_of(1));
    let want: Vec<Bytes> = (0..2_000u32).map(|i| Bytes::from(i.to_be_bytes().to_vec())).collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn deliveries_reach_the_subscription_whose_id_they_carry() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut temps = bounded("subscribe", client.subscribe("plant.*.temp")).await.unwrap();
    let mut trades = bounded("subscribe", client.subscribe("trades.>")).await.unwrap();
    assert_ne!(temps.id(), trades.id());
    let props = [Property::new("sym", "IBM"), Property::new("missed", 3i64)];
    client.publish_with("trades.nyse.ibm", &props, Bytes::from_static(b"buy")).await.unwrap();
    client.publish("plant.line3.temp", "21.5").await.unwrap();

    let t = bounded("trade delivery", trades.next()).await.unwrap();
    assert_eq!((t.subscription, t.topic.as_str(), &t.payload[..]), (trades.id(), "trades.nyse.ibm", &b"buy"[..]));
    assert_eq!(t.property("sym"), Some(&Value::Str("IBM".into())));
    assert_eq!(t.missed, 3);
    assert_eq!(trades.missed(), 3);
    assert!(t.sent_us <= t.received_us && t.latency() < Duration::from_secs(5));

    let p = bounded("temperature delivery", temps.next()).await.unwrap();
    assert_eq!((p.subscription, p.topic.as_str(), &p.payload[..]), (temps.id(), "plant.line3.temp", &b"21.5"[..]));
    assert!(temps.try_recv().is_none() && trades.try_recv().is_none(), "each message went to one subscription");
}

#[tokio::test]
async fn a_delivery_is_stamped_when_the_application_takes_it_not_when_the_socket_was_read() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("slow.consumer")).await.unwrap();
    client.publish("slow.consumer", "x").await.unwrap();
    bounded("flush", client.flush()).await.unwrap();
    // The consumer is busy elsewhere while the delivery waits in the subscription's queue.
    let wait = Duration::from_millis(200);
    tokio::time::sleep(wait).await;
    let d = bounded("delivery", sub.next()).await.unwrap();
    assert!(d.latency() >= wait, "latency {:?} must include the {wait:?} the consumer made it wait", d.latency());
    assert!(d.read_us <= d.received_us && d.wire_latency() <= d.latency());
}

#[tokio::test]
async fn subscribe_sends_pattern_and_selector_then_waits_for_the_pong() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let options = SubscribeOptions::new("trades.>").selector("price > 100");
    let sub = bounded("subscribe", client.subscribe_with(options)).await.unwrap();
    let frames = broker.shared.lock().frames_of(1);
    let Frame::Subscribe(s) = &frames[0] else { panic!("expected SUBSCRIBE first, got {frames:?}") };
    assert_eq!((s.id, s.pattern.as_str(), s.selector.as_deref()), (sub.id(), "trades.>", Some("price > 100")));
    assert!(matches!(frames[1], Frame::Ping(_)), "PING follows SUBSCRIBE");
    assert_eq!(client.subscription_count(), 1);
}

#[tokio::test]
async fn refused_subscribe_returns_the_reason_and_text_and_the_client_carries_on() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut good = bounded("subscribe", client.subscribe("a.>")).await.unwrap();

    let err = bounded("bad subscribe", client.subscribe("a.invalid")).await.unwrap_err();
    match &err {
        ClientError::Refused { reason, code, text } => {
            assert_eq!(*reason, Some(ReasonCode::InvalidPattern));
            assert_eq!(*code, ReasonCode::InvalidPattern.code());
            assert!(text.contains("a.invalid"), "{text}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    let err = bounded("bad selector", client.subscribe_with(SubscribeOptions::new("b").selector("bad"))).await;
    assert_eq!(err.unwrap_err().reason(), Some(ReasonCode::InvalidSelector));

    // The broker closed the connection after each ERROR; the client reconnected and re-sent
    // only the good subscription, which still delivers.
    broker.shared.wait_until("good subscription re-sent", |s| s.accepted >= 3 && s.subscriptions().len() == 1).await;
    bounded("publish", client.publish("a.b", "still here")).await.unwrap();
    let d = bounded("delivery after reconnect", good.next()).await.unwrap();
    assert_eq!(&d.payload[..], b"still here");
    assert_eq!(client.subscription_count(), 1);
}

#[tokio::test]
async fn reconnect_resubscribes_and_the_stream_survives() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut events = client.events();
    let mut sub = bounded("subscribe", client.subscribe("x.*")).await.unwrap();
    client.publish("x.1", "before").await.unwrap();
    assert_eq!(&bounded("first", sub.next()).await.unwrap().payload[..], b"before");

    broker.close_all(Some(Notice::new(ReasonCode::ShuttingDown, "restart")));
    broker.shared.wait_until("re-subscribed", |s| s.accepted == 2 && s.subscriptions().len() == 1).await;
    let (conn, id, pattern) = broker.shared.lock().subscriptions()[0].clone();
    assert_eq!((conn, id, pattern.as_str()), (2, sub.id(), "x.*"));

    bounded("flush after reconnect", client.flush()).await.unwrap();
    client.publish("x.2", "after").await.unwrap();
    assert_eq!(&bounded("second", sub.next()).await.unwrap().payload[..], b"after");

    let mut saw_disconnect = false;
    loop {
        match bounded("events", events.recv()).await.unwrap() {
            ConnectionEvent::Disconnected { error, .. } => {
                assert_eq!(error.reason(), Some(ReasonCode::ShuttingDown));
                saw_disconnect = true;
            }
            ConnectionEvent::Connected { server_name } if saw_disconnect => {
                assert_eq!(server_name, "fake-broker");
                break;
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn without_reconnect_a_lost_connection_ends_streams_with_its_error() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).no_reconnect().connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("x")).await.unwrap();
    broker.close_all(None);
    assert!(bounded("stream end", sub.next()).await.is_none());
    assert!(matches!(sub.error(), Some(ClientError::ConnectionLost)), "{:?}", sub.error());
    assert!(matches!(client.publish("x", "late").await, Err(ClientError::ConnectionLost)));
    assert!(!client.is_connected());
}

#[tokio::test]
async fn publish_during_an_outage_fails_after_the_reconnect_wait() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).reconnect_wait(Duration::from_millis(200)).connect()).await.unwrap();
    broker.stop_listening();
    broker.close_all(None);
    let err = bounded("publish while down", async {
        loop {
            // The first publishes may land before the client noticed the drop.
            match client.publish("x", "lost").await {
                Ok(()) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => break e,
            }
        }
    })
    .await;
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(!client.is_connected());
}

#[tokio::test]
async fn close_sends_disconnect_after_pending_publishes_and_ends_streams() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("x")).await.unwrap();
    client.publish("y", "last words").await.unwrap();
    bounded("close", client.close()).await.unwrap();

    assert!(bounded("stream end", sub.next()).await.is_none());
    assert!(sub.error().is_none(), "an orderly close is not an error");
    assert!(matches!(client.publish("x", "late").await, Err(ClientError::Closed)));
    assert!(matches!(client.ping().await, Err(ClientError::Closed)));
    bounded("close again", client.close()).await.unwrap();

    broker.shared.wait_until("DISCONNECT", |s| s.received.iter().any(|(_, f)| matches!(f, Frame::Disconnect(_)))).await;
    let frames = broker.shared.lock().frames_of(1);
    let publish = frames.iter().position(|f| matches!(f, Frame::Publish(_))).unwrap();
    let Some(Frame::Disconnect(notice)) = frames.last() else { panic!("DISCONNECT last: {frames:?}") };
    assert_eq!(notice.reason(), Some(ReasonCode::Normal));
    assert!(publish < frames.len() - 1);
}

#[tokio::test]
async fn dropping_every_handle_closes_the_connection() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let other = client.clone();
    drop(client);
    bounded("ping via clone", other.ping()).await.unwrap();
    drop(other);
    broker.shared.wait_until("DISCONNECT", |s| s.received.iter().any(|(_, f)| matches!(f, Frame::Disconnect(_)))).await;
}

#[tokio::test]
async fn unsubscribe_and_drop_both_tell_the_broker() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let a = bounded("subscribe a", client.subscribe("a")).await.unwrap();
    let b = bounded("subscribe b", client.subscribe("b")).await.unwrap();
    let (a_id, b_id) = (a.id(), b.id());
    bounded("unsubscribe", a.unsubscribe()).await.unwrap();
    assert_eq!(broker.shared.lock().subscriptions().len(), 1, "UNSUBSCRIBE handled before unsubscribe returned");
    drop(b);
    bounded("flush", client.flush()).await.unwrap();
    assert!(broker.shared.lock().subscriptions().is_empty());
    let unsubscribed: Vec<_> = broker
        .shared
        .lock()
        .frames_of(1)
        .iter()
        .filter_map(|f| match f {
            Frame::Unsubscribe(u) => Some(u.id),
            _ => None,
        })
        .collect();
    assert_eq!(unsubscribed, [a_id, b_id]);
    assert_eq!(client.subscription_count(), 0);
}

#[tokio::test]
async fn ping_measures_a_round_trip_and_broker_pings_are_answered() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let rtt = bounded("ping", client.ping()).await.unwrap();
    assert!(rtt < Duration::from_secs(5));
    broker.send_all(Frame::Ping(Ping { nonce: 77 }));
    // The fake broker records the client's PONG like any other frame.
    broker
        .shared
        .wait_until("PONG 77", |s| s.received.iter().any(|(_, f)| matches!(f, Frame::Pong(p) if p.nonce == 77)))
        .await;
}

#[tokio::test]
async fn a_message_over_the_brokers_frame_limit_is_refused_locally() {
    let broker = TcpBroker::start_with(Behaviour { max_frame: 1024, ..Behaviour::default() }).await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let err = client.publish("big", vec![0u8; 2048]).await.unwrap_err();
    assert!(matches!(err, ClientError::Wire(WireError::FrameTooLarge { max: 1024, .. })), "{err:?}");
    client.publish("small", vec![0u8; 100]).await.unwrap();
    bounded("flush", client.flush()).await.unwrap();
}

#[tokio::test]
async fn publish_waits_when_the_broker_stops_reading() {
    let broker = TcpBroker::start_with(Behaviour { stall: true, ..Behaviour::default() }).await;
    let client = bounded("connect", fast(&broker).max_pending_bytes(64 * 1024).connect()).await.unwrap();
    let payload = Bytes::from(vec![7u8; 64 * 1024]);
    let mut blocked = false;
    for _ in 0..2_000 {
        // Kernel socket buffers absorb a few MiB first; then the write buffer fills.
        if tokio::time::timeout(Duration::from_millis(200), client.publish("bulk", payload.clone())).await.is_err() {
            blocked = true;
            break;
        }
    }
    assert!(blocked, "publish never waited for the writer");
}

/// Close first waits for the broker to have handled what was sent (a PING barrier), then for
/// the writer: against a broker that answers nothing it waits out the barrier, and both waits
/// together stay within one request timeout.
#[tokio::test]
async fn close_against_a_broker_that_answers_nothing_returns_within_the_request_timeout() {
    let broker = TcpBroker::start_with(Behaviour { stall: true, ..Behaviour::default() }).await;
    let limit = Duration::from_millis(600);
    let client = bounded("connect", fast(&broker).request_timeout(limit).connect()).await.unwrap();
    let started = std::time::Instant::now();
    bounded("close", client.close()).await.unwrap();
    let took = started.elapsed();
    assert!(took >= limit / 2, "closed at once ({took:?}): the barrier was not waited for");
    assert!(took < limit + Duration::from_millis(500), "close took {took:?} against a {limit:?} request timeout");
    assert!(matches!(client.publish("x", "late").await, Err(ClientError::Closed)));
}

#[tokio::test]
async fn connect_fails_cleanly_when_nothing_listens() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let err = bounded("connect", Client::builder(addr).connect()).await.unwrap_err();
    assert!(matches!(err, ClientError::Io(_)), "{err:?}");
}

#[tokio::test]
async fn a_subscribe_cut_off_by_a_lost_connection_completes_after_the_reconnect() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("flaky.topic")).await.unwrap();
    assert_eq!(broker.shared.lock().subscriptions(), [(2, sub.id(), "flaky.topic".to_string())]);
    client.publish("flaky.topic", "made it").await.unwrap();
    assert_eq!(&bounded("delivery", sub.next()).await.unwrap().payload[..], b"made it");
}

#[tokio::test]
async fn a_refused_publish_fails_the_pending_flush_and_the_client_reconnects() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("ok")).await.unwrap();
    let mut events = client.events();
    client.publish("forbidden", "x").await.unwrap();
    // The flush fails if its PING went out before the client read the ERROR; otherwise it
    // waited for the next connection. Either way the refusal is an event.
    if let Err(err) = bounded("flush", client.flush()).await {
        assert_eq!(err.reason(), Some(ReasonCode::InvalidTopic), "{err:?}");
    }
    loop {
        let Ok(event) = bounded("refused event", events.recv()).await else { panic!("the event stream ended") };
        if let ConnectionEvent::Refused { error } = event {
            assert_eq!(error.reason(), Some(ReasonCode::InvalidTopic));
            break;
        }
    }
    bounded("flush after reconnect", client.flush()).await.unwrap();
    client.publish("ok", "fine").await.unwrap();
    assert_eq!(&bounded("delivery", sub.next()).await.unwrap().payload[..], b"fine");
    assert!(sub.error().is_none());
}

#[tokio::test]
async fn a_full_subscription_holds_the_reader_back_without_losing_deliveries() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).subscription_capacity(4).connect()).await.unwrap();
    let mut sub = bounded("subscribe", client.subscribe("x")).await.unwrap();
    for i in 0..500u32 {
        client.publish("x", Bytes::from(i.to_be_bytes().to_vec())).await.unwrap();
    }
    for i in 0..500u32 {
        let d = bounded("delivery", sub.next()).await.unwrap();
        assert_eq!(d.payload, Bytes::from(i.to_be_bytes().to_vec()));
    }
    bounded("flush", client.flush()).await.unwrap();
}

#[tokio::test]
async fn dropping_a_subscription_frees_a_reader_waiting_for_it() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).subscription_capacity(2).connect()).await.unwrap();
    let slow = bounded("subscribe", client.subscribe("slow")).await.unwrap();
    let mut quick = bounded("subscribe", client.subscribe("quick")).await.unwrap();
    // Separate reads, hence separate batches: the first takes the credit, later ones wait.
    for _ in 0..3 {
        for _ in 0..10 {
            client.publish("slow", "unread").await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    client.publish("quick", "here").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(quick.try_recv().is_none(), "the reader is waiting for the slow subscription");
    drop(slow);
    assert_eq!(&bounded("quick delivery", quick.next()).await.unwrap().payload[..], b"here");
}

/// Waits for the client's `Refused` event, so the ERROR is handled before the next call.
async fn refusal_seen(events: &mut tokio::sync::broadcast::Receiver<ConnectionEvent>) {
    loop {
        let Ok(event) = bounded("refused event", events.recv()).await else { panic!("the event stream ended") };
        if let ConnectionEvent::Refused { error } = event {
            assert_eq!(error.reason(), Some(ReasonCode::InvalidTopic));
            return;
        }
    }
}

#[tokio::test]
async fn a_refusal_read_before_the_flush_is_staged_still_fails_that_flush_once() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut events = client.events();
    client.publish("forbidden", "x").await.unwrap();
    refusal_seen(&mut events).await;
    // The flush's PING goes on the next connection, where it passes: the refusal is reported.
    let err = bounded("flush", client.flush()).await.unwrap_err();
    assert_eq!(err.reason(), Some(ReasonCode::InvalidTopic), "{err:?}");
    bounded("second flush", client.flush()).await.unwrap();
}

#[tokio::test]
async fn close_reports_a_refusal_no_flush_reported() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let mut events = client.events();
    client.publish("forbidden", "x").await.unwrap();
    refusal_seen(&mut events).await;
    let err = bounded("close", client.close()).await.unwrap_err();
    assert_eq!(err.reason(), Some(ReasonCode::InvalidTopic), "{err:?}");
    assert!(client.closed_error().is_some(), "closed all the same");
}

#[tokio::test]
async fn a_refused_subscribe_is_not_reported_again_by_the_next_flush() {
    let broker = TcpBroker::start().await;
    let client = bounded("connect", fast(&broker).connect()).await.unwrap();
    let err = bounded("bad subscribe", client.subscribe("a.invalid")).await.unwrap_err();
    assert_eq!(err.reason(), Some(ReasonCode::InvalidPattern));
    bounded("flush", client.flush()).await.unwrap();
}
