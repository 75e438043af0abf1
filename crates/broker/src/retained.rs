//! Retained values: each topic's last message published with [`RETAIN`], kept so that a new
//! subscription gets it at once, before any live message of that topic.
//!
//! Every broker keeps the whole network's retained values: routing treats a retained publish as
//! wanted by every summary (`tidings_route::Probe`), so it reaches every broker along the same
//! trees and links as live traffic, and updates each broker's copy in the order the broker
//! delivers that traffic. The [`Dispatcher`](crate::dispatch::Dispatcher) updates this store
//! and delivers a retained publish under one lock, and a new subscription takes its snapshot
//! and joins the index under the same lock: whatever value a subscription gets from the store,
//! every message delivered to it afterwards was delivered here after that value (see
//! docs/protocol.md, "Retained values").
//!
//! A value published guaranteed is also kept on disk by its publisher's broker (the
//! guaranteed driver's durable store), so that broker has it again after a restart. Its topic
//! is then *durable* here: every later change of its value, whatever brought it (a best-effort
//! publish, a value from another broker, a clearing), is handed to the [`DurableHook`] in the
//! order the store applied it, so the copy on disk follows the one in memory and a restart
//! never brings back a value older than one this broker already served.

use std::collections::{HashMap, HashSet};

use tidings_matching::{Pattern, Selector};
use tidings_wire::{Message, Notice, Property, ReasonCode, RETAIN, RETAINED};

/// The retained values a broker holds, within `[limits] max_retained_bytes`.
pub struct Retained {
    /// Per topic, the value as delivered to new subscriptions (flagged [`RETAINED`]).
    topics: HashMap<String, Message>,
    /// The sum of the kept values' encoded lengths.
    bytes: usize,
    /// `[limits] max_retained_bytes`.
    limit: usize,
    /// Topics whose value this broker keeps on disk too (see the module doc).
    durable: HashSet<String>,
    /// Told of each change of a durable topic's value, under the store's lock.
    hook: Option<DurableHook>,
}

/// Called with a durable topic and its new value (`None`: cleared) each time it changes, in
/// the order the changes were applied (the caller holds the store's lock): the guaranteed
/// driver writes them to disk in that order.
pub type DurableHook = Box<dyn Fn(&str, Option<&Message>) + Send + Sync>;

impl std::fmt::Debug for Retained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retained").field("topics", &self.topics.len()).field("bytes", &self.bytes).finish()
    }
}

impl Retained {
    /// An empty store holding at most `limit` bytes of values.
    pub fn new(limit: usize) -> Retained {
        Retained { topics: HashMap::new(), bytes: 0, limit, durable: HashSet::new(), hook: None }
    }

    /// Takes back the values kept on disk (already flagged, as [`flagged`] made them) at start,
    /// marks their topics durable, and from now on tells `hook` of every change of a durable
    /// topic. Values past the limit (a smaller `max_retained_bytes` since) are left out.
    pub fn restore(&mut self, values: Vec<Message>, hook: DurableHook) -> usize {
        let mut kept = 0;
        for value in values {
            let old = self.topics.get(value.topic()).map_or(0, Message::encoded_len);
            let after = (self.bytes - old).saturating_add(value.encoded_len());
            if after > self.limit || value.payload().is_empty() {
                continue;
            }
            self.bytes = after;
            self.durable.insert(value.topic().to_string());
            self.topics.insert(value.topic().to_string(), value);
            kept += 1;
        }
        self.hook = Some(hook);
        kept
    }

    /// `topic` is kept on disk from now on: a guaranteed retained publish was accepted for it
    /// (the driver writes its value before acknowledging the publish).
    pub fn keep_durably(&mut self, topic: &str) {
        if !self.durable.contains(topic) {
            self.durable.insert(topic.to_string());
        }
    }

    /// Tells the hook of a durable topic's new value.
    fn changed(&mut self, topic: &str) {
        if !self.durable.contains(topic) {
            return;
        }
        let value = self.topics.get(topic);
        if let Some(hook) = &self.hook {
            hook(topic, value);
        }
        if value.is_none() {
            // Cleared on disk too: nothing durable left for it until the next guaranteed value.
            self.durable.remove(topic);
        }
    }

    /// Topics with a value.
    pub fn len(&self) -> usize {
        self.topics.len()
    }

    /// True when no topic has a value.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// Bytes of the values kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Refuses, with the reason a publisher is told, a retained publish that would take the
    /// store past its limit (clearing a value never does).
    pub fn check(&self, message: &Message) -> Result<(), Notice> {
        let after = self.bytes_after(message);
        if after > self.limit {
            return Err(Notice::new(
                ReasonCode::LimitExceeded,
                format!(
                    "keeping this retained message ({} B) would hold {after} B of retained values, past the broker's [limits] max_retained_bytes of {} B",
                    message.encoded_len(),
                    self.limit
                ),
            ));
        }
        Ok(())
    }

    /// What the store would hold after `message` replaced or cleared its topic's value (an
    /// estimate: the flagged copy differs from the published message by a few bytes).
    fn bytes_after(&self, message: &Message) -> usize {
        let old = self.topics.get(message.topic()).map_or(0, Message::encoded_len);
        let new = if message.payload().is_empty() { 0 } else { message.encoded_len() };
        (self.bytes - old).saturating_add(new)
    }

    /// Takes `message` as its topic's value, or clears the topic's value when its payload is
    /// empty. A value past the limit is not kept (the publisher's broker refused it already
    /// if it was published there): returns false then.
    pub fn apply(&mut self, message: &Message) -> bool {
        if message.payload().is_empty() {
            if let Some(old) = self.topics.remove(message.topic()) {
                self.bytes -= old.encoded_len();
            }
            self.changed(message.topic());
            return true;
        }
        let Some(value) = flagged(message) else { return false };
        let old = self.topics.get(message.topic()).map_or(0, Message::encoded_len);
        let after = (self.bytes - old).saturating_add(value.encoded_len());
        if after > self.limit {
            return false;
        }
        self.bytes = after;
        self.topics.insert(message.topic().to_string(), value);
        self.changed(message.topic());
        true
    }

