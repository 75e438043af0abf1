//! Opening a pubend from its replica group (`docs/replication.md`, "Serving from the
//! replicas"): a pubend whose group serves here (this broker leads it and applied an entry of
//! its term) and that is not open on this broker (its disk was wiped, or the pubend is new) is
//! opened from the group's state. The state becomes writes to this broker's pubend log
//! (`tidings_node::replicated::seed`; a log found at start is resumed, or voided and seeded again
//! when the group contradicts it: `reopen`), and once they are synced the engine opens the pubend
//! from that log, as after any restart: nacks, reads and releases are then the code that serves
//! every pubend. Until then the pubend is closed here: publishes wait at the gate, and nacks
//! find no stream.

use std::collections::BTreeMap;

use tidings_delivery::{PubendId, PublisherId, Recovered, StoreAction};
use tidings_store::Completion;
use tidings_wire::GuaranteedPublish;
use tracing::{error, info, warn};

use super::Replicas;
use crate::guaranteed::driver::Driver;
use crate::guaranteed::journal;

impl Replicas {
    /// The pubend a publisher that moved here from `name`'s host resumes: a cell mate's pubend
    /// of that name (`PubendId::derive(mate, name)`) whose group this broker holds and whose
    /// replicated retry table knows `publisher`. A publisher the group never logged has nothing
    /// acknowledged there, and starts on this broker's own pubend of that name.
    pub(super) fn resumed(&self, name: &str, publisher: PublisherId) -> Option<PubendId> {
        self.groups.iter().find_map(|(&pubend, group)| {
            let host = self.mates.get(group.voters.first()?)?;
            let named = tidings_route::PubendId::derive(host, name).0 == pubend.0;
            let knows = || group.replica.state().is_some_and(|s| s.publishers().iter().any(|&(p, _)| p == publisher.0));
            (named && knows()).then_some(pubend)
        })
    }
}

/// How long after its start a broker refuses a publisher whose home it has not seen advertised:
/// its view of the network fills within a few link-state rounds.
const YOUNG_MS: u64 = 10_000;

/// Seeds whose writes are in flight, by pubend.
#[derive(Default)]
pub(crate) struct Seeds(BTreeMap<PubendId, Seed>);

/// One pubend's seed: what the engine opens it with, and the writes not yet completed.
struct Seed {
    recovered: Recovered,
    left: usize,
    /// A write failed: the log holds only part of the group's state and is never opened.
    failed: bool,
}

impl Driver {
    /// The pubend a GPUBLISH goes to here: the one a publisher resumes after a takeover
    /// (`Replicas::resumed`), or the home it names (the pubend that acknowledged its last
    /// publish) when that is open here or a group held here, else this broker's own of its
    /// name.
    pub(in crate::guaranteed) fn publish_pubend(&self, publish: &GuaranteedPublish) -> PubendId {
        let name = crate::guaranteed::pubend_name(&publish.pubend);
        let publisher = PublisherId(publish.publisher.0);
        if let Some(resumed) = self.replicas.as_ref().and_then(|replicas| replicas.resumed(name, publisher)) {
            return resumed;
        }
        let held = |home: &PubendId| {
            self.hosted.contains(home) || self.replicas.as_ref().is_some_and(|r| r.is_replicated(*home))
        };
        match publish.home.map(|home| PubendId(home.0)) {
            Some(home) if held(&home) => home,
            _ => self.pubend_id(name),
        }
    }

    /// Why a publish that names a home must not be logged in `pubend` here, if it must not: its
    /// home (the pubend that acknowledged the publisher's last publish of that name, or the one
    /// its first try went to) is a pubend this broker neither hosts nor replicates. Its first
    /// try may be logged there, and logging the retry here, in a pubend that has never seen the
    /// publisher, would deliver it twice (the nemesis's replicated-cell schedules did, after a
    /// wiped mate took a moved publisher into a pubend of its own); and even a publisher with
    /// nothing in flight would have its next publishes delivered before what its home still
    /// holds for subscribers, out of the publisher's order. So the publish is refused
    /// unavailable, and the client moves on to a broker that serves its home: a mate of the home
    /// cell (one that replicates it), or the home's host once it is back. That holds for a home
    /// in another cell too, where nothing is shared to deduplicate with, and for a home no
    /// broker in view advertises (its host is down long enough for its advert to age out, or
    /// this broker's view is still filling): a publisher is never moved to another pubend
    /// (docs/replication.md, "Clients"). A broker with no network knows no home but its own.
    pub(in crate::guaranteed) fn home_elsewhere(
        &self,
        publish: &GuaranteedPublish,
        pubend: PubendId,
    ) -> Option<String> {
        let home = PubendId(publish.home?.0);
        if home == pubend {
            return None;
        }
        let net = self.net.as_ref()?;
        let why = match net.advertised.iter().find(|p| p.id.0 == home.0) {
            Some(p) => match net.cluster.cell_of_broker(&p.home) {
                Some(cell) if &cell == net.cluster.cell() => {
                    format!("the publisher's pubend is hosted by {} in this cell, and this broker holds no replica of it", p.home)
                }
                Some(cell) => format!(
                    "the publisher's pubend is hosted by {} in cell {cell}: only a broker of that cell takes its publishes (those not acknowledged yet may be logged there)",
                    p.home
                ),
                None => format!(
                    "the publisher's pubend is hosted by {}, out of this broker's view: only a broker serving it takes its publishes (those not acknowledged yet may be logged there)",
                    p.home
                ),
            },
            None if crate::guaranteed::driver::now().0.saturating_sub(self.started_ms.0) < YOUNG_MS => {
                "the publisher's pubend is not in this broker's view yet".to_string()
            }
            None => "no broker in view advertises the publisher's pubend (its host is down or gone): its publishes not acknowledged yet may be logged there".to_string(),
        };
        Some(why)
    }

