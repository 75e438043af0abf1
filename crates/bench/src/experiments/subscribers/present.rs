//! How `subscribers` shows its rows: the figure and the report's tables, beside the seeds'.

use super::{Row, Subscribers};
use crate::seeds;
use crate::stats::Spread;
use crate::suite::prelude::*;
use crate::suite::text::micros;
use tidings_client::Transport;

/// One figure of a row.
type Field = fn(&Row) -> Option<f64>;

impl Subscribers {
    /// Every repetition's value of `field` for `system` at `n` subscribers.
    fn values(rows: &[Row], system: &str, n: usize, field: Field) -> Vec<f64> {
        rows.iter().filter(|r| r.system == system && r.subscribers == n).filter_map(field).collect()
    }

    /// `median [min-max]` of `field`, flagged when the repetitions disagree by over 25 %.
    fn ranged(rows: &[Row], system: &str, n: usize, field: Field) -> String {
        let values = Self::values(rows, system, n, field);
        if values.is_empty() {
            return "n/a".into();
        }
        Spread::of(&values).show(micros)
    }

    /// The median over repetitions of `field` for `system` at `n` subscribers.
    fn median(rows: &[Row], system: &str, n: usize, field: Field) -> Option<f64> {
        crate::stats::median_if_any(&Self::values(rows, system, n, field))
    }

    fn series(&self, rows: &[Row], system: &str, field: Field) -> Vec<(f64, f64)> {
        self.0.counts.iter().filter_map(|&n| Self::median(rows, system, n, field).map(|v| (n as f64, v))).collect()
    }

    pub(super) fn figure(&self, table: &[Row]) -> Figure {
        let x = || Axis::log("subscribers (each its own connection)");
        let ours = |column: Field| {
            let line = |label, mark, color, system| Series::new(label, mark, color, self.series(table, system, column));
            vec![
                line("tidings TCP", Mark::Line, figure::TIDINGS, "tidings-tcp"),
                line("tidings UDP", Mark::Line, figure::TIDINGS_ALT, "tidings-udp"),
                line("NATS", Mark::Line, figure::NATS, "nats"),
                line("NATS, committed anchor", Mark::Dashed, figure::NATS_ANCHOR, "nats-anchor"),
            ]
        };
        let seed = |t: &seeds::LatencyTable, color, values: &[f64]| {
            let points = t.subscribers.iter().copied().zip(values.iter().copied()).collect();
            Series::new(t.label, Mark::Dashed, color, points)
        };
        let mut mean = ours(|r| r.mean_us);
        mean.push(seed(&seeds::SEED_003_LAN, figure::SEED, seeds::SEED_003_LAN.mean_us));
        mean.push(seed(&seeds::SEED_000_LAN, 5, seeds::SEED_000_LAN.mean_us));
        let mut dropped = ours(|r| r.dropped_subscribers);
        dropped.push(seed(&seeds::SEED_003_VM, figure::SEED, seeds::SEED_003_VM.dropped));
        dropped.push(seed(&seeds::SEED_000_VM, 5, seeds::SEED_000_VM.dropped));
        let latency_axis = |what: &str| Axis::log(format!("{what} latency (µs)"));
        let y = Axis::linear("subscribers no longer served at the end");
        Figure {
            title: "Latency vs subscribers (seeds 003, 000)".into(),
            panels: vec![
                Panel::new("mean latency", x(), latency_axis("mean"), mean),
                Panel::new("99th percentile latency", x(), latency_axis("p99"), ours(|r| r.p99_us)),
                Panel::new("dropped subscribers", x(), y, dropped),
            ],
        }
    }

