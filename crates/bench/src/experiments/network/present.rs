//! The report section of `network`: the medians over repetitions, each beside NATS's and the
//! goals of issue 4.

use super::NetRow;
use super::{median, show, us, Params, ANCHOR, NATS, TIDINGS};
use crate::suite::prelude::*;

pub(super) use super::figure::figure;

/// (system, its name in the report) for throughput: ours, NATS now, NATS anchored.
const SYSTEMS: [(&str, &str); 3] = [
    (TIDINGS, "tidings"),
    (NATS, "NATS, this session (one node; two-node cluster)"),
    (ANCHOR, "NATS, committed anchor (cluster: node A alone; across the route)"),
];

/// The same for latency, where NATS now is measured on the cluster too.
const LATENCY_SYSTEMS: [(&str, &str); 3] = [
    (TIDINGS, "tidings (phb alone; phb to shb)"),
    (NATS, "NATS, this session (cluster: node A alone; across the route)"),
    SYSTEMS[2],
];

fn rate(v: f64) -> String {
    format!("{} msg/s", thousands(v))
}

/// The Markdown body.
pub(super) fn body(p: &Params, table: &[NetRow]) -> String {
    let mut out = String::new();
    throughput(&mut out, table);
    super::cpu::report(&mut out, table);
    latency(&mut out, p, table);
    path(&mut out, p, table);
    faults(&mut out, table);
    subscriptions(&mut out, table);
    out
}

pub(super) fn ratio(table: &[NetRow], system: &str) -> Option<f64> {
    let m = |b| median(table, "throughput", system, b, "received_msg_s");
    Some(m(2)? / m(1)?)
}

fn throughput(out: &mut String, table: &[NetRow]) {
    let _ = writeln!(out, "### Throughput: one broker against two\n");
    let _ = writeln!(
        out,
        "Received msg/s at the subscriber (received / time from the first publish to the last receipt), \
         medians over repetitions; lost = sent − received.\n"
    );
    md_head(out, &["", "one", "two", "two / one", "lost, one", "lost, two"]);
    for (system, name) in SYSTEMS {
        let m = |b, q| median(table, "throughput", system, b, q);
        let lost = |b| match (m(b, "lost"), m(b, "sent")) {
            (Some(l), Some(s)) if s > 0.0 => format!("{} ({:.1} %)", thousands(l), 100.0 * l / s),
            _ => "n/a".into(),
        };
        let received = |b| show(m(b, "received_msg_s"), rate);
        let two_over_one = show(ratio(table, system), |r| format!("{r:.2}"));
        md_row(out, [name.to_string(), received(1), received(2), two_over_one, lost(1), lost(2)]);
    }
    let verdict = |held: bool| if held { "met" } else { "**not met**" };
    if let Some(r) = ratio(table, TIDINGS) {
        let _ = writeln!(out, "\nGoal, two brokers at least 90 % of one: {} ({r:.2}).", verdict(r >= 0.9));
    }
    let drops = median(table, "throughput", TIDINGS, 2, "link_drops").unwrap_or(0.0);
    let _ = writeln!(
        out,
        "Goal, a flood never cuts a broker link and what a link cannot carry is counted: see the checks \
         below (link drops in the median two-broker run: {}).",
        thousands(drops)
    );
    let nats = |q| median(table, "throughput", NATS, 2, q).unwrap_or(0.0);
    let (dropped, reports) = (nats("dropped_subscribers"), nats("slow_consumer_reports"));
    if dropped > 0.0 || reports > 0.0 {
        let _ = writeln!(
            out,
            "NATS's cluster under the flood: {dropped:.0} dropped subscriber(s) in the median run (the harness's \
             count); over the session the nodes logged {reports:.0} slow-consumer cuts, {:.0} of client \
             connections and {:.0} of the route. A cut connection's backlog is lost \
             and counted nowhere the subscriber can see.",
            nats("slow_consumer_reports_on_clients"),
            nats("slow_consumer_reports_on_routes")
        );
    }
    out.push('\n');
}

fn latency(out: &mut String, p: &Params, table: &[NetRow]) {
    let _ = writeln!(out, "### Latency through one broker and two, {} msg/s\n", p.rate);
    let _ = writeln!(
        out,
        "tidings: one publisher at phb, one subscriber at phb and one at shb, on the same messages. NATS: \
         publisher on node A, subscriber on node A, then on node B (the peer harness's E4).\n"
    );
    md_head(out, &["", "one broker: p50 / p99 / mean", "two: p50 / p99 / mean", "added by the hop, p50"]);
    let mut added = Vec::new();
    for (system, name) in LATENCY_SYSTEMS {
        let m = |b, q| median(table, "latency", system, b, q);
        let three = |b| format!("{} / {} / {}", us(m(b, "p50_us")), us(m(b, "p99_us")), us(m(b, "mean_us")));
        let hop = m(2, "p50_us").zip(m(1, "p50_us")).map(|(two, one)| two - one);
        added.push((system, hop));
        md_row(out, [name.to_string(), three(1), three(2), us(hop)]);
    }
    let find = |s: &str| added.iter().find(|(system, _)| *system == s).and_then(|(_, v)| *v);
    if let (Some(ours), Some(theirs)) = (find(TIDINGS), find(NATS).or(find(ANCHOR))) {
        let which = if find(NATS).is_some() { "measured now" } else { "committed anchor" };
        let held = if ours <= theirs { "met" } else { "**not met**" };
        let _ = writeln!(
            out,
            "\nGoal, a hop adds no more than NATS's ({which}): {held} ({} against {}).",
            micros(ours),
            micros(theirs)
        );
    }
    out.push('\n');
}

