//! A nemesis schedule, generated from one `u64` seed (the simulator's SplitMix64, so a seed
//! names the same schedule on every machine): who publishes and subscribes where, and which
//! faults hit the network when, for how long.
//!
//! Clients sit at the topology's edge brokers (those with the fewest links): two brokers get
//! the three guaranteed publishers; plain, selector and durable subscribers go to the other edge
//! brokers (to the same two when there are no others), so traffic crosses the relays between.
//! Faults run on two tracks, one for brokers (stall, kill, power loss, empty restart, a stall
//! then a kill) and one for links (link stall, cut, partition), with `--client-faults` a third
//! for the connection of one client to its broker (client stall, client cut), each fault over
//! before the next on its track starts, every one over one and a half seconds before publishing ends. An empty restart hits only a
//! relay (a broker with no client): the data of a publisher's or durable subscriber's broker is
//! what the guarantee rests on. Whether kills lose unsynced log writes (`[storage]
//! fault_drop_unsynced`, a power cut) is decided per schedule: then every kill is a power loss.
//!
//! With a publishers' cell (`--publishers-cell`, issue 40), the publishers sit at that cell's
//! brokers instead, each given all of them (`pub --server own,mate,...`), and the cell's logs are
//! replicated among them: then a broker fault may wipe one of them (once per schedule, so a
//! quorum's disks always survive) or kill the whole cell at once (a power cut of the cell when
//! the schedule drops unsynced writes).

use std::fmt;
use std::time::Duration;

use tidings_sim::rng::Rng;

use crate::topology::Topology;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGSTOP a broker, SIGCONT at the end.
    Stall,
    /// SIGKILL a broker, restart it on its data at the end.
    Kill,
    /// The same with unsynced log writes dropped (a power cut).
    PowerLoss,
    /// SIGKILL a relay, restart it on an empty data directory.
    EmptyRestart,
    /// SIGSTOP a broker for [`STALL_FIRST`], then SIGKILL it (a failure that loses what was in
    /// flight, as seed 001 made its crashes), restart it on its data at the end.
    StallKill,
    /// Hold a link's bytes, connections open.
    LinkStall,
    /// Reset a link's connections and refuse new ones.
    Cut,
    /// Cut several links at once.
    Partition,
    /// SIGKILL every broker of the publishers' cell at once, restart them on their data (with
    /// unsynced writes dropped in a power-loss schedule: the whole cell's power cut).
    CellKill,
    /// Hold the bytes between one client and its broker, connection open (`--client-faults`).
    ClientStall,
    /// Reset one client's connections to its broker and refuse new ones (`--client-faults`).
    ClientCut,
}

impl Kind {
    /// Its name in reports and the CSV.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Stall => "stall",
            Kind::Kill => "kill",
            Kind::PowerLoss => "power-loss",
            Kind::EmptyRestart => "empty-restart",
            Kind::StallKill => "stall-kill",
            Kind::LinkStall => "link-stall",
            Kind::Cut => "cut",
            Kind::Partition => "partition",
            Kind::CellKill => "cell-kill",
            Kind::ClientStall => "client-stall",
            Kind::ClientCut => "client-cut",
        }
    }

    /// Its track, each fault over before the next of its track begins: brokers 0, links 1,
    /// clients 2 (`--client-faults`).
    pub fn track(self) -> usize {
        match self {
            Kind::LinkStall | Kind::Cut | Kind::Partition => 1,
            Kind::ClientStall | Kind::ClientCut => 2,
            Kind::Stall | Kind::Kill | Kind::PowerLoss | Kind::EmptyRestart | Kind::StallKill | Kind::CellKill => 0,
        }
    }

    /// Whether it hits a client's connection (made at the client's own proxy, not by `net fault`).
    pub fn is_client(self) -> bool {
        self.track() == 2
    }
}

