//! The fault log of a network's directory (`faults.jsonl`): one JSON line per fault's begin and
//! end, written by `tidings net fault` and by the nemesis's client faults alike, and read back
//! by the nemesis to time recoveries.

use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The log's file name in a network's directory.
pub const FAULT_LOG: &str = "faults.jsonl";

/// Appends `{"unix_ms", "fault", "target", "event"}` to `dir`'s fault log in one write (the cuts
/// of a partition are logged by processes side by side, and an append of one buffer is not
/// interleaved with another's); returns the line's `unix_ms`.
pub fn append_fault_event(dir: &Path, fault: &str, target: &str, event: &str) -> std::io::Result<u64> {
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let line = serde_json::json!({ "unix_ms": unix_ms, "fault": fault, "target": target, "event": event });
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(FAULT_LOG))?;
    file.write_all(format!("{line}\n").as_bytes())?;
    Ok(unix_ms)
}
