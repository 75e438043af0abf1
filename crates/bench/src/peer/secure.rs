//! NATS with TLS (`tls {}` with a certificate, so every client upgrades after INFO) and,
//! optionally, a user whose password is a bcrypt hash: the peer of a tidings broker with
//! `[tls]` and a users file. The peer harness gets `-tls-ca` and `-user`/`-pass`.

use std::path::Path;
use std::time::Duration;

use super::nats::{flags, free_port, harness_row, millis, NatsTools, PeerRun, PeerServer};
use super::PeerRow;

/// TLS and login of a NATS run.
#[derive(Debug, Clone)]
pub struct NatsSecurity<'a> {
    /// The server's certificate (PEM) for 127.0.0.1.
    pub cert: &'a Path,
    /// Its key (PEM).
    pub key: &'a Path,
    /// The CA the harness trusts.
    pub ca: &'a Path,
    /// `(user, password, bcrypt hash of the password)`: the server keeps the hash, the harness
    /// sends the password.
    pub login: Option<(&'a str, &'a str, &'a str)>,
}

impl NatsSecurity<'_> {
    /// The server's configuration for `port`.
    fn config(&self, port: u16) -> String {
        let mut text = format!(
            "listen: \"127.0.0.1:{port}\"\ntls {{\n  cert_file: {:?}\n  key_file: {:?}\n}}\n",
            self.cert.display().to_string(),
            self.key.display().to_string()
        );
        if let Some((user, _, hash)) = self.login {
            text.push_str(&format!("authorization {{\n  users = [ {{ user: {user:?}, password: {hash:?} }} ]\n}}\n"));
        }
        text
    }

    /// The harness's flags for it.
    fn harness_flags(&self) -> Vec<String> {
        let mut pairs = vec![("-tls-ca", self.ca.display().to_string())];
        if let Some((user, password, _)) = self.login {
            pairs.push(("-user", user.to_string()));
            pairs.push(("-pass", password.to_string()));
        }
        flags(&pairs)
    }

    /// Starts one `nats-server` with this configuration, logs in `logs`.
    pub fn server(&self, tools: &NatsTools, logs: &Path) -> anyhow::Result<PeerServer> {
        let port = free_port()?;
        PeerServer::configured(
            tools.program(),
            logs,
            "nats-secure",
            &self.config(port),
            (port, format!("tls://127.0.0.1:{port}")),
        )
    }
}

/// One throughput repetition (`-mode tput`) on a fresh secured server: its row.
pub fn tput(tools: &NatsTools, security: &NatsSecurity, mut job: PeerRun, scratch: &Path) -> anyhow::Result<PeerRow> {
    let server = security.server(tools, scratch)?;
    (job.publisher, job.subscriber) = (server.urls[0].clone(), server.urls[0].clone());
    harness_row(tools, "secure", scratch, |csv| [job.args(csv), security.harness_flags()].concat())
}

/// One connection-setup repetition (`-mode connect`) on a fresh secured server: `sequential`
/// connections, then `workers` at once for `duration`.
pub fn connect(
    tools: &NatsTools,
    security: &NatsSecurity,
    (sequential, workers, duration): (usize, usize, Duration),
    scratch: &Path,
) -> anyhow::Result<PeerRow> {
    let server = security.server(tools, scratch)?;
    harness_row(tools, "connect", scratch, |csv| {
        let args = flags(&[
            ("-mode", "connect".to_string()),
            ("-exp", "security".into()),
            ("-label", "nats".into()),
            ("-pub", server.urls[0].clone()),
            ("-max", sequential.to_string()),
            ("-subs", workers.to_string()),
            ("-reps", "1".into()),
            ("-dur", millis(duration)),
            ("-csv", csv.display().to_string()),
        ]);
        [args, security.harness_flags()].concat()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_keeps_the_hash_and_the_harness_sends_the_password() {
        let (cert, key, ca) = (Path::new("/s.pem"), Path::new("/s.key"), Path::new("/ca.pem"));
        let security = NatsSecurity { cert, key, ca, login: Some(("u", "pw", "$2b$11$hash")) };
        let config = security.config(4222);
        assert!(config.contains("listen: \"127.0.0.1:4222\"") && config.contains("cert_file: \"/s.pem\""));
        assert!(config.contains("password: \"$2b$11$hash\"") && !config.contains("\"pw\""), "{config}");
        assert_eq!(security.harness_flags().join(" "), "-tls-ca /ca.pem -user u -pass pw");
        let plain = NatsSecurity { login: None, ..security };
        assert!(!plain.config(1).contains("authorization"));
        assert_eq!(plain.harness_flags().join(" "), "-tls-ca /ca.pem");
    }
}
