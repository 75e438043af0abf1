//! Topic aliases the broker sets on the PUBLISHes it sends a 5.0 client that allows them (its
//! CONNECT's Topic Alias Maximum, MQTT 5.0 §3.3.2.3.4): the first PUBLISH of a topic names it
//! and sets an alias, later ones carry the alias alone, saving the name on every message of a
//! busy topic. Aliases belong to one network connection, as this table does (a new connection
//! starts empty, MQTT-3.3.2-7).

use std::collections::HashMap;
use std::num::NonZeroU16;

use tidings_wire::mqtt::Publish;

/// The most aliases the broker keeps for one connection, whatever the client allows: the table
/// costs a topic name each.
const MOST: u16 = 64;

/// One connection's topic-to-alias table, filled first come first served and never replaced
/// (a topic past the last alias goes with its name, as without aliases).
#[derive(Debug, Default)]
pub(super) struct ServerAliases {
    /// The client's Topic Alias Maximum, at most [`MOST`]; 0 is none.
    max: u16,
    by_topic: HashMap<String, NonZeroU16>,
}

impl ServerAliases {
    /// A table for a client that accepts up to `client_max` aliases (0 or absent: none).
    pub(super) fn new(client_max: Option<u16>) -> ServerAliases {
        ServerAliases { max: client_max.unwrap_or(0).min(MOST), by_topic: HashMap::new() }
    }

    /// Sets `publish`'s alias: the topic's own, once set, with the name left out; or a new one
    /// while the client allows more, with the name; else nothing. True when it set one.
    pub(super) fn apply(&mut self, publish: &mut Publish) -> bool {
        if self.max == 0 || publish.topic.is_empty() {
            return false;
        }
        if let Some(&alias) = self.by_topic.get(&publish.topic) {
            publish.properties.topic_alias = Some(alias);
            publish.topic.clear();
            return true;
        }
        let Some(next) = NonZeroU16::new(self.by_topic.len() as u16 + 1).filter(|n| n.get() <= self.max) else {
            return false;
        };
        self.by_topic.insert(publish.topic.clone(), next);
        publish.properties.topic_alias = Some(next);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(topic: &str) -> Publish {
        Publish::at_most_once(topic, &b"x"[..])
    }

    fn sent(aliases: &mut ServerAliases, topic: &str) -> (String, Option<u16>) {
        let mut p = publish(topic);
        aliases.apply(&mut p);
        (p.topic, p.properties.topic_alias.map(NonZeroU16::get))
    }

    #[test]
    fn a_topic_is_named_with_its_alias_once_then_sent_by_alias_alone() {
        let mut a = ServerAliases::new(Some(1));
        assert_eq!(sent(&mut a, "a/b"), ("a/b".into(), Some(1)));
        assert_eq!(sent(&mut a, "a/b"), ("".into(), Some(1)));
        // Past the client's maximum: the name, no alias.
        assert_eq!(sent(&mut a, "c"), ("c".into(), None));
        assert_eq!(sent(&mut a, "a/b"), ("".into(), Some(1)));
    }

    #[test]
    fn a_client_that_allows_none_gets_names_only() {
        let mut a = ServerAliases::new(None);
        assert_eq!(sent(&mut a, "a"), ("a".into(), None));
        let mut a = ServerAliases::new(Some(0));
        assert_eq!(sent(&mut a, "a"), ("a".into(), None));
    }

    #[test]
    fn the_broker_keeps_at_most_its_own_number_of_aliases() {
        let mut a = ServerAliases::new(Some(u16::MAX));
        for i in 0..MOST {
            assert_eq!(sent(&mut a, &format!("t{i}")).1, Some(i + 1));
        }
        assert_eq!(sent(&mut a, "one more"), ("one more".into(), None));
    }
}
