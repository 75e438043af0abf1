//! The checks a session makes (issue 43; the rules and the users file are in
//! [`crate::security`]), kept here so that the session, TCP and MQTT code each call one
//! line: log in before HELLO, check a publish, a subscription and a durable name, and notice a
//! reload that revoked the session's user.

use std::sync::Arc;

use tidings_auth::{Credentials, Failure, SubscribeDecision};
use tidings_matching::Pattern;
use tidings_wire::{Message, Notice, ReasonCode};

use crate::security::Login;
use crate::session::Session;

fn not_authorized(what: String) -> Notice {
    Notice::new(ReasonCode::NotAuthorized, what)
}

impl Session {
    /// Logs the session in with `credentials`, before its HELLO is handled (a no-op without a
    /// users file); a client that offers none logs in by its TLS client certificate, if it
    /// showed one. The refusal says only "not authenticated": not whether the user exists.
    pub async fn login(&mut self, credentials: Credentials) -> Result<(), Failure> {
        let Some(guard) = self.shared.security.clone() else { return Ok(()) };
        if self.login.is_some() {
            return Ok(()); // a second HELLO: refused as such by `hello`
        }
        let credentials = match (credentials, self.certificate.take()) {
            (Credentials::None, Some(names)) => Credentials::Certificate(names),
            (credentials, _) => credentials,
        };
        let client = self.outbox.client.lock().clone();
        let user = guard.login(credentials, &client).await?;
        if user.permissions.filters_deliveries() {
            let _ = self.outbox.gate.set(Arc::clone(&user.permissions));
        }
        {
            let mut client = self.outbox.client.lock();
            client.push_str(&format!(" user {}", user.name));
        }
        self.login = Some(Login { user, changes: guard.watch() });
        Ok(())
    }

    /// Whether HELLO may complete: with a users file, only after a successful [`Session::login`].
    pub(crate) fn check_logged_in(&self) -> Result<(), Notice> {
        match (&self.shared.security, &self.login) {
            (Some(_), None) => Err(Notice::new(ReasonCode::NotAuthenticated, "not authenticated")),
            _ => Ok(()),
        }
    }

    /// A publish's topic needs publish permission; a request's reply subject needs subscribe
    /// permission (the answers come back there, so it must be a topic the user may read).
    pub(crate) fn check_publish(&self, message: &Message) -> Result<(), Notice> {
        let Some(login) = &self.login else { return Ok(()) };
        let permissions = &login.user.permissions;
        if !permissions.may_publish(message.topic()) {
            return Err(not_authorized(format!("user {} may not publish to {}", login.user.name, message.topic())));
        }
        match message.reply_to() {
            Some(reply) if !permissions.may_receive(reply) => {
                Err(not_authorized(format!("user {} may not receive replies on {reply}", login.user.name)))
            }
            _ => Ok(()),
        }
    }

    /// A subscription (of any kind) must be covered by a subscribe allow rule and not wholly
    /// denied; one that overlaps a denied topic is taken, and the outbox's gate withholds the
    /// denied messages.
    pub(crate) fn check_subscribe(&self, pattern: &Pattern) -> Result<(), Notice> {
        let Some(login) = &self.login else { return Ok(()) };
        match login.user.permissions.subscribe(pattern) {
            SubscribeDecision::Allowed | SubscribeDecision::Filtered => Ok(()),
            SubscribeDecision::Denied => {
                Err(not_authorized(format!("user {} may not subscribe to {pattern}", login.user.name)))
            }
        }
    }

    /// A durable name belongs to its user: stored as `<user>.<name>`, so two users' `orders`
    /// are two durables, and one user can neither take over nor delete another's.
    pub(crate) fn durable_name(&self, name: String) -> String {
        match &self.login {
            Some(login) => format!("{}.{name}", login.user.name),
            None => name,
        }
    }
}

/// Completes when a reload removed or changed the session's user (its connection is then
/// closed: the client logs in again under the new rules); never, for a session without one.
pub async fn revoked(session: &mut Session) {
    let (Some(guard), Some(login)) = (session.shared.security.clone(), session.login.as_mut()) else {
        return std::future::pending().await;
    };
    loop {
        if login.changes.changed().await.is_err() {
            return std::future::pending().await;
        }
        let users = guard.users();
        if users.get(&login.user.name).is_none_or(|now| **now != *login.user) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_auth::{Permissions, RuleSet, Rules};
    use tidings_wire::{PubendId, SubId, Tick};

    use crate::budget::QueueBudget;
    use crate::config::SlowConsumer;
    use crate::metrics::Metrics;
    use crate::outbox::{GuaranteedPush, Outbox, Push, Target};

    fn message(topic: &str) -> tidings_wire::Message {
        let Ok(message) = tidings_wire::Message::new(topic, &[], Bytes::from_static(b"p"), 0) else {
            panic!("a valid message")
        };
        message
    }

    #[test]
    fn a_gated_outbox_withholds_denied_topics_and_queues_the_rest() {
        let registry = &mut prometheus_client::registry::Registry::default();
        let outbox = Outbox::new(SlowConsumer::default(), Metrics::new(registry), &QueueBudget::new(0));
        let rules = |list: &[&str]| RuleSet::new(list.iter().filter_map(|p| p.parse().ok()).collect());
        let subscribe = Rules { allow: rules(&[">"]), deny: rules(&["secret.>"]) };
        let permissions = Permissions { publish: Rules::default(), subscribe };
        assert!(outbox.gate.set(std::sync::Arc::new(permissions)).is_ok());
        let target = std::sync::Arc::new(Target::new(SubId(1), std::sync::Arc::clone(&outbox)));
        let mut wake = Vec::new();
        assert_eq!(outbox.push(&target, &message("secret.plans"), &mut wake), Push::Withheld);
        assert_eq!(outbox.push(&target, &message("public.news"), &mut wake), Push::Queued);
        let withheld = outbox.push_guaranteed(SubId(2), PubendId(1), Tick(1), &message("secret.x"));
        assert_eq!(withheld, GuaranteedPush::Queued, "withheld, and counted as delivered");
        assert_eq!(outbox.depth().0, 1, "only public.news was queued");
    }
}
