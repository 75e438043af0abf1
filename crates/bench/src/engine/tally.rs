//! What one subscriber received, by identity: a bit per message number, so that a duplicate
//! cannot hide a loss and a late probe cannot count as data.

use std::time::Instant;

use serde::Serialize;

/// One subscriber's account of a run.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    seen: Vec<u64>,
    expected: u64,
    /// Distinct data messages received.
    pub count: u64,
    /// Second copies of a data message.
    pub duplicates: u64,
    /// Deliveries whose number was not above the previous one's.
    pub out_of_order: u64,
    /// Messages the broker said it dropped for this subscriber (`missed` of deliveries).
    pub missed: u64,
    /// Probe deliveries (never counted as data).
    pub probes: u64,
    /// Deliveries without a readable mark, or with a number beyond the run.
    pub foreign: u64,
    /// The stream ended before the run did (the reason).
    pub ended: Option<String>,
    /// When the first and the last distinct data message arrived.
    pub first: Option<Instant>,
    /// See `first`.
    pub last: Option<Instant>,
    previous: Option<u64>,
}

/// What [`Tally::record`] made of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The first copy of data message n.
    First,
    /// A copy already counted.
    Duplicate,
    /// A probe.
    Probe,
    /// Not a message of this run.
    Foreign,
}

impl Tally {
    /// A tally for a run of `expected` numbered messages.
    pub fn new(expected: u64) -> Tally {
        Tally { seen: vec![0; (expected as usize).div_ceil(64)], expected, ..Tally::default() }
    }

    /// Records one delivery of `number` (`None`: no mark) at `at`.
    pub fn record(&mut self, number: Option<u64>, missed: u32, at: Instant) -> Seen {
        self.missed += u64::from(missed);
        let Some(n) = number else {
            self.foreign += 1;
            return Seen::Foreign;
        };
        if n == super::PROBE {
            self.probes += 1;
            return Seen::Probe;
        }
        let (word, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        let Some(slot) = self.seen.get_mut(word).filter(|_| n < self.expected) else {
            self.foreign += 1;
            return Seen::Foreign;
        };
        if self.previous.is_some_and(|p| n <= p) {
            self.out_of_order += 1;
        }
        self.previous = Some(n);
        if *slot & bit != 0 {
            self.duplicates += 1;
            return Seen::Duplicate;
        }
        *slot |= bit;
        self.count += 1;
        self.first.get_or_insert(at);
        self.last = Some(at);
        Seen::First
    }

    /// Whether message `n` arrived.
    pub fn has(&self, n: u64) -> bool {
        self.seen.get((n / 64) as usize).is_some_and(|w| w & (1u64 << (n % 64)) != 0)
    }

    /// The numbers below `sent` that never arrived.
    pub fn missing(&self, sent: u64) -> impl Iterator<Item = u64> + '_ {
        (0..sent).filter(|&n| !self.has(n))
    }

    /// Whether the subscriber was still being served when the run ended: its stream is open
    /// and at least one of the last tenth of the `sent` messages reached it. A subscriber that
    /// lost datagrams while its process waited for a CPU, and heard the rest, is alive; one
    /// cut off, or whose session the broker let go, hears none of the end.
    pub fn alive_at_end(&self, sent: u64) -> bool {
        let tail = (sent / 10).max(1);
        self.ended.is_none() && (sent.saturating_sub(tail)..sent).any(|n| self.has(n))
    }
}

