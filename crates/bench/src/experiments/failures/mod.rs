//! `failures` (seed 001 §4.2, figure 6): guaranteed delivery in the 10-broker network of
//! `gryphon-fig3.toml` while the b1-s1 link is cut, b1 crashes and p1 (the pubends' broker)
//! crashes, each after a stall of what is about to fail, as the seed did so that the failure
//! loses data in flight. Four pubends at p1 publish 25 msg/s of 100 B each; guaranteed
//! subscribers at s1 and s2. The output is the seed's time series (latency at s1 and s2, nacks
//! and nack range at s1 and b1..b4), and the run fails if any acknowledged publish was lost,
//! repeated or reordered at a subscriber, or if a subscriber did not recover after a fault.

mod faults;
mod nats;
mod plot;
mod recovery;
mod run;
mod sampler;
mod series;
mod verify;

use std::fmt::Write as _;
use std::time::Duration;

use futures::future::BoxFuture;

use super::Tally;
use crate::suite::table::{md_head, md_row};
use crate::suite::{About, Check, Context, Experiment, Outcome, Scale};

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// The topology file.
    pub topology: String,
    /// The pubends' broker.
    pub publisher_at: String,
    /// Guaranteed publishers (one pubend each).
    pub publishers: usize,
    /// Each publisher's rate, msg/s.
    pub rate: f64,
    /// Payload bytes.
    pub size: usize,
    /// Brokers with a guaranteed subscriber.
    pub subscribers: Vec<String>,
    /// Brokers whose nack counters are sampled.
    pub watched: Vec<String>,
    /// The brokers' liveness profile (`[guaranteed] liveness`).
    pub liveness: String,
    /// Publishing before the first fault.
    pub warmup: Duration,
    /// The stall before each failure.
    pub stall: Duration,
    /// How long the link stays cut.
    pub cut: Duration,
    /// How long a crashed broker stays down before it is restarted on its data directory.
    pub down: Duration,
    /// Quiet time after each fault.
    pub between: Duration,
    /// Bin of the time series and period of the metric scrapes.
    pub bin: Duration,
    /// How long the clients may take to finish after the schedule (each).
    pub drain: Duration,
    /// The latency baseline is taken over this long before each stall.
    pub baseline: Duration,
}

impl Params {
    /// The seed's setup, or the quick version (faults of 2 s).
    pub fn new(scale: Scale) -> Params {
        let s = Duration::from_secs;
        let (warmup, stall, fault, between, baseline) = match scale {
            Scale::Full => (s(10), Duration::from_millis(2500), s(10), s(20), s(5)),
            Scale::Quick => (s(3), s(1), s(2), s(5), s(2)),
        };
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Params {
            topology: "gryphon-fig3.toml".into(),
            publisher_at: "p1".into(),
            publishers: 4,
            rate: 25.0,
            size: 100,
            subscribers: names(&["s1", "s2"]),
            watched: names(&["s1", "s2", "b1", "b2", "b3", "b4"]),
            liveness: "seed001".into(),
            warmup,
            stall,
            cut: fault,
            down: fault,
            between,
            bin: Duration::from_millis(100),
            drain: s(30),
            baseline,
        }
    }

    /// How long the fault schedule (and so the publishing) lasts.
    pub fn schedule(&self) -> Duration {
        self.warmup + (self.stall + self.cut.max(self.down) + self.between) * faults::steps().len() as u32
    }
}

/// The experiment.
pub struct Failures(pub Params);

impl Experiment for Failures {
    fn about(&self) -> About {
        About {
            name: "failures",
            title: "guaranteed delivery through a link cut and broker crashes",
            seeds: "seed 001, §4.2 and figure 6",
        }
    }
    fn parameters(&self) -> Vec<(&'static str, String)> {
        let p = &self.0;
        let secs = |d: Duration| format!("{} s", d.as_secs_f64());
        vec![
            ("network", format!("`{}`, started by `tidings net up --faults`", p.topology)),
            ("publishers", format!("{} guaranteed pubends at {}, {} msg/s of {} B each", p.publishers, p.publisher_at, p.rate, p.size)),
            ("subscribers", format!("guaranteed, at {}, to `failures.>`", p.subscribers.join(" and "))),
            ("liveness", format!("`[guaranteed] liveness = \"{}\"`: GCT 200 ms, NRT 600 ms, AET 10 s, DCT infinite", p.liveness)),
            ("faults", format!("after {}: b1-s1 link stalled then cut for {}; b1 stalled then SIGKILLed, restarted on its data after {}; p1 the same", secs(p.warmup), secs(p.cut), secs(p.down))),
            ("stall before each failure", secs(p.stall)),
            ("quiet time after each fault", secs(p.between)),
            ("time series", format!("{} ms bins; nacks from `/metrics` of {} every bin", p.bin.as_millis(), p.watched.join(", "))),
        ]
    }
    fn points(&self, _: &Context) -> u64 {
        2
    }
    fn run<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, anyhow::Result<Outcome>> {
        Box::pin(async move {
            let r = run::run(ctx, &self.0).await?;
            let peer = match ctx.peers.tools() {
                Some(tools) => Some(nats::run(ctx, tools, &self.0).await),
                None => None,
            };
            outcome(&self.0, &r, peer)
        })
    }
}

