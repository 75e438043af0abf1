//! `tidings bench mqtt` (issue 42's measure): tidings' MQTT front door beside mosquitto (and, for
//! QoS 1, nats-server's MQTT front door), one load generator ([`crate::mqtt`]) driving all of
//! them, each repetition on fresh brokers, interleaved repetition by repetition. Points: QoS 0
//! from 1 publisher to 1 and to N subscribers (deliveries/s at all subscribers together), QoS 1
//! PUBACKs/s with a window in flight, and the broker's RSS growth per idle connection. Writes
//! `mqtt.csv` (every figure of every repetition) and `mqtt.md` (medians, ratios, goals) to
//! `--out`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tidings_admin::{resident_bytes, BrokerProcess};

use super::measure::{interleaved, spread_of, tidings_exe, About, AnyMeasurement, Figures, Measurement, Row};
use crate::acked::ScratchDir;
use crate::mqtt::{self, AckedSpec, FanSpec};
use crate::outln;
use crate::parse::{above_zero, at_least_one};
use crate::peer::mqtt::{self as peer, Program};
use crate::peer::PeerServer;
use crate::stats::{load_average, Spread};

/// `tidings bench mqtt`.
#[derive(clap::Args)]
pub struct MqttArgs {
    /// A run that finishes in seconds (1 repetition, 0.5 s points, 10 subscribers, 200 idle
    /// connections), to check that the bench works, not to quote.
    #[arg(long)]
    quick: bool,
    /// Repetitions; every broker once per repetition, in turn (default 3; 1 with --quick).
    #[arg(long, value_parser = at_least_one::<usize>)]
    reps: Option<usize>,
    /// Where mqtt.csv and mqtt.md are written.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// Seconds of publishing per repetition (default 5; 0.5 with --quick).
    #[arg(long, value_parser = above_zero)]
    duration: Option<f64>,
    /// Payload bytes.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    size: usize,
    /// Subscribers of the fan-out point (default 100; 10 with --quick).
    #[arg(long, value_parser = at_least_one::<usize>)]
    fanout: Option<usize>,
    /// QoS 1 publishes in flight.
    #[arg(long, default_value_t = 100, value_parser = at_least_one::<usize>)]
    window: usize,
    /// Idle connections (default 10,000; 200 with --quick).
    #[arg(long, value_parser = at_least_one::<usize>)]
    idle: Option<usize>,
    /// Seconds the broker is left alone before each RSS reading.
    #[arg(long, default_value_t = 2.0, value_parser = above_zero)]
    settle: f64,
    /// The points measured (default all): `qos0` (1 to 1), `fanout`, `qos1`, `idle`. One point
    /// alone is quicker to repeat, say `--points idle` while working on memory.
    #[arg(long, value_delimiter = ',', default_value = "qos0,fanout,qos1,idle")]
    points: Vec<Which>,
    /// The peers measured beside tidings: mosquitto (every point), nats (QoS 1), or none. A
    /// peer asked for and not found stops the run before anything is measured.
    #[arg(long, value_delimiter = ',', default_value = "mosquitto,nats")]
    peers: Vec<Peer>,
    /// mosquitto (default: on PATH, or /usr/sbin/mosquitto).
    #[arg(long, value_name = "PATH")]
    mosquitto: Option<PathBuf>,
    /// nats-server with MQTT (default: target/peers/nats-server, else on PATH).
    #[arg(long, value_name = "PATH")]
    nats_server: Option<PathBuf>,
}

/// A peer broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    /// Debian's mosquitto.
    Mosquitto,
    /// nats-server's MQTT front door (JetStream).
    Nats,
    /// tidings alone.
    None,
}

/// A point of the run, by name (`--points`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// QoS 0, 1 publisher to 1 subscriber.
    Qos0,
    /// QoS 0, 1 publisher to `--fanout` subscribers.
    Fanout,
    /// QoS 1 acknowledged publishes with a window.
    Qos1,
    /// Resident memory per idle connection.
    Idle,
}

/// A broker of one repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Tidings,
    Mosquitto,
    Nats,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Tidings => "tidings",
            System::Mosquitto => "mosquitto",
            System::Nats => "nats",
        }
    }
}

/// What one point measures.
enum Work {
    Fan(FanSpec),
    Acked(AckedSpec),
    Idle { connections: usize, settle: Duration },
}

