//! SUBSCRIBE and UNSUBSCRIBE, and the session's subscriptions across connections.
//!
//! Each MQTT filter becomes, per mapped pattern, two native subscriptions: a best-effort one
//! (QoS 0 publishes, retained values) and a guaranteed one (QoS 1/2 publishes, which only
//! guaranteed subscriptions receive), delivered at the lower of the granted QoS and the
//! message's. In a session that outlives its connection the guaranteed one of a QoS 1/2 filter
//! is a durable subscription named after the client and the filter, and the filters are on disk
//! ([`super::registry`]), so the next connection, to this broker process or the next one,
//! resumes them and gets what it missed. SUBACK waits for the guaranteed subscriptions'
//! SUBSCRIBED: a message published once the client has SUBACK reaches it.
//!
//! 5.0 subscription options shape each delivery ([`Shape`]): the subscription identifier,
//! no-local, retain-as-published and retain handling; a `tidings-where` user property on
//! SUBSCRIBE is a tidings selector on its filters (what no other MQTT broker offers), kept with
//! the session's stored filters.
//!
//! `$share/GROUP/filter` is a member of the best-effort queue group `GROUP` (QoS 0 publishes)
//! and of a guaranteed queue group of its own ([`shared_group_name`]; QoS 1/2 publishes), at the
//! QoS asked: each message goes to one member and is acknowledged by that member's PUBACK or
//! PUBCOMP; a member that leaves gives its unacknowledged messages to another, with DUP set. A
//! guaranteed group is durable by itself, so a persistent session's shared filter is no durable
//! subscription of its own: while its connection is away it is no member, and the group's
//! messages go to the members left, or wait in the group for the first one back.

use tidings_matching::Pattern;
use tidings_wire::mqtt::topic::{filter_to_tidings, split_shared};
use tidings_wire::mqtt::{
    MqttReason, Packet, Properties, ProtocolVersion, QoS, RetainHandling, Suback, Subscribe, Unsuback, Unsubscribe,
};
use tidings_wire::{DeliveryMode, Frame, Notice, ReasonCode, SubId};

use super::inflight::Change;
use super::link::{Incoming, Shape, Sub};
use super::registry::{durable_name, session_prefix, Kept, Stored};
use super::session::{reason_for, Filter, MqttSession, Step};
use crate::session::Next;

/// The SUBSCRIBE user property whose value is a tidings selector over the messages' properties
/// (an MQTT publisher's user properties are properties, so `tidings-where: room = 'kitchen'`
/// filters on them).
pub(super) const WHERE: &str = "tidings-where";

impl MqttSession {
    pub(super) fn subscribe(&mut self, subscribe: Subscribe) -> Step {
        let mut reasons = Vec::with_capacity(subscribe.filters.len());
        let mut waits = Vec::new();
        let mut problem = None;
        let identifier = subscribe.properties.subscription_identifiers.first().copied();
        let selector =
            subscribe.properties.user_properties.iter().find(|(key, _)| key == WHERE).map(|(_, text)| text.clone());
        for (filter, options) in &subscribe.filters {
            let retained = match options.retain_handling {
                RetainHandling::OnSubscribe => true,
                RetainHandling::OnNewSubscribe => !self.filters.contains_key(filter),
                RetainHandling::Never => false,
            };
            let kept = Kept {
                identifier,
                no_local: options.no_local,
                retain_as_published: options.retain_as_published,
                selector: selector.clone(),
            };
            let reason = match self.subscribe_filter(filter, options.qos, kept, retained) {
                Ok((reason, guaranteed)) => {
                    waits.extend(guaranteed);
                    reason
                }
                // A denied filter fails alone (SUBACK 0x87, 0x80 in 3.1.1); the session stays.
                Err(notice) if notice.reason() == Some(ReasonCode::NotAuthorized) => MqttReason::NotAuthorized,
                // So does a filter whose `tidings-where` selector does not parse; the SUBACK says why.
                Err(notice) if notice.reason() == Some(ReasonCode::InvalidSelector) => {
                    problem = Some(format!("{WHERE}: {}", notice.text));
                    MqttReason::ImplementationSpecificError
                }
                Err(notice) => return self.refuse(reason_for(&notice)),
            };
            reasons.push(match (self.version(), reason.is_error()) {
                (Some(ProtocolVersion::V311), true) => MqttReason::UnspecifiedError,
                _ => reason,
            });
        }
        if self.save().is_err() {
            return self.refuse(MqttReason::UnspecifiedError);
        }
        let mut properties = Properties::default();
        if self.version() == Some(ProtocolVersion::V5) {
            properties.reason_string = problem;
        }
        let suback = Packet::Suback(Suback { packet_id: subscribe.packet_id, properties, reasons });
        let mut state = self.link.state.lock();
        waits.retain(|id| !state.confirmed.remove(id));
        if waits.is_empty() {
            return Step::Reply(vec![suback]);
        }
        state.subacks.push((waits, suback));
        Step::Reply(Vec::new())
    }