/// One fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// What it does.
    pub kind: Kind,
    /// A broker (one name), links (pairs of names), or a client (its name: `pub0`, `durable`).
    pub targets: Vec<Vec<String>>,
    /// When it begins, from the start of publishing.
    pub at: Duration,
    /// How long it lasts (a stall-kill's kill: its stall comes first).
    pub lasting: Duration,
}

/// How long a stall-kill's broker is stalled before it is killed.
pub const STALL_FIRST: Duration = Duration::from_secs(1);

impl Fault {
    /// The `tidings net fault` argument lists that make it, side by side (one per link of a
    /// partition), each `--for` [`Fault::lasting`]; a stall-kill's stall is made before them.
    /// None for a client fault: `net` knows nothing of the clients, whose proxies the nemesis
    /// runs itself.
    pub fn commands(&self) -> Vec<Vec<String>> {
        let verb = match self.kind {
            Kind::Stall | Kind::LinkStall => "stall",
            Kind::Kill | Kind::PowerLoss | Kind::EmptyRestart | Kind::StallKill | Kind::CellKill => "kill",
            Kind::Cut | Kind::Partition => "cut",
            Kind::ClientStall | Kind::ClientCut => return Vec::new(),
        };
        self.targets
            .iter()
            .map(|t| {
                let mut args: Vec<String> = std::iter::once(verb.to_string()).chain(t.iter().cloned()).collect();
                if self.kind == Kind::EmptyRestart {
                    args.push("--empty".into());
                }
                args
            })
            .collect()
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let targets: Vec<String> = self.targets.iter().map(|t| t.join("-")).collect();
        write!(
            f,
            "{} {} at {:.1}s for {:.1}s",
            self.kind.name(),
            targets.join("+"),
            self.at.as_secs_f64(),
            self.lasting.as_secs_f64()
        )
    }
}

/// A subscriber of the schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Sub {
    /// Its name (also its output file's).
    pub name: String,
    /// The broker it is connected to.
    pub broker: String,
    /// Its topic pattern.
    pub pattern: String,
    /// Its selector, if any.
    pub selector: Option<String>,
    /// Its durable name, if durable.
    pub durable: Option<String>,
}

impl Sub {
    /// The `sub` arguments after `--server`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["--json".to_string()];
        match &self.durable {
            Some(name) => args.extend(["--durable".to_string(), name.clone()]),
            None => args.push("--guaranteed".into()),
        }
        args.push(self.pattern.clone());
        if let Some(s) = &self.selector {
            args.extend(["--where".to_string(), s.clone()]);
        }
        args
    }
}

/// A guaranteed publisher of the schedule: topic `nem.tI`, property `shade = I + 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pub {
    /// Its name (also its output file's).
    pub name: String,
    /// The broker it is connected to first.
    pub broker: String,
    /// Every broker it is given (`pub --server`): its own first, then its cell mates.
    pub servers: Vec<String>,
    /// Its topic.
    pub topic: String,
    /// Its `shade` property (what the selectors look at, with `seq`).
    pub shade: u64,
}

/// Everything a seed decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The seed.
    pub seed: u64,
    /// Every kill drops the log writes not yet synced.
    pub power_loss: bool,
    /// The publishers.
    pub publishers: Vec<Pub>,
    /// The subscribers.
    pub subscribers: Vec<Sub>,
    /// The faults, by track then time.
    pub faults: Vec<Fault>,
}

/// Where a schedule puts its clients: the cells named on the command line (each empty when not
/// named), their brokers in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cells {
    /// The publishers' cell (`--publishers-cell`): its brokers hold the publishers and may be
    /// wiped (one of them, once) and killed all at once.
    pub publishers: Vec<String>,
    /// The subscribers' cell (`--subscribers-cell`): its brokers hold the subscribers.
    pub subscribers: Vec<String>,
}

