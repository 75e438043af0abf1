//! The fsync policies, named for what they promise (see the table in docs/store.md).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// When appends are made durable, and so when they are acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Sync before completing: an acknowledged append survives a process crash and a power loss.
    #[default]
    Always,
    /// Complete after the write reaches the OS; sync when the interval has passed since the last
    /// sync (and when idle past it). A power loss loses up to the interval (plus one sync) of
    /// acknowledged appends; a process crash loses none.
    Batch(Duration),
    /// Never sync appends (the kernel writes back when it likes). A process crash loses no
    /// acknowledged append; a power loss may lose any that the kernel had not written back.
    Never,
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => f.write_str("always"),
            FsyncPolicy::Batch(interval) => write!(f, "batch:{}ms", interval.as_millis()),
            FsyncPolicy::Never => f.write_str("never"),
        }
    }
}

/// The default interval of `batch`.
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(10);

impl FromStr for FsyncPolicy {
    type Err = String;

    /// `always`, `never`, `batch` (every 10 ms) or `batch:<N>ms`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let millis = |n: &str| n.parse::<u64>().map(Duration::from_millis);
        match text {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            "batch" => Ok(FsyncPolicy::Batch(DEFAULT_BATCH_INTERVAL)),
            _ => text
                .strip_prefix("batch:")
                .and_then(|rest| rest.strip_suffix("ms"))
                .and_then(|n| millis(n).ok())
                .map(FsyncPolicy::Batch)
                .ok_or_else(|| format!("unknown fsync policy {text:?}: always, batch, batch:<N>ms or never")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_parses_from_its_display() {
        for policy in [FsyncPolicy::Always, FsyncPolicy::Never, FsyncPolicy::Batch(Duration::from_millis(25))] {
            assert_eq!(policy.to_string().parse::<FsyncPolicy>(), Ok(policy));
        }
        assert_eq!("batch".parse(), Ok(FsyncPolicy::Batch(DEFAULT_BATCH_INTERVAL)));
        assert!("sometimes".parse::<FsyncPolicy>().is_err());
    }
}
