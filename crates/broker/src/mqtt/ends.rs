//! What happens after an MQTT connection ends: its will is published (after its delay, unless
//! the client came back first), and a session that outlived it ends when its expiry passes
//! without a new connection, deleting its durable subscriptions (which otherwise keep their
//! messages in the pubend logs for a client that is not coming back).

use std::sync::Arc;
use std::time::Duration;

use tidings_wire::mqtt::{QoS, Will};
use tidings_wire::{Frame, GuaranteedPublish, Hello, Message, Property, PublisherId, Value, RETAIN};

use super::link::QOS_PROPERTY;
use super::registry::{client_hash, Registry};
use super::session::now_us;
use super::subscribe::delete_durables;
use crate::context::Context;
use crate::outbox::Outbox;
use crate::session::{Session, Transport};

/// A native session of the broker's own, for work no client connection carries out, acting
/// for the client's user (`user`, looked up again now: a user a reload removed acts no more).
/// Without it, with a users file, the session was never logged in, and every will and every
/// expired session's cleanup was refused.
fn detached(shared: &Arc<Context>, name: &str, user: Option<&str>) -> Option<Session> {
    let outbox = Outbox::new(shared.live.get().slow_consumer, shared.metrics.clone(), &shared.budget);
    *outbox.client.lock() = format!("mqtt {name}");
    let mut session = Session::new(Transport::Tcp, outbox, Arc::clone(shared));
    if let Some(guard) = &shared.security {
        let Some(user) = user.and_then(|name| guard.users().get(name).cloned()) else {
            tracing::warn!(user = user.unwrap_or("(none)"), "no such user any more: the {name} is not carried out");
            return None;
        };
        session.login_proven(user);
    }
    session.handle(Frame::Hello(Hello::new(name)));
    Some(session)
}

/// Publishes `will` of the connection `(client_id, generation)` after `delay` seconds, unless
/// a new connection took the session first (MQTT-3.1.3-9), as the connection's `user` (its
/// publish rules apply to the will).
pub(super) async fn publish_will(
    shared: Arc<Context>,
    registry: Arc<Registry>,
    (client_id, generation, user): (String, u64, Option<String>),
    will: Will,
    delay: u32,
) {
    if delay > 0 {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(u64::from(delay))) => {}
            _ = shared.shutdown.cancelled() => return,
        }
        if !registry.unchanged_since(&client_id, generation) {
            return;
        }
    }
    let mut properties = Vec::new();
    // Will properties carry as a PUBLISH's do (user properties, response topic, expiry, ...).
    tidings_wire::mqtt::carry::to_tidings(&will.properties, &mut properties);
    if will.retain && will.qos == QoS::AtMostOnce {
        properties.push(Property { key: RETAIN.to_string(), value: Value::Bool(true) });
    }
    if will.qos == QoS::ExactlyOnce {
        properties.push(Property { key: QOS_PROPERTY.to_string(), value: Value::Int(2) });
    }
    let topic = tidings_wire::mqtt::topic::name_to_tidings(&will.topic);
    let Ok(message) = Message::new(&topic, &properties, will.payload, now_us()) else { return };
    let Some(mut session) = detached(&shared, "will", user.as_deref()) else { return };
    let frame = match will.qos {
        QoS::AtMostOnce => Frame::Publish(message),
        // Another publisher than the client's own: the will's sequence number is the clock's.
        _ => Frame::GuaranteedPublish(GuaranteedPublish {
            publisher: PublisherId(client_hash(&client_id) ^ WILL_PUBLISHER),
            seq: now_us(),
            pubend: String::new(),
            home: None,
            message,
        }),
    };
    session.handle(frame);
    session.finish_batch(std::time::Instant::now());
}

/// Keeps the will's publisher id apart from its client's.
const WILL_PUBLISHER: u64 = 0x5749_4c4c_0000_0000;

/// Ends the session of `(client_id, generation)` once `expiry` seconds passed without a new
/// connection. `u32::MAX` is never (5.0, 3.1.2.11.2).
pub(super) async fn expire(
    shared: Arc<Context>,
    registry: Arc<Registry>,
    (client_id, generation): (String, u64),
    expiry: u32,
) {
    if expiry == u32::MAX {
        return;
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(u64::from(expiry))) => {}
        _ = shared.shutdown.cancelled() => return,
    }
    if !registry.unchanged_since(&client_id, generation) {
        return;
    }
    let Some(stored) = registry.load(&client_id) else { return };
    // Its durables are named in its user's scope: deleted as that user.
    let Some(mut session) = detached(&shared, "session expiry", stored.user.as_deref()) else { return };
    if delete_durables(&mut session, &stored, 1).is_ok() {
        registry.forget(&client_id);
    }
}

/// At start: the stored sessions' expiry timers run again, from now (the time a session spent
/// without its connection before the restart is not counted: a session ends late, never early).
pub(super) fn expire_stored(shared: &Arc<Context>, registry: &Arc<Registry>) {
    for stored in registry.load_all() {
        let task = expire(Arc::clone(shared), Arc::clone(registry), (stored.client_id, 0), stored.expiry);
        shared.tasks.spawn(task);
    }
}
