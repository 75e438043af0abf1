//! What the network report reads into the CPU time of its runs ([`crate::cpu`]).

use super::present::ratio;
use super::NetRow;
use super::{median, show, Key, NATS, TIDINGS};
use crate::cpu::Spent;
use crate::suite::prelude::*;

/// (`cpu_us_per_msg.NAME`, `cpu_us_per_msg.total`), and the CPUs they kept busy on average
/// (`cpus_busy`: all their CPU time over the wall-clock time).
pub(super) fn put(key: &Key, table: &mut Vec<NetRow>, spent: &Spent, received: u64) {
    let total: f64 = spent.by_process.values().sum();
    if spent.wall_secs > 0.0 {
        key.put(table, "cpus_busy", total / spent.wall_secs);
    }
    if received == 0 {
        return;
    }
    let per = |secs: f64| secs * 1e6 / received as f64;
    for (name, &secs) in &spent.by_process {
        key.put(table, &format!("cpu_us_per_msg.{name}"), per(secs));
    }
    key.put(table, "cpu_us_per_msg.total", per(total));
}

/// CPU µs per message of `system` with `brokers`: (brokers' processes, clients, all).
fn cpu_split(table: &[NetRow], system: &str, brokers: usize) -> Option<(f64, f64, f64)> {
    let m = |name: &str| median(table, "throughput", system, brokers, &format!("cpu_us_per_msg.{name}"));
    let total = m("total")?;
    let clients = m("clients").or_else(|| m("peerbench"))?;
    Some((total - clients, clients, total))
}

/// CPUs kept busy by every process together, on average over a run.
fn cores(table: &[NetRow], system: &str, brokers: usize) -> Option<f64> {
    median(table, "throughput", system, brokers, "cpus_busy")
}

pub(super) fn report(out: &mut String, table: &[NetRow]) {
    let _ = writeln!(out, "### Where the time goes: CPU per message\n");
    let _ = writeln!(
        out,
        "CPU time (user + system, from `/proc/PID/stat`) of each process during a throughput run, \
         divided by the messages received, µs; *clients* is this process (publisher and subscriber) \
         for tidings and the peer harness for NATS (where messages were lost, what they cost is spread over \
         those received); *CPUs busy*: all their CPU time over the run's wall-clock time.\n"
    );
    md_head(out, &["", "brokers", "per broker", "clients", "all", "CPUs busy"]);
    let f = |v: Option<f64>| show(v, |v| format!("{v:.1}"));
    for (system, setup, brokers, names) in [
        (TIDINGS, "tidings, one broker", 1, &["broker"][..]),
        (TIDINGS, "tidings, two brokers", 2, &["phb", "shb"][..]),
        (NATS, "NATS, one node", 1, &["nats"][..]),
        (NATS, "NATS, cluster", 2, &["nats-a", "nats-b"][..]),
    ] {
        let Some((all_brokers, clients, total)) = cpu_split(table, system, brokers) else { continue };
        let each: Vec<String> = names
            .iter()
            .map(|n| format!("{n} {}", f(median(table, "throughput", system, brokers, &format!("cpu_us_per_msg.{n}")))))
            .collect();
        let busy = f(cores(table, system, brokers));
        md_row(out, [setup.to_string(), f(Some(all_brokers)), each.join(", "), f(Some(clients)), f(Some(total)), busy]);
    }
    if let (Some(one), Some(two)) = (cpu_split(table, TIDINGS, 1), cpu_split(table, TIDINGS, 2)) {
        bound(out, table, one, two);
    }
    out.push('\n');
}

/// What the CPU per message says about the ratio two / one.
fn bound(out: &mut String, table: &[NetRow], one: (f64, f64, f64), two: (f64, f64, f64)) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let ((first, _, one_all), (second, _, two_all)) = (one, two);
    let (added, times, ceiling) = (second - first, second / first, one_all / two_all);
    let _ = write!(
        out,
        "\nA second broker adds {added:.1} µs of broker CPU per message to the first's {first:.1} ({times:.1}× the \
         broker CPU of one). Every process shares this machine's {cpus} CPUs, so where the CPUs are the limit \
         throughput goes as the inverse of all the CPU a message costs, and two / one comes to {one_all:.1} / \
         {two_all:.1} = {ceiling:.2}. "
    );
    match (ratio(table, TIDINGS), cores(table, TIDINGS, 1)) {
        (Some(r), Some(busy)) if r > ceiling => {
            let _ = write!(
                out,
                "Measured {r:.2}, above that: one broker's runs kept {busy:.1} of the {cpus} CPUs busy, so they \
                 were not CPU-bound, and the second broker used CPU that was idle. "
            );
        }
        (Some(r), _) => {
            let _ = write!(out, "Measured {r:.2}. ");
        }
        _ => {}
    }
    let _ = writeln!(
        out,
        "Perf profiles of the brokers (taken outside this command) put about 40 % of each broker's CPU in \
         kernel copies (`copy_from_iter` / `copy_to_iter`): every broker a message crosses copies it in from \
         one socket and out to another, so a second broker costs about as much CPU as the first, and on a \
         machine whose CPUs the clients and brokers share, the ratio is bounded by that."
    );
}
