//! The table, figure, report text and checks of `failures` over its repetitions: the
//! publishers' crash summed up beside NATS first ([`summary`]), then per repetition what each
//! subscriber got and how it recovered from each fault. Tidings' runs are checked; NATS's
//! findings are reported, never checked.

use super::summary::{self, Row};
use super::{faults, nats, plot, run, Params};
use crate::experiments::Tally;
use crate::suite::prelude::*;

/// One repetition: tidings' run, and NATS's when it was measured.
pub(super) type Rep = (run::Run, Option<anyhow::Result<nats::NatsRun>>);

/// The outcome of `reps`, and the rows of the publishers' crash (`failures-takeover.csv`).
pub(super) fn outcome(p: &Params, reps: &[Rep]) -> anyhow::Result<(Outcome, Table)> {
    let mut details = String::new();
    let mut exact = Tally::new("every acknowledged publish delivered exactly once, in order, to every subscriber");
    let mut recovered = Tally::new("every subscriber recovered after every fault");
    let mut took_over =
        Tally::new("the publishers, held at p1 by its stall, went on at a mate before p1 was back (takeover)");
    let mut injected = Tally::new("every fault was injected");
    let mut rows: Vec<Row> = Vec::new();
    let first = &reps.first().ok_or_else(|| anyhow::anyhow!("no repetition ran"))?.0;
    let mut table = Table::new(&first.series.columns().iter().map(String::as_str).collect::<Vec<_>>());
    for (k, (r, peer)) in reps.iter().enumerate() {
        let rep = k + 1;
        let label = |what: String| if reps.len() > 1 { format!("repetition {rep}, {what}") } else { what };
        if reps.len() > 1 {
            let _ = writeln!(details, "\n### Repetition {rep}\n");
        }
        tidings_section(p, r, &mut details, (&mut exact, &mut recovered), &label);
        let names: Vec<&str> = r.windows.iter().map(|w| w.label).collect();
        injected.record(r.windows.len() == faults::steps().len(), label(names.join(", ")));
        r.series.rows(rep, &mut table)?;
        if let Some(row) = summary::row(p, rep, "tidings", r) {
            let show = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0} ms"));
            let what = format!(
                "the publisher held up least waited {} (stall {} ms), every publisher acknowledged {} after the kill, \
                 p1 down {:.0} ms",
                show(row.least_held_ms),
                p.stall.as_millis(),
                show(row.resumed_after_kill_ms),
                row.down_ms
            );
            took_over.record(row.before_restart && row.held_by_the_stall, label(what));
            rows.push(row);
        }
        match peer {
            Some(Ok(n)) => {
                nats_section(p, n, &mut details);
                rows.extend(summary::row(p, rep, "NATS", &n.run));
            }
            Some(Err(e)) => {
                let _ = writeln!(
                    details,
                    "\nNATS JetStream was to be measured with the same schedule, but the run failed: {e:#}."
                );
            }
            None => {}
        }
    }
    let mut body = String::new();
    summary::section(p, &rows, &mut body);
    let _ = writeln!(body, "\nThe seed (figure 6, b1-s1 cut for 10 s) shows the latency at s1 rising during the failure and going back to normal after it, nacks from s1 during it, and s2 stable. Recovery is counted from the fault's end (the link healed, the broker restarted); \
        \"back under 2x\" is the first bin after it whose median is, however few deliveries it holds (the column \"from every \
        publisher\" shows when the last publisher was back). The CSV has one row per bin and repetition (`rep`), \
        `publisher_acks` the acknowledgements the publishers took in the bin; the figure is the first repetition's; the \
        fault log and the clients' lines are kept in `failures-logs/` (`failures-logs/repN/` for repetition N).");
    body.push('\n');
    body.push_str(&details);
    let mut figure = plot::figure(&p.topology, &first.series, &first.windows, first.t0_us / 1000);
    figure.panels.push(plot::acks_panel("tidings", &first.series, &first.windows, first.t0_us / 1000));
    if let Some((_, Some(Ok(n)))) = reps.first() {
        let (series, windows, t0_ms) = (&n.run.series, &n.run.windows, n.run.t0_us / 1000);
        figure.panels.extend(plot::latency_panels(series, windows, t0_ms));
        figure.panels.push(plot::acks_panel("NATS", series, windows, t0_ms));
    }
    let mut checks = vec![exact.check(), recovered.check(), injected.check()];
    if p.replicas.is_some() {
        checks.push(took_over.check());
    }
    Ok((Outcome { table, figure, body, checks }, summary::table(&rows)?))
}

