//! `tidings net fault`: the faults of seed 001's experiments, on a running `net up` network.
//!
//! A broker can be stalled (SIGSTOP, then SIGCONT), killed (SIGKILL: a crash, nothing flushed)
//! and restarted on its data directory with the addresses and links it had. A link of a network
//! started with `--faults` can be stalled (bytes held, connections open, as a black-holed path)
//! or cut (connections reset, new ones refused) at its fault point. `--after` waits before the
//! fault and `--for` ends it (a killed broker is restarted), so one command line per fault makes
//! a script such as "stall 2.5 s, then cut for 10 s"; without `--for` the fault lasts until
//! `heal` (or `restart`). `--empty` restarts a broker on an empty data directory instead, as
//! if its disk had been replaced (for fault tests: what it had kept is gone). Every begin and end is appended to `DIR/faults.jsonl` with its wall
//! clock time, for experiments to draw on their time axis.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use tidings_admin::Signal;

use super::proxy::{self, LinkMode, LinkProxy};
use super::{alive, brokers, pid_of, read_network, update_network, DirArgs};
use crate::cmd::outln;

/// The fault log in the network's directory, one JSON object per line.
pub(crate) const LOG_FILE: &str = tidings_admin::FAULT_LOG;

/// `net fault` arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tidings net fault stall b1 --for 2.5s           # SIGSTOP b1, SIGCONT 2.5 s later
  tidings net fault cut b1 s1 --after 3s --for 10s # the b1-s1 link (needs `net up --faults`)
  tidings net fault kill p1 --for 5s              # crash p1, restart it on its data 5 s later
  tidings net fault restart p1                    # restart a broker killed earlier
  tidings net fault kill b2 --for 2s --empty      # crash b2, restart it on an empty data directory")]
pub(crate) struct Args {
    /// What to do.
    #[arg(value_enum)]
    kind: Kind,
    /// A broker, or two brokers naming the link between them.
    #[arg(num_args = 1..=2, required = true, value_name = "BROKER")]
    target: Vec<String>,
    /// Wait this long before the fault (e.g. 500ms, 3s).
    #[arg(long, value_parser = humantime::parse_duration)]
    after: Option<Duration>,
    /// End the fault after this long (a killed broker is restarted); without it, it lasts.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    lasting: Option<Duration>,
    /// With `restart` or `kill --for`: delete the broker's data directory before restarting it
    /// (a replaced disk: its logs, durable subscriptions and incarnation are gone).
    #[arg(long)]
    empty: bool,
    #[command(flatten)]
    dir: DirArgs,
}

/// The faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Kind {
    /// A broker: SIGSTOP. A link: hold its bytes, connections open.
    Stall,
    /// A link: reset its connections and refuse new ones.
    Cut,
    /// A broker: SIGKILL.
    Kill,
    /// A broker that is not running: start it again on its data directory.
    Restart,
    /// End a stall or a cut now.
    Heal,
}

