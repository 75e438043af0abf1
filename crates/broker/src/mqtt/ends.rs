//! What happens after an MQTT connection ends: its will is published (after its delay, unless
//! the client came back first; the delay outlives a broker restart, [`super::wills`]), and a session that outlived it ends when its expiry passes
//! without a new connection, deleting its durable subscriptions (which otherwise keep their
//! messages in the pubend logs for a client that is not coming back).

use std::sync::Arc;
use std::time::Duration;

use tidings_wire::mqtt::{QoS, Will};
use tidings_wire::{Frame, GuaranteedPublish, Hello, Message, Property, PublisherId, Value, RETAIN};

use super::inflight::Change;
use super::link::QOS_PROPERTY;
use super::registry::{client_hash, Registry};
use super::session::now_us;
use super::subscribe::delete_durables;
use super::wills::{self, Pending};
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

/// Publishes `pending` when it is due, unless a new connection took the session first
/// (MQTT-3.1.3-9: of `generation`, the connection that ended, or since the broker started),
/// as the connection's user (its publish rules apply to the will). A delayed will's record
/// ([`super::wills`]) goes once it is sent; at a shutdown it stays, for the next start.
pub(super) async fn publish_will(
    shared: Arc<Context>,
    registry: Arc<Registry>,
    pending: Pending,
    generation: Option<u64>,
) {
    if pending.delayed {
        tokio::select! {
            () = tokio::time::sleep(pending.left(wills::now_ms())) => {}
            _ = shared.shutdown.cancelled() => return,
        }
        let moved_on = generation.is_some_and(|generation| !registry.unchanged_since(&pending.client_id, generation));
        if moved_on || !registry.wills.take(&pending.client_id, pending.seq) {
            return;
        }
    }
    let Pending { client_id, user, will, seq, delayed, .. } = pending;
    publish(&shared, &client_id, user.as_deref(), will, seq);
    if delayed {
        registry.inflight.enqueue(vec![Change::ForgetWill(client_id, seq)]);
    }
}

/// Publishes `will` of `client_id` as `user`, a QoS 1/2 one under sequence number `seq`.
fn publish(shared: &Arc<Context>, client_id: &str, user: Option<&str>, will: Will, seq: u64) {
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
    let Some(mut session) = detached(shared, "will", user) else { return };
    let frame = match will.qos {
        QoS::AtMostOnce => Frame::Publish(message),
        // Another publisher than the client's own: the will's sequence number is the clock's
        // when its connection ended (kept with a delayed will, so a will sent again after a
        // crash is the same publish).
        _ => Frame::GuaranteedPublish(GuaranteedPublish {
            publisher: PublisherId(client_hash(client_id) ^ WILL_PUBLISHER),
            seq,
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

/// At start: the wills kept waiting for their delay wait again for the time they have left
/// (published at once when it ran out while the broker was down).
pub(super) fn rearm_wills(shared: &Arc<Context>, registry: &Arc<Registry>) {
    if !registry.has_inflight() {
        return;
    }
    for pending in registry.wills.load(&registry.inflight) {
        shared.tasks.spawn(publish_will(Arc::clone(shared), Arc::clone(registry), pending, None));
    }
}