/// A point: its label, the figure compared, what it measures and its goal.
struct Point {
    label: String,
    headline: &'static str,
    work: Work,
    /// Which peers are measured at it.
    peers: &'static [System],
    goal: &'static str,
}

/// The broker started for one repetition, stopped on drop.
enum Running {
    Tidings(Box<BrokerProcess>),
    Peer(PeerServer),
}

impl Running {
    fn addr(&self) -> anyhow::Result<String> {
        match self {
            Running::Tidings(b) => b
                .ready
                .mqtt
                .map(|a| a.to_string())
                .ok_or_else(|| anyhow::anyhow!("tidings' ready line has no MQTT port")),
            Running::Peer(p) => Ok(p.urls[0].clone()),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Running::Tidings(b) => b.ready.pid,
            Running::Peer(p) => p.pids()[0],
        }
    }
}

/// The programs of the run.
struct Programs {
    mosquitto: Option<Program>,
    nats: Option<Program>,
}

/// One broker at one point.
struct Side<'a> {
    system: System,
    point: &'a Point,
    programs: &'a Programs,
}

impl Side<'_> {
    fn start(&self, dir: &Path) -> anyhow::Result<Running> {
        let missing = |what: &str| anyhow::anyhow!("{what} was not found");
        Ok(match self.system {
            System::Tidings => {
                // One source address holds every idle connection: lift the per-address limit
                // (an eighth of max_connections by default) past them.
                let per_address = match self.point.work {
                    Work::Idle { connections, .. } => connections + 1000,
                    _ => 1000,
                };
                let config = format!(
                    "[mqtt]\nlisten = \"127.0.0.1:0\"\n[limits]\nmax_connections_per_address = {per_address}\n"
                );
                let data = dir.join("data").display().to_string();
                Running::Tidings(Box::new(BrokerProcess::start_configured(
                    &tidings_exe()?,
                    &config,
                    &["--data", &data],
                )?))
            }
            System::Mosquitto => {
                Running::Peer(peer::mosquitto(self.programs.mosquitto.as_ref().ok_or(missing("mosquitto"))?, dir)?)
            }
            System::Nats => {
                Running::Peer(peer::nats_mqtt(self.programs.nats.as_ref().ok_or(missing("nats-server"))?, dir)?)
            }
        })
    }
}

impl Measurement for Side<'_> {
    fn about(&self) -> About<'_> {
        About { system: self.system.name(), point: &self.point.label, headline: self.point.headline }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        // tidings' log and NATS's store go to the temp directory: a disk here, not a tmpfs.
        let scratch = ScratchDir::new(&std::env::temp_dir(), &format!("mqtt-{}", self.system.name()))?;
        let broker = tokio::task::block_in_place(|| self.start(&scratch.0))?;
        let addr = broker.addr()?;
        let figures = match &self.point.work {
            Work::Fan(spec) => figures_of(&mqtt::fan(&addr, spec).await?)?,
            Work::Acked(spec) => figures_of(&mqtt::acked(&addr, spec).await?)?,
            Work::Idle { connections, settle } => {
                let pid = broker.pid();
                figures_of(&mqtt::idle(&addr, *connections, *settle, || Ok(resident_bytes(pid)?)).await?)?
            }
        };
        drop(broker);
        Ok(figures)
    }
}

/// A result's numeric fields as figures, under the field names: one name from the engine to the
/// CSV.
fn figures_of<T: serde::Serialize>(result: &T) -> anyhow::Result<Figures> {
    let value = serde_json::to_value(result)?;
    let fields = value.as_object().ok_or_else(|| anyhow::anyhow!("a result is not a struct"))?;
    Ok(fields.iter().filter_map(|(name, v)| Some((name.clone(), v.as_f64()?))).collect())
}