    pub(super) fn body(&self, table: &[Row]) -> anyhow::Result<String> {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Latency is one-way, from the time the publisher's schedule said to send the message \
             to the time the subscribing application took the delivery (one machine, one clock), \
             over every delivery of every subscriber: a publisher that falls behind does not hide a \
             stall. *send p99* measures from the actual send instead (for comparison only), and \
             *achieved* is the publish rate reached. Both sides measure the same way (the peer \
             harness in `bench/peers/`); NATS runs on a fresh server right after tidings at each \
             point and repetition. A *dropped subscriber* is one no longer served at the end: its \
             stream ended, or none of the last tenth of the messages reached it (seed 003's dropped \
             subscribers never reported; NATS's are the peer harness's slow consumers). A subscriber \
             that is alive but lost messages is counted in *lossy subs* instead, and *max lost/sub* is \
             the most one subscriber lost; *lost* counts deliveries that never arrived, by identity. \
             The publisher sends 1000 msg/s \
             up to 1000 subscribers and 100 msg/s at 10,000: at most 1 M deliveries/s. Medians over \
             repetitions, with [min-max]; `!` marks a spread over 25 % of the median. The CSV has \
             the load average before and after every point (the machine is shared).\n"
        );
        let head = ["subscribers", "system", "mean", "p50", "p99 [min-max]", "max", "send p99", "achieved msg/s"];
        md_head(&mut out, &[&head[..], &["dropped subs", "lossy subs", "max lost/sub", "lost"]].concat());
        for &n in &self.0.counts {
            for system in ["tidings-tcp", "tidings-udp", "nats", "nats-anchor"] {
                let m = |c: Field| Self::median(table, system, n, c);
                let Some(mean) = m(|r| r.mean_us) else { continue };
                let us = |c: Field| m(c).map(micros).unwrap_or_else(|| "n/a".into());
                let count = |c: Field| m(c).map(num).unwrap_or_else(|| "n/a".into());
                let p99 = Self::ranged(table, system, n, |r| r.p99_us);
                let latency = [micros(mean), us(|r| r.p50_us), p99, us(|r| r.max_us), us(|r| r.send_p99_us)];
                let counts = [
                    count(|r| r.achieved_rate_msg_s),
                    count(|r| r.dropped_subscribers),
                    count(|r| r.lossy_subscribers),
                    count(|r| r.max_lost_per_subscriber),
                    count(|r| r.lost),
                ];
                md_row(&mut out, [n.to_string(), system.to_string()].into_iter().chain(latency).chain(counts));
            }
        }
        if self.0.transports.contains(&Transport::Udp) {
            let _ = writeln!(
                out,
                "\nWhere UDP deliveries were lost (medians): the broker's queue for each client keeps the \
                 newest `[udp] queue_messages` and drops the oldest (*broker queue*); the kernel drops \
                 at a receiving socket whose buffer is full (*receivers' buffers*, `RcvbufErrors`) and \
                 at a full send buffer (*send buffer*, `SndbufErrors`), both read from /proc/net/snmp \
                 over the point, machine-wide. The bench's receivers are one socket per subscriber, \
                 each read by a task of the client library, one datagram per system call. *Told* is \
                 what the subscribers' deliveries reported as missed before them (the broker's queue \
                 drops, and the gaps each client saw in the broker's numbering of its datagrams); \
                 *not told* is what a subscriber lost beyond what it was told, summed.\n"
            );
            let head = ["subscribers", "lost", "broker queue", "receivers' buffers", "send buffer"];
            md_head(&mut out, &[&head[..], &["not attributed", "told", "not told"]].concat());
            for &n in &self.0.counts {
                let m = |c: Field| Self::median(table, "tidings-udp", n, c);
                let Some(lost) = m(|r| r.lost) else { continue };
                let parts = [m(|r| r.broker_drops), m(|r| r.rcvbuf_errors), m(|r| r.sndbuf_errors)];
                let shown = |v: Option<f64>| v.map(num).unwrap_or_else(|| "n/a".into());
                let attributed: f64 = parts.iter().flatten().sum();
                let unattributed = num((lost - attributed).max(0.0));
                let told = [shown(m(|r| r.told_lost)), shown(m(|r| r.unattributed))];
                md_row(
                    &mut out,
                    [n.to_string(), num(lost)].into_iter().chain(parts.map(shown)).chain([unattributed]).chain(told),
                );
            }
        }
        let _ = writeln!(out, "\nMean latency and dropped subscribers beside the seeds' (their LAN and VM tables):\n");
        let head = ["subscribers", "tidings TCP", "tidings UDP", "NATS", "NATS, committed anchor"];
        md_head(&mut out, &[&head[..], &seeds::LATENCY_TABLES.map(|t| t.label)].concat());
        for &n in &self.0.counts {
            let ours = |s: &str| match (
                Self::median(table, s, n, |r| r.mean_us),
                Self::median(table, s, n, |r| r.dropped_subscribers),
            ) {
                (Some(m), Some(d)) => format!("{} ({d:.0} dropped)", micros(m)),
                _ => "n/a".into(),
            };
            let seed = |t: &seeds::LatencyTable| match t.at(n) {
                Some((m, _, d)) => format!("{} ({d:.0} dropped)", micros(m)),
                None => "-".into(),
            };
            let ours = ["tidings-tcp", "tidings-udp", "nats", "nats-anchor"].map(ours);
            md_row(&mut out, [n.to_string()].into_iter().chain(ours).chain(seeds::LATENCY_TABLES.map(seed)));
        }
        let _ = writeln!(
            out,
            "\nThe seeds ran on a campus LAN and a VM over the internet; here everything shares one \
             machine's loopback, so the comparison is of shape (how latency grows with subscribers) more \
             than of level. NATS has no UDP transport."
        );
        Ok(out)
    }
}
