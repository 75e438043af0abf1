//! Nack repetition timing (gd-protocol §8.4): Jacobson/Karels round-trip estimation with a floor
//! and a cap; samples only from ranges nacked once (Karn's rule); each repetition of a range
//! doubles its own wait.

use crate::settings::Settings;

/// Smoothed round trip of nacks towards one upstream.
#[derive(Clone, Copy, Debug, Default)]
pub struct NackTimer {
    /// Smoothed round trip in ms, `None` until the first sample.
    srtt: Option<u64>,
    /// Round-trip variation in ms.
    rttvar: u64,
}

impl NackTimer {
    /// Feeds one round trip (ms) of a range nacked exactly once.
    pub fn sample(&mut self, rtt_ms: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt_ms);
                self.rttvar = rtt_ms / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.abs_diff(rtt_ms)) / 4;
                self.srtt = Some((7 * srtt + rtt_ms) / 8);
            }
        }
    }

    /// How long to wait before repeating a nack that was already sent `repeats` times before:
    /// `clamp(srtt + 4 rttvar) * 2^repeats`, capped.
    pub fn interval_ms(&self, settings: &Settings, repeats: u8) -> u64 {
        let base = match self.srtt {
            None => settings.nack_repetition_initial_ms,
            Some(srtt) => srtt + 4 * self.rttvar,
        };
        let base = base.clamp(settings.nack_repetition_min_ms, settings.nack_repetition_max_ms);
        base.saturating_mul(1u64 << repeats.min(20)).min(settings.nack_repetition_max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_respects_the_floor_and_doubles_per_repeat_up_to_the_cap() {
        let settings = Settings::default();
        let mut timer = NackTimer::default();
        assert_eq!(timer.interval_ms(&settings, 0), settings.nack_repetition_initial_ms);
        timer.sample(1);
        assert_eq!(timer.interval_ms(&settings, 0), settings.nack_repetition_min_ms);
        assert_eq!(timer.interval_ms(&settings, 1), 2 * settings.nack_repetition_min_ms);
        assert_eq!(timer.interval_ms(&settings, 30), settings.nack_repetition_max_ms);
    }

    #[test]
    fn samples_converge_on_the_round_trip() {
        let settings = Settings::default();
        let mut timer = NackTimer::default();
        for _ in 0..50 {
            timer.sample(400);
        }
        let interval = timer.interval_ms(&settings, 0);
        assert!((400..=420).contains(&interval), "{interval}");
    }
}
