//! The one reader of Prometheus text in the workspace: what `tidings info`, the experiments and
//! the tests read from a broker's `/metrics` is parsed here, the same way, so a sample one of
//! them sees is a sample all of them see. (No offline-available crate parses the exposition
//! format; the subset the broker prints, `name{labels} value` lines and `#` comments, is small.)

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// One sample line: `name{label="value",...} number`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name (counters end in `_total`).
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// All samples of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Samples in the order the broker printed them.
    pub samples: Vec<Sample>,
}

impl Snapshot {
    /// Parses Prometheus text exposition (comments and malformed lines are skipped).
    pub fn parse(text: &str) -> Snapshot {
        Snapshot { samples: text.lines().filter(|l| !l.starts_with('#')).filter_map(parse_line).collect() }
    }

    /// Whether any sample has this name.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }

    /// The sum of every sample of `name`, whatever its labels (0 when there is none).
    pub fn sum(&self, name: &str) -> f64 {
        // `+ 0.0`: an empty float sum is -0.0, which prints as "-0".
        self.samples.iter().filter(|s| s.name == name).map(|s| s.value).sum::<f64>() + 0.0
    }

    /// The sum of the samples `selector` names: a metric name with, optionally, its label
    /// block as printed (`tidings_connections{transport="tcp"}`); without one, only the
    /// unlabelled sample matches. 0 when none does (or the selector is malformed).
    pub fn value(&self, selector: &str) -> f64 {
        let Some((name, labels)) = parse_head(selector.trim()) else { return 0.0 };
        self.samples.iter().filter(|s| s.name == name && s.labels == labels).map(|s| s.value).sum::<f64>() + 0.0
    }

    /// `name`'s samples summed by the value of `label`.
    pub fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            if let Some(v) = s.labels.get(label) {
                *out.entry(v.clone()).or_insert(0.0) += s.value;
            }
        }
        out
    }

    /// How much `name` grew since `earlier`.
    pub fn delta(&self, earlier: &Snapshot, name: &str) -> f64 {
        self.sum(name) - earlier.sum(name)
    }
}

/// [`Snapshot::value`] of Prometheus text: one sample (a name with its label block, or an
/// unlabelled name), summed over matches.
pub fn metric_value(text: &str, selector: &str) -> f64 {
    Snapshot::parse(text).value(selector)
}

/// [`Snapshot::sum`] of Prometheus text: a metric over all its label sets (every link, every
/// reason...).
pub fn metric_total(text: &str, name: &str) -> f64 {
    Snapshot::parse(text).sum(name)
}

/// Scrapes `/metrics` from an admin listener (blocking; a few milliseconds on loopback).
pub fn scrape(admin: SocketAddr) -> std::io::Result<Snapshot> {
    Ok(Snapshot::parse(&crate::http_get(admin, "/metrics")?))
}

fn parse_line(line: &str) -> Option<Sample> {
    let (head, value) = line.trim().rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = parse_head(head)?;
    Some(Sample { name: name.to_string(), labels, value })
}

/// `name` or `name{labels}` into the name and its labels.
fn parse_head(head: &str) -> Option<(&str, BTreeMap<String, String>)> {
    match head.split_once('{') {
        Some((name, rest)) => Some((name, parse_labels(rest.strip_suffix('}')?)?)),
        None => Some((head, BTreeMap::new())),
    }
}

/// `a="x",b="y \"q\""` into a map.
fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let mut chars = after.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.insert(key.trim().to_string(), value);
        rest = after.get(end + 2..)?.trim_start_matches(',').trim();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP tidings_messages_in Messages\n\
        # TYPE tidings_messages_in counter\n\
        tidings_messages_in_total 42\n\
        tidings_connections{transport=\"tcp\"} 3\n\
        tidings_connections{transport=\"udp\"} 2\n\
        tidings_link_messages_out_total{link=\"n1\",dir=\"a \\\"b\\\"\"} 7\n\
        garbage\n";

    #[test]
    fn samples_and_labels_are_parsed() {
        let s = Snapshot::parse(TEXT);
        assert_eq!(s.samples.len(), 4);
        assert_eq!(s.sum("tidings_messages_in_total"), 42.0);
        assert_eq!(s.sum("tidings_connections"), 5.0);
        assert_eq!(s.by_label("tidings_connections", "transport").get("udp"), Some(&2.0));
        let link = &s.samples[3];
        assert_eq!(link.labels.get("dir").map(String::as_str), Some("a \"b\""));
        assert_eq!(link.labels.get("link").map(String::as_str), Some("n1"));
        assert!(s.has("tidings_connections") && !s.has("nope"));
    }

    #[test]
    fn deltas_subtract_an_earlier_scrape() {
        let before = Snapshot::parse("x_total 10\n");
        let after = Snapshot::parse("x_total 25\n");
        assert_eq!(after.delta(&before, "x_total"), 15.0);
        assert_eq!(after.delta(&before, "y_total"), 0.0);
    }

    #[test]
    fn a_selector_names_one_label_set_and_a_total_sums_them_all() {
        assert_eq!(metric_value(TEXT, "tidings_connections{transport=\"udp\"}"), 2.0);
        assert_eq!(metric_value(TEXT, "tidings_connections"), 0.0, "only the unlabelled sample");
        assert_eq!(metric_value(TEXT, "tidings_messages_in_total"), 42.0);
        assert_eq!(metric_total(TEXT, "tidings_connections"), 5.0);
        assert_eq!(metric_total(TEXT, "tidings_messages_in"), 0.0, "a prefix is not a name");
        assert!(metric_total(TEXT, "nope").is_sign_positive(), "an empty sum prints as 0, not -0");
    }
}
