//! A simulated broker opening its data directory: the real log's recovery (as the broker's
//! driver runs it, through `tidings_node::journal`), judged against the run's truth.
//!
//! Whatever acknowledged record the log no longer holds above its release prefix, and does not
//! report lost, was lost silently: a violation. A record the log holds that the world never saw
//! made durable was written but not acknowledged before the crash (the crash struck between
//! the write and the end of its sync, and the page cache or the torn tail kept it): the broker
//! treats it as logged, so it joins the truth (its publisher's retry is a duplicate of it).

use std::collections::BTreeSet;

use tidings_delivery::{PubendId, Recovered, StoreInput, Tick};
use tidings_node::publishes::Publishes;

use crate::gd::disk::Disk;
use crate::gd::layer::GdLayer;
use crate::gd::world::{message_of, World};

impl GdLayer {
    /// Opens `node`'s log; returns what the core is told about its own pubend (nothing when
    /// it hosts none), and the retry table the broker rebuilds from the log. A log that will
    /// not open is a violation (the simulated disk never fails).
    pub(super) fn open_log(&self, node: usize, disk: &mut Disk) -> (Option<(PubendId, Recovered)>, Publishes<u64>) {
        let pubend = self.world.borrow().pubends.get(&node).copied();
        let opened = disk.open().and_then(|recovered| match disk.store() {
            Some(store) => tidings_node::journal::opened(store, recovered),
            None => Ok(Default::default()),
        });
        let opened = match opened {
            Ok(opened) => opened,
            Err(error) => {
                self.world.borrow_mut().violation(format!("node {node}'s log would not open: {error}"));
                return (None, Publishes::default());
            }
        };
        let logged = opened.pubends.iter().map(|(p, r)| (*p, r.logged.last().copied().unwrap_or_default()));
        let publishes = Publishes::recovered(opened.dedup.iter().copied(), logged.collect::<Vec<_>>());
        let Some(pubend) = pubend else { return (None, publishes) };
        let recovered = opened.pubends.into_iter().find(|(p, _)| *p == pubend).map(|(_, r)| r).unwrap_or_default();
        if let StoreInput::ReadDone { records, .. } = disk.records(pubend, recovered.release) {
            let kept: Vec<(Tick, u64)> =
                records.iter().map(|(tick, payload)| (*tick, message_of(payload).unwrap_or(u64::MAX))).collect();
            self.world.borrow_mut().judge_recovered(node, pubend, &recovered, &kept);
        }
        (Some((pubend, recovered)), publishes)
    }
}

impl World {
    /// Judges what `node`'s log recovered for `pubend` (`kept`: its records above the release
    /// prefix, with their messages) against the acknowledged truth, and adopts the records
    /// written but never acknowledged.
    fn judge_recovered(&mut self, node: usize, pubend: PubendId, recovered: &Recovered, kept: &[(Tick, u64)]) {
        let lost = |tick: Tick| recovered.lost.iter().any(|r| r.from <= tick && tick <= r.to);
        let truth = self.durable.entry(pubend).or_default();
        let mut problems = Vec::new();
        let mut adopted = Vec::new();
        for &(tick, msg) in kept {
            match truth.get(&tick) {
                Some(&was) if was != msg => {
                    problems.push(format!("node {node}'s log holds msg {msg} at {pubend:?} {tick:?}, not {was}"))
                }
                Some(_) => {}
                None => adopted.push((tick, msg)),
            }
        }
        let held: BTreeSet<Tick> = kept.iter().map(|(tick, _)| *tick).collect();
        for &tick in truth.range(recovered.release.next()..).map(|(tick, _)| tick) {
            if !held.contains(&tick) && !lost(tick) {
                problems.push(format!("node {node}'s log lost acknowledged {pubend:?} {tick:?} without a trace"));
            }
        }
        for (tick, msg) in adopted {
            self.made_durable(pubend, tick, msg);
        }
        if let Some(&(tick, _)) = kept.last() {
            let assigned = self.assigned.entry(pubend).or_default();
            *assigned = (*assigned).max(tick);
        }
        self.violations.extend(problems);
    }
}