/// The table, figure, report text and checks of a run (and of NATS's, when measured: its
/// findings are reported, never checked).
fn outcome(p: &Params, r: &run::Run, peer: Option<anyhow::Result<nats::NatsRun>>) -> anyhow::Result<Outcome> {
    let mut body = String::new();
    let (sent, acked, failed) = &r.published;
    let _ = writeln!(
        body,
        "{sent} publishes scheduled, {acked} acknowledged{}.\n",
        match failed.is_empty() {
            true => String::new(),
            false => format!("; publishers that exited with an error: {}", failed.join(", ")),
        }
    );
    let mut exact = Tally::new("every acknowledged publish delivered exactly once, in order, to every subscriber");
    for (name, _, v) in &r.subscribers {
        exact.record(v.held(), format!("{name}: {}", v.describe()));
        let _ = writeln!(body, "- {name}: {}", v.describe());
    }
    for name in &r.unfinished {
        exact.note(format!("{name} had not received every scheduled publish when it was stopped"));
    }
    let mut recovered = Tally::new("every subscriber recovered after every fault");
    let t0_ms = r.t0_us / 1000;
    let subs: Vec<(&str, &[series::Delivery])> = r.subscribers.iter().map(|(n, d, _)| (n.as_str(), &d[..])).collect();
    recovery_table(p, (&r.series, r.t0_us), &r.windows, &subs, &mut body, Some(&mut recovered));
    let _ = writeln!(body, "\nThe seed (figure 6, b1-s1 cut for 10 s) shows the latency at s1 rising during the failure and going back to normal after it, nacks from s1 during it, and s2 stable. Recovery is counted from the fault's end (the link healed, the broker restarted); \
        \"back under 2x\" is the first bin after it whose median is, however few deliveries it holds (after a crash of p1 \
        the publishers reconnect one by one, on their clients' backoff: the column \"from every publisher\" shows when the \
        last was back). The CSV has one row per bin; the fault log and the clients' lines are kept in `failures-logs/`.");
    let mut figure = plot::figure(&r.series, &r.windows, t0_ms);
    match peer {
        Some(Ok(n)) => {
            nats_section(p, &n, &mut body);
            figure.panels.extend(plot::latency_panels(&n.run.series, &n.run.windows, n.run.t0_us / 1000));
        }
        Some(Err(e)) => {
            let _ = writeln!(
                body,
                "\nNATS JetStream was to be measured with the same schedule, but the run failed: {e:#}."
            );
        }
        None => {}
    }
    Ok(Outcome {
        table: r.series.table()?,
        figure,
        body,
        checks: vec![exact.check(), recovered.check(), faults_ran(&r.windows)],
    })
}

/// The faults the log shows happened: all three, in order.
fn faults_ran(windows: &[faults::Window]) -> Check {
    let names: Vec<&str> = windows.iter().map(|w| w.label).collect();
    Check::new("every fault was injected", windows.len() == faults::steps().len(), names.join(", "))
}

/// The recovery table of one run: per fault and subscriber, the latency baseline, the worst,
/// and how long after the fault's end new messages came through. Each row is recorded in
/// `recovered` when given (tidings' run is checked, NATS's only reported).
fn recovery_table(
    p: &Params,
    (series, t0_us): (&series::Series, u64),
    windows: &[faults::Window],
    subscribers: &[(&str, &[series::Delivery])],
    body: &mut String,
    mut recovered: Option<&mut Tally>,
) {
    let head =
        ["fault", "subscriber", "baseline p50 (ms)", "worst latency (ms)", "first new delivery after the end (ms)"];
    body.push('\n');
    md_head(
        body,
        &[&head[..], &["... from every publisher (ms)", "latency under 2x baseline after the end (ms)"]].concat(),
    );
    let end_ms = t0_us / 1000 + (series.t_s.len() as u64) * p.bin.as_millis() as u64;
    for (k, w) in windows.iter().enumerate() {
        let until = windows.get(k + 1).map_or(end_ms, |n| n.stalled_ms);
        for (i, (name, ds)) in subscribers.iter().enumerate() {
            let bins = (&series.latency[i].1[..], t0_us, p.bin.as_micros() as u64);
            let rec = recovery::recovery(w, ds, bins, until, p.baseline.as_millis() as u64);
            let show = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0}"));
            let times = [rec.baseline_ms, rec.worst_ms, rec.first_new_ms, rec.all_new_ms, rec.back_ms].map(show);
            md_row(body, [w.label.to_string(), name.to_string()].into_iter().chain(times));
            if let Some(tally) = recovered.as_deref_mut() {
                tally.record(
                    rec.recovered(),
                    format!(
                        "{} at {name}: first new {} ms, from every publisher {} ms, back under 2x baseline {} ms",
                        w.label,
                        show(rec.first_new_ms),
                        show(rec.all_new_ms),
                        show(rec.back_ms)
                    ),
                );
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
    let subs: Vec<(&str, &[series::Delivery])> = n.subscribers.iter().map(|(s, d, _)| (s.as_str(), &d[..])).collect();
    recovery_table(p, (&n.series, n.t0_us), &n.windows, &subs, body, None);
}
