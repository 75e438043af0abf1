//! The chaos of a run: one random step (deliveries, time, churn, publishes, connections,
//! faults and repairs, as the run's [`crate::gd::Mode`] allows) and the crashes of every role.

use tidings_delivery::{PubendId, SubendId};

use crate::gd::disk::Crash;
use crate::gd::layer::Command;
use crate::gd::run::GdRun;
use crate::net::LIVENESS;

impl GdRun {
    /// A broker crashes: its non-durable subscribers end with it; its durable ones stay (their
    /// clients are cut off) and are restored when it restarts.
    pub(super) fn crash(&mut self, node: usize, loud: bool) {
        self.coverage.crashes += 1;
        self.net.nodes[node].store.next_crash = self.crash_kind(node);
        self.net.crash(node, loud);
        let subs: Vec<SubendId> = self
            .world
            .borrow()
            .subs
            .iter()
            .filter(|(_, s)| s.node == node && !s.gone && s.durable.is_none())
            .map(|(&id, _)| id)
            .collect();
        for subend in subs {
            self.end_sub(node, subend);
        }
        self.durables_down(node);
        self.world.borrow_mut().confirmed.remove(&node);
    }

    /// What a crash of `node` does to its data directory, as the mode allows: a power loss
    /// (unsynced writes gone) half the time, an empty directory for a quarter of the crashes of
    /// a broker whose directory holds nothing it promised (no pubend, no durable subscriber),
    /// else the process alone dies.
    fn crash_kind(&mut self, node: usize) -> Crash {
        let world = self.world.borrow();
        let promised = world.pubends.contains_key(&node)
            || world.subs.values().any(|s| s.node == node && !s.gone && s.durable.is_some());
        drop(world);
        if self.mode.empty_restarts && !promised && self.disk_rng.chance(25) {
            self.coverage.empty_restarts += 1;
            Crash::Empty
        } else if self.mode.power_loss && self.disk_rng.chance(50) {
            self.coverage.power_losses += 1;
            Crash::PowerLoss
        } else {
            Crash::Process
        }
    }

    /// A publishing broker crashes and comes straight back (its store keeps synced appends,
    /// its clock may step back), whatever its subscribers are still owed.
    fn crash_pubend(&mut self) {
        let hosts: Vec<usize> = self.world.borrow().pubends.keys().copied().collect();
        let Some(&node) = self.rng.pick(&hosts) else { return };
        let loud = self.rng.chance(50);
        if self.net.alive(node) {
            self.crash(node, loud);
            self.restart(node);
            self.command(node, Command::Retry);
        }
    }

    /// A broker of any role crashes while no subscriber is owed anything, restarts, the
    /// network settles, and its publisher retries what was not acknowledged.
    fn crash_idle(&mut self) {
        let node = self.rng.below(self.net.nodes.len());
        let loud = self.rng.chance(50);
        let pubends: Vec<PubendId> = self.world.borrow().pubends.values().copied().collect();
        let idle = pubends.iter().all(|&p| self.world.borrow().caught_up(p));
        if !idle || !self.net.alive(node) {
            return;
        }
        self.crash(node, loud);
        if !loud {
            self.pump(4 * LIVENESS.heartbeat_interval_ms);
        }
        self.restart(node);
        self.pump(4 * LIVENESS.heartbeat_interval_ms);
        self.command(node, Command::Retry);
    }

    pub(super) fn restart(&mut self, node: usize) {
        self.net.start(node);
        let brokers = self.net.nodes.len();
        self.routes.iter_mut().skip(node).step_by(brokers).for_each(|route| *route = None);
        for peer in 0..self.net.nodes.len() {
            if peer != node && self.net.alive(peer) {
                self.command(peer, Command::PeerRestarted { peer: node });
            }
        }
        self.durables_up(node);
    }

