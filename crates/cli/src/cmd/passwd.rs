//! `tidings passwd`: writes a user's argon2id password hash and its SCRAM-SHA-256 credential
//! (MQTT 5 enhanced authentication), or a new bearer token's digest, into a users file, so that no one edits hashes by hand. The broker reads the file on start
//! and on SIGHUP.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// `tidings passwd` options.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The users file (created when missing). Rewritten whole: comments are not kept.
    #[arg(long, short, value_name = "FILE")]
    file: PathBuf,
    /// The user to add or change.
    user: String,
    /// The new password; read from the first line of standard input when omitted.
    #[arg(long, env = "TIDINGS_PASSWORD", hide_env_values = true, conflicts_with = "token")]
    password: Option<String>,
    /// Instead of a password: make a new random bearer token, print it once, and store only
    /// its SHA-256 digest.
    #[arg(long)]
    token: bool,
    /// Store no SCRAM-SHA-256 credential beside the argon2id hash (and drop an older one):
    /// the user then cannot log in with MQTT 5 enhanced authentication, and a stolen users
    /// file holds only the argon2id hash, which costs a guesser far more per try than SCRAM's
    /// 4096 PBKDF2 iterations.
    #[arg(long, conflicts_with = "token")]
    no_scram: bool,
}

/// Runs `tidings passwd`.
pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.user.is_empty() || !args.user.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        anyhow::bail!(super::UsageError("a user name is letters, digits, '-' and '_'".into()));
    }
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", args.file.display())),
    };
    let mut doc: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not TOML", args.file.display()))?;
    let users = doc.entry("user").or_insert_with(|| toml::Value::Array(Vec::new()));
    let toml::Value::Array(users) = users else { anyhow::bail!("`user` in {} is not a list", args.file.display()) };
    let at = users.iter().position(|u| u.get("name").and_then(|n| n.as_str()) == Some(args.user.as_str()));
    let entry = match at {
        Some(at) => &mut users[at],
        None => {
            let mut table = toml::Table::new();
            table.insert("name".into(), toml::Value::String(args.user.clone()));
            users.push(toml::Value::Table(table));
            let last = users.len() - 1;
            &mut users[last]
        }
    };
    let toml::Value::Table(entry) = entry else { anyhow::bail!("a `[[user]]` entry is not a table") };
    let mut token = None;
    if args.token {
        let new = format!("{:032x}", rand::random::<u128>());
        let tokens = entry.entry("tokens").or_insert_with(|| toml::Value::Array(Vec::new()));
        if let toml::Value::Array(tokens) = tokens {
            tokens.push(toml::Value::String(tidings_auth::token_entry(&new)));
        }
        token = Some(new);
    } else {
        let password = match &args.password {
            Some(password) => password.clone(),
            None => {
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line)?;
                line.trim_end_matches(['\r', '\n']).to_string()
            }
        };
        if password.is_empty() {
            anyhow::bail!(super::UsageError("the password is empty".into()));
        }
        entry.insert("password".into(), toml::Value::String(tidings_auth::hash_password(&password)?));
        // Never an older password's credential beside the new hash: it would still log in.
        entry.remove("scram");
        if !args.no_scram {
            let scram = tidings_auth::ScramCredential::generate(&password);
            entry.insert("scram".into(), toml::Value::String(scram.to_string()));
        }
    }
    let out = toml::to_string(&doc)?;
    // What the broker will load must load: check before writing.
    tidings_auth::Users::parse(&out)?;
    std::fs::write(&args.file, out).with_context(|| format!("cannot write {}", args.file.display()))?;
    let mut stdout = std::io::stdout().lock();
    match token {
        Some(token) => writeln!(stdout, "{token}")?,
        None => writeln!(stdout, "{}: password set in {}", args.user, args.file.display())?,
    }
    Ok(ExitCode::SUCCESS)
}
