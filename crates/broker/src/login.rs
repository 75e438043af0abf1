//! The checks a session makes (issue 43; the rules and the users file are in
//! [`crate::security`]), kept here so that the session, TCP and MQTT code each call one
//! line: log in before HELLO, check a publish, a subscription and a durable name, and notice a
//! reload that revoked the session's user.

use std::sync::Arc;

use tidings_auth::{Credentials, Failure, Permissions, SubscribeDecision, User};
use tidings_matching::Pattern;
use tidings_wire::{Message, Notice, ReasonCode};

use crate::outbox::Outbox;
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
        {
            let mut client = self.outbox.client.lock();
            client.push_str(&format!(" user {}", user.name));
        }
        self.login = Some(Login { user, changes: guard.watch() });
        Ok(())
    }

    /// Logs the session in as `user`, whom another exchange proved (MQTT 5 enhanced
    /// authentication's SCRAM): from then on as [`Session::login`] would have.
    pub fn login_proven(&mut self, user: Arc<User>) {
        let Some(guard) = self.shared.security.clone() else { return };
        self.outbox.client.lock().push_str(&format!(" user {}", user.name));
        self.login = Some(Login { user, changes: guard.watch() });
    }

    /// A proof that failed (SCRAM): counted, logged and delayed as a wrong password is.
    pub async fn proof_failed(&self) {
        let Some(guard) = self.shared.security.clone() else { return };
        let client = self.outbox.client.lock().clone();
        guard.refused(Failure::BadSecret, &client).await;
    }

    /// Whether HELLO may complete: with a users file, only after a successful [`Session::login`].
    pub(crate) fn check_logged_in(&self) -> Result<(), Notice> {
        match (&self.shared.security, &self.login) {
            (Some(_), None) => Err(Notice::new(ReasonCode::NotAuthenticated, "not authenticated")),
            _ => Ok(()),
        }
    }

    /// A publish's topic needs publish permission (checked once per new topic: see
    /// `Session::check_topic`).
    pub(crate) fn check_publish(&self, topic: &str) -> Result<(), Notice> {
        let Some(login) = &self.login else { return Ok(()) };
        if !login.user.permissions.may_publish(topic) {
            return Err(not_authorized(format!("user {} may not publish to {topic}", login.user.name)));
        }
        Ok(())
    }

    /// A request's reply subject needs subscribe permission: the answers come back there, so it
    /// must be a topic the user may read.
    pub(crate) fn check_reply_to(&self, message: &Message) -> Result<(), Notice> {
        let (Some(login), Some(reply)) = (&self.login, message.reply_to()) else { return Ok(()) };
        if !login.user.permissions.may_receive(reply) {
            return Err(not_authorized(format!("user {} may not receive replies on {reply}", login.user.name)));
        }
        Ok(())
    }

    /// A subscription (of any kind) must be covered by a subscribe allow rule and not wholly
    /// denied; one that overlaps a denied topic is taken, and the outbox's gate, set here
    /// before the subscription exists, withholds the denied messages from then on. A session
    /// that only ever holds allowed subscriptions gets no gate: none of its deliveries can be
    /// on a denied topic, so checking each one would be pure cost (5-16 % of 1->1 throughput
    /// at 1,000 rules, issue 43).
    pub(crate) fn check_subscribe(&self, pattern: &Pattern) -> Result<(), Notice> {
        let Some(login) = &self.login else { return Ok(()) };
        let decision = login.user.permissions.subscribe(pattern);
        if decision == SubscribeDecision::Denied {
            return Err(not_authorized(format!("user {} may not subscribe to {pattern}", login.user.name)));
        }
        gate(&self.outbox, decision, &login.user.permissions);
        Ok(())
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

/// Gives `outbox` its delivery gate when a subscription is taken as `decision` (before the
/// subscription exists, so that none of its messages passes unchecked): only a
/// [`SubscribeDecision::Filtered`] one needs it. Once set it stays for the session, and then
/// checks its allowed subscriptions' deliveries too: a deny walk that always passes them, since
/// an allowed pattern shares no topic with a deny rule.
fn gate(outbox: &Outbox, decision: SubscribeDecision, permissions: &Arc<Permissions>) {
    if decision == SubscribeDecision::Filtered {
        let _ = outbox.gate.set(Arc::clone(permissions));
    }
}

/// Completes when a reload removed or changed the session's user (its connection is then
/// closed: the client logs in again under the new rules); never, for a session without one.
pub async fn revoked(session: &mut Session) {
    let (Some(guard), Some(login)) = (session.shared.security.clone(), session.login.as_mut()) else {
        return std::future::pending().await;
    };
    user_revoked(&guard, &login.user, &mut login.changes).await;
}

/// A session's [`revocation`].
pub type Revocation = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What [`revoked`] waits for, made once the session logged in and owning what it reads, so
/// that a connection can keep it boxed across its waits: its wait then holds a pointer, not
/// the watch's future, while idle, and a connection without a login holds nothing (issue 42:
/// an idle MQTT connection at most 5 KB). `None` without a login. A session's login is set once.
pub fn revocation(session: &Session) -> Option<Revocation> {
    let (Some(guard), Some(login)) = (session.shared.security.clone(), session.login.as_ref()) else {
        return None;
    };
    let (user, mut changes) = (Arc::clone(&login.user), login.changes.clone());
    Some(Box::pin(async move { user_revoked(&guard, &user, &mut changes).await }))
}

/// Completes when a reload removed or changed `user`; never once the users file's watch ends.
async fn user_revoked(
    guard: &crate::security::Guard,
    user: &Arc<User>,
    changes: &mut tokio::sync::watch::Receiver<u64>,
) {
    loop {
        if changes.changed().await.is_err() {
            return std::future::pending().await;
        }
        let users = guard.users();
        if users.get(&user.name).is_none_or(|now| **now != **user) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_auth::{Permissions, RuleSet, Rules, SubscribeDecision};
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

    fn outbox() -> std::sync::Arc<Outbox> {
        let registry = &mut prometheus_client::registry::Registry::default();
        Outbox::new(SlowConsumer::default(), Metrics::new(registry), &QueueBudget::new(0))
    }

    /// alice reads everything but `secret.>`.
    fn alice() -> std::sync::Arc<Permissions> {
        let rules = |list: &[&str]| RuleSet::new(list.iter().filter_map(|p| p.parse().ok()).collect());
        let subscribe = Rules { allow: rules(&[">"]), deny: rules(&["secret.>"]) };
        std::sync::Arc::new(Permissions { publish: Rules::default(), subscribe })
    }

    #[test]
    fn only_a_filtered_subscription_gates_the_outbox() {
        let (outbox, alice) = (outbox(), alice());
        let steps = [("public.>", SubscribeDecision::Allowed), (">", SubscribeDecision::Filtered)];
        let mut targets = Vec::new();
        for (id, (text, want)) in (1..).zip(steps) {
            let Ok(pattern) = text.parse::<tidings_matching::Pattern>() else { panic!("a valid pattern") };
            let decision = alice.subscribe(&pattern);
            assert_eq!(decision, want, "{text}");
            super::gate(&outbox, decision, &alice);
            let gated = outbox.gate.get().is_some();
            assert_eq!(
                gated,
                decision == SubscribeDecision::Filtered,
                "after {text}: checked only from a filtered one"
            );
            targets.push(std::sync::Arc::new(Target::new(SubId(id), std::sync::Arc::clone(&outbox))));
        }
        let everything = &targets[1]; // `>`, taken after the gate was set
        assert_eq!(outbox.push(everything, &message("secret.plans"), &mut Vec::new()), Push::Withheld);
        assert_eq!(outbox.push(everything, &message("public.more"), &mut Vec::new()), Push::Queued);
    }

    #[test]
    fn a_gated_outbox_withholds_denied_topics_and_queues_the_rest() {
        let outbox = outbox();
        assert!(outbox.gate.set(alice()).is_ok());
        let target = std::sync::Arc::new(Target::new(SubId(1), std::sync::Arc::clone(&outbox)));
        let mut wake = Vec::new();
        assert_eq!(outbox.push(&target, &message("secret.plans"), &mut wake), Push::Withheld);
        assert_eq!(outbox.push(&target, &message("public.news"), &mut wake), Push::Queued);
        let withheld = outbox.push_guaranteed(SubId(2), PubendId(1), Tick(1), &message("secret.x"));
        assert_eq!(withheld, GuaranteedPush::Queued, "withheld, and counted as delivered");
        assert_eq!(outbox.depth().0, 1, "only public.news was queued");
    }
}
