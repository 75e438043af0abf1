//! NATS beside tidings: measured in the same session with the peer harness
//! (`bench/peers/harness`, built with `go build` when `--nats` is given) against a
//! `nats-server` this command starts on loopback, or, when that is not available, the
//! committed anchors from `bench/peers/results/`, labelled as such.

pub mod anchors;
pub mod jstakeover;
pub mod mqtt;
pub mod nats;
pub mod patterns;
pub mod secure;

use std::collections::BTreeMap;

pub use anchors::Anchors;
pub use nats::{NatsTools, PeerServer};

/// `(ours, column)` pairs naming the peer harness's CSV columns as tidings names its figures:
/// `name` where the column is called as ours, `ours = column` where not, so that a name the two
/// share is written once.
macro_rules! columns {
    ($($ours:ident $(= $column:ident)?),* $(,)?) => {
        [$((stringify!($ours), columns!(@column $ours $(, $column)?))),*]
    };
    (@column $ours:ident) => { stringify!($ours) };
    (@column $ours:ident, $column:ident) => { stringify!($column) };
}
pub(crate) use columns;

/// Whether and how NATS is measured in this session.
#[derive(Debug, Clone)]
pub enum NatsMode {
    /// Measured now: the tools were found.
    Measured(NatsTools),
    /// `--nats` was not given.
    NotRequested,
    /// `--nats` was given but a tool is missing; the reason.
    Unavailable(String),
}

/// NATS for this run, and the committed anchors.
#[derive(Debug, Clone)]
pub struct Peers {
    /// NATS in this session.
    pub nats: NatsMode,
    /// The peer harness's committed results, when their directory was found.
    pub anchors: Option<Anchors>,
}

impl Peers {
    /// The tools, when NATS is measured in this session.
    pub fn tools(&self) -> Option<&NatsTools> {
        match &self.nats {
            NatsMode::Measured(tools) => Some(tools),
            _ => None,
        }
    }

    /// One sentence for the report: where the NATS figures come from.
    pub fn describe(&self) -> String {
        let anchors = match &self.anchors {
            Some(a) => format!("the committed anchors in `{}` ({})", crate::paths::shown(&a.source), a.versions),
            None => "no committed anchors either (their directory was not found)".to_string(),
        };
        match &self.nats {
            NatsMode::Measured(t) => format!(
                "NATS measured in this session: {} on loopback, driven by the peer harness `{}` ({}); \
                 beside it, {anchors}",
                t.server_version,
                crate::paths::shown(&t.peerbench),
                t.client_version
            ),
            NatsMode::NotRequested => {
                format!("NATS was not measured in this session (no `--nats`); NATS figures are {anchors}")
            }
            NatsMode::Unavailable(why) => {
                format!("NATS could not be measured in this session ({why}); NATS figures are {anchors}")
            }
        }
    }
}

/// One CSV row of the peer harness, by column name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerRow(pub BTreeMap<String, String>);

impl PeerRow {
    /// A numeric column.
    pub fn num(&self, column: &str) -> Option<f64> {
        self.0.get(column).and_then(|v| v.parse().ok())
    }

    /// A numeric column that must be there: absent or not a number is an error naming it, so
    /// a missing figure never becomes a 0 in a count or a ratio.
    pub fn require(&self, column: &str) -> anyhow::Result<f64> {
        self.num(column).ok_or_else(|| match self.0.get(column) {
            Some(v) => anyhow::anyhow!("the peer harness's column {column:?} is not a number: {v:?}"),
            None => anyhow::anyhow!("the peer harness's row has no column {column:?}"),
        })
    }

    /// A text column.
    pub fn text(&self, column: &str) -> Option<&str> {
        self.0.get(column).map(String::as_str)
    }
}

/// Parses the peer harness's CSV (a header line, then rows; its cells hold no commas).
pub fn parse_csv(text: &str) -> Vec<PeerRow> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else { return Vec::new() };
    let columns: Vec<&str> = header.split(',').collect();
    lines
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            (cells.len() == columns.len())
                .then(|| PeerRow(columns.iter().zip(cells).map(|(c, v)| (c.to_string(), v.to_string())).collect()))
        })
        .collect()
}

/// The median over rows (repetitions) of a numeric column; `None` when no row has it.
pub fn median_of(rows: &[PeerRow], column: &str) -> Option<f64> {
    crate::stats::median_if_any(&rows.iter().filter_map(|r| r.num(column)).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_csv_rows_are_keyed_by_header() {
        let rows = parse_csv("a,b\n1,x\n2,y\nbad\n\n3,z\n");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].num("a"), Some(2.0));
        assert_eq!(rows[2].text("b"), Some("z"));
        assert_eq!(median_of(&rows, "a"), Some(2.0));
        assert_eq!(median_of(&rows, "b"), None);
        assert_eq!(rows[0].require("a").unwrap(), 1.0);
        assert!(rows[0].require("b").unwrap_err().to_string().contains("\"b\" is not a number"));
        assert!(rows[0].require("recv_total").unwrap_err().to_string().contains("no column \"recv_total\""));
    }

    #[test]
    fn the_description_says_where_nats_figures_come_from() {
        let p = Peers { nats: NatsMode::NotRequested, anchors: None };
        assert!(p.describe().contains("not measured in this session"));
        let p = Peers { nats: NatsMode::Unavailable("no nats-server".into()), anchors: None };
        assert!(p.describe().contains("no nats-server"));
    }
}