/// Selectors the selector subscribers pick from (over `shade` and the publisher's `seq`).
const SELECTORS: [&str; 4] = ["shade <> 2", "shade = 1 OR seq > 100", "seq < 400 AND shade >= 2", "shade IN (1, 3)"];

/// The schedule of `seed` on `topology`, publishing for `duration`, its publishers at the edge
/// or, given a cell's brokers (`publishers_cell`, at least one), at that cell's; its subscribers
/// at the edge or, given `subscribers_cell`, at that cell's brokers (where a cell that stores
/// durable subscriptions, `store = "cell"`, puts its replication under the faults too); with
/// `client_faults`, a third track of client faults, drawn after the other two so that a seed's
/// broker and link faults stay what they were without it.
pub fn generate(seed: u64, topology: &Topology, duration: Duration, cells: &Cells, client_faults: bool) -> Schedule {
    let publishers_cell = &cells.publishers[..];
    let mut rng = Rng::new(seed);
    let degree = |b: &String| topology.links.iter().filter(|(x, y)| x == b || y == b).count();
    let others: Vec<&String> = topology.brokers.iter().filter(|b| !publishers_cell.contains(b)).collect();
    let fewest = others.iter().map(|b| degree(b)).min().unwrap_or(0);
    let mut edge: Vec<String> = others.into_iter().filter(|b| degree(b) == fewest).cloned().collect();
    rng.shuffle(&mut edge);
    let (pub_at, sub_at): (Vec<String>, Vec<String>) = match publishers_cell.is_empty() {
        true => {
            (edge.iter().take(2).cloned().collect(), if edge.len() > 3 { edge[2..].to_vec() } else { edge.clone() })
        }
        false => {
            let mut cell = publishers_cell.to_vec();
            rng.shuffle(&mut cell);
            (cell.into_iter().take(2).collect(), edge.clone())
        }
    };
    let sub_at = match cells.subscribers.is_empty() {
        true => sub_at,
        false => {
            let mut cell = cells.subscribers.clone();
            rng.shuffle(&mut cell);
            cell
        }
    };
    let publishers: Vec<Pub> = (0..3)
        .map(|i| {
            let broker = pub_at[i % pub_at.len()].clone();
            let mates = publishers_cell.iter().filter(|b| **b != broker).cloned();
            Pub {
                name: format!("pub{i}"),
                servers: std::iter::once(broker.clone()).chain(mates).collect(),
                broker,
                topic: format!("nem.t{i}"),
                shade: i as u64 + 1,
            }
        })
        .collect();
    let mut selector = || Some(rng.pick(&SELECTORS).copied().unwrap_or(SELECTORS[0]).to_string());
    let kinds: [(&str, Option<String>, bool); 4] = [
        ("plain", None, false),
        ("select", selector(), false),
        ("durable", None, true),
        ("durable-select", selector(), true),
    ];
    let subscribers = kinds
        .into_iter()
        .enumerate()
        .map(|(i, (name, selector, durable))| Sub {
            name: name.to_string(),
            broker: sub_at[i % sub_at.len()].clone(),
            pattern: "nem.>".into(),
            selector,
            durable: durable.then(|| format!("nem{seed}-{i}")),
        })
        .collect::<Vec<_>>();
    let clients: Vec<&String> = pub_at.iter().chain(&sub_at).collect();
    let relays: Vec<String> = topology.brokers.iter().filter(|b| !clients.contains(b)).cloned().collect();
    // What an empty restart may hit: a relay, or one broker of a replicated publishers' cell
    // (once: two wiped replicas of a quorum lose what only they held, docs/replication.md).
    let mut wipeable: Vec<String> =
        relays.iter().filter(|b| !publishers_cell.contains(b)).chain(publishers_cell).cloned().collect();
    let power_loss = rng.chance(30);
    let links: Vec<Vec<String>> = topology.links.iter().map(|(a, b)| vec![a.clone(), b.clone()]).collect();
    let mut faults = Vec::new();
    let end = duration.saturating_sub(Duration::from_millis(1500));
    let kill = if power_loss { Kind::PowerLoss } else { Kind::Kill };
    let mut broker_kinds = vec![Kind::Stall, kill, kill, Kind::StallKill];
    if !wipeable.is_empty() {
        broker_kinds.push(Kind::EmptyRestart);
    }
    // Cells of several brokers, killed all at once: the publishers' (its replicated logs) and
    // the subscribers' (its relayed durable subscriptions, if it stores them).
    let killable: Vec<&Vec<String>> =
        [&cells.publishers, &cells.subscribers].into_iter().filter(|c| c.len() > 1).collect();
    if !killable.is_empty() {
        broker_kinds.push(Kind::CellKill);
    }
    track(&mut rng, end, &mut faults, |rng| {
        let mut kind = *rng.pick(&broker_kinds)?;
        if kind == Kind::EmptyRestart && wipeable.is_empty() {
            kind = kill;
        }
        if kind == Kind::CellKill {
            // One cell drawn from when there are two, so a schedule with the publishers' alone
            // draws what it always drew.
            let cell = if killable.len() > 1 { *rng.pick(&killable)? } else { killable[0] };
            return Some((kind, cell.iter().map(|b| vec![b.clone()]).collect()));
        }
        let pool = if kind == Kind::EmptyRestart { &wipeable } else { &topology.brokers };
        let broker = rng.pick(pool)?.clone();
        if kind == Kind::EmptyRestart && publishers_cell.contains(&broker) {
            wipeable.retain(|b| !publishers_cell.contains(b));
        }
        Some((kind, vec![vec![broker]]))
    });
    track(&mut rng, end, &mut faults, |rng| {
        let kind = *rng.pick(&[Kind::LinkStall, Kind::Cut, Kind::Cut, Kind::Partition])?;
        if kind != Kind::Partition {
            return Some((kind, vec![rng.pick(&links)?.clone()]));
        }
        // Isolate a broker, or cut two to three links at random.
        if rng.chance(50) {
            let b = rng.pick(&topology.brokers)?.clone();
            return Some((kind, links.iter().filter(|l| l.contains(&b)).cloned().collect()));
        }
        let mut some = links.clone();
        rng.shuffle(&mut some);
        some.truncate(rng.between(2, 3));
        Some((kind, some))
    });
    if client_faults {
        let clients: Vec<String> =
            publishers.iter().map(|p: &Pub| p.name.clone()).chain(subscribers.iter().map(|s| s.name.clone())).collect();
        track(&mut rng, end, &mut faults, |rng| {
            let kind = *rng.pick(&[Kind::ClientStall, Kind::ClientCut, Kind::ClientCut])?;
            Some((kind, vec![vec![rng.pick(&clients)?.clone()]]))
        });
    }
    Schedule { seed, power_loss, publishers, subscribers, faults }
}