/// What a fault hits.
enum Target {
    Broker(Value),
    Link(LinkProxy),
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::Broker(b) => b["name"].as_str().unwrap_or("?").to_string(),
            Target::Link(l) => l.between.join("-"),
        }
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let dir = &args.dir.dir;
    let network = read_network(dir)?;
    let target = find(&network, &args.target, dir)?;
    match (args.kind, &target) {
        (Kind::Cut, Target::Broker(_)) => bail!("`cut` takes a link: two broker names"),
        (Kind::Kill | Kind::Restart, Target::Link(_)) => bail!("`{:?}` takes one broker", args.kind),
        (Kind::Restart, _) if args.lasting.is_some() => bail!("`restart` takes no --for"),
        (Kind::Kill, _) if args.empty && args.lasting.is_none() => bail!("`kill --empty` needs --for"),
        (Kind::Stall | Kind::Cut | Kind::Heal, _) if args.empty => bail!("--empty goes with `restart` or `kill --for`"),
        _ => {}
    }
    if let Some(after) = args.after {
        std::thread::sleep(after);
    }
    begin(args.kind, &target, dir, args.empty)?;
    // `heal` and `restart` end a fault begun by an earlier command.
    let event = if matches!(args.kind, Kind::Heal | Kind::Restart) { "end" } else { "begin" };
    log(dir, args.kind, &target, event)?;
    if let Some(lasting) = args.lasting.filter(|_| args.kind != Kind::Heal) {
        std::thread::sleep(lasting);
        end(args.kind, &target, dir, args.empty)?;
        log(dir, args.kind, &target, "end")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The broker or link the names point at, or an error naming what exists.
fn find(network: &Value, names: &[String], dir: &Path) -> anyhow::Result<Target> {
    let known: Vec<Value> = brokers(network);
    for name in names {
        if !known.iter().any(|b| b["name"].as_str() == Some(name.as_str())) {
            let all: Vec<&str> = known.iter().filter_map(|b| b["name"].as_str()).collect();
            bail!("no broker {name:?} in the network of {} (brokers: {})", dir.display(), all.join(", "));
        }
    }
    match names {
        [one] => {
            Ok(Target::Broker(known.into_iter().find(|b| b["name"].as_str() == Some(one.as_str())).context("gone")?))
        }
        [a, b] => {
            let links = proxy::links(network);
            if links.is_empty() {
                bail!("the links of this network have no fault points: start it with `tidings net up --faults`");
            }
            let link = links.into_iter().find(|l| l.joins(a, b));
            Ok(Target::Link(link.with_context(|| format!("no link between {a} and {b} in this network"))?))
        }
        _ => bail!("name one broker, or two for a link"),
    }
}

/// Starts a fault (or, for `heal` and `restart`, ends one); `empty` restarts on an empty data
/// directory.
fn begin(kind: Kind, target: &Target, dir: &Path, empty: bool) -> anyhow::Result<()> {
    match (kind, target) {
        (Kind::Stall, Target::Broker(b)) => stop_or_continue(b, Signal::Stop),
        (Kind::Heal, Target::Broker(b)) => stop_or_continue(b, Signal::Cont),
        (Kind::Kill, Target::Broker(b)) => kill(b),
        (Kind::Restart, Target::Broker(b)) => restart(b, dir, empty),
        (Kind::Stall, Target::Link(l)) => l.set(LinkMode::Stall),
        (Kind::Cut, Target::Link(l)) => l.set(LinkMode::Cut),
        (Kind::Heal, Target::Link(l)) => l.set(LinkMode::Heal),
        (Kind::Cut | Kind::Kill | Kind::Restart, _) => bail!("{kind:?} does not apply to {}", target.name()),
    }
}

/// Undoes a fault whose `--for` has passed.
fn end(kind: Kind, target: &Target, dir: &Path, empty: bool) -> anyhow::Result<()> {
    match kind {
        Kind::Stall | Kind::Cut => begin(Kind::Heal, target, dir, false),
        Kind::Kill => begin(Kind::Restart, target, dir, empty),
        Kind::Restart | Kind::Heal => Ok(()),
    }
}

fn stop_or_continue(broker: &Value, sig: Signal) -> anyhow::Result<()> {
    let pid = pid_of(broker);
    anyhow::ensure!(alive(pid), "broker {} (pid {pid}) is not running", broker["name"].as_str().unwrap_or("?"));
    tidings_admin::send_signal(pid, sig).with_context(|| format!("cannot signal pid {pid}"))
}

/// SIGKILL, and wait until the process is gone so a restart can bind its ports.
fn kill(broker: &Value) -> anyhow::Result<()> {
    stop_or_continue(broker, Signal::Kill)?;
    let pid = pid_of(broker);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        anyhow::ensure!(std::time::Instant::now() < deadline, "pid {pid} survived SIGKILL for 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Starts a broker again with the arguments that started it, bound to the ports it had, and
/// records its new process in network.json (read afresh: another fault may have changed it).
/// With `empty`, its data directory is deleted first.
fn restart(broker: &Value, dir: &Path, empty: bool) -> anyhow::Result<()> {
    let name = broker["name"].as_str().unwrap_or("?");
    if alive(pid_of(broker)) {
        bail!("broker {name} is running (pid {}); kill it first", pid_of(broker));
    }
    if empty {
        let data = broker["data"].as_str().context("network.json has no data directory for this broker")?;
        match std::fs::remove_dir_all(data) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot empty {data}"));
            }
            _ => {}
        }
    }
    let args: Vec<String> = broker["restart"]
        .as_array()
        .context("network.json has no restart arguments for this broker (started by an older tidings?)")?
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let exe = std::env::current_exe().context("cannot find the tidings binary")?;
    let ready = super::start_broker(&exe, dir, name, &args, true, &AtomicBool::new(false))?;
    update_network(dir, |network| {
        if let Some(list) = network["brokers"].as_array_mut() {
            for b in list.iter_mut().filter(|b| b["name"].as_str() == Some(name)) {
                b["pid"] = ready["pid"].clone();
                b["incarnation"] = ready["incarnation"].clone();
            }
        }
    })?;
    outln!("restarted {name}: pid {}, incarnation {}", ready["pid"], ready["incarnation"])?;
    Ok(())
}

/// Appends one event to the fault log and says it on stdout.
fn log(dir: &Path, kind: Kind, target: &Target, event: &str) -> anyhow::Result<()> {
    let kind = format!("{kind:?}").to_lowercase();
    let unix_ms = tidings_admin::append_fault_event(dir, &kind, &target.name(), event)
        .with_context(|| format!("cannot write {}", dir.join(LOG_FILE).display()))?;
    outln!("{event} {kind} {} at {unix_ms}", target.name())?;
    Ok(())
}