fn path(out: &mut String, p: &Params, table: &[NetRow]) {
    let (topology, publisher, measuring) = &p.path;
    let _ = writeln!(out, "### Along the path of `{topology}`, publisher at {publisher}\n");
    md_head(out, &["subscriber at", "brokers on the path", "received / sent", "p50", "p99", "added p50 per hop"]);
    let rows = path_points(table, measuring);
    let local = rows.iter().find(|(_, b)| *b == 1).and_then(|&(_, b)| median(table, "path", TIDINGS, b, "p50_us"));
    for (name, brokers) in &rows {
        let m = |q| median(table, "path", TIDINGS, *brokers, q);
        let per_hop = match (m("p50_us"), local) {
            (Some(p50), Some(l)) if *brokers > 1 => us(Some((p50 - l) / (*brokers - 1) as f64)),
            _ => "-".into(),
        };
        let received = format!("{} / {}", show(m("received"), thousands), show(m("sent"), thousands));
        md_row(out, [name.clone(), brokers.to_string(), received, us(m("p50_us")), us(m("p99_us")), per_hop]);
    }
    out.push('\n');
}

/// (broker, brokers on the path) of each measuring subscriber that has rows.
pub(super) fn path_points(table: &[NetRow], measuring: &[String]) -> Vec<(String, usize)> {
    measuring
        .iter()
        .filter_map(|name| {
            let row = table.iter().find(|r| r.part == "path" && r.setup == *name)?;
            Some((name.clone(), row.brokers))
        })
        .collect()
}

fn faults(out: &mut String, table: &[NetRow]) {
    let _ = writeln!(out, "### Re-convergence after the bundle broker carrying traffic fails\n");
    let head = ["fault", "longest gap in deliveries at s1", "not delivered / sent after the fault"];
    let counts = ["of which in the fault window", "counted as dropped by surviving brokers", "unexplained"];
    md_head(out, &[head, counts].concat());
    for (setup, values) in super::figure::faults(table) {
        let v = |q: &str| show(values.iter().find(|(n, _)| n == q).map(|(_, v)| *v), thousands);
        let gap = show(values.iter().find(|(n, _)| n == "longest_gap_ms").map(|(_, v)| *v), |ms| micros(ms * 1e3));
        let lost = format!("{} / {}", v("lost"), v("sent"));
        let counts = [v("lost_in_fault_window"), v("drops_counted_by_survivors"), v("lost_unexplained")];
        md_row(out, [setup, gap, lost].into_iter().chain(counts));
    }
    let _ = writeln!(
        out,
        "\nA crash resets the broker's connections, so its neighbours see the link go at once; a stall \
         says nothing, and only missed heartbeats reveal it. Delivery is best effort: messages are \
         numbered, and every one lost is accounted for by number. The *fault window* is the run of \
         messages from the first one lost, if it was sent before the fault took effect (50 ms after \
         the signal: a loaded machine may schedule the broker's threads that late), to the next one \
         delivered: what the failed broker held, or what was routed to it before the network \
         re-converged. No broker can count those (the failed one is gone or frozen); any other loss \
         must show in a surviving broker's drop counters, or the check fails.\n"
    );
}

fn subscriptions(out: &mut String, table: &[NetRow]) {
    let _ = writeln!(out, "### Subscribing at a linked broker\n");
    let _ = writeln!(
        out,
        "µs per subscription (acknowledged by the broker the client is connected to), each batch of 500 \
         made on top of the previous ones:\n"
    );
    md_head(out, &["where", "batch 1, 2, ..."]);
    for (brokers, name) in [(1, "one broker"), (2, "shb, linked to phb")] {
        let batches: Vec<String> = table
            .iter()
            .filter(|r| r.part == "subscribe" && r.brokers == brokers)
            .map(|r| thousands(r.value))
            .collect();
        md_row(out, [name.to_string(), batches.join(", ")]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::network::Key;
    use crate::suite::Scale;

    fn table() -> Vec<NetRow> {
        let mut t = Vec::new();
        let mut put = |part, system, brokers, quantity: &str, value| {
            Key::new(part, system, "s", brokers, 1).put(&mut t, quantity, value);
        };
        for (b, rate, total, clients) in [(1, 100_000.0, 4.0, 2.0), (2, 95_000.0, 6.0, 2.0)] {
            put("throughput", TIDINGS, b, "received_msg_s", rate);
            put("throughput", TIDINGS, b, "cpu_us_per_msg.total", total);
            put("throughput", TIDINGS, b, "cpu_us_per_msg.clients", clients);
            put("throughput", TIDINGS, b, "cpus_busy", 1.2);
        }
        for (b, ours, theirs) in [(1, 150.0, 140.0), (2, 190.0, 220.0)] {
            put("latency", TIDINGS, b, "p50_us", ours);
            put("latency", NATS, b, "p50_us", theirs);
        }
        t
    }

    #[test]
    fn the_body_states_each_goal_and_the_cpu_ceiling() {
        let body = body(&Params::new(Scale::Quick), &table());
        assert!(body.contains("two brokers at least 90 % of one: met (0.95)"), "{body}");
        assert!(body.contains("4.0 / 6.0 = 0.67"), "{body}");
        assert!(body.contains("Measured 0.95, above that: one broker's runs kept 1.2 of the"), "{body}");
        assert!(body.contains("a hop adds no more than NATS's (measured now): met (40 µs against 80 µs)"), "{body}");
    }
}
