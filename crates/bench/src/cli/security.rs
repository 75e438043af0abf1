//! `tidings bench security` (issue 43's measure): what security costs, beside NATS with TLS
//! (`--nats`), every side on a fresh server each repetition, interleaved repetition by
//! repetition ([`interleaved`]), through the one throughput engine and the peer harness.
//!
//! 1. TLS throughput 1->1 at each `--sizes`: tidings with `[tls]` on the client listener
//!    against `nats-server` with `tls {}`, no login on either.
//! 2. The permission check: tidings 1->1 at 256 B (plain TCP, logged in) for a user with one
//!    allow-all rule against one with `--rules` rules each way; the ratio is taken pair by pair.
//! 3. Connection setup with TLS and a password: tidings with its argon2id hash, tidings with
//!    the bcrypt hash NATS gets, NATS with that bcrypt hash.
//!
//! Each part's rows go to `--out`/security-PART.csv; the summary to `$TIDINGS_BENCH_JSON`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::classic::{paired, tput_figures, TPUT};
use super::measure::{
    beside, figures, nats_tools, ratio, summarize, tidings_exe, About, Common, Figures, Measurement, Row,
};
use super::peers::{renamed, tput_run};
use crate::engine::Access;
use crate::parse::at_least_one;
use crate::peer::nats::PeerRun;
use crate::peer::secure::{self, NatsSecurity};
use crate::peer::{columns, NatsTools};
use crate::security::connect::{self, ConnectSpec};
use crate::security::{Rules, Secrets, BCRYPT_COST, PASSWORD, USER};
use crate::suite::table::Table;
use crate::target::Target;
use crate::throughput::{self, ThroughputSpec};

/// `tidings bench security`.
#[derive(clap::Args)]
pub struct SecurityArgs {
    #[command(flatten)]
    common: Common,
    /// A small run (1 repetition, 0.5 s, 256 B only, few connections) for tests.
    #[arg(long)]
    quick: bool,
    /// Payload sizes of the TLS throughput part (1 publisher -> 1 subscriber).
    #[arg(long, value_delimiter = ',', default_value = "256,2000", value_parser = at_least_one::<usize>)]
    sizes: Vec<usize>,
    /// Rules each way (publish, subscribe) of the permission part's loaded user.
    #[arg(long, default_value_t = 1000, value_parser = at_least_one::<usize>)]
    rules: usize,
    /// Connections one after another in the connection part.
    #[arg(long, default_value_t = 100, value_parser = at_least_one::<usize>)]
    connects: usize,
    /// Clients connecting at once in the connection part's second phase (for --duration).
    #[arg(long, default_value_t = 8, value_parser = at_least_one::<usize>)]
    workers: usize,
    /// Message cap per throughput repetition.
    #[arg(long, default_value_t = 5_000_000)]
    max: u64,
    /// Where the CSVs go.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// Which parts to run (all three by default): re-measuring one part need not wait for the
    /// others (the connection part alone takes minutes of password hashing).
    #[arg(long, value_delimiter = ',', default_value = "tls,permissions,connect")]
    parts: Vec<SecurityPart>,
}

/// A part of the measure (see the module's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecurityPart {
    /// 1. TLS throughput beside NATS.
    Tls,
    /// 2. The permission check's cost at `--rules` rules.
    Permissions,
    /// 3. Connection setup with TLS and a password.
    Connect,
}

const CONNECT: &[&str] = &["sequential_conn_s", "p50_us", "p99_us", "concurrent_conn_s", "sequential", "errors"];

/// What a tidings side measures.
enum Part {
    /// Throughput with the spec's access.
    Tput(ThroughputSpec),
    /// Connection setup.
    Connect(ConnectSpec),
}

/// tidings on a fresh broker configured by `toml` each repetition.
struct Tidings<'a> {
    part: Part,
    toml: String,
    point: &'a str,
}

impl Measurement for Tidings<'_> {
    fn about(&self) -> About<'_> {
        About { system: "tidings", point: self.point, headline: headline(matches!(self.part, Part::Tput(_))) }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        let target = Target::spawn_configured(&tidings_exe()?, &self.toml)?;
        match &self.part {
            Part::Tput(spec) => Ok(tput_figures(&throughput::run(&target, spec).await?)),
            Part::Connect(spec) => Ok(connect_figures(&connect::run(&target.tcp, spec).await?)),
        }
    }
}

/// The figure a part's ratio compares: throughput's, or connection setup's.
fn headline(tput: bool) -> &'static str {
    if tput {
        "received_msg_s"
    } else {
        "sequential_conn_s"
    }
}

