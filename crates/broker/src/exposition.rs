//! The two shapes of `/metrics`: OpenMetrics, which `prometheus-client` writes and Prometheus
//! asks for, and the classic Prometheus text format, which `promtool check metrics`, older
//! scrapers and people with `curl` read. The body always matches its content type.
//!
//! Written by hand because `prometheus-client` encodes only OpenMetrics: the classic format is
//! the same samples with three differences, handled line by line below (a counter's TYPE and
//! HELP carry the `_total` its samples have, an info metric is a gauge named `_info`, and the
//! `# UNIT` and `# EOF` lines do not exist).

/// The content type of the OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic text format.
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's Accept header asks for OpenMetrics (Prometheus's does).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The classic text format of an OpenMetrics exposition.
pub fn classic(openmetrics: &str) -> String {
    let lines: Vec<&str> = openmetrics.lines().collect();
    let mut out = String::with_capacity(openmetrics.len());
    for (index, line) in lines.iter().enumerate() {
        if *line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = classic_name(name, kind);
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            // In both formats HELP comes right before TYPE, which says how the name changes.
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = lines.get(index + 1).and_then(|l| l.strip_prefix("# TYPE ")).and_then(|t| t.split_once(' '));
            let name = kind.map_or(name.to_string(), |(_, kind)| classic_name(name, kind).0);
            out.push_str(&format!("# HELP {name} {help}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A metric family's name and type in the classic format.
fn classic_name(name: &str, kind: &str) -> (String, &'static str) {
    match kind {
        "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
        "counter" => (name.to_string(), "counter"),
        "info" => (format!("{name}_info"), "gauge"),
        "gauge" => (name.to_string(), "gauge"),
        "histogram" => (name.to_string(), "histogram"),
        "summary" => (name.to_string(), "summary"),
        _ => (name.to_string(), "untyped"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: &str = "# HELP tidings_messages_in Messages published.\n# TYPE tidings_messages_in counter\n\
        tidings_messages_in_total 5\n# HELP tidings_build Build.\n# TYPE tidings_build info\n\
        tidings_build_info{version=\"0.1.0\"} 1\n# HELP tidings_up Up.\n# TYPE tidings_up gauge\n\
        # UNIT tidings_up seconds\ntidings_up 1\n# EOF\n";

    #[test]
    fn counters_and_infos_are_named_as_their_samples_and_openmetrics_only_lines_go() {
        let text = classic(OPEN);
        assert!(text.contains("# HELP tidings_messages_in_total Messages published.\n# TYPE tidings_messages_in_total counter\ntidings_messages_in_total 5\n"), "{text}");
        assert!(text.contains("# HELP tidings_build_info Build.\n# TYPE tidings_build_info gauge\ntidings_build_info{version=\"0.1.0\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE tidings_up gauge\ntidings_up 1\n"), "{text}");
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
    }

    #[test]
    fn prometheus_asks_for_openmetrics_and_curl_gets_the_classic_format() {
        assert!(wants_openmetrics(Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
    }
}
