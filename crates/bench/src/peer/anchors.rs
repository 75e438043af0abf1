//! The peer harness's committed results (`bench/peers/results/*.csv`, copied from the shared
//! peer measurements): NATS figures from an earlier session on this kind of machine, shown when
//! NATS is not measured now.

use std::path::{Path, PathBuf};

use super::{parse_csv, PeerRow};

/// Committed peer-harness rows.
#[derive(Debug, Clone)]
pub struct Anchors {
    /// The results directory they were read from.
    pub source: PathBuf,
    /// Versions and date, from `versions.txt`.
    pub versions: String,
    /// `throughput.csv` rows (E1, E2, E4 throughput).
    pub throughput: Vec<PeerRow>,
    /// `latency.csv` rows (E3, E4 latency).
    pub latency: Vec<PeerRow>,
}

/// Which rows: experiment id, label, size, subscribers, hops.
#[derive(Debug, Clone, Copy)]
pub struct Point<'a> {
    /// `E1` .. `E4`.
    pub exp: &'a str,
    /// Setup label: `nats`, `nats-cluster`.
    pub label: &'a str,
    /// Message size in bytes.
    pub size: u64,
    /// Subscribers.
    pub subs: u64,
    /// Broker hops (label only in the harness).
    pub hops: u64,
}

impl Anchors {
    /// Reads `DIR/results/{throughput,latency}.csv` and `versions.txt`; `None` when the files
    /// are not there.
    pub fn load(peers_dir: &Path) -> Option<Anchors> {
        let results = peers_dir.join("results");
        let throughput = std::fs::read_to_string(results.join("throughput.csv")).ok()?;
        let latency = std::fs::read_to_string(results.join("latency.csv")).ok()?;
        let versions = std::fs::read_to_string(results.join("versions.txt")).unwrap_or_default();
        Some(Anchors {
            source: results,
            versions: describe_versions(&versions),
            throughput: parse_csv(&throughput),
            latency: parse_csv(&latency),
        })
    }

    /// Throughput rows of one point (one per repetition).
    pub fn throughput(&self, point: Point<'_>) -> Vec<PeerRow> {
        select(&self.throughput, point)
    }

    /// Latency rows of one point (one per repetition).
    pub fn latency(&self, point: Point<'_>) -> Vec<PeerRow> {
        select(&self.latency, point)
    }
}

fn select(rows: &[PeerRow], p: Point<'_>) -> Vec<PeerRow> {
    rows.iter()
        .filter(|r| {
            r.text("exp") == Some(p.exp)
                && r.text("label") == Some(p.label)
                && r.num("size") == Some(p.size as f64)
                && r.num("subs") == Some(p.subs as f64)
                && r.num("hops") == Some(p.hops as f64)
        })
        .cloned()
        .collect()
}

/// "nats-server v2.9.10, nats.go v1.55.0, run 2026-11-22T03:59Z" from `versions.txt`.
fn describe_versions(text: &str) -> String {
    let field = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .map(|l| l.trim_start()[prefix.len()..].trim().to_string())
    };
    let mut parts = Vec::new();
    if let Some(version) = field("nats-server:").and_then(|l| l.split_whitespace().last().map(str::to_string)) {
        parts.push(format!("nats-server {version}"));
    }
    if let Some(client) = text.lines().find(|l| l.contains("nats.go")) {
        parts.push(client.split_whitespace().collect::<Vec<_>>().join(" ").replace("github.com/nats-io/", ""));
    }
    if let Some(date) = field("date (start of main run):").or_else(|| field("date (start of run):")) {
        parts.push(format!("run {date}"));
    }
    if parts.is_empty() {
        "versions not recorded".to_string()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VERSIONS: &str = "date (start of main run): 2026-11-22T03:59Z\nnats-server: nats-server: v2.9.10\n\
                            go client modules:\n  \tgithub.com/nats-io/nats.go v1.55.0\n";

    #[test]
    fn versions_are_summarised() {
        assert_eq!(describe_versions(VERSIONS), "nats-server v2.9.10, nats.go v1.55.0, run 2026-11-22T03:59Z");
        assert_eq!(describe_versions(""), "versions not recorded");
    }

    #[test]
    fn rows_are_selected_by_point() {
        let rows = parse_csv(
            "exp,label,size,subs,hops,agg\nE1,nats,2000,1,1,5\nE1,nats,2000,1,1,7\nE1,nats,1000,1,1,9\nE4,nats-cluster,2000,1,2,3\n",
        );
        let p = Point { exp: "E1", label: "nats", size: 2000, subs: 1, hops: 1 };
        assert_eq!(select(&rows, p).len(), 2);
        let p = Point { exp: "E4", label: "nats-cluster", size: 2000, subs: 1, hops: 2 };
        assert_eq!(select(&rows, p)[0].num("agg"), Some(3.0));
    }
}
