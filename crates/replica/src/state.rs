//! The replicated state machine of one pubend: what a successor leader needs to keep every
//! promise its predecessor made (records, silence, the release point, the retry table).
//!
//! Apply is a pure function of the state and the command, so every replica that applies the same
//! committed log holds the same state. Ticks only grow: a publish lands at
//! `max(proposed tick, last record + 1, silence + 1)`, so a leader whose clock lags its
//! predecessor's can neither reorder the stream nor log inside ticks already told silent.

use std::collections::BTreeMap;

use crate::command::{Command, PublisherId};

/// What applying one committed command did: the facts replicas compare and leaders acknowledge.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// A new record, logged at `tick`.
    Logged {
        /// The publishing session.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
        /// Where the record landed.
        tick: u64,
    },
    /// A retry of a record already logged: not logged again, answered with the first tick.
    Duplicate {
        /// The publishing session.
        publisher: PublisherId,
        /// Its sequence number.
        seq: u64,
        /// The tick of the first copy; `None` once it is released ("logged earlier, tick
        /// forgotten", see [`PubendReplica`]).
        tick: Option<u64>,
    },
    /// Silence now reaches `up_to`.
    Silenced {
        /// The last silent tick after this command.
        up_to: u64,
    },
    /// The release point is now `up_to`.
    Released {
        /// The release point after this command.
        up_to: u64,
    },
    /// An entry with no command (a new leader's empty entry) or one this build cannot read:
    /// applied as nothing, identically on every replica.
    Nothing,
}

/// One retained record of the pubend's stream.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record {
    /// Its tick.
    pub tick: u64,
    /// The publishing session.
    pub publisher: PublisherId,
    /// Its sequence number.
    pub seq: u64,
    /// The message body.
    pub payload: Vec<u8>,
}

/// A pubend's replicated state: the same on every replica that applied the same log prefix.
///
/// Bounded by what subscribers still need: the records above the release point and, per
/// publisher, one high-water mark. A retry of an unreleased record is answered with its first
/// tick; one of a released record with "logged earlier, tick forgotten" (as the unreplicated
/// path does, `tidings_node::publishes`), which rests on a publisher's sequence numbers being
/// logged in order (a seq at or below one already released is taken as logged).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct PubendReplica {
    /// Records above the release point, by tick.
    pub(crate) records: BTreeMap<u64, Record>,
    /// The unreleased records' `(publisher, seq)` and tick: a retry after a takeover still
    /// finds its first tick. Derived from `records`, so a snapshot does not carry it.
    pub(crate) recent: BTreeMap<(PublisherId, u64), u64>,
    /// Per publisher, the highest sequence number among its released records.
    pub(crate) released_seqs: BTreeMap<PublisherId, u64>,
    /// The highest tick holding a record (0: none yet).
    pub(crate) last_tick: u64,
    /// Ticks up to here without a record are silence.
    pub(crate) silent_up_to: u64,
    /// Records up to here are released.
    pub(crate) released_up_to: u64,
    /// The payload bytes of `records`: a snapshot's size without walking them (a compaction
    /// sizes its buffer on the driver's task). Derived, like `recent`.
    pub(crate) payload_bytes: usize,
}

impl PubendReplica {
    /// Applies one committed command; `None` is an entry without one (see [`Outcome::Nothing`]).
    pub fn apply(&mut self, command: Option<Command>) -> Outcome {
        self.apply_with(command, &mut |_| {})
    }

    /// [`PubendReplica::apply`], handing each record a release drops to `released`: a
    /// compaction in progress keeps the ones its snapshot still needs (`compaction`).
    pub(crate) fn apply_with(&mut self, command: Option<Command>, released: &mut dyn FnMut(Record)) -> Outcome {
        match command {
            None => Outcome::Nothing,
            Some(Command::Publish { publisher, seq, tick, payload }) => {
                if let Some(first) = self.logged(publisher, seq) {
                    return Outcome::Duplicate { publisher, seq, tick: first };
                }
                // Above the release point: a release only reaches known ticks.
                let tick = tick.max(self.last_tick + 1).max(self.silent_up_to + 1);
                self.last_tick = tick;
                self.recent.insert((publisher, seq), tick);
                self.payload_bytes += payload.len();
                self.records.insert(tick, Record { tick, publisher, seq, payload });
                Outcome::Logged { publisher, seq, tick }
            }
            Some(Command::Silence { up_to }) => {
                self.silent_up_to = self.silent_up_to.max(up_to);
                Outcome::Silenced { up_to: self.silent_up_to }
            }
            Some(Command::Release { up_to }) => {
                // Only what is known (a record or silence) can be released.
                let known = self.last_tick.max(self.silent_up_to);
                self.released_up_to = self.released_up_to.max(up_to.min(known));
                let kept = self.records.split_off(&(self.released_up_to + 1));
                for record in std::mem::replace(&mut self.records, kept).into_values() {
                    self.forget(&record);
                    released(record);
                }
                Outcome::Released { up_to: self.released_up_to }
            }
        }
    }

