//! What `tidings bench security` (issue 43's measure) sets up for both sides: a throwaway CA
//! and a server certificate for 127.0.0.1, made at run time and removed with the run (never a
//! committed key); a users file with the password hashed as each side stores it (tidings:
//! argon2id, its default; NATS: bcrypt, which tidings also accepts); and users whose
//! permissions hold one allow-all rule or 1,000 realistic rules. [`connect`] counts
//! connection setups.

pub mod connect;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use crate::acked::ScratchDir;

/// The login every side of the run uses.
pub const USER: &str = "bench";
/// Its password (a throwaway: the users file lives in the run's scratch directory).
pub const PASSWORD: &str = "bench-password-43";
/// bcrypt's cost for the NATS side and tidings' bcrypt side (Go's bcrypt default is 10; 11 is
/// the stronger setting a NATS operator would pick, and the same hash serves both sides).
pub const BCRYPT_COST: u32 = 11;

/// The run's certificates and password hashes, in a scratch directory removed on drop.
pub struct Secrets {
    /// Where they are.
    pub dir: ScratchDir,
    /// The CA clients trust (PEM).
    pub ca: PathBuf,
    /// The server certificate for `127.0.0.1` (PEM), signed by the CA.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// [`PASSWORD`] hashed with argon2id, as `tidings passwd` stores it.
    pub argon2: String,
    /// [`PASSWORD`] hashed with bcrypt at [`BCRYPT_COST`], as NATS stores it.
    pub bcrypt: String,
}

impl Secrets {
    /// Makes a CA, a server certificate for 127.0.0.1 it signs, and both hashes, under `parent`.
    pub fn new(parent: &Path) -> anyhow::Result<Secrets> {
        let dir = ScratchDir::new(parent, "security")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "tidings bench throwaway CA");
        let ca_key = KeyPair::generate()?;
        let ca = ca_params.self_signed(&ca_key)?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        let path = |name: &str| dir.0.join(name);
        std::fs::write(path("ca.pem"), ca.pem())?;
        std::fs::write(path("server.pem"), cert.pem())?;
        std::fs::write(path("server.key"), key.serialize_pem())?;
        Ok(Secrets {
            ca: path("ca.pem"),
            cert: path("server.pem"),
            key: path("server.key"),
            argon2: tidings_auth::hash_password(PASSWORD)?,
            bcrypt: bcrypt::hash(PASSWORD, BCRYPT_COST)?,
            dir,
        })
    }

    /// A users file holding [`USER`] with `hash` and `rules`; its path.
    pub fn users_file(&self, name: &str, hash: &str, rules: Rules) -> anyhow::Result<PathBuf> {
        let path = self.dir.0.join(format!("{name}.toml"));
        let (publish, subscribe) = (rules.topics("pub"), rules.topics("sub"));
        let text =
            format!("[[user]]\nname = {USER:?}\npassword = {hash:?}\npublish = {publish}\nsubscribe = {subscribe}\n");
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// The broker's TOML: TLS on the client listener (plain admin port, for metrics) when
    /// `tls`, and the users file when given, verifying as many passwords a second as the
    /// measurement asks (the default 50 is a flood guard, not a rate to measure).
    pub fn broker_toml(&self, tls: bool, users: Option<&Path>) -> String {
        let mut text = String::new();
        if tls {
            let (cert, key) = (self.cert.display().to_string(), self.key.display().to_string());
            let _ = write!(text, "[tls]\ncert = {cert:?}\nkey = {key:?}\nadmin = false\nmqtt = false\n");
        }
        if let Some(users) = users {
            let users = users.display().to_string();
            let _ = write!(text, "[security]\nusers_file = {users:?}\nverify_per_second = 100000\n");
        }
        text
    }
}

/// The permissions of the benchmark's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// One rule, `>`, for publish and for subscribe.
    AllowAll,
    /// `n` rules each for publish and subscribe: allow and deny rules over other services'
    /// topics, literal and wildcard, none matching the benchmark's `bench.t`, then the one
    /// allow rule that does (last, so that a scan of the rules would read them all).
    Many(usize),
}

impl Rules {
    /// The TOML table `{ allow = [...], deny = [...] }` of one direction.
    fn topics(self, direction: &str) -> String {
        let quoted = |v: Vec<String>| v.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ");
        match self {
            Rules::AllowAll => "{ allow = [\">\"] }".to_string(),
            Rules::Many(n) => {
                let (allow, deny) = many(n, direction);
                format!("{{ allow = [{}], deny = [{}] }}", quoted(allow), quoted(deny))
            }
        }
    }
}

/// `n` rules (at least 1): one in 50 a deny rule, the rest allow rules, none matching
/// `bench.t` but the last allow rule `bench.>`. Shapes as real users' lists: a service's
/// exact topics, a service's subtree, one level of wildcard in the middle.
fn many(n: usize, direction: &str) -> (Vec<String>, Vec<String>) {
    let (mut allow, mut deny) = (Vec::new(), Vec::new());
    for i in 0..n.saturating_sub(1) {
        let rule = match i % 5 {
            0 => format!("svc{i}.orders.created"),
            1 => format!("svc{i}.{direction}.>"),
            2 => format!("region{}.*.sensor{i}", i % 7),
            3 => format!("fleet.truck{i}.*"),
            _ => format!("bench{i}.t"),
        };
        if i % 50 == 49 {
            deny.push(rule);
        } else {
            allow.push(rule);
        }
    }
    allow.push("bench.>".to_string());
    (allow, deny)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_rules_are_n_with_one_matching_and_some_denied() {
        let (allow, deny) = many(1000, "pub");
        assert_eq!(allow.len() + deny.len(), 1000);
        assert_eq!(deny.len(), 19);
        let matching: Vec<_> = allow.iter().chain(&deny).filter(|p| matches(p, "bench.t")).collect();
        assert_eq!(matching, vec!["bench.>"]);
        assert!(allow.iter().any(|p| p.contains('*')) && allow.iter().any(|p| p.ends_with('>')));
    }

    fn matches(pattern: &str, topic: &str) -> bool {
        let (p, t): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), topic.split('.').collect());
        for (i, level) in p.iter().enumerate() {
            match *level {
                ">" => return t.len() > i,
                "*" if i < t.len() => {}
                l if t.get(i) == Some(&l) => {}
                _ => return false,
            }
        }
        p.len() == t.len()
    }

    #[test]
    fn the_users_file_loads_with_tidings_auth() {
        let secrets = Secrets::new(&std::env::temp_dir()).unwrap();
        for rules in [Rules::AllowAll, Rules::Many(1000)] {
            let path = secrets.users_file("u", &secrets.argon2, rules).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            let users = tidings_auth::Users::parse(&text);
            assert!(users.is_ok(), "{users:?}");
        }
        assert!(tidings_auth::verify_password(PASSWORD, &secrets.bcrypt));
        assert!(secrets.broker_toml(true, None).contains("[tls]"));
    }
}
