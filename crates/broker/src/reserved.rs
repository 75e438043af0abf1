//! The protocol's own message properties (keys starting with `$`, see
//! [`tidings_wire::REPLY_TO`]) checked where a message enters the network: at the publisher's
//! broker, once, before anything is delivered or routed. Brokers downstream trust them.

use tidings_matching::Topic;
use tidings_wire::{Message, Notice, ReasonCode, ValueRef, REPLY_TO, RETAIN, RETAINED, RETAIN_ONLY};

/// What a valid message's reserved properties ask of the broker.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Asks<'a> {
    /// A request's reply subject: a valid topic, no wildcards.
    pub reply_to: Option<&'a str>,
    /// Keep this message as its topic's retained value (an empty payload clears it).
    pub retain: bool,
}

/// Reads and checks the reserved properties of a published message in one pass over its
/// properties (none to read for most messages). Refuses a reply subject that is not text or
/// not a valid topic, a non-boolean retain flag, and [`RETAINED`], which only brokers set.
pub fn check(message: &Message) -> Result<Asks<'_>, Notice> {
    let mut asks = Asks::default();
    if message.property_count() == 0 {
        return Ok(asks);
    }
    for (key, value) in message.property_view().iter().filter(|(key, _)| key.starts_with('$')) {
        match (key, value) {
            (REPLY_TO, ValueRef::Str(subject)) if asks.reply_to.is_none() => {
                Topic::parse(subject).map_err(|e| {
                    Notice::new(
                        ReasonCode::InvalidTopic,
                        format!("reply subject {subject:?} is not a valid topic (wildcards are not allowed): {e}"),
                    )
                })?;
                asks.reply_to = Some(subject);
            }
            (REPLY_TO, _) => {
                return Err(Notice::new(ReasonCode::InvalidTopic, format!("{REPLY_TO} must be given once, as text")))
            }
            (RETAIN, ValueRef::Bool(flag)) => asks.retain |= flag,
            (RETAIN, _) => {
                return Err(Notice::new(ReasonCode::MalformedFrame, format!("{RETAIN} must be a boolean")));
            }
            (RETAIN_ONLY, ValueRef::Bool(_)) => {}
            (RETAIN_ONLY, _) => {
                return Err(Notice::new(ReasonCode::MalformedFrame, format!("{RETAIN_ONLY} must be a boolean")));
            }
            (key, _) if key.starts_with("$relay") => {
                return Err(Notice::new(
                    ReasonCode::MalformedFrame,
                    format!("{key}: properties starting with $relay are set by brokers relaying durable subscriptions"),
                ));
            }
            (RETAINED, _) => {
                return Err(Notice::new(
                    ReasonCode::MalformedFrame,
                    format!("{RETAINED} is set by brokers on the retained values they deliver, not by publishers"),
                ));
            }
            _ => {}
        }
    }
    Ok(asks)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_wire::Property;

    use super::*;

    fn message(props: &[Property]) -> Message {
        Message::new("svc.a", props, Bytes::from_static(b"x"), 0).unwrap()
    }

    #[test]
    fn a_plain_message_asks_nothing() {
        assert_eq!(check(&message(&[])), Ok(Asks::default()));
        assert_eq!(check(&message(&[Property::new("k", 1i64)])), Ok(Asks::default()));
    }

    #[test]
    fn a_valid_reply_subject_and_retain_flag_are_read() {
        let props = [Property::new(REPLY_TO, "_INBOX.a.1"), Property::new(RETAIN, true)];
        assert_eq!(check(&message(&props)), Ok(Asks { reply_to: Some("_INBOX.a.1"), retain: true }));
    }

    #[test]
    fn bad_reserved_properties_are_refused_with_a_reason() {
        for (props, reason, says) in [
            (vec![Property::new(REPLY_TO, "a.*")], ReasonCode::InvalidTopic, "wildcards"),
            (vec![Property::new(REPLY_TO, "a.>")], ReasonCode::InvalidTopic, "not a valid topic"),
            (vec![Property::new(REPLY_TO, "a..b")], ReasonCode::InvalidTopic, "not a valid topic"),
            (vec![Property::new(REPLY_TO, "")], ReasonCode::InvalidTopic, "not a valid topic"),
            (vec![Property::new(REPLY_TO, 7i64)], ReasonCode::InvalidTopic, "as text"),
            (vec![Property::new(REPLY_TO, "a"), Property::new(REPLY_TO, "b")], ReasonCode::InvalidTopic, "once"),
            (vec![Property::new(RETAIN, "yes")], ReasonCode::MalformedFrame, "boolean"),
            (vec![Property::new(RETAIN_ONLY, 1i64)], ReasonCode::MalformedFrame, "boolean"),
            (vec![Property::new(RETAINED, true)], ReasonCode::MalformedFrame, "set by brokers"),
            (vec![Property::new("$relay-gap", "1-2")], ReasonCode::MalformedFrame, "relaying durable"),
        ] {
            let notice = check(&message(&props)).unwrap_err();
            assert_eq!(notice.reason(), Some(reason), "{props:?}");
            assert!(notice.text.contains(says), "{props:?}: {}", notice.text);
        }
    }
}