    /// Whether `(publisher, seq)` was logged, and its tick if it is not released yet
    /// (`Some(None)`: logged earlier, tick forgotten), so a leader answers a retry without
    /// logging it again.
    pub fn logged(&self, publisher: PublisherId, seq: u64) -> Option<Option<u64>> {
        if let Some(&tick) = self.recent.get(&(publisher, seq)) {
            return Some(Some(tick));
        }
        self.released_seqs.get(&publisher).is_some_and(|&high| seq <= high).then_some(None)
    }

    /// A released record leaves the retry table for its publisher's high-water mark.
    fn forget(&mut self, record: &Record) {
        self.recent.remove(&(record.publisher, record.seq));
        self.payload_bytes -= record.payload.len();
        let high = self.released_seqs.entry(record.publisher).or_insert(record.seq);
        *high = (*high).max(record.seq);
    }

    /// Each publisher and the highest sequence number logged for it: a pubend opened from this
    /// state takes a repeat of any of them as a retry, never as a new record.
    pub fn publishers(&self) -> Vec<(PublisherId, u64)> {
        let mut highest = self.released_seqs.clone();
        for &(publisher, seq) in self.recent.keys() {
            let entry = highest.entry(publisher).or_insert(seq);
            *entry = (*entry).max(seq);
        }
        highest.into_iter().collect()
    }

    /// The records not yet released, in tick order: what subscribers may still ask for.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.records.values()
    }

    /// The highest tick that holds a record.
    pub fn last_tick(&self) -> u64 {
        self.last_tick
    }

    /// The end of the silence the lease made true.
    pub fn silent_up_to(&self) -> u64 {
        self.silent_up_to
    }

    /// The release point.
    pub fn released_up_to(&self) -> u64 {
        self.released_up_to
    }
}

#[cfg(test)]
mod tests {
    use super::{Outcome, PubendReplica};
    use crate::command::Command;

    fn publish(publisher: u64, seq: u64, tick: u64) -> Option<Command> {
        Some(Command::Publish { publisher, seq, tick, payload: vec![seq as u8] })
    }

    /// A retry, even one logged a second time by a new leader, is answered with the first tick
    /// and never becomes a second record.
    #[test]
    fn a_retry_is_answered_with_its_first_tick() {
        let mut state = PubendReplica::default();
        assert_eq!(state.apply(publish(1, 1, 10)), Outcome::Logged { publisher: 1, seq: 1, tick: 10 });
        assert_eq!(state.apply(publish(1, 1, 20)), Outcome::Duplicate { publisher: 1, seq: 1, tick: Some(10) });
        assert_eq!(state.records().count(), 1);
        assert_eq!(state.logged(1, 1), Some(Some(10)));
        assert_eq!(state.logged(1, 2), None);
    }

    /// Ticks only grow, and never land inside silence: a lagging successor's clock cannot
    /// reorder the stream or contradict a lease.
    #[test]
    fn ticks_grow_past_records_and_silence() {
        let mut state = PubendReplica::default();
        state.apply(publish(1, 1, 50));
        assert_eq!(state.apply(publish(2, 1, 40)), Outcome::Logged { publisher: 2, seq: 1, tick: 51 });
        assert_eq!(state.apply(Some(Command::Silence { up_to: 100 })), Outcome::Silenced { up_to: 100 });
        assert_eq!(state.apply(Some(Command::Silence { up_to: 90 })), Outcome::Silenced { up_to: 100 });
        assert_eq!(state.apply(publish(3, 1, 60)), Outcome::Logged { publisher: 3, seq: 1, tick: 101 });
        assert_eq!(state.apply(None), Outcome::Nothing);
    }

    /// A release drops records up to what is known, and their ticks from the retry table (a
    /// retry of one is still a duplicate, its tick forgotten), and never goes back.
    #[test]
    fn release_drops_known_records_only() {
        let mut state = PubendReplica::default();
        state.apply(publish(1, 1, 10));
        state.apply(publish(1, 2, 20));
        assert_eq!(state.apply(Some(Command::Release { up_to: 15 })), Outcome::Released { up_to: 15 });
        assert_eq!(state.records().map(|r| r.tick).collect::<Vec<_>>(), vec![20]);
        assert_eq!(state.apply(Some(Command::Release { up_to: 1_000 })), Outcome::Released { up_to: 20 });
        assert_eq!(state.apply(Some(Command::Release { up_to: 5 })), Outcome::Released { up_to: 20 });
        assert_eq!(state.records().count(), 0);
        assert_eq!(state.apply(publish(1, 2, 30)), Outcome::Duplicate { publisher: 1, seq: 2, tick: None });
        assert_eq!((state.recent.len(), state.released_seqs.len()), (0, 1));
        assert_eq!((state.last_tick(), state.silent_up_to(), state.released_up_to()), (20, 0, 20));
    }

    /// The publishers' highest sequence numbers outlive the records a release dropped: a pubend
    /// opened after a release still refuses to log a retry again.
    #[test]
    fn publishers_keep_their_highest_sequence_number_past_a_release() {
        let mut state = PubendReplica::default();
        state.apply(publish(1, 3, 10));
        state.apply(publish(2, 1, 11));
        state.apply(publish(1, 2, 12));
        state.apply(Some(Command::Release { up_to: 12 }));
        assert_eq!(state.records().count(), 0);
        assert_eq!(state.publishers(), vec![(1, 3), (2, 1)]);
    }
}