    /// One chaos step and the checks.
    pub(super) fn step(&mut self) -> Result<(), String> {
        let n = self.net.nodes.len();
        let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
        match self.rng.below(100) {
            0..=59 => {
                // Frames due are delivered (a round: one per connection direction) before
                // time moves on, so only faults, never the scheduler, starve a link.
                let mut busy = self.net.busy();
                if busy.is_empty() {
                    self.net.advance(self.rng.between(1, 30) as u64);
                }
                self.rng.shuffle(&mut busy);
                for (key, direction) in busy {
                    self.net.deliver(key, direction);
                }
            }
            60..=62 if self.mode.churn => {
                let node = self.rng.below(n);
                self.subscribe(node);
            }
            63..=64 if self.mode.churn => {
                let node = self.rng.below(n);
                self.unsubscribe(node);
            }
            65..=79 => self.publish(),
            80..=88 => {
                if let Some(&key) = self.rng.pick(&keys) {
                    self.net.connect(key);
                }
            }
            // Before the faults' arm: with faults on too (Mode::FULL) a publishing broker's
            // crash would otherwise never be drawn as such.
            89 if self.mode.pubend_crashes => self.crash_pubend(),
            89..=91 if self.mode.faults => self.fault(),
            92..=99 if self.mode.faults => self.repair(&keys),
            90 if self.mode.pubend_crashes => self.crash_pubend(),
            89..=90 if self.mode.idle_crashes => self.crash_idle(),
            94..=95 if self.mode.shb_crashes => self.crash_shb(),
            96..=98 if self.mode.durable => self.toggle_client(),
            _ => self.net.advance(1),
        }
        self.refresh();
        self.check()
    }

    /// Draws a fault (every draw made even when skipped, so a shrunk plan replays the rest
    /// identically) and applies it unless the plan skips it.
    fn fault(&mut self) {
        let n = self.net.nodes.len();
        let keys: Vec<(usize, usize)> = self.net.wires.keys().copied().collect();
        let (loud, kind, node) = (self.rng.chance(50), self.rng.below(100), self.rng.below(n));
        let key = self.rng.pick(&keys).copied();
        // One bit per broker: which side of a partition it falls on.
        let sides = self.rng.next_u64();
        let side = |i: usize| sides >> (i % 64) & 1 == 1;
        self.coverage.faults += 1;
        if self.plan.skip.contains(&(self.coverage.faults - 1)) {
            return;
        }
        let dead = (0..n).filter(|&i| !self.net.alive(i)).count();
        self.coverage.silent_faults += usize::from(!loud);
        match kind {
            0..=29 if (dead + 1) * 3 <= n && self.net.alive(node) => self.crash(node, loud),
            30..=39 if self.net.alive(node) => {
                self.coverage.stalls += 1;
                self.net.nodes[node].stalled = true;
            }
            40..=49 => {
                self.coverage.partitions += 1;
                for key in keys.into_iter().filter(|&(a, b)| side(a) != side(b)) {
                    self.net.cut(key, loud);
                }
            }
            _ => {
                if let Some(key) = key {
                    self.net.cut(key, loud);
                }
            }
        }
    }

    /// Repairs one thing at random: a cut wire, a stall, or a crash (the publisher then
    /// reconnects and retries).
    fn repair(&mut self, keys: &[(usize, usize)]) {
        let n = self.net.nodes.len();
        let kind = self.rng.below(3);
        let candidates: Vec<usize> = match kind {
            0 => (0..keys.len()).filter(|&i| self.net.wires[&keys[i]].cut).collect(),
            1 => (0..n).filter(|&i| self.net.nodes[i].stalled).collect(),
            _ => (0..n).filter(|&i| !self.net.alive(i)).collect(),
        };
        let Some(&pick) = self.rng.pick(&candidates) else { return };
        match kind {
            0 => self.net.repair(keys[pick]),
            1 => self.net.nodes[pick].stalled = false,
            _ => {
                self.restart(pick);
                self.command(pick, Command::Retry);
            }
        }
    }
}
