//! The fault schedule of seed 001 §4.2, injected with `tidings net fault` (the project's own
//! machinery, so the bench faults the network exactly as an operator would): each fault is a
//! stall of the link or broker about to fail, then the failure itself, then a quiet interval.
//! When the faults happened is read back from the network's `faults.jsonl`, not assumed.

use std::path::Path;

use serde_json::Value;

use super::Params;
use crate::network::net_fault;

/// One fault of the sequence.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Step {
    /// How the report names it.
    pub label: &'static str,
    /// The broker, or the two brokers of the link, it hits.
    pub target: Vec<&'static str>,
    /// `cut` (a link) or `kill` (a broker, restarted on its data directory at the end).
    pub kind: &'static str,
}

/// The label of the publishers' broker crash (the last fault, the one a takeover answers).
pub(super) const PUBLISHERS_CRASH: &str = "p1 crash";

/// The seed's three faults, in the order they are injected.
pub(super) fn steps() -> Vec<Step> {
    vec![
        Step { label: "b1-s1 link cut", target: vec!["b1", "s1"], kind: "cut" },
        Step { label: "b1 crash", target: vec!["b1"], kind: "kill" },
        Step { label: PUBLISHERS_CRASH, target: vec!["p1"], kind: "kill" },
    ]
}

/// Runs the whole schedule (blocking): the warm-up, then per fault a stall lasting until the
/// failure (`stall`), the failure for its duration (the link healed or the broker restarted at
/// its end), then `between`.
pub(super) fn inject(tidings: &Path, dir: &Path, p: &Params) -> anyhow::Result<()> {
    std::thread::sleep(p.warmup);
    for step in steps() {
        let lasting = if step.kind == "cut" { p.cut } else { p.down };
        net_fault(tidings, dir, &[&["stall"], step.target.as_slice()].concat(), None)?;
        std::thread::sleep(p.stall);
        net_fault(tidings, dir, &[&[step.kind], step.target.as_slice()].concat(), Some(lasting))?;
        std::thread::sleep(p.between);
    }
    Ok(())
}

/// When one fault happened (Unix ms, from `faults.jsonl`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Window {
    /// The step's label.
    pub label: &'static str,
    /// The stall began.
    pub stalled_ms: u64,
    /// The failure began (the stall ended with it).
    pub failed_ms: u64,
    /// The link was healed or the broker restarted.
    pub ended_ms: u64,
}

/// The windows of the steps in `log` (the text of `faults.jsonl`); a step without its three
/// events is an error naming it.
pub(super) fn windows(log: &str) -> anyhow::Result<Vec<Window>> {
    let events: Vec<Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let mut out = Vec::new();
    let mut from = 0;
    for step in steps() {
        let hits = |v: &Value| {
            let t = v["target"].as_str().unwrap_or_default();
            let names: Vec<&str> = t.split('-').collect();
            names.len() == step.target.len() && step.target.iter().all(|n| names.contains(n))
        };
        let find = |from: usize, fault: &str, event: &str| {
            events.iter().enumerate().skip(from).find(|(_, v)| hits(v) && v["fault"] == fault && v["event"] == event)
        };
        let at = |v: &Value| v["unix_ms"].as_u64().unwrap_or(0);
        let missing = || anyhow::anyhow!("faults.jsonl lacks the events of {}", step.label);
        let (i, stall) = find(from, "stall", "begin").ok_or_else(missing)?;
        let (j, fail) = find(i, step.kind, "begin").ok_or_else(missing)?;
        let (k, end) = find(j, step.kind, "end").ok_or_else(missing)?;
        out.push(Window { label: step.label, stalled_ms: at(stall), failed_ms: at(fail), ended_ms: at(end) });
        from = k + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_read_from_the_fault_log_in_order() {
        let line = |ms: u64, fault: &str, target: &str, event: &str| {
            format!("{{\"unix_ms\":{ms},\"fault\":\"{fault}\",\"target\":\"{target}\",\"event\":\"{event}\"}}\n")
        };
        let log = [
            line(10, "stall", "b1-s1", "begin"),
            line(12, "cut", "b1-s1", "begin"),
            line(22, "cut", "b1-s1", "end"),
            line(30, "stall", "b1", "begin"),
            line(33, "kill", "b1", "begin"),
            line(40, "kill", "b1", "end"),
            line(50, "stall", "p1", "begin"),
            line(52, "kill", "p1", "begin"),
            line(60, "kill", "p1", "end"),
        ]
        .concat();
        let w = windows(&log).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!((w[0].stalled_ms, w[0].failed_ms, w[0].ended_ms), (10, 12, 22));
        assert_eq!((w[2].label, w[2].ended_ms), ("p1 crash", 60));
        assert!(windows(&log[..log.len() / 2]).is_err(), "a missing fault is an error");
    }
}
