//! `[guaranteed] liveness`: which timer profile of the delivery core a broker runs with, so an
//! experiment can run a network with seed 001's failure-injection settings instead of the
//! defaults without a new build.
//!
//! A module of its own below both `config` (which reads it from the file) and `guaranteed`
//! (which runs with it), so the configuration imports nothing of what it configures.

use serde::{Deserialize, Serialize};

/// The delivery core's liveness timers (GCT, NRT, AET, DCT) in force.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Liveness {
    /// gd-protocol's proposals: GCT 100 ms, NRT 200 ms (floor 50 ms), AET 1 s, DCT 1 s.
    #[default]
    Default,
    /// Seed 001 §4.2: GCT 200 ms, NRT 600 ms, AET 10 s, DCT infinite.
    Seed001,
}

impl Liveness {
    /// The core's settings for this profile.
    pub fn settings(self) -> tidings_delivery::Settings {
        match self {
            Liveness::Default => tidings_delivery::Settings::default(),
            Liveness::Seed001 => tidings_delivery::Settings::seed_experiment(),
        }
    }
}

/// Guaranteed-delivery settings of the broker (`[guaranteed]`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GuaranteedConfig {
    /// The liveness timer profile: `default` or `seed001` (seed 001's failure runs).
    pub liveness: Liveness,
    /// At most this many messages per second replayed to the durable subscribers catching up
    /// on one pubend at this broker (0, the default: as fast as the broker goes). A catch-up
    /// at full speed takes every core a small machine has, and live subscribers then wait for
    /// one: on 2 cores, live p99 3 ms alone, 16-30 ms beside a 600-680 k msg/s catch-up, about
    /// 12 ms beside one bound to 370 k (`tidings bench catch-up`, 2026-11-27).
    pub catch_up_rate: u64,
    /// A durable subscriber catching up at the pubend's broker is served by a cursor over the
    /// log outside the driver's turns (docs/catch-up.md; true, the default) instead of replayed
    /// by the driver a turn at a time (false). Measured alternated with the replay on 2 cores
    /// (2026-12-01, docs/results/JOURNAL.md), the cursor caught up faster in every pair
    /// (1.24-1.60 M against 0.87-0.98 M msg/s) with a lower live p99 beside it in two of three.
    pub catch_up_cursor: bool,
}

impl Default for GuaranteedConfig {
    fn default() -> GuaranteedConfig {
        GuaranteedConfig { liveness: Liveness::default(), catch_up_rate: 0, catch_up_cursor: true }
    }
}

impl GuaranteedConfig {
    /// The core's settings: the liveness profile's, with this configuration's bounds.
    pub fn settings(&self) -> tidings_delivery::Settings {
        let serve_orders = self.catch_up_cursor;
        tidings_delivery::Settings { catch_up_rate: self.catch_up_rate, serve_orders, ..self.liveness.settings() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_profile_has_the_seeds_timers() {
        let s = Liveness::Seed001.settings();
        assert_eq!((s.gap_curiosity_ms, s.nack_repetition_min_ms, s.ack_expected_ms), (200, 600, 10_000));
        assert_eq!(s.delay_curiosity_ms, None);
        let c: GuaranteedConfig = toml::from_str("liveness = \"seed001\"\ncatch_up_rate = 400000").unwrap();
        assert_eq!(c.liveness, Liveness::Seed001);
        assert_eq!(c.settings().catch_up_rate, 400_000);
        assert_eq!(c.settings().ack_expected_ms, 10_000, "the profile's timers stay");
        assert!(c.settings().serve_orders, "catch-ups are served by a cursor unless told otherwise");
        let replay: GuaranteedConfig = toml::from_str("catch_up_cursor = false").unwrap();
        assert!(!replay.settings().serve_orders);
    }
}
