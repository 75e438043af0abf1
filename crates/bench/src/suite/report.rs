//! `report.md`: a header that describes the machine, then one section per experiment.
//!
//! Sections are delimited by HTML comments so that running one experiment replaces its own
//! section and keeps the others, each of which states when and how it was run.

use std::fmt::Write as _;

/// The machine the suite ran on, as the report states it.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// Logical CPUs available to this process.
    pub cpus: usize,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Total memory in GiB.
    pub memory_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// Operating system name.
    pub os: String,
}

impl Machine {
    /// Reads the running machine's description (unknown parts say "unknown").
    pub fn current() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            cpu_model: cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown".into()),
            memory_gib: mem_total_kib(&read("/proc/meminfo")).map(|k| k as f64 / 1024.0 / 1024.0).unwrap_or(0.0),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            os: os_name(&read("/etc/os-release")).unwrap_or_else(|| "unknown".into()),
        }
    }

    /// One Markdown line.
    pub fn markdown(&self) -> String {
        format!(
            "{} CPUs ({}), {:.0} GiB RAM, {}, Linux {}",
            self.cpus, self.cpu_model, self.memory_gib, self.os, self.kernel
        )
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()
}

fn os_name(os_release: &str) -> Option<String> {
    let line = os_release.lines().find(|l| l.starts_with("PRETTY_NAME="))?;
    Some(line.trim_start_matches("PRETTY_NAME=").trim_matches('"').to_string())
}

/// The report's opening: what the file is, the machine, how to rerun.
pub fn header(machine: &Machine) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# tidings: the seed experiments, rerun\n");
    let _ = writeln!(
        out,
        "Written by `tidings bench`. Each section below is one experiment: when and how it ran \
         (full seed parameters or `--quick`), its parameters, our figures beside the seed's own and \
         NATS's, and the internal checks it made. Its CSV and plots (PNG, SVG) sit next to this file \
         under the experiment's name.\n"
    );
    let _ = writeln!(out, "Machine of the latest run: {}.\n", machine.markdown());
    let _ = writeln!(
        out,
        "Everything ran on this one machine over loopback: the brokers, the publisher and every \
         subscriber share its CPUs, so the figures are a lower bound on what a broker does with a \
         machine to itself, and the seeds' networks (35 MB/s LAN, campus links, SPARC machines) are \
         not reproduced."
    );
    out
}

fn begin(name: &str) -> String {
    format!("<!-- section:{name} -->")
}

fn end(name: &str) -> String {
    format!("<!-- /section:{name} -->")
}

/// The sections of an existing report, in file order: (name, body).
pub fn sections(report: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = report;
    while let Some(start) = rest.find("<!-- section:") {
        let after = &rest[start + "<!-- section:".len()..];
        let Some(close) = after.find(" -->") else { break };
        let name = after[..close].to_string();
        let body_start = &after[close + " -->".len()..];
        let Some(stop) = body_start.find(&end(&name)) else { break };
        out.push((name.clone(), body_start[..stop].trim_matches('\n').to_string()));
        rest = &body_start[stop + end(&name).len()..];
    }
    out
}

/// The report with `header` at the top and the section `name` set to `body`, other sections
/// kept; sections appear in `order`, then any others in the order they had.
pub fn merge(existing: &str, header: &str, name: &str, body: &str, order: &[&str]) -> String {
    let mut all = sections(existing);
    match all.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = body.trim_matches('\n').to_string(),
        None => all.push((name.to_string(), body.trim_matches('\n').to_string())),
    }
    let rank = |n: &str| order.iter().position(|o| *o == n).unwrap_or(order.len());
    all.sort_by_key(|(n, _)| rank(n)); // stable: unknown sections keep their order
    let mut out = header.trim_end().to_string();
    out.push_str("\n\n");
    for (n, b) in all {
        let _ = write!(out, "{}\n{}\n{}\n\n", begin(&n), b, end(&n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &[&str] = &["subscribers", "sizes", "fanout"];

    #[test]
    fn a_section_is_added_then_replaced_and_others_are_kept() {
        let one = merge("", "# H1", "fanout", "fan 1", ORDER);
        let two = merge(&one, "# H2", "subscribers", "subs 1", ORDER);
        let three = merge(&two, "# H3", "fanout", "fan 2", ORDER);
        assert_eq!(sections(&three), vec![("subscribers".into(), "subs 1".into()), ("fanout".into(), "fan 2".into())]);
        assert!(three.starts_with("# H3\n\n<!-- section:subscribers -->"));
        assert!(!three.contains("H2"));
    }

    #[test]
    fn unknown_sections_follow_the_known_ones_in_their_old_order() {
        let mut r = merge("", "# H", "zeta", "z", ORDER);
        r = merge(&r, "# H", "alpha", "a", ORDER);
        r = merge(&r, "# H", "sizes", "s", ORDER);
        let names: Vec<String> = sections(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["sizes", "zeta", "alpha"]);
    }

    #[test]
    fn a_truncated_section_is_dropped_not_misread() {
        assert!(sections("<!-- section:a -->\nbody without end").is_empty());
    }

    #[test]
    fn machine_files_are_parsed() {
        assert_eq!(cpu_model("processor\t: 0\nmodel name\t: Xeon X\n").as_deref(), Some("Xeon X"));
        assert_eq!(mem_total_kib("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24_576_000));
        assert_eq!(os_name("NAME=x\nPRETTY_NAME=\"Debian 12\"\n").as_deref(), Some("Debian 12"));
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn the_header_names_the_machine() {
        let m = Machine { cpus: 2, cpu_model: "X".into(), memory_gib: 24.0, kernel: "6.1".into(), os: "D".into() };
        assert!(header(&m).contains("2 CPUs (X), 24 GiB RAM, D, Linux 6.1"));
    }
}
