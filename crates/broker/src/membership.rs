//! Which queue groups have members at this broker: one [`QueueGroup`] per name, shared by its
//! members' subscriptions so they share one round-robin turn. Kept apart from the choice of a
//! member (`queue_groups`), which reads outboxes, so that an outbox's `Target` can name its group
//! without the two modules importing each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// One group as this broker holds it, shared by its members' subscriptions.
#[derive(Debug)]
pub struct QueueGroup {
    /// The name members joined with.
    pub name: String,
    /// The property whose value picks the member (`--queue-key`), the same for every member
    /// here; `None`: members take turns.
    pub key: Option<String>,
    /// Turns taken: where the next round-robin choice starts.
    next: AtomicUsize,
    /// Member subscriptions here.
    members: AtomicUsize,
}

/// The groups with members at this broker, by name, so members of one name share one turn.
#[derive(Default)]
pub struct QueueGroups {
    by_name: Mutex<HashMap<String, Arc<QueueGroup>>>,
}

impl QueueGroups {
    /// A new member of the group `name` keyed by `key` (made if it has none here), or why not:
    /// the group's members here share one key (or none), since a message's member is chosen
    /// once per group.
    pub fn join(&self, name: &str, key: Option<&str>) -> Result<Arc<QueueGroup>, String> {
        let mut by_name = self.by_name.lock();
        let group = by_name.entry(name.to_string()).or_insert_with(|| {
            Arc::new(QueueGroup {
                name: name.to_string(),
                key: key.map(str::to_string),
                next: AtomicUsize::new(0),
                members: AtomicUsize::new(0),
            })
        });
        if group.key.as_deref() != key {
            let had = group.key.as_deref().map_or("no key".to_string(), |k| format!("the key {k:?}"));
            return Err(format!("the queue group {name:?} has members here with {had}; its members share one key"));
        }
        group.members.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::clone(group))
    }

    /// A member left; a group with no member left here is forgotten.
    pub fn leave(&self, group: &QueueGroup) {
        let mut by_name = self.by_name.lock();
        if group.members.fetch_sub(1, Ordering::Relaxed) == 1 {
            by_name.remove(&group.name);
        }
    }

    /// Groups with members here, and how many each has.
    pub fn sizes(&self) -> Vec<(String, usize)> {
        let mut sizes: Vec<(String, usize)> =
            self.by_name.lock().values().map(|g| (g.name.clone(), g.members.load(Ordering::Relaxed))).collect();
        sizes.sort();
        sizes
    }
}

impl QueueGroup {
    /// Takes a turn: where this message's round-robin choice starts.
    pub fn take_turn(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
}