/// Tidings' run: what was published, what each subscriber got, and how it recovered.
fn tidings_section(
    p: &Params,
    r: &run::Run,
    body: &mut String,
    (exact, recovered): (&mut Tally, &mut Tally),
    label: &dyn Fn(String) -> String,
) {
    let (sent, acked, failed) = &r.published;
    let _ = writeln!(
        body,
        "{sent} publishes scheduled, {acked} acknowledged{}.\n",
        match failed.is_empty() {
            true => String::new(),
            false => format!("; publishers that exited with an error: {}", failed.join(", ")),
        }
    );
    for (name, _, v) in &r.subscribers {
        exact.record(v.held(), label(format!("{name}: {}", v.describe())));
        let _ = writeln!(body, "- {name}: {}", v.describe());
    }
    for name in &r.unfinished {
        exact.note(label(format!("{name} had not received every scheduled publish when it was stopped")));
    }
    recovery_table(p, r, body, Some((recovered, label)));
}

/// The recovery table of one run: per fault and subscriber, the latency baseline, the worst,
/// and how long after the fault's end new messages came through. Each row is recorded in
/// `recovered` when given, named by its label function (tidings' run is checked, NATS's only
/// reported).
fn recovery_table(
    p: &Params,
    r: &run::Run,
    body: &mut String,
    mut recovered: Option<(&mut Tally, &dyn Fn(String) -> String)>,
) {
    let head =
        ["fault", "subscriber", "baseline p50 (ms)", "worst latency (ms)", "first new delivery after the end (ms)"];
    body.push('\n');
    md_head(
        body,
        &[&head[..], &["... from every publisher (ms)", "latency under 2x baseline after the end (ms)"]].concat(),
    );
    for (k, w) in r.windows.iter().enumerate() {
        for (i, (name, _, _)) in r.subscribers.iter().enumerate() {
            let rec = r.recovery(p, k, i);
            let show = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0}"));
            let times = [rec.baseline_ms, rec.worst_ms, rec.first_new_ms, rec.all_new_ms, rec.back_ms].map(show);
            let [_, _, first, all, back] = times.clone();
            md_row(body, [w.label.to_string(), name.to_string()].into_iter().chain(times));
            if let Some((tally, label)) = recovered.as_mut() {
                let at = format!("{} at {name}", w.label);
                let what = format!(
                    "{at}: first new {first} ms, from every publisher {all} ms, back under 2x baseline {back} ms"
                );
                tally.record(rec.recovered(), label(what));
            }
        }
    }
}

/// NATS's run, reported beside tidings': what its subscribers lost, repeated or reordered,
/// and how it recovered.
fn nats_section(p: &Params, peer: &nats::NatsRun, body: &mut String) {
    let n = &peer.run;
    let (sent, acked, failed) = &n.published;
    let _ = writeln!(
        body,
        "\n### NATS JetStream, the same schedule\n\n{}: three nodes, an R3 file stream with `sync_interval: always`, \
         durable pull consumers acknowledging each message, the peer harness's `jspub` (synchronous acknowledged \
         publish, retried with the same `Nats-Msg-Id` until acknowledged) and `jssub`. Publishers at n1 (p1), s1's \
         consumer at n3, s2's at n2 (b1), each client given every node with its own first; the n2-n3 route (b1-s1) \
         through a fault point. {sent} publishes scheduled, {acked} acknowledged{}.\n",
        peer.version,
        match failed.is_empty() {
            true => String::new(),
            false => format!("; publishers that did not get every publish acknowledged: {}", failed.join(", ")),
        }
    );
    for (name, _, v) in &n.subscribers {
        let _ = writeln!(body, "- {name}: {}", v.describe());
    }
    for name in &n.unfinished {
        let _ = writeln!(body, "- {name} had not received every acknowledged publish when it was stopped");
    }
    recovery_table(p, n, body, None);
}