fn connect_figures(r: &connect::ConnectResult) -> Figures {
    figures!(r: sequential, sequential_conn_s, p50_us, p99_us, concurrent, concurrent_conn_s, errors)
}

/// Connection figures of a harness row, named as tidings names its own.
const NATS_CONNECT: &[(&str, &str)] = &columns! {
    sequential, sequential_conn_s = seq_conn_s, p50_us, p99_us, concurrent, concurrent_conn_s = conc_conn_s, errors,
};

/// NATS with TLS (and a bcrypt'd user for the connection part) on a fresh server each
/// repetition.
struct Nats<'a> {
    tools: &'a NatsTools,
    security: NatsSecurity<'a>,
    part: NatsPart,
    point: &'a str,
}

enum NatsPart {
    Tput(PeerRun, usize),
    Connect(usize, usize, Duration),
}

impl Measurement for Nats<'_> {
    fn about(&self) -> About<'_> {
        About { system: "nats", point: self.point, headline: headline(matches!(self.part, NatsPart::Tput(..))) }
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        tokio::task::block_in_place(|| {
            let scratch = crate::acked::ScratchDir::new(&std::env::temp_dir(), "nats-security")?;
            match &self.part {
                NatsPart::Tput(run, size) => {
                    let row = secure::tput(self.tools, &self.security, run.clone(), &scratch.0)?;
                    Ok(super::peers::tput_figures(&row, *size))
                }
                NatsPart::Connect(sequential, workers, duration) => {
                    let at = (*sequential, *workers, *duration);
                    Ok(renamed(&secure::connect(self.tools, &self.security, at, &scratch.0)?, NATS_CONNECT))
                }
            }
        })
    }
}

/// Runs `tidings bench security`.
pub(super) async fn run(mut a: SecurityArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        a.common.server.is_none(),
        "security starts its own brokers (each with its settings), not --server"
    );
    if a.quick {
        (a.common.reps, a.common.duration, a.sizes, a.connects, a.workers) = (1, 0.5, vec![256], 10, 2);
    }
    let tools = nats_tools(&a.common)?;
    let secrets = Secrets::new(&std::env::temp_dir())?;
    std::fs::create_dir_all(&a.out)?;
    let wanted = |part| a.parts.contains(&part);
    let skipped = serde_json::Value::Null;
    let tls = if wanted(SecurityPart::Tls) { tls_part(&a, &secrets, tools.as_ref()).await? } else { skipped.clone() };
    let permissions =
        if wanted(SecurityPart::Permissions) { permission_part(&a, &secrets).await? } else { skipped.clone() };
    let connections =
        if wanted(SecurityPart::Connect) { connect_part(&a, &secrets, tools.as_ref()).await? } else { skipped };
    Ok(serde_json::json!({
        "nats": tools.map(|t| t.server_version),
        "tls": tls,
        "permissions": permissions,
        "connect": connections,
        "bcrypt_cost": BCRYPT_COST,
    }))
}

fn tput_spec(a: &SecurityArgs, size: usize, access: Access) -> ThroughputSpec {
    ThroughputSpec {
        size,
        duration: Duration::from_secs_f64(a.common.duration),
        max_messages: a.max,
        access,
        ..ThroughputSpec::default()
    }
}

/// Part 1: TLS throughput at each size, tidings and NATS.
async fn tls_part(a: &SecurityArgs, secrets: &Secrets, tools: Option<&NatsTools>) -> anyhow::Result<serde_json::Value> {
    let mut all = Vec::new();
    let mut ratios = serde_json::Map::new();
    for &size in &a.sizes {
        let point = format!("tls tput 1->1 size={size}");
        let spec = tput_spec(a, size, Access { tls_ca: Some(secrets.ca.clone()), login: None });
        let nats_point = PeerRun { exp: "security".into(), ..tput_run(&spec) };
        let ours = Tidings { part: Part::Tput(spec), toml: secrets.broker_toml(true, None), point: &point };
        let security = NatsSecurity { cert: &secrets.cert, key: &secrets.key, ca: &secrets.ca, login: None };
        let theirs = tools.map(|tools| Nats { tools, security, part: NatsPart::Tput(nats_point, size), point: &point });
        let rows = beside(a.common.reps, &[&ours], theirs.as_ref()).await?;
        ratios.insert(point.clone(), summarize(&point, "received_msg_s", TPUT, &rows)?.into());
        all.extend(rows);
    }
    write_csv(&a.out, "tls", TPUT, &all)?;
    Ok(serde_json::json!({ "rows": all, "ratios": ratios }))
}