/// Losses and anomalies over all subscribers of a run, counted by identity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Accounting {
    /// Data messages sent.
    pub sent: u64,
    /// Distinct (subscriber, number) pairs received.
    pub received: u64,
    /// (subscriber, number) pairs below `sent` that never arrived.
    pub lost: u64,
    /// Second copies.
    pub duplicates: u64,
    /// Deliveries out of order.
    pub out_of_order: u64,
    /// What the broker said it dropped (`missed`).
    pub missed: u64,
    /// Probe deliveries received, all subscribers (brokers count them with the data).
    pub probes: u64,
    /// Subscribers no longer served at the end (see [`Tally::alive_at_end`]): their stream
    /// ended, or none of the last tenth of the messages reached them. Seed 003's "dropped"
    /// subscribers were those that never reported; one that is alive but lost some
    /// messages is counted in `lossy_subscribers` instead, its losses in `lost`.
    pub dropped_subscribers: usize,
    /// Subscribers that lost anything (alive or not).
    pub lossy_subscribers: usize,
    /// The most one subscriber lost.
    pub max_lost: u64,
    /// Losses no subscriber was told of: over subscribers, what each lost beyond the `missed`
    /// its deliveries reported (the broker's queue drops and, over UDP, the gaps in the
    /// broker's datagram numbers). 0 when every loss was attributed to its subscriber.
    pub unattributed: u64,
    /// Subscribers whose stream ended early.
    pub ended: usize,
}

impl Accounting {
    /// Sums the tallies of a run that sent `sent` messages to each.
    pub fn of(sent: u64, tallies: &[Tally]) -> Accounting {
        let mut a = Accounting { sent, ..Accounting::default() };
        for t in tallies {
            let lost = t.missing(sent).count() as u64;
            a.received += t.count;
            a.lost += lost;
            a.duplicates += t.duplicates;
            a.out_of_order += t.out_of_order;
            a.missed += t.missed;
            a.probes += t.probes;
            a.ended += usize::from(t.ended.is_some());
            a.dropped_subscribers += usize::from(!t.alive_at_end(sent));
            a.lossy_subscribers += usize::from(lost > 0);
            a.max_lost = a.max_lost.max(lost);
            a.unattributed += lost.saturating_sub(t.missed);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_does_not_hide_a_loss() {
        let now = Instant::now();
        let mut t = Tally::new(3);
        for n in [0, 0, 2] {
            t.record(Some(n), 0, now);
        }
        let a = Accounting::of(3, &[t]);
        // By totals, 3 deliveries for 3 messages would look complete.
        assert_eq!((a.received, a.lost, a.duplicates, a.lossy_subscribers), (2, 1, 1, 1));
        assert_eq!((a.dropped_subscribers, a.max_lost, a.unattributed), (0, 1, 1), "alive at the end, told nothing");
    }

    #[test]
    fn a_subscriber_that_hears_none_of_the_end_is_dropped_one_told_of_its_losses_is_attributed() {
        let now = Instant::now();
        let mut cut = Tally::new(20);
        for n in 0..18 {
            cut.record(Some(n), 0, now);
        }
        let mut told = Tally::new(20);
        told.record(Some(0), 0, now);
        told.record(Some(19), 18, now);
        let mut ended = Tally::new(20);
        (0..20).for_each(|n| {
            ended.record(Some(n), 0, now);
        });
        ended.ended = Some("closed".into());
        let a = Accounting::of(20, &[cut, told, ended]);
        assert_eq!((a.dropped_subscribers, a.lossy_subscribers, a.lost), (2, 2, 20));
        assert_eq!((a.max_lost, a.unattributed), (18, 2), "the cut one was told nothing of its 2");
    }

    #[test]
    fn probes_and_strangers_are_never_data() {
        let now = Instant::now();
        let mut t = Tally::new(2);
        assert_eq!(t.record(Some(super::super::PROBE), 0, now), Seen::Probe);
        assert_eq!(t.record(None, 0, now), Seen::Foreign);
        assert_eq!(t.record(Some(7), 0, now), Seen::Foreign);
        assert_eq!(t.record(Some(1), 2, now), Seen::First);
        assert_eq!((t.count, t.probes, t.foreign, t.missed), (1, 1, 2, 2));
        assert_eq!(t.missing(2).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn reordering_is_counted() {
        let now = Instant::now();
        let mut t = Tally::new(3);
        for n in [1, 0, 2] {
            t.record(Some(n), 0, now);
        }
        assert_eq!((t.count, t.out_of_order), (3, 1));
    }
}