    /// The values a new subscription to `pattern` (and `selector`) gets.
    pub fn matching<'a>(
        &'a self,
        pattern: &'a Pattern,
        selector: Option<&'a Selector>,
    ) -> impl Iterator<Item = &'a Message> + 'a {
        let wanted =
            move |m: &&Message| pattern.matches(m.topic()) && selector.is_none_or(|s| s.matches(&m.property_view()));
        let literal = pattern.is_literal().then(|| self.topics.get(pattern.as_str())).flatten();
        let scan = (!pattern.is_literal()).then(|| self.topics.values()).into_iter().flatten();
        literal.into_iter().chain(scan).filter(wanted)
    }
}

/// The copy of a retained publish that new subscriptions get: its properties without
/// [`RETAIN`], plus [`RETAINED`] `true`. `None` only for a message that cannot be re-encoded,
/// which a decoded one always can.
pub(crate) fn flagged(message: &Message) -> Option<Message> {
    let mut properties: Vec<Property> = message.properties().into_iter().filter(|p| p.key != RETAIN).collect();
    properties.push(Property::new(RETAINED, true));
    Message::new(message.topic(), &properties, message.payload(), message.sent_us()).ok()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn retain(topic: &str, payload: &'static str) -> Message {
        Message::new(topic, &[Property::new(RETAIN, true), Property::new("k", 1i64)], Bytes::from(payload), 5).unwrap()
    }

    fn topics(store: &Retained, pattern: &str, selector: Option<&str>) -> Vec<(String, Bytes)> {
        let pattern = Pattern::parse(pattern).unwrap();
        let selector = selector.map(|s| Selector::parse(s).unwrap());
        let mut got: Vec<_> =
            store.matching(&pattern, selector.as_ref()).map(|m| (m.topic().to_string(), m.payload())).collect();
        got.sort();
        got
    }

    #[test]
    fn the_last_value_per_topic_is_kept_flagged_and_an_empty_payload_clears_it() {
        let mut store = Retained::new(1 << 20);
        assert!(store.apply(&retain("a.b", "1")));
        assert!(store.apply(&retain("a.b", "2")));
        assert!(store.apply(&retain("a.c", "3")));
        assert_eq!(store.len(), 2);
        assert_eq!(topics(&store, "a.*", None), [("a.b".into(), "2".into()), ("a.c".into(), "3".into())]);
        assert_eq!(topics(&store, "a.b", None), [("a.b".into(), "2".into())]);
        assert_eq!(topics(&store, "x.>", None), []);
        assert_eq!(topics(&store, "a.>", Some("k = 2")), [], "the selector applies to retained values too");
        let value = store.matching(&Pattern::parse("a.b").unwrap(), None).next().unwrap().clone();
        assert!(value.is_retained() && !value.is_retain(), "flagged as retained, not as a retain request");
        assert_eq!(value.sent_us(), 5);
        assert!(store.apply(&retain("a.b", "")));
        assert_eq!(topics(&store, ">", None), [("a.c".into(), "3".into())]);
        let bytes = store.bytes();
        assert_eq!(bytes, store.matching(&Pattern::parse(">").unwrap(), None).map(Message::encoded_len).sum::<usize>());
    }

    #[test]
    fn every_change_of_a_durable_topic_reaches_the_hook_in_order_and_others_do_not() {
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let log = std::sync::Arc::clone(&seen);
        let hook: DurableHook = Box::new(move |topic: &str, value: Option<&Message>| {
            log.lock().push((topic.to_string(), value.map(Message::payload)));
        });
        let mut store = Retained::new(1 << 20);
        let on_disk = flagged(&retain("a", "0")).unwrap();
        assert_eq!(store.restore(vec![on_disk], hook), 1);
        assert_eq!(topics(&store, "a", None), [("a".into(), "0".into())], "restored as it was kept");
        assert!(store.apply(&retain("a", "1")));
        assert!(store.apply(&retain("b", "1")), "not durable: not reported");
        store.keep_durably("b");
        assert!(store.apply(&retain("b", "2")));
        assert!(store.apply(&retain("a", "")));
        assert!(store.apply(&retain("a", "3")), "cleared: durable again only by a guaranteed value");
        let seen = seen.lock().clone();
        let want: Vec<(String, Option<Bytes>)> =
            vec![("a".into(), Some("1".into())), ("b".into(), Some("2".into())), ("a".into(), None)];
        assert_eq!(seen, want);
    }

    #[test]
    fn the_byte_limit_refuses_a_value_with_a_reason_and_changes_nothing() {
        let one = retain("a", "xxxxxxxx").encoded_len();
        let mut store = Retained::new(2 * one + 8);
        assert!(store.apply(&retain("a", "xxxxxxxx")) && store.apply(&retain("b", "xxxxxxxx")));
        let over = retain("c", "xxxxxxxx");
        let notice = store.check(&over).unwrap_err();
        assert_eq!(notice.reason(), Some(ReasonCode::LimitExceeded));
        assert!(notice.text.contains("max_retained_bytes"), "{}", notice.text);
        assert!(!store.apply(&over));
        assert_eq!(store.len(), 2);
        assert!(store.check(&retain("a", "yyyyyyyy")).is_ok(), "replacing a value of the same size fits");
        assert!(store.check(&retain("c", "")).is_ok(), "clearing always fits");
    }
}