/// Part 2: the permission check's cost, one allow-all rule against `--rules`, pair by pair.
async fn permission_part(a: &SecurityArgs, secrets: &Secrets) -> anyhow::Result<serde_json::Value> {
    let login = Access { tls_ca: None, login: Some((USER.into(), PASSWORD.into())) };
    let side = |rules: Rules, point| -> anyhow::Result<Tidings> {
        let users = secrets.users_file(&format!("users-{point}"), &secrets.argon2, rules)?;
        let toml = secrets.broker_toml(false, Some(&users));
        Ok(Tidings { part: Part::Tput(tput_spec(a, 256, login.clone())), toml, point })
    };
    // `--rules 1` is the A/A control: both sides one rule, told apart by name.
    let control = if a.rules == 1 { " (A/A control)" } else { "" };
    let loaded_point = format!("permissions rules={}{control} size=256", a.rules);
    let (one, many) =
        (side(Rules::AllowAll, "permissions rules=1 size=256")?, side(Rules::Many(a.rules), &loaded_point)?);
    let what = format!("permissions: {} rules / 1 rule", a.rules);
    let (base, loaded, ratio) = paired(a.common.reps, [&one, &many], &what).await?;
    let all: Vec<Row> = base.iter().chain(&loaded).cloned().collect();
    write_csv(&a.out, "permissions", TPUT, &all)?;
    let (median, min, max) = (ratio.median, ratio.min, ratio.max);
    Ok(serde_json::json!({ "base": base, "loaded": loaded, "ratio": median, "ratio_min": min, "ratio_max": max }))
}

/// Part 3: connections a second with TLS and a password.
async fn connect_part(
    a: &SecurityArgs,
    secrets: &Secrets,
    tools: Option<&NatsTools>,
) -> anyhow::Result<serde_json::Value> {
    let duration = Duration::from_secs_f64(a.common.duration);
    let access = Access { tls_ca: Some(secrets.ca.clone()), login: Some((USER.into(), PASSWORD.into())) };
    let spec = ConnectSpec { sequential: a.connects, workers: a.workers, duration, access };
    let argon_users = secrets.users_file("users-argon2", &secrets.argon2, Rules::AllowAll)?;
    let bcrypt_users = secrets.users_file("users-bcrypt", &secrets.bcrypt, Rules::AllowAll)?;
    let (argon_point, bcrypt_point) = ("connect tls+password argon2id", "connect tls+password bcrypt");
    let toml = |users| secrets.broker_toml(true, Some(users));
    let argon = Tidings { part: Part::Connect(spec.clone()), toml: toml(&argon_users), point: argon_point };
    let bcrypt = Tidings { part: Part::Connect(spec), toml: toml(&bcrypt_users), point: bcrypt_point };
    let login = Some((USER, PASSWORD, secrets.bcrypt.as_str()));
    let security = NatsSecurity { cert: &secrets.cert, key: &secrets.key, ca: &secrets.ca, login };
    let theirs = tools.map(|tools| Nats {
        tools,
        security,
        part: NatsPart::Connect(a.connects, a.workers, duration),
        point: bcrypt_point,
    });
    let rows = beside(a.common.reps, &[&argon, &bcrypt], theirs.as_ref()).await?;
    let (argon_rows, bcrypt_rows): (Vec<Row>, Vec<Row>) = rows.iter().cloned().partition(|r| r.point == argon_point);
    summarize(argon_point, "sequential_conn_s", CONNECT, &argon_rows)?;
    let sequential = summarize(bcrypt_point, "sequential_conn_s", CONNECT, &bcrypt_rows)?;
    let concurrent = ratio(bcrypt_point, "concurrent_conn_s", &bcrypt_rows)?;
    write_csv(&a.out, "connect", CONNECT, &rows)?;
    Ok(serde_json::json!({
        "rows": rows,
        "sequential_ratio_bcrypt": sequential,
        "concurrent_ratio_bcrypt": concurrent,
        "workers": a.workers,
    }))
}

/// `rows` as `DIR/security-PART.csv`: one line per repetition, `figures` as columns.
fn write_csv(dir: &Path, part: &str, figures: &[&str], rows: &[Row]) -> anyhow::Result<()> {
    let mut columns = vec!["system", "point", "rep", "load_before", "load_after"];
    columns.extend(figures);
    let mut table = Table::new(&columns);
    let load = |l: Option<f64>| l.map_or(String::new(), |l| format!("{l:.2}"));
    for r in rows {
        let mut cells =
            vec![r.system.clone(), r.point.clone(), r.rep.to_string(), load(r.load_before), load(r.load_after)];
        cells.extend(figures.iter().map(|f| format!("{:.1}", r.figure(f))));
        table.push(cells)?;
    }
    let path = dir.join(format!("security-{part}.csv"));
    std::fs::write(&path, table.to_csv())?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
