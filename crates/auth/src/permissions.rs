//! What a user may publish and subscribe to. Deny wins over allow, and nothing is allowed that
//! no allow rule names: a user with no rules can do nothing.

use tidings_matching::Pattern;

use crate::rules::RuleSet;

/// Allow and deny rules for one direction (publish or subscribe).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Topics that may be used, unless a deny rule also matches.
    pub allow: RuleSet,
    /// Topics that may never be used, whatever allows them.
    pub deny: RuleSet,
}

impl Rules {
    /// Whether a message on `topic` may pass: some allow rule matches and no deny rule does.
    pub fn permits(&self, topic: &str) -> bool {
        !self.deny.matches(topic) && self.allow.matches(topic)
    }
}

/// A user's rules, both directions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    /// What it may publish (the message's topic).
    pub publish: Rules,
    /// What it may subscribe to and receive.
    pub subscribe: Rules,
}

/// The answer to a SUBSCRIBE: a subscription whose wildcard only overlaps a denied topic is
/// taken, but what it matches there must be filtered out message by message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeDecision {
    /// Every topic the pattern matches may be received.
    Allowed,
    /// Taken; messages on some matched topics are denied and must not be delivered.
    Filtered,
    /// Refused: no single allow rule covers the pattern, or a deny rule covers all of it.
    Denied,
}

impl Permissions {
    /// Whether this user may publish on `topic`.
    pub fn may_publish(&self, topic: &str) -> bool {
        self.publish.permits(topic)
    }

    /// Whether this user may receive messages on `topic` at all (a request's reply subject is
    /// checked so, before the request is published).
    pub fn may_receive(&self, topic: &str) -> bool {
        self.subscribe.permits(topic)
    }

    /// Whether a message on `topic`, matched by a subscription this user holds, must be withheld
    /// from it: the per-message check of the delivery path. Only deny rules are walked: a
    /// subscription is taken only when one allow rule covers its whole pattern, so every topic
    /// it matches is allowed already (and a reload that changes the rules closes the session).
    /// Only [`SubscribeDecision::Filtered`] subscriptions need it: an allowed one shares no
    /// topic with a deny rule.
    pub fn withholds(&self, topic: &str) -> bool {
        self.subscribe.deny.matches(topic)
    }

    /// Decides a subscription to `pattern`.
    pub fn subscribe(&self, pattern: &Pattern) -> SubscribeDecision {
        let rules = &self.subscribe;
        if rules.deny.covers(pattern) || !rules.allow.covers(pattern) {
            SubscribeDecision::Denied
        } else if rules.deny.overlaps(pattern) {
            SubscribeDecision::Filtered
        } else {
            SubscribeDecision::Allowed
        }
    }
}