/// The points of a run, from the options.
fn points(a: &MqttArgs) -> Vec<Point> {
    let q = a.quick;
    let duration = Duration::from_secs_f64(a.duration.unwrap_or(if q { 0.5 } else { 5.0 }));
    let fan = |subscribers: usize| FanSpec {
        size: a.size,
        subscribers,
        duration,
        max_messages: 50_000_000,
        drain: Duration::from_secs(if q { 5 } else { 30 }),
    };
    let fanout = a.fanout.unwrap_or(if q { 10 } else { 100 });
    let connections = a.idle.unwrap_or(if q { 200 } else { 10_000 });
    let mosquitto: &'static [System] = &[System::Mosquitto];
    let all = [
        Point {
            label: format!("qos0 1->1 size={}", a.size),
            headline: "received_msg_s",
            work: Work::Fan(fan(1)),
            peers: mosquitto,
            goal: "msg/s at least 2x mosquitto's",
        },
        Point {
            label: format!("qos0 1->{fanout} size={}", a.size),
            headline: "received_msg_s",
            work: Work::Fan(fan(fanout)),
            peers: mosquitto,
            goal: "msg/s (all subscribers together) at least 2x mosquitto's",
        },
        Point {
            label: format!("qos1 window={} size={}", a.window, a.size),
            headline: "acked_msg_s",
            work: Work::Acked(AckedSpec { size: a.size, window: a.window, duration }),
            peers: &[System::Mosquitto, System::Nats],
            goal: "PUBACKs/s at least mosquitto's",
        },
        Point {
            label: format!("idle connections={connections}"),
            headline: "bytes_per_connection",
            work: Work::Idle { connections, settle: Duration::from_secs_f64(a.settle) },
            peers: mosquitto,
            goal: "at most 5 KB (5,000 bytes) per connection",
        },
    ];
    let names = [Which::Qos0, Which::Fanout, Which::Qos1, Which::Idle];
    names.into_iter().zip(all).filter(|(which, _)| a.points.contains(which)).map(|(_, point)| point).collect()
}

/// Finds the peers asked for; a missing one is an error naming it (the run does not start).
fn programs(a: &MqttArgs) -> anyhow::Result<Programs> {
    let wants = |p: Peer| a.peers.contains(&p);
    anyhow::ensure!(!(wants(Peer::None) && a.peers.len() > 1), "--peers none measures tidings alone: name no other");
    let mosquitto =
        wants(Peer::Mosquitto).then(|| Program::mosquitto(a.mosquitto.clone())).transpose().map_err(|why| {
            anyhow::anyhow!("the peer mosquitto is missing: {why}; `--peers none` measures tidings alone")
        })?;
    let nats = wants(Peer::Nats)
        .then(|| Program::nats(a.nats_server.clone()))
        .transpose()
        .map_err(|why| anyhow::anyhow!("the peer nats is missing: {why}; `--peers mosquitto` leaves it out"))?;
    Ok(Programs { mosquitto, nats })
}

