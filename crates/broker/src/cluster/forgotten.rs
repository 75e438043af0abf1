//! Brokers forgotten in this cell (`tidings cell forget`, docs/replication.md, "Membership
//! changes"), as the links see them. A forgotten broker is gone for good as far as its cell is
//! concerned: its replica groups removed it, so if its machine comes back on its old disk it
//! holds replicas that no group counts and journals that must not be served. So no link with it
//! comes up: this broker does not dial it (once a dial named it), and refuses its handshake
//! with a reason that starts with [`FORGOTTEN`], sent before this broker's own HELLO (or AUTH),
//! so that no link comes up on the forgotten side either. That side logs the reason at error
//! level, shows it in `/state` (`forgotten_here`) and refuses guaranteed publishes with it.
//!
//! The guaranteed layer owns the record (`<data dir>/cell-forgotten`) and tells this one; the
//! ids are the replica ids of the names ([`broker_id`]). The refusal is by name: a data
//! directory carries no identity of its own that HELLO tells, so a fresh machine under a
//! forgotten name is refused too, until `tidings cell unforget` re-admits the name.

use std::collections::BTreeSet;

use tidings_route::BrokerName;
use tidings_wire::peer::Hello;
use tracing::error;

use super::Cluster;

/// How every refusal of a forgotten broker's link begins: the refused side recognises it in
/// the CLOSE that ends its handshake (docs/protocol.md, "Link handshake").
pub const FORGOTTEN: &str = "forgotten by cell ";

/// A broker's id in its cell's records (its replica id): a hash of its name, never 0.
pub(crate) fn broker_id(name: &str) -> u64 {
    tidings_wire::hash::fnv1a(name.as_bytes()).max(1)
}

/// What the links know of forgetting.
#[derive(Default)]
pub(super) struct Forgotten {
    /// The brokers forgotten in this cell, by [`broker_id`].
    ids: BTreeSet<u64>,
    /// Why this broker's own cell refused it, when it did (the refusal's text, or a mate's
    /// FORGET naming this broker); cleared when a cell mate links again.
    here: Option<String>,
}

impl Cluster {
    /// Brokers forgotten in this cell (read at start, or just forgotten): never dialled or
    /// linked again, and their client addresses are no longer told to clients.
    pub(crate) fn forget_brokers(&self, ids: impl IntoIterator<Item = u64>) {
        let forgotten = {
            let mut forgotten = self.forgotten.lock();
            forgotten.ids.extend(ids);
            forgotten.ids.clone()
        };
        // One lock at a time: `establish` takes the router's, then this one.
        let mut core = self.core.write();
        let before = core.mates.len();
        core.mates.retain(|name, _| !forgotten.contains(&broker_id(name.as_str())));
        if core.mates.len() != before {
            self.tell_servers(&core.mates);
        }
    }

    /// An operator took back the forget of the broker `id` here (`tidings cell unforget`): its
    /// links are accepted, and dialled, again.
    pub(crate) fn readmit_broker(&self, id: u64) {
        self.forgotten.lock().ids.remove(&id);
    }

    /// Whether `peer` is forgotten in this cell.
    pub(crate) fn is_forgotten(&self, peer: &BrokerName) -> bool {
        self.forgotten.lock().ids.contains(&broker_id(peer.as_str()))
    }

    /// Why a link with the sender of `hello` is refused, if its name is forgotten here: the
    /// text that goes into the CLOSE, beginning with [`FORGOTTEN`].
    pub(super) fn refuse_forgotten(&self, hello: &Hello) -> Option<String> {
        if !self.forgotten.lock().ids.contains(&broker_id(&hello.name)) {
            return None;
        }
        let (cell, name) = (&self.cell, &hello.name);
        Some(format!(
            "{FORGOTTEN}{cell}: `tidings cell forget {name}` was run, so {name}'s replica groups removed it and \
             its cell refuses its links; a replacement takes a new name, or the name is re-admitted by \
             `tidings cell unforget {name}` on every broker of the cell and used with a fresh data directory"
        ))
    }

    /// This broker's own cell says it is forgotten (`why`): logged at error level, shown in
    /// `/state`, and guaranteed publishes are refused with it until a cell mate links again.
    pub(crate) fn told_forgotten(&self, why: &str) {
        let mut forgotten = self.forgotten.lock();
        if forgotten.here.as_deref() != Some(why) {
            error!(
                why,
                "this broker was forgotten by its cell: no link to its cell mates, guaranteed publishes refused, \
                 its journals kept; to serve the cell again, start it under a new name with a fresh data \
                 directory, or re-admit its name (`tidings cell unforget`) and start it with a fresh one"
            );
            forgotten.here = Some(why.to_string());
        }
    }

    /// A handshake this broker dialled was refused with a CLOSE saying it is forgotten (`why`).
    /// That CLOSE comes before AUTH, so anyone at a dialled address could send it: it is
    /// believed only while no cell mate is linked (a forgotten broker's mates all refuse it),
    /// never against a mate's authenticated link. The caller takes it only from its own dials:
    /// an inbound connection's first frame is anyone's.
    pub(super) fn refused_as_forgotten(&self, why: &str) {
        let linked_mate = self.core.read().links.values().any(|link| link.cell == self.cell);
        if !linked_mate {
            self.told_forgotten(why);
        }
    }

    /// An insecure link's peer closed it saying this broker is forgotten (`why`): the same
    /// rule as [`Cluster::refused_as_forgotten`], for a link this broker dialled, with no other
    /// cell mate linked.
    pub(super) fn closed_as_forgotten(&self, peer: &BrokerName, why: &str) {
        let believed = {
            let core = self.core.read();
            let dialled = core.links.get(peer).is_some_and(|link| link.direction == super::Direction::Outbound);
            dialled && !core.links.iter().any(|(name, link)| name != peer && link.cell == self.cell)
        };
        if believed {
            self.told_forgotten(why);
        }
    }

    /// Why this broker's cell refused it, while it does (see [`Cluster::told_forgotten`]).
    pub fn forgotten_here(&self) -> Option<String> {
        self.forgotten.lock().here.clone()
    }

    /// A cell mate linked: whatever refused this broker before (a refusal is not authenticated:
    /// it comes before AUTH) no longer stands.
    pub(super) fn mate_linked(&self) {
        self.forgotten.lock().here = None;
    }
}
