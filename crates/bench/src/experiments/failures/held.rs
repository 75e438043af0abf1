//! How long a broker failure held the publishers up, read from their own acknowledgements (when
//! each client took each one): the longest time a publisher went without one across the fault,
//! and how long after the failure every publisher had one again. With the publishers' cell
//! replicated, a crash of their broker is answered by a takeover and they go on at a mate before
//! it restarts; without, they wait for the restart. Both systems are read the same way.

use std::collections::BTreeMap;

use super::faults::Window;

/// How the publishers came through one fault.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Held {
    /// The longest time one publisher went without an acknowledgement (ms), over the gaps that
    /// end after the stall and before the fault's aftermath ends; the largest over publishers.
    /// `None` when a publisher had none after the failure.
    pub longest_gap_ms: Option<f64>,
    /// The same longest gap of the publisher held up least: a publisher at the broker that
    /// stalled went without one for the whole stall at least, so a shorter one was elsewhere.
    pub least_gap_ms: Option<f64>,
    /// From the failure (the kill) to when every publisher had an acknowledgement taken after
    /// it (ms); `None` when one had none before the aftermath ended.
    pub resumed_ms: Option<f64>,
}

impl Held {
    /// Whether every publisher went on before the failed broker was back: the failure was
    /// answered by someone else (a takeover), not waited out.
    pub(super) fn before_the_end(&self, w: &Window) -> bool {
        self.resumed_ms.is_some_and(|r| r < w.ended_ms.saturating_sub(w.failed_ms) as f64)
    }

    /// Whether every publisher was at the failed broker when it stalled: each went without an
    /// acknowledgement for the stall at least (one at a mate already would not have).
    pub(super) fn held_by_the_stall(&self, w: &Window) -> bool {
        self.least_gap_ms.is_some_and(|g| g >= w.failed_ms.saturating_sub(w.stalled_ms) as f64)
    }
}

/// `acks` are (publisher, when its client took the acknowledgement, Unix µs); `until_ms` is
/// where the fault's aftermath ends (the next stall, or the end of the run).
pub(super) fn held(w: &Window, acks: &[(String, u64)], until_ms: u64) -> Held {
    let (stalled, failed, until) = (w.stalled_ms * 1000, w.failed_ms * 1000, until_ms * 1000);
    let mut per: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (publisher, at) in acks {
        per.entry(publisher.as_str()).or_default().push(*at);
    }
    let (mut longest, mut least, mut resumed) = (Some(0u64), Some(u64::MAX), Some(0u64));
    for times in per.values_mut() {
        times.sort_unstable();
        let first_after = times.iter().copied().find(|&t| t >= failed && t < until);
        resumed = resumed.zip(first_after).map(|(r, f)| r.max(f - failed));
        let gap = times.windows(2).filter(|p| p[1] > stalled && p[1] < until).map(|p| p[1] - p[0]).max();
        longest = longest.zip(first_after.and(gap)).map(|(l, g)| l.max(g));
        least = least.zip(first_after.and(gap)).map(|(l, g)| l.min(g));
    }
    let ms = |us: Option<u64>| us.filter(|_| !per.is_empty()).map(|u| u as f64 / 1e3);
    Held { longest_gap_ms: ms(longest), least_gap_ms: ms(least), resumed_ms: ms(resumed) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_and_the_resumption_are_read_from_the_acknowledgements() {
        let w = Window { label: "p1 crash", stalled_ms: 1000, failed_ms: 2000, ended_ms: 5000 };
        let ack = |p: &str, ms: u64| (p.to_string(), ms * 1000);
        // a: acknowledged every 40 ms until 990 ms, then again at 2300 ms (a mate took over).
        // b: until 980 ms, then at 2500 ms. c: an earlier, longer gap before the stall is not this
        // fault's.
        let acks = [
            ack("a", 950),
            ack("a", 990),
            ack("a", 2300),
            ack("a", 2340),
            ack("b", 980),
            ack("b", 2500),
            ack("c", 0),
            ack("c", 900),
            ack("c", 999),
            ack("c", 2100),
        ];
        let h = held(&w, &acks, 9000);
        assert_eq!(h.longest_gap_ms, Some(1520.0), "b: 980 ms to 2500 ms");
        assert_eq!(h.least_gap_ms, Some(1101.0), "c: 999 ms to 2100 ms");
        assert_eq!(h.resumed_ms, Some(500.0), "b was the last back, at 2500 ms");
        assert!(h.before_the_end(&w));
        assert!(h.held_by_the_stall(&w), "every publisher waited out the stall (1000 ms)");
        // d was at a mate all along: acknowledged through the stall.
        let elsewhere = [&acks[..], &[ack("d", 990), ack("d", 1400), ack("d", 2050)]].concat();
        let h = held(&w, &elsewhere, 9000);
        assert_eq!((h.least_gap_ms, h.longest_gap_ms), (Some(650.0), Some(1520.0)));
        assert!(!h.held_by_the_stall(&w));
        // Waited out: back only after the restart at 5000 ms.
        let late = [ack("a", 990), ack("a", 5200)];
        let h = held(&w, &late, 9000);
        assert_eq!((h.longest_gap_ms, h.resumed_ms), (Some(4210.0), Some(3200.0)));
        assert!(!h.before_the_end(&w));
        assert!(h.held_by_the_stall(&w));
        // A publisher never back: neither figure.
        let never = [ack("a", 990), ack("a", 2300), ack("b", 980)];
        assert_eq!(held(&w, &never, 9000), Held::default());
        assert_eq!(held(&w, &[], 9000), Held::default());
    }
}
