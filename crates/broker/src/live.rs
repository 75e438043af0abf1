//! Settings a running broker changes without a restart, and the comparison that decides, on a
//! reload (SIGHUP), which changed settings took effect and which wait for a restart.
//!
//! Live: `limits.max_subscriptions_per_session` (checked at each SUBSCRIBE),
//! `slow_consumer.*` (each new session's queue bounds and policy; `max_stall` for every
//! session at its next stall) and `log.*` (applied by the command that owns the log). Everything
//! else (listeners, names, cluster, storage, frame size) shapes state built at start: it is
//! reported as needing a restart and left as it was.

use parking_lot::RwLock;

use crate::config::{Config, SlowConsumer};

/// The settings read at the moment they are needed.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Subscriptions one session may hold.
    pub max_subscriptions_per_session: usize,
    /// Subscriber queue bounds, policy and the longest stall.
    pub slow_consumer: SlowConsumer,
}

impl Settings {
    fn of(config: &Config) -> Settings {
        Settings {
            max_subscriptions_per_session: config.limits.max_subscriptions_per_session,
            slow_consumer: config.slow_consumer.clone(),
        }
    }
}

/// The live settings of a running broker.
#[derive(Debug)]
pub struct Live(RwLock<Settings>);

impl Live {
    /// The settings of `config`.
    pub fn new(config: &Config) -> Live {
        Live(RwLock::new(Settings::of(config)))
    }

    /// A copy of what is in force now.
    pub fn get(&self) -> Settings {
        self.0.read().clone()
    }

    /// Subscriptions one session may hold, now.
    pub fn max_subscriptions_per_session(&self) -> usize {
        self.0.read().max_subscriptions_per_session
    }

    /// The longest a publisher is held back by a congested subscriber, now.
    pub fn max_stall(&self) -> std::time::Duration {
        self.0.read().slow_consumer.max_stall
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reload {
    /// Changed keys now in force (`limits.max_subscriptions_per_session`, ...).
    pub applied: Vec<String>,
    /// Changed keys that take effect only at the next start.
    pub need_restart: Vec<String>,
}

/// Applies what can change live from `new`, and lists every changed key against `running`
/// (the configuration the broker started with, updated by earlier reloads).
pub fn reload(live: &Live, running: &Config, new: &Config) -> Reload {
    let mut outcome = Reload::default();
    for key in changed_keys(running, new) {
        let is_live = key == "limits.max_subscriptions_per_session"
            || key.starts_with("slow_consumer.")
            || key.starts_with("log.");
        if is_live {
            outcome.applied.push(key);
        } else {
            outcome.need_restart.push(key);
        }
    }
    *live.0.write() = Settings::of(new);
    outcome
}

/// `running` with the live settings of `new`: what the broker runs with after a reload, so the
/// next reload reports again what still waits for a restart.
pub fn with_live(running: &Config, new: &Config) -> Config {
    let mut next = running.clone();
    next.limits.max_subscriptions_per_session = new.limits.max_subscriptions_per_session;
    next.slow_consumer = new.slow_consumer.clone();
    next.log = new.log.clone();
    next
}

/// Dotted paths of the settings that differ, in a stable order.
pub fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let (Ok(old), Ok(new)) = (toml::Value::try_from(old), toml::Value::try_from(new)) else {
        return vec!["(configuration)".to_string()];
    };
    let mut keys = Vec::new();
    diff("", &old, &new, &mut keys);
    keys
}

fn diff(path: &str, old: &toml::Value, new: &toml::Value, keys: &mut Vec<String>) {
    match (old, new) {
        (toml::Value::Table(a), toml::Value::Table(b)) => {
            let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for name in names {
                let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => diff(&child, x, y, keys),
                    _ => keys.push(child),
                }
            }
        }
        (a, b) if a != b => keys.push(path.to_string()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_slow_consumers_change_live_and_listeners_wait_for_a_restart() {
        let old = Config::default();
        let mut new = old.clone();
        new.limits.max_subscriptions_per_session = 2;
        new.slow_consumer.max_messages = 10;
        new.listen.tcp = "127.0.0.1:7000".into();
        new.log.level = "debug".into();
        let live = Live::new(&old);
        let outcome = reload(&live, &old, &new);
        assert_eq!(
            outcome.applied,
            ["limits.max_subscriptions_per_session", "log.level", "slow_consumer.max_messages"]
        );
        assert_eq!(outcome.need_restart, ["listen.tcp"]);
        assert_eq!(live.max_subscriptions_per_session(), 2);
        assert_eq!(live.get().slow_consumer.max_messages, 10);
        assert!(changed_keys(&new, &new).is_empty());
        let next = with_live(&old, &new);
        assert_eq!(changed_keys(&next, &new), ["listen.tcp"], "still waiting for a restart");
    }
}
