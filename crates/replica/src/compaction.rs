//! A compaction spread over turns (issue 40): encoding a large applied state at once held the
//! broker's driver for 100-400 ms (a 100 MB state: encode, fault in fresh memory, CRC), every
//! publish on the broker waiting behind it. [`Compaction`] is the snapshot at one applied index
//! `A`, encoded [`GroupSettings::compact_slice`](crate::GroupSettings::compact_slice) bytes of
//! records per turn while the group goes on applying.
//!
//! It is still exactly the state at `A`: the header words, the release high-water marks and
//! the members are taken at `A` (small); the records are the ones at `A` in tick order, read
//! from a cursor. Records applied after `A` have higher ticks than any at `A` and are not read;
//! a release applied meanwhile hands the records it drops to [`Compaction::keep`], which keeps
//! the ones the cursor has not passed. Only a snapshot installed from the leader (which
//! replaces the log and the state) ends one early: it is dropped (`snapshot`).

use std::collections::BTreeMap;

use raft::eraftpb::ConfState;

use crate::state::{PubendReplica, Record};

/// A snapshot being encoded: the state at `index`, as [`PubendReplica::encode`] would have
/// encoded it there.
pub(crate) struct Compaction {
    /// The applied index `A` the snapshot is of.
    pub(crate) index: u64,
    /// The members at `A`.
    pub(crate) conf: ConfState,
    /// The bytes so far, reserved whole at the start (grown by doubling, a large state would
    /// be copied again at every step).
    out: Vec<u8>,
    /// The CRC32 of `out`, a slice at a time.
    crc: crc32fast::Hasher,
    /// The next tick the cursor reads from.
    next: u64,
    /// The last tick encoded: the last record at `A` (before it, for the mutation).
    last: u64,
    /// Records still to encode.
    left: u64,
    /// Records at `A` that a release dropped from the state before the cursor reached them.
    aside: BTreeMap<u64, Record>,
    /// The release high-water marks at `A`, encoded: the snapshot's end.
    tail: Vec<u8>,
}

impl Compaction {
    /// Starts the snapshot of `state`, applied at `index` with members `conf`; `drop_newest`:
    /// the simulator's mutation (it leaves out the newest record).
    pub(crate) fn start(state: &PubendReplica, index: u64, conf: ConfState, drop_newest: bool) -> Self {
        let mut out = Vec::with_capacity(state.encoded_len());
        let mut count = state.records.len() as u64;
        let mut last = state.last_tick;
        if let (true, Some((&newest, _))) = (drop_newest, state.records.last_key_value()) {
            count -= 1;
            last = newest - 1;
        }
        state.encode_head(&mut out, count);
        let mut tail = Vec::with_capacity(8 + 16 * state.released_seqs.len());
        state.encode_tail(&mut tail);
        let next = state.released_up_to + 1;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out);
        Self { index, conf, out, crc, next, last, left: count, aside: BTreeMap::new(), tail }
    }

    /// A record a release dropped from the state: kept if the snapshot still needs it.
    pub(crate) fn keep(&mut self, record: Record) {
        if record.tick >= self.next && record.tick <= self.last {
            self.aside.insert(record.tick, record);
        }
    }

    /// Encodes one record at the cursor.
    fn put(&mut self, record: &Record) -> Result<(), String> {
        if self.left == 0 {
            return Err(format!("compacting at {}: more records than the state held", self.index));
        }
        self.left -= 1;
        self.next = record.tick + 1;
        PubendReplica::encode_record(&mut self.out, record);
        Ok(())
    }

    /// Encodes records until `budget` bytes are spent or none is left: `Some(bytes)` once the
    /// snapshot is whole (its CRC appended), `Err` if the records read are not the count taken
    /// at `A` (a bug: the snapshot would not be the state at `A`).
    pub(crate) fn advance(&mut self, state: &PubendReplica, budget: usize) -> Result<Option<Vec<u8>>, String> {
        let start = self.out.len();
        // Kept records are all below the state's (a release drops a prefix): first.
        while self.out.len() - start < budget {
            let Some((_, record)) = self.aside.pop_first() else { break };
            self.put(&record)?;
        }
        // One walk of the state's records a slice, not a search a record.
        if self.aside.is_empty() && self.next <= self.last {
            for (_, record) in state.records.range(self.next..=self.last) {
                if self.out.len() - start >= budget {
                    break;
                }
                self.put(record)?;
            }
        }
        self.crc.update(&self.out[start..]);
        if self.out.len() - start >= budget && self.left > 0 {
            return Ok(None);
        }
        if self.left != 0 {
            return Err(format!("compacting at {}: {} records of the state missing", self.index, self.left));
        }
        let mut out = std::mem::take(&mut self.out);
        out.extend_from_slice(&self.tail);
        let mut crc = std::mem::take(&mut self.crc);
        crc.update(&self.tail);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::Compaction;
    use crate::command::Command;
    use crate::state::PubendReplica;

    fn publish(state: &mut PubendReplica, seq: u64, compaction: &mut Compaction) {
        let payload = vec![seq as u8; (seq % 7) as usize];
        let command = Command::Publish { publisher: seq % 3, seq, tick: seq * 10, payload };
        state.apply_with(Some(command), &mut |r| compaction.keep(r));
    }

    /// A compaction spread over many turns, with publishes, releases (some past records the
    /// cursor has not reached, one past every record at `A`) and silence applied between its
    /// slices, encodes exactly the state at `A`, byte for byte what `encode` gave there.
    #[test]
    fn a_compaction_over_many_turns_is_the_state_at_its_index() {
        for (release_at, budget) in [(3, 1), (10, 40), (25, 100), (1_000, 7)] {
            let mut state = PubendReplica::default();
            let mut none = Compaction::start(&state, 0, Default::default(), false);
            for seq in 1..=40 {
                publish(&mut state, seq, &mut none);
            }
            state.apply(Some(Command::Release { up_to: 55 }));
            let at_a = state.clone();
            let mut compaction = Compaction::start(&state, 7, Default::default(), false);
            let mut turns = 0;
            let data = loop {
                if let Some(data) = compaction.advance(&state, budget).expect("the records at A") {
                    break data;
                }
                turns += 1;
                let seq = 40 + turns;
                publish(&mut state, seq, &mut compaction);
                state.apply_with(Some(Command::Silence { up_to: seq * 10 + 5 }), &mut |r| compaction.keep(r));
                if turns % 3 == 0 {
                    let up_to = release_at * 10 * turns / 3;
                    state.apply_with(Some(Command::Release { up_to }), &mut |r| compaction.keep(r));
                }
            };
            assert_eq!(data, at_a.encode(), "release_at {release_at}, budget {budget}");
            assert_eq!(PubendReplica::decode(&data), Ok(at_a));
            assert!(budget > 100 || turns > 3, "spread over turns: {turns}");
        }
    }

    /// The mutation leaves out the newest record at `A`, and nothing else.
    #[test]
    fn the_mutation_drops_the_newest_record_only() {
        let mut state = PubendReplica::default();
        let mut none = Compaction::start(&state, 0, Default::default(), false);
        for seq in 1..=5 {
            publish(&mut state, seq, &mut none);
        }
        let mut compaction = Compaction::start(&state, 5, Default::default(), true);
        let data = compaction.advance(&state, 1 << 20).expect("encodes").expect("whole");
        let mut expected = state.clone();
        expected.records.pop_last();
        assert_eq!(data, expected.encode());
    }
}
