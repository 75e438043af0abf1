//! When a dial loop tries its peer again. A peer that was up a moment ago is most likely back
//! in a moment (a cut healed, a broker restarted): it is redialled every 100-200 ms for
//! [`RECENTLY_UP_MS`], so the link returns within a fifth of a second of the heal rather than
//! after the 0.4-0.8 s window the exponential backoff had reached while the fault lasted (the
//! nemesis, issue 38: seed 43's `c` dialled 70 ms before a cut healed, then waited 590 ms). A
//! peer down for longer, or never seen, backs off as before, up to `reconnect_max`.

use tidings_route::ReconnectBackoff;

/// How long after its peer was last seen up a dial loop keeps redialling quickly. The
/// nemesis's faults last at most 3 s, a broker restart on its data a few seconds more; a peer
/// gone for good costs at most 10 connection attempts a second for this long.
pub(crate) const RECENTLY_UP_MS: u64 = 10_000;

/// A dial loop's pacing, on the loop's own clock in ms (so it is tested without sleeping).
pub(crate) struct Redial {
    /// The backoff of a peer not seen lately, up to `reconnect_max`.
    slow: ReconnectBackoff,
    /// The backoff while the peer was seen lately: `reconnect_min` doubled once, at most.
    quick: ReconnectBackoff,
    /// When the peer was last seen up (a link to it ended, or it was linked another way).
    up_at: Option<u64>,
}

impl Redial {
    /// Pacing between `min_ms` and `max_ms`; `seed` spreads the jitter of brokers started
    /// together.
    pub(crate) fn new(min_ms: u64, max_ms: u64, seed: u64) -> Redial {
        let quick_max = min_ms.saturating_mul(2).min(max_ms.max(min_ms));
        Redial {
            slow: ReconnectBackoff::new(min_ms, max_ms, seed),
            quick: ReconnectBackoff::new(min_ms, quick_max, seed.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15),
            up_at: None,
        }
    }

    /// The peer was up at `now_ms` (a link to it just ended, or it is linked through a
    /// connection it dialled): past failures are forgotten and the next dials come quickly.
    pub(crate) fn up(&mut self, now_ms: u64) {
        self.slow.reset();
        self.quick.reset();
        self.up_at = Some(now_ms);
    }

    /// The delay before the next dial, after one that failed or a link that ended at `now_ms`.
    pub(crate) fn next_delay_ms(&mut self, now_ms: u64) -> u64 {
        let slow = self.slow.next_delay_ms();
        match self.up_at {
            Some(at) if now_ms < at.saturating_add(RECENTLY_UP_MS) => slow.min(self.quick.next_delay_ms()),
            _ => slow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dial loop's delays from `start_ms`, failing every dial, until `until_ms`.
    fn delays(r: &mut Redial, start_ms: u64, until_ms: u64) -> Vec<u64> {
        let (mut now, mut out) = (start_ms, Vec::new());
        while now < until_ms {
            let d = r.next_delay_ms(now);
            out.push(d);
            now += d;
        }
        out
    }

    /// The broker's defaults (100 ms, 800 ms): through a 3 s cut of a link that was up, every
    /// redial comes within 200 ms of the one before, with jitter; the plain backoff had reached
    /// 400-800 ms by then (the heal waited up to 0.8 s).
    #[test]
    fn a_peer_up_a_moment_ago_is_redialled_within_200_ms_with_jitter() {
        let mut r = Redial::new(100, 800, 7);
        r.up(1_000);
        let quick = delays(&mut r, 1_000, 4_000);
        assert!(quick.iter().all(|&d| (50..=200).contains(&d)), "{quick:?}");
        assert!(quick.len() >= 15, "{quick:?}");
        assert!(quick.windows(2).any(|w| w[0] != w[1]), "no jitter: {quick:?}");
        let mut plain = ReconnectBackoff::new(100, 800, 7);
        let late: Vec<u64> = (0..8).map(|_| plain.next_delay_ms()).skip(4).collect();
        assert!(late.iter().all(|&d| d >= 400), "the plain backoff this replaces: {late:?}");
    }

    /// A peer gone for longer backs off to `reconnect_max` as before; seen up again, it is
    /// redialled quickly at once.
    #[test]
    fn a_peer_down_for_long_backs_off_and_quickens_when_seen_again() {
        let mut r = Redial::new(100, 800, 7);
        r.up(0);
        let all = delays(&mut r, 0, RECENTLY_UP_MS + 5_000);
        let after: Vec<u64> = all.iter().rev().take(4).copied().collect();
        assert!(after.iter().all(|&d| d >= 400), "{after:?}");
        r.up(20_000);
        assert!(r.next_delay_ms(20_000) <= 100);
        let mut never = Redial::new(100, 800, 7);
        let cold = delays(&mut never, 0, 5_000);
        assert!(cold.iter().rev().take(3).all(|&d| d >= 400), "a peer never seen backs off: {cold:?}");
    }
}