/// `tidings bench mqtt`: measures, prints, writes `mqtt.csv` and `mqtt.md`; the summary JSON.
pub(super) async fn run(a: MqttArgs) -> anyhow::Result<serde_json::Value> {
    let programs = programs(&a)?;
    let reps = a.reps.unwrap_or(if a.quick { 1 } else { 3 });
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
    let points = points(&a);
    let needed = points.iter().map(|p| if let Work::Idle { connections, .. } = p.work { connections } else { 0 });
    let needed = needed.max().unwrap_or(0);
    anyhow::ensure!(
        needed + 200 < limit as usize,
        "{needed} idle connections need more open files than the limit of {limit}"
    );
    let versions: Vec<String> = [
        Some(format!("tidings {}", env!("CARGO_PKG_VERSION"))),
        programs.mosquitto.as_ref().map(|p| p.version.clone()),
        programs.nats.as_ref().map(|p| p.version.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    eprintln!("brokers: {}", versions.join(", "));
    let load_start = load_average();
    let mut rows = Vec::new();
    for point in &points {
        let present = |s: &System| match s {
            System::Mosquitto => programs.mosquitto.is_some(),
            System::Nats => programs.nats.is_some(),
            System::Tidings => true,
        };
        let sides: Vec<Side> = std::iter::once(System::Tidings)
            .chain(point.peers.iter().copied().filter(present))
            .map(|system| Side { system, point, programs: &programs })
            .collect();
        let sides: Vec<&dyn AnyMeasurement> = sides.iter().map(|s| s as &dyn AnyMeasurement).collect();
        eprintln!("{}:", point.label);
        rows.extend(interleaved(reps, &sides).await?);
    }
    let report = markdown(&points, &rows, reps, &versions, (load_start, load_average()), a.quick);
    outln!("{report}")?;
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("mqtt.csv"), super::measure::csv(&rows))?;
    std::fs::write(a.out.join("mqtt.md"), &report)?;
    eprintln!("wrote {} and {}", a.out.join("mqtt.csv").display(), a.out.join("mqtt.md").display());
    Ok(serde_json::json!({ "versions": versions, "rows": rows }))
}

fn spread(rows: &[Row], point: &str, system: &str, figure: &str) -> Spread {
    spread_of(rows.iter().filter(|r| r.point == point), system, figure)
}

/// The results section: per point, each broker's median [min-max] of its headline figure (and
/// the figures that qualify it), the ratio tidings / each peer, and the goal.
fn markdown(
    points: &[Point],
    rows: &[Row],
    reps: usize,
    versions: &[String],
    load: (Option<f64>, Option<f64>),
    quick: bool,
) -> String {
    let shown = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Brokers: {}. {reps} repetition(s), medians [min-max]; load average {} at the start, {} at the end.{}\n",
        versions.join(", "),
        shown(load.0),
        shown(load.1),
        if quick { " QUICK RUN: a check that the bench works, not figures to quote." } else { "" }
    );
    out.push_str("| point | figure | tidings | mosquitto | nats | tidings / mosquitto | tidings / nats | goal |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for point in points {
        let extra: &[&str] = match point.work {
            Work::Fan(_) => &["publish_msg_s", "lost"],
            Work::Acked(_) => &["p99_us"],
            Work::Idle { .. } => &[],
        };
        for figure in std::iter::once(&point.headline).chain(extra) {
            let cell = |system: &str| {
                let s = spread(rows, &point.label, system, figure);
                if s.median.is_finite() {
                    s.show(|v| format!("{v:.0}"))
                } else {
                    "-".into()
                }
            };
            let ratio = |system: &str| {
                let ours = spread(rows, &point.label, "tidings", figure).median;
                let r = ours / spread(rows, &point.label, system, figure).median;
                if r.is_finite() && *figure == point.headline {
                    format!("{r:.2}")
                } else {
                    "-".into()
                }
            };
            let goal = if *figure == point.headline { point.goal } else { "" };
            let ([ours, mosquitto, nats], [by_mosquitto, by_nats]) =
                (["tidings", "mosquitto", "nats"].map(cell), ["mosquitto", "nats"].map(ratio));
            let row = format!("{ours} | {mosquitto} | {nats} | {by_mosquitto} | {by_nats}");
            let _ = writeln!(out, "| {} | {figure} | {row} | {goal} |", point.label);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &str, rep: usize, value: f64) -> Row {
        Row { load_before: Some(1.0), ..Row::sample(system, rep, value, &[("received_msg_s", value)]) }
    }

    #[test]
    fn the_csv_has_a_line_per_figure_and_the_report_the_ratio_of_medians() {
        let rows = [row("tidings", 1, 300.0), row("mosquitto", 1, 100.0), row("tidings", 2, 200.0)];
        let text = super::super::measure::csv(&rows);
        assert_eq!(text.lines().count(), 4);
        assert!(text.contains("p,mosquitto,1,received_msg_s,100,1.00,\n"), "{text}");
        let point = Point {
            label: "p".into(),
            headline: "received_msg_s",
            work: Work::Idle { connections: 1, settle: Duration::ZERO },
            peers: &[System::Mosquitto],
            goal: "2x",
        };
        let md = markdown(&[point], &rows, 2, &["tidings x".into()], (Some(1.0), None), false);
        assert!(
            md.contains("| p | received_msg_s | 250 [200-300] (spread 40 %!) | 100 [100-100] | - | 2.50 | - | 2x |"),
            "{md}"
        );
    }

    #[test]
    fn none_cannot_be_asked_for_with_a_peer() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: MqttArgs,
        }
        let cli = Cli::try_parse_from(["x", "--peers", "none,mosquitto"]).unwrap();
        assert!(programs(&cli.a).is_err());
        let cli = Cli::try_parse_from(["x", "--peers", "mosquitto", "--mosquitto", "/nonexistent/mosquitto"]).unwrap();
        let err = programs(&cli.a).err().unwrap().to_string();
        assert!(err.contains("the peer mosquitto is missing"), "{err}");
    }
}