/// Faults of one track, one after the other from 1.5 s, each 0.5-3 s long (a stall-kill 1 s
/// more) after a pause of 0.5-2.5 s, until the next would not be over by `end`.
fn track(
    rng: &mut Rng,
    end: Duration,
    faults: &mut Vec<Fault>,
    mut pick: impl FnMut(&mut Rng) -> Option<(Kind, Vec<Vec<String>>)>,
) {
    let ms = |n: usize| Duration::from_millis(n as u64);
    let mut t = ms(1000);
    loop {
        let at = t + ms(rng.between(500, 2500));
        let lasting = ms(rng.between(500, 3000));
        let Some((kind, targets)) = pick(rng) else { return };
        let stall = if kind == Kind::StallKill { STALL_FIRST } else { Duration::ZERO };
        if at + stall + lasting > end {
            return;
        }
        faults.push(Fault { kind, targets, at, lasting });
        t = at + stall + lasting;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Topology {
        Topology::parse(
            "name = \"chain-3\"\n[[broker]]\nname = \"a\"\n[[broker]]\nname = \"b\"\n[[broker]]\nname = \"c\"\n\
             [[link]]\nbetween = [\"a\", \"b\"]\n[[link]]\nbetween = [\"b\", \"c\"]\n",
        )
        .unwrap()
    }

    #[test]
    fn a_seed_names_one_schedule_and_faults_end_in_time() {
        let t = chain();
        let d = Duration::from_secs(20);
        assert_eq!(generate(7, &t, d, &Cells::default(), false), generate(7, &t, d, &Cells::default(), false));
        assert_ne!(
            generate(7, &t, d, &Cells::default(), false).faults,
            generate(8, &t, d, &Cells::default(), false).faults
        );
        for seed in 0..50 {
            let s = generate(seed, &t, d, &Cells::default(), false);
            assert!(!s.faults.is_empty(), "seed {seed} has no fault");
            for f in &s.faults {
                let stall = if f.kind == Kind::StallKill { STALL_FIRST } else { Duration::ZERO };
                assert!(f.at + stall + f.lasting <= d - Duration::from_millis(1500), "{f}");
                if f.kind == Kind::EmptyRestart {
                    assert_eq!(f.targets, [["b"]], "only the relay is emptied");
                }
            }
            assert!(s.publishers.iter().all(|p| p.broker != "b"), "clients sit at the edge");
        }
    }

    #[test]
    fn a_publishers_cell_gets_the_publishers_and_is_wiped_once_at_most() {
        let t = Topology::parse(
            "name = \"cell\"\n[[broker]]\nname = \"p1\"\ncell = \"P\"\n[[broker]]\nname = \"p2\"\ncell = \"P\"\n\
             [[broker]]\nname = \"p3\"\ncell = \"P\"\n[[broker]]\nname = \"r\"\n[[broker]]\nname = \"s1\"\n\
             [[broker]]\nname = \"s2\"\n[[link]]\nbetween = [\"P\", \"r\"]\n[[link]]\nbetween = [\"r\", \"s1\"]\n\
             [[link]]\nbetween = [\"r\", \"s2\"]\n",
        )
        .unwrap();
        let cell = t.cell("P");
        let cells = Cells { publishers: cell.clone(), ..Cells::default() };
        let (mut wipes, mut cell_kills) = (0, 0);
        for seed in 0..200 {
            let s = generate(seed, &t, Duration::from_secs(60), &cells, false);
            for p in &s.publishers {
                assert!(cell.contains(&p.broker), "seed {seed}: {p:?}");
                assert_eq!(p.servers[0], p.broker);
                let mut servers = p.servers.clone();
                servers.sort();
                assert_eq!(servers, cell, "seed {seed}: every mate is given");
            }
            assert!(s.subscribers.iter().all(|x| !cell.contains(&x.broker)), "seed {seed}");
            let wiped = |f: &&Fault| f.kind == Kind::EmptyRestart && cell.contains(&f.targets[0][0]);
            let in_cell = s.faults.iter().filter(wiped).count();
            assert!(in_cell <= 1, "seed {seed}: {in_cell} wipes of the cell");
            wipes += in_cell;
            for f in s.faults.iter().filter(|f| f.kind == Kind::CellKill) {
                assert_eq!(f.commands(), [["kill", "p1"], ["kill", "p2"], ["kill", "p3"]]);
                cell_kills += 1;
            }
        }
        assert!(wipes > 20 && cell_kills > 20, "{wipes} wipes, {cell_kills} cell kills over 200 seeds");
        assert_eq!(generate(3, &t, Duration::from_secs(20), &Cells::default(), false).publishers[0].servers.len(), 1);
    }

    #[test]
    fn a_subscribers_cell_gets_the_subscribers_and_either_cell_may_be_killed() {
        let t = Topology::parse(
            "name = \"two-cells\"\n[[broker]]\nname = \"p1\"\ncell = \"P\"\n[[broker]]\nname = \"p2\"\ncell = \"P\"\n\
             [[broker]]\nname = \"r\"\n[[broker]]\nname = \"s1\"\ncell = \"S\"\n[[broker]]\nname = \"s2\"\ncell = \"S\"\n\
             [[broker]]\nname = \"s3\"\ncell = \"S\"\n[[link]]\nbetween = [\"P\", \"r\"]\n[[link]]\nbetween = [\"r\", \"S\"]\n",
        )
        .unwrap();
        let cells = Cells { publishers: t.cell("P"), subscribers: t.cell("S") };
        let (mut kills_p, mut kills_s) = (0, 0);
        for seed in 0..200 {
            let s = generate(seed, &t, Duration::from_secs(60), &cells, false);
            assert!(s.subscribers.iter().all(|x| cells.subscribers.contains(&x.broker)), "seed {seed}");
            let used: std::collections::BTreeSet<&String> = s.subscribers.iter().map(|x| &x.broker).collect();
            assert_eq!(used.len(), 3, "seed {seed}: four subscribers over the cell's three brokers");
            for f in &s.faults {
                if f.kind == Kind::EmptyRestart {
                    assert!(!used.contains(&f.targets[0][0]), "seed {seed}: a subscriber's broker wiped: {f}");
                }
                if f.kind == Kind::CellKill {
                    match f.targets[0][0].as_str() {
                        "p1" => kills_p += 1,
                        _ => {
                            assert_eq!(f.commands(), [["kill", "s1"], ["kill", "s2"], ["kill", "s3"]]);
                            kills_s += 1
                        }
                    }
                }
            }
        }
        assert!(kills_p > 20 && kills_s > 20, "{kills_p} and {kills_s} cell kills over 200 seeds");
    }

    #[test]
    fn client_faults_are_a_third_track_that_leaves_the_others_alone() {
        let t = chain();
        let d = Duration::from_secs(30);
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let plain = generate(seed, &t, d, &Cells::default(), false);
            let with = generate(seed, &t, d, &Cells::default(), true);
            assert_eq!(with.faults[..plain.faults.len()], plain.faults[..], "seed {seed}: the old faults change");
            assert_eq!((&with.publishers, &with.subscribers), (&plain.publishers, &plain.subscribers));
            let clients = &with.faults[plain.faults.len()..];
            assert!(!clients.is_empty(), "seed {seed} has no client fault");
            let names: Vec<&str> = ["pub0", "pub1", "pub2", "plain", "select", "durable", "durable-select"].into();
            let mut last_end = Duration::ZERO;
            for f in clients {
                assert!(f.kind.is_client() && f.commands().is_empty(), "{f}");
                assert!(names.contains(&f.targets[0][0].as_str()) && f.targets.len() == 1, "{f}");
                assert!(f.lasting >= Duration::from_millis(500) && f.lasting <= Duration::from_secs(3), "{f}");
                assert!(f.at >= last_end && f.at + f.lasting <= d - Duration::from_millis(1500), "{f}");
                last_end = f.at + f.lasting;
                kinds.insert(f.kind);
            }
        }
        assert_eq!(kinds.len(), 2, "both client-stall and client-cut are drawn");
    }

    #[test]
    fn faults_become_net_fault_commands() {
        let f = Fault {
            kind: Kind::EmptyRestart,
            targets: vec![vec!["b".into()]],
            at: Duration::ZERO,
            lasting: Duration::from_secs(1),
        };
        assert_eq!(f.commands(), [["kill", "b", "--empty"]]);
        let p = Fault {
            kind: Kind::Partition,
            targets: vec![vec!["a".into(), "b".into()], vec!["b".into(), "c".into()]],
            ..f
        };
        assert_eq!(p.commands(), [["cut", "a", "b"], ["cut", "b", "c"]]);
    }
}