    fn next_sub_id(&mut self) -> SubId {
        let id = SubId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    /// Subscribes one MQTT filter (replacing an earlier subscription of the same filter, as
    /// MQTT-3.8.4-3 asks): the reason to give and the guaranteed subscriptions to wait for.
    /// `retained` says whether the kept retained values of its topics are delivered now.
    pub(super) fn subscribe_filter(
        &mut self,
        filter: &str,
        qos: QoS,
        kept: Kept,
        retained: bool,
    ) -> Result<(MqttReason, Vec<SubId>), Notice> {
        let (group, inner) = match split_shared(filter) {
            Some((group, inner)) => (Some(group.to_string()), inner),
            None => (None, filter),
        };
        let mapped = filter_to_tidings(inner);
        if mapped.patterns.iter().any(|pattern| Pattern::parse(pattern).is_err()) {
            return Ok((MqttReason::TopicFilterInvalid, Vec::new()));
        }
        self.unsubscribe_filter(filter, false)?;
        let mut ids = Vec::new();
        let mut guaranteed = Vec::new();
        for (index, pattern) in mapped.patterns.iter().enumerate() {
            let durable = (group.is_none() && qos != QoS::AtMostOnce && self.expiry > 0)
                .then(|| durable_name(&self.client_id, filter, index));
            // A shared filter joins two groups: the best-effort one named by the client (QoS 0
            // publishes) and the guaranteed one of the whole `$share/GROUP/filter` (QoS 1/2
            // publishes, each leased to one member until its PUBACK or PUBCOMP).
            let modes = match &group {
                Some(name) => vec![
                    (DeliveryMode::BestEffort, None, Some(name.clone())),
                    (DeliveryMode::Guaranteed, None, Some(shared_group_name(filter, index))),
                ],
                None => vec![(DeliveryMode::BestEffort, None, None), (DeliveryMode::Guaranteed, durable, None)],
            };
            for (mode, durable, group) in modes {
                let id = self.next_sub_id();
                let options = Shape {
                    identifier: kept.identifier,
                    no_local: kept.no_local,
                    retain_as_published: kept.retain_as_published,
                    retained,
                };
                let (shared, member) = (group.is_some(), group.is_some() && mode == DeliveryMode::Guaranteed);
                let name: Option<std::sync::Arc<str>> = durable.as_deref().map(Into::into);
                let sub = Sub { filter: mapped.clone(), qos, options, member, shared, durable: name };
                self.link.state.lock().subs.insert(id, sub);
                ids.push(id);
                if mode == DeliveryMode::Guaranteed {
                    guaranteed.push(id);
                }
                let frame = Frame::Subscribe(tidings_wire::Subscribe {
                    queue_key: None,
                    id,
                    mode,
                    pattern: pattern.clone(),
                    selector: kept.selector.clone(),
                    durable,
                    group,
                });
                if let Next::Refuse(notice) = self.native.handle(frame) {
                    // Nothing of a refused filter stays subscribed.
                    self.link.state.lock().forget(id);
                    for taken in ids.into_iter().filter(|taken| *taken != id) {
                        self.link.state.lock().forget(taken);
                        let _ = self.native.handle(Frame::Unsubscribe(tidings_wire::Unsubscribe { id: taken }));
                    }
                    return Err(notice);
                }
            }
        }
        self.filters.insert(filter.to_string(), Filter { qos, ids, kept });
        let reason = match qos {
            QoS::AtMostOnce => MqttReason::Success,
            QoS::AtLeastOnce => MqttReason::GrantedQos1,
            QoS::ExactlyOnce => MqttReason::GrantedQos2,
        };
        Ok((reason, guaranteed))
    }

    pub(super) fn unsubscribe(&mut self, unsubscribe: Unsubscribe) -> Step {
        let mut reasons = Vec::with_capacity(unsubscribe.filters.len());
        for filter in &unsubscribe.filters {
            match self.unsubscribe_filter(filter, false) {
                Ok(true) => reasons.push(MqttReason::Success),
                Ok(false) => reasons.push(MqttReason::NoSubscriptionExisted),
                Err(notice) => return self.refuse(reason_for(&notice)),
            }
        }
        if self.save().is_err() {
            return self.refuse(MqttReason::UnspecifiedError);
        }
        if self.version() == Some(ProtocolVersion::V311) {
            reasons.clear();
        }
        Step::Reply(vec![Packet::Unsuback(Unsuback {
            packet_id: unsubscribe.packet_id,
            properties: Properties::default(),
            reasons,
        })])
    }

    /// Ends the native subscriptions of `filter` (deleting a durable one); false if there were
    /// none. `keep` leaves a durable one for the session's next connection instead.
    fn unsubscribe_filter(&mut self, filter: &str, keep: bool) -> Result<bool, Notice> {
        let Some(Filter { ids, .. }) = self.filters.remove(filter) else { return Ok(false) };
        for id in ids {
            let mut state = self.link.state.lock();
            if let (false, Some(name)) = (keep, state.subs.get(&id).and_then(|sub| sub.durable.clone())) {
                // Its deliveries in flight and marks go with it: a new subscription of the same
                // filter (the same durable name) starts afresh.
                state.inbound.forget_durable(&name);
                state.journal.push(Change::ForgetName(name.to_string()));
            }
            state.forget(id);
            drop(state);
            if keep {
                continue;
            }
            if let Next::Refuse(notice) = self.native.handle(Frame::Unsubscribe(tidings_wire::Unsubscribe { id })) {
                return Err(notice);
            }
        }
        Ok(true)
    }

    /// Writes the session's filters, if it outlives its connection.
    fn save(&self) -> std::io::Result<()> {
        if self.expiry == 0 {
            return Ok(());
        }
        let filters = self.filters.iter().map(|(filter, f)| (filter.clone(), f.qos as u8)).collect();
        let options = self
            .filters
            .iter()
            .filter(|(_, f)| f.kept != Kept::default())
            .map(|(filter, f)| (filter.clone(), f.kept.clone()))
            .collect();
        let user = self.native.login.as_ref().map(|login| login.user.name.clone());
        self.registry.save(&Stored { client_id: self.client_id.clone(), filters, expiry: self.expiry, options, user })
    }

    /// At CONNECT: resumes the stored session (true: session present) or, with clean start,
    /// ends it, deleting its durable subscriptions.
    pub(super) fn resume(&mut self, clean_start: bool) -> Result<bool, Notice> {
        if clean_start {
            self.link.state.lock().inbound.carried = None;
        }
        let Some(stored) = self.registry.load(&self.client_id) else {
            // A session that outlives its connection is on disk from its CONNECT, subscribed or
            // not: a publisher's unreleased QoS 2 publishes go with it across a restart.
            if self.save().is_err() {
                return Err(Notice::new(ReasonCode::StorageUnavailable, "the MQTT session could not be stored"));
            }
            return Ok(false);
        };
        if clean_start {
            // The ids the deleted subscriptions took are not given again on this connection: a
            // delivery of theirs already on its way must not pass for a new subscription's.
            self.next_id = delete_durables(&mut self.native, &stored, self.next_id)?;
            self.registry.forget(&self.client_id);
            return Ok(false);
        }
        // The client's QoS 2 publishes not yet released, from before a broker restart: a retry
        // takes the sequence number it had, so the log answers it as the same publish.
        {
            let mut state = self.link.state.lock();
            for (id, seq) in self.registry.load_inbound(&self.client_id) {
                state.inbound.last_seq = state.inbound.last_seq.max(seq);
                let incoming = Incoming { seq, qos: QoS::ExactlyOnce, recorded: false };
                state.inbound.by_packet.entry(id).or_insert(incoming);
            }
        }
        // Its deliveries in flight and how far its client was done, from before a broker restart.
        if self.registry.has_inflight() {
            match self.registry.inflight.load(&session_prefix(&self.client_id)) {
                Ok(loaded) => self.link.state.lock().inbound.restore(loaded),
                Err(error) => {
                    tracing::warn!(%error, "the MQTT session's deliveries in flight could not be read");
                    return Err(Notice::new(ReasonCode::StorageUnavailable, "the MQTT session could not be read"));
                }
            }
        }
        let expiry = self.expiry;
        // Subscribed as durable whatever this connection's expiry: deleted at its end if 0.
        self.expiry = self.expiry.max(1);
        for (filter, qos) in &stored.filters {
            let kept =
                stored.options.iter().find(|(f, _)| f == filter).map(|(_, kept)| kept.clone()).unwrap_or_default();
            // The session's subscriptions go on: retained values were sent when they were made.
            self.subscribe_filter(filter, Stored::qos(*qos), kept, false)?;
        }
        self.expiry = expiry;
        if self.save().is_err() {
            return Err(Notice::new(ReasonCode::StorageUnavailable, "the MQTT session could not be stored"));
        }
        Ok(true)
    }

    /// At the connection's end: a session that ends with it deletes its durable subscriptions
    /// and its file; one that outlives it leaves them for the next connection.
    pub(super) fn end(&mut self) {
        let keep = self.expiry > 0;
        let filters: Vec<String> = self.filters.keys().cloned().collect();
        for filter in filters {
            let _ = self.unsubscribe_filter(&filter, keep);
        }
        if !keep {
            self.registry.forget(&self.client_id);
        }
    }
}

/// The native guaranteed queue group of pattern `index` of the shared filter `filter`
/// (`$share/GROUP/filter` whole): MQTT shares a group by its name and filter together, and a
/// native group has one pattern, so each pair is a group of its own. Stable across connections,
/// restarts and brokers, and within the native group name rules whatever the filter holds.
pub(super) fn shared_group_name(filter: &str, index: usize) -> String {
    format!("mqtt-{:016x}-{index}", tidings_wire::hash::fnv1a(filter.as_bytes()))
}

/// Deletes the durable subscriptions of a stored session through `native` (a session of this
/// broker that said HELLO): each is resumed and unsubscribed, which deletes it. The next
/// subscription id after those it used.
pub(super) fn delete_durables(
    native: &mut crate::session::Session,
    stored: &Stored,
    first_id: u32,
) -> Result<u32, Notice> {
    let mut id = first_id.max(1);
    for (filter, _) in stored.filters.iter().filter(|(filter, qos)| *qos > 0 && split_shared(filter).is_none()) {
        for (index, pattern) in filter_to_tidings(filter).patterns.into_iter().enumerate() {
            let sub = SubId(id);
            id = id.wrapping_add(1).max(1);
            let selector = stored.options.iter().find(|(f, _)| f == filter).and_then(|(_, kept)| kept.selector.clone());
            let frame = Frame::Subscribe(tidings_wire::Subscribe {
                queue_key: None,
                id: sub,
                mode: DeliveryMode::Guaranteed,
                pattern,
                selector,
                durable: Some(durable_name(&stored.client_id, filter, index)),
                group: None,
            });
            if let Next::Refuse(notice) = native.handle(frame) {
                return Err(notice);
            }
            if let Next::Refuse(notice) = native.handle(Frame::Unsubscribe(tidings_wire::Unsubscribe { id: sub })) {
                return Err(notice);
            }
        }
    }
    Ok(id)
}
