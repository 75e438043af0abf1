//! The driver's side of durable subscribers ([`crate::gd::Mode::DURABLE`]): their clients go
//! away and come back, and the broker hosting them (the SHB) crashes at any moment, not only
//! while idle, and restarts with a fresh engine that restores each durable subscription from
//! its stored checkpoint (the layer does that at boot, see `durable.rs`).

use tidings_delivery::SubendId;

use crate::gd::layer::Command;
use crate::gd::run::GdRun;
use crate::net::LIVENESS;

impl GdRun {
    /// The live durable subscribers at running brokers: (subend, node, client connected).
    fn durables(&self) -> Vec<(SubendId, usize, bool)> {
        let world = self.world.borrow();
        let live = world.subs.iter().filter(|(_, s)| !s.gone && self.net.alive(s.node));
        live.filter_map(|(&id, s)| s.durable.as_ref().map(|d| (id, s.node, d.connected))).collect()
    }

    /// `node` crashed: its durable subscribers' clients are cut off, and the barrier they
    /// waited on (of that incarnation) is void.
    pub(super) fn durables_down(&mut self, node: usize) {
        let mut world = self.world.borrow_mut();
        for sub in world.subs.values_mut().filter(|s| s.node == node && !s.gone) {
            if let Some(durable) = sub.durable.as_mut() {
                durable.connected = false;
                sub.barrier = None;
            }
        }
    }

    /// `node` restarted: durable subscribers still missing a start ask its new barrier (the
    /// others were restored from their checkpoints when its layer booted).
    pub(super) fn durables_up(&mut self, node: usize) {
        let pubends = self.world.borrow().pubends.len();
        let waiting: Vec<SubendId> = {
            let world = self.world.borrow();
            let subs = world.subs.iter().filter(|(_, s)| s.node == node && !s.gone && s.durable.is_some());
            subs.filter(|(_, s)| s.starts.len() < pubends).map(|(&id, _)| id).collect()
        };
        for subend in waiting {
            self.barrier(node, subend);
        }
    }

    /// A broker hosting a durable subscriber crashes, whatever is owed or in flight (deliveries
    /// in its outboxes, acknowledgements on their way, checkpoint writes, replays), stays down
    /// for a while (none, one heartbeat or four), restarts, and its publisher retries.
    ///
    /// Two limits of the system outside the delivery core keep this narrower than "any broker,
    /// any time" (the seeds they fail are in `tests/gd_durable.rs`):
    /// - only brokers that relay no stream and host no pubend crash: a relay's crash reshapes
    ///   the trees, the known limit of I2 under tree changes (delivery's lib.rs);
    /// - the run goes on only once the restarted broker's subscriptions are back in its
    ///   neighbours' summaries (four heartbeats): while a broker is down its durable filters
    ///   are out of the routing summaries, so a relay judges a message published then F for
    ///   its cell, and its durable subscriber never gets it. (A message already on its way
    ///   when the broker crashes can still be judged so: the seeds that fail are those.)
    pub(super) fn crash_shb(&mut self) {
        let mut hosts: Vec<usize> = self.durables().into_iter().map(|(_, node, _)| node).collect();
        hosts.retain(|&node| self.is_leaf(node));
        hosts.sort_unstable();
        hosts.dedup();
        let (loud, down) = (self.rng.chance(50), [0, 1, 4][self.rng.below(3)]);
        let Some(&node) = self.rng.pick(&hosts) else { return };
        self.world.borrow_mut().stats.shb_crashes += 1;
        self.crash(node, loud);
        if down > 0 {
            self.pump(down * LIVENESS.heartbeat_interval_ms);
        }
        self.restart(node);
        self.pump(4 * LIVENESS.heartbeat_interval_ms);
        self.command(node, Command::Retry);
    }

    /// Whether `node` relays no stream (no children in any route) and hosts no pubend.
    fn is_leaf(&self, node: usize) -> bool {
        let hosts_pubend = self.world.borrow().pubends.contains_key(&node);
        let layer = self.net.nodes[node].layer.as_ref();
        !hosts_pubend && layer.is_some_and(|l| l.routes.values().all(|r| r.children.is_empty()))
    }

    /// A durable subscriber's client goes away, or comes back if it was away.
    pub(super) fn toggle_client(&mut self) {
        let durables = self.durables();
        let Some(&(subend, node, connected)) = self.rng.pick(&durables) else { return };
        match connected {
            true => {
                self.world.borrow_mut().stats.clients_away += 1;
                self.command(node, Command::ClientAway { subend })
            }
            false => self.command(node, Command::ClientBack { subend }),
        }
    }

    /// Every away client whose broker runs comes back (when the run heals).
    pub(super) fn clients_back(&mut self) {
        for (subend, node, connected) in self.durables() {
            if !connected {
                self.command(node, Command::ClientBack { subend });
            }
        }
    }
}
