//! `tidings bench request` and `tidings bench queue` (issue 41's measure): request/reply round
//! trips through one or two brokers, and a queue group's delivered msg/s, each beside NATS
//! (`--nats`) interleaved repetition by repetition on fresh servers, with the checks that make
//! the numbers mean something: no request went unanswered, each message reached exactly one
//! member of the group.

use std::time::Duration;

use super::classic::with_peer;
use super::measure::{ratio, Common, Row, Spec};
use crate::outln;
use crate::parse::at_least_one;
use crate::queue::QueueSpec;
use crate::request::RequestSpec;

/// `tidings bench request`.
#[derive(clap::Args)]
pub struct RequestArgs {
    #[command(flatten)]
    common: Common,
    /// Brokers on the path: 1 (requester and responder on one broker) or 2 (`two-brokers.toml`:
    /// requester at `phb`, responder at `shb`; NATS: two nodes joined by a route).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=2))]
    hops: u64,
    /// Requests outstanding at once in the throughput phase.
    #[arg(long, default_value_t = 100, value_parser = at_least_one::<usize>)]
    in_flight: usize,
    /// Request payload bytes (the responder echoes it).
    #[arg(long, default_value_t = 128, value_parser = at_least_one::<usize>)]
    size: usize,
}

/// `tidings bench queue`.
#[derive(clap::Args)]
pub struct QueueArgs {
    #[command(flatten)]
    common: Common,
    /// Members of the queue group, one connection each.
    #[arg(long, default_value_t = 10, value_parser = at_least_one::<usize>)]
    members: usize,
    /// Payload bytes (at least 16: the message's number and schedule).
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    size: usize,
    /// Message cap per repetition.
    #[arg(long, default_value_t = 5_000_000)]
    max: u64,
}

const REQUEST: &[&str] = &["p50_us", "p99_us", "max_us", "sequential", "requests_s", "timeouts", "errors"];
const QUEUE: &[&str] = &["delivered_msg_s", "publish_msg_s", "sent", "lost", "duplicates", "member_min", "member_max"];

/// Prints whether `figures` summed to 0 over `system`'s rows: the check, and whether it held.
fn check_zero(system: &str, figures: &[&str], rows: &[Row], what: &str) -> std::io::Result<bool> {
    let sums: Vec<(&str, f64)> = figures
        .iter()
        .map(|f| (*f, rows.iter().filter(|r| r.system == system).map(|r| r.figure(f)).sum::<f64>()))
        .collect();
    let held = sums.iter().all(|(_, s)| *s == 0.0);
    let detail: Vec<String> = sums.iter().map(|(f, s)| format!("{f} {s:.0}")).collect();
    let verdict = if held { "held" } else { "FAILED" };
    outln!("check ({system}): {what}: {verdict} ({}, all repetitions)", detail.join(", "))?;
    Ok(held)
}

/// `tidings bench request`: the summary, and whether every request of both sides was answered.
pub(super) async fn request(a: RequestArgs) -> anyhow::Result<(serde_json::Value, bool)> {
    anyhow::ensure!(!(a.hops == 2 && a.common.server.is_some()), "--hops 2 starts its own two brokers, not --server");
    anyhow::ensure!(
        !(a.hops == 2 && a.common.server_threads.is_some()),
        "--server-threads is for one broker; --hops 2 starts a network with its defaults"
    );
    let spec = RequestSpec {
        size: a.size,
        duration: Duration::from_secs_f64(a.common.duration),
        in_flight: a.in_flight,
        ..RequestSpec::default()
    };
    let point = format!("request hops={} size={} in_flight={}", a.hops, a.size, a.in_flight);
    let (rows, nats) = with_peer(&a.common, Spec::Request(&spec, a.hops), &point, REQUEST).await?;
    let (p50, requests_s) = (ratio(&point, "p50_us", &rows)?, ratio(&point, "requests_s", &rows)?);
    let mut held = true;
    for system in ["tidings", "nats"].into_iter().filter(|s| rows.iter().any(|r| r.system == *s)) {
        held &= check_zero(system, &["timeouts", "errors"], &rows, "every request answered")?;
    }
    let summary = serde_json::json!({
        "point": point, "nats": nats, "rows": rows, "p50_ratio": p50, "requests_s_ratio": requests_s,
        "all_answered": held,
    });
    Ok((summary, held))
}

/// `tidings bench queue`: the summary, and whether tidings delivered each message exactly once
/// (NATS's losses and duplicates are reported, not held against the run: they are its figures).
pub(super) async fn queue(a: QueueArgs) -> anyhow::Result<(serde_json::Value, bool)> {
    let spec = QueueSpec {
        size: a.size,
        members: a.members,
        duration: Duration::from_secs_f64(a.common.duration),
        max_messages: a.max,
        ..QueueSpec::default()
    };
    let point = format!("queue members={} size={}", a.members, a.size);
    let (rows, nats) = with_peer(&a.common, Spec::Queue(&spec), &point, QUEUE).await?;
    let exactly_once = check_zero("tidings", &["lost", "duplicates"], &rows, "each message to exactly one member")?;
    if rows.iter().any(|r| r.system == "nats") {
        check_zero("nats", &["lost", "duplicates"], &rows, "each message to exactly one member")?;
    }
    let summary =
        serde_json::json!({ "point": point, "nats": nats, "rows": rows, "tidings_exactly_once": exactly_once });
    Ok((summary, exactly_once))
}

/// The exit status of a measurement whose check did not hold, after its JSON is written.
pub(super) fn finish(outcome: (serde_json::Value, bool)) -> anyhow::Result<std::process::ExitCode> {
    let (summary, held) = outcome;
    super::measure::write_json(summary)?;
    Ok(if held { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::dir_from;
    use std::path::Path;

    fn row(system: &str, figures: &[(&str, f64)]) -> Row {
        Row::sample(system, 1, f64::NAN, figures)
    }

    #[test]
    fn one_timeout_in_any_repetition_fails_the_check() {
        let rows = [
            row("tidings", &[("timeouts", 0.0), ("errors", 0.0)]),
            row("tidings", &[("timeouts", 1.0), ("errors", 0.0)]),
            row("nats", &[("timeouts", 0.0), ("errors", 0.0)]),
        ];
        assert!(!check_zero("tidings", &["timeouts", "errors"], &rows, "answered").unwrap());
        assert!(check_zero("nats", &["timeouts", "errors"], &rows, "answered").unwrap());
    }

    #[test]
    fn the_ratio_is_of_the_medians() {
        let rows = [
            row("tidings", &[("requests_s", 10.0)]),
            row("tidings", &[("requests_s", 30.0)]),
            row("tidings", &[("requests_s", 20.0)]),
            row("nats", &[("requests_s", 40.0)]),
        ];
        assert_eq!(ratio("p", "requests_s", &rows).unwrap(), 0.5);
        assert!(ratio("p", "requests_s", &rows[..1]).unwrap().is_nan());
    }

    #[test]
    fn the_two_broker_topology_is_shipped() {
        let file = dir_from(&None, "TIDINGS_TOPOLOGIES", "topologies").join("two-brokers.toml");
        assert!(Path::new(&file).is_file(), "{}", file.display());
    }
}