    /// Opens the pubends whose log was found at start, then restores the ack leases and the
    /// durable subscriptions. A replicated one waits for its group to serve here: a cell mate may have
    /// taken it over while this broker was down (`docs/replication.md`, "Takeover"), and this
    /// log would then answer nacks and tell silence for ticks the successor logged.
    pub(in crate::guaranteed) fn open_found(&mut self) -> Result<(), crate::guaranteed::GuaranteedError> {
        for (pubend, recovered) in std::mem::take(&mut self.found) {
            match self.replicas.as_ref().is_some_and(|replicas| replicas.is_replicated(pubend)) {
                true => {
                    info!(pubend = pubend.0, "a replicated pubend found at start waits for its group to serve here");
                    self.found.insert(pubend, recovered);
                }
                false => self.open_pubend(pubend, recovered),
            }
        }
        self.restore_ack_leases()?;
        self.restore_durables()
    }

    /// Starts opening every pubend whose group serves here and that is neither open nor being
    /// opened: from the group's state alone, or from the log found at start plus what the
    /// group holds past it.
    pub(in crate::guaranteed) fn serve_from_replicas(&mut self) {
        let Some(replicas) = self.replicas.as_ref() else { return };
        let ready: Vec<_> = replicas
            .serving()
            .filter(|(pubend, _)| !self.hosted.contains(pubend) && !self.seeds.0.contains_key(pubend))
            .map(|(pubend, state)| match self.found.get(&pubend) {
                Some(found) => (pubend, tidings_node::replicated::reopen(pubend, state, found.clone())),
                None => (pubend, tidings_node::replicated::seed(pubend, state)),
            })
            .collect();
        for (pubend, seed) in ready {
            self.found.remove(&pubend);
            self.seed(pubend, seed);
        }
    }

    fn seed(&mut self, pubend: PubendId, seed: tidings_node::replicated::Seed) {
        match seed.voided {
            // A successor logged below this log's last tick (the brokers' clocks differ) after
            // this broker synced records its group never committed: the log is voided and seeded
            // again from the group (`docs/replication.md`, "Serving from the replicas").
            Some(tick) => {
                warn!(
                    pubend = pubend.0,
                    tick = tick.0,
                    records = seed.ticks.len(),
                    dropped = seed.dropped.len(),
                    "the log found at start lacks the replica group's record at this tick, below its last one: voiding it and seeding it again from the group"
                );
                // Its records are gone from the disk: the group's are counted as they are written.
                self.retained.remove(&pubend);
                self.metrics.logs_voided.inc();
            }
            None => info!(
                pubend = pubend.0,
                records = seed.ticks.len(),
                dropped = seed.dropped.len(),
                "opening the pubend from its replica group"
            ),
        }
        // What the reopened log lacks (logged here and never committed by the group) is never
        // served, and a retry of it is new.
        self.publishes.keep_logged(pubend, seed.recovered.release, &seed.recovered.logged);
        for ((publisher, seq), tick) in seed.ticks {
            self.publishes.appending((pubend, publisher, seq), tick);
        }
        let mut entry = Seed { recovered: seed.recovered, left: 0, failed: false };
        for write in &seed.writes {
            if let StoreAction::Append { tick, record, .. } = write {
                self.retained.entry(pubend).or_default().add(*tick, record.len() as u64);
            }
            let token = self.token();
            match journal::submit(&self.store, token, write) {
                Ok(()) => entry.left += 1,
                Err(e) => {
                    error!(pubend = pubend.0, error = %e, "the pubend log did not take the replica group's state: the pubend stays closed here");
                    entry.failed = true;
                    break;
                }
            }
        }
        match entry.left == 0 && !entry.failed {
            true => self.open_seeded(pubend, entry.recovered),
            false => drop(self.seeds.0.insert(pubend, entry)),
        }
    }

    /// Takes the completions of seeds' writes out of `group` and opens each pubend whose writes
    /// are all synced; returns the others, for the engine.
    pub(in crate::guaranteed) fn seeded(&mut self, group: &[Completion]) -> Vec<Completion> {
        let mut rest = Vec::with_capacity(group.len());
        let mut done = Vec::new();
        for completion in group {
            let pubend = PubendId(completion.pubend.0);
            let Some(seed) = self.seeds.0.get_mut(&pubend).filter(|seed| seed.left > 0) else {
                rest.push(completion.clone());
                continue;
            };
            seed.left -= 1;
            if let Err(e) = &completion.result {
                error!(pubend = pubend.0, error = %e, "a write of the replica group's state failed: the pubend stays closed here");
                seed.failed = true;
            }
            if seed.left == 0 && !seed.failed {
                done.push(pubend);
            }
        }
        for pubend in done {
            if let Some(seed) = self.seeds.0.remove(&pubend) {
                self.open_seeded(pubend, seed.recovered);
            }
        }
        rest
    }

    /// Whether seeds' writes are in flight (their completions must be taken out first).
    pub(in crate::guaranteed) fn seeding(&self) -> bool {
        self.seeds.0.values().any(|seed| seed.left > 0)
    }

    fn open_seeded(&mut self, pubend: PubendId, recovered: Recovered) {
        let highest = recovered.logged.last().copied().unwrap_or_default();
        info!(pubend = pubend.0, records = recovered.logged.len(), "the pubend is open from its replica group");
        self.publishes.synced(pubend, highest);
        self.open_pubend(pubend, recovered);
    }
}
