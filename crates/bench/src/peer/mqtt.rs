//! The MQTT peers of `tidings bench mqtt`: Debian's mosquitto and nats-server's MQTT front door
//! (JetStream-backed), each started fresh on a loopback port chosen at run time with a config
//! generated here, and stopped on drop, as tidings gets a fresh broker every repetition.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::nats::{free_port, on_path, PeerServer};

/// A peer server program and its version line, for the results.
#[derive(Debug, Clone)]
pub struct Program {
    /// The executable.
    pub path: PathBuf,
    /// What it says its version is (`mosquitto version 2.0.11`, `nats-server: v2.15.2`).
    pub version: String,
}

impl Program {
    /// mosquitto: `given`, else on `PATH` (Debian puts it in `/usr/sbin`, looked at too). The
    /// error says how to install it, so a comparison asked for is never skipped silently.
    pub fn mosquitto(given: Option<PathBuf>) -> Result<Program, String> {
        let path = given
            .or_else(|| on_path("mosquitto"))
            .or_else(|| Some(PathBuf::from("/usr/sbin/mosquitto")).filter(|p| p.is_file()))
            .ok_or("mosquitto is not installed (apt-get install mosquitto) nor given with --mosquitto PATH")?;
        // `mosquitto -h` prints its version first and exits 3.
        let out = Command::new(&path).arg("-h").output().map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        let version =
            String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("mosquitto, version unknown").into();
        Ok(Program { path, version })
    }

    /// nats-server: `given`, else `target/peers/nats-server` (issue 42 measures v2.15.2, installed
    /// there with `go install`), else on `PATH`.
    pub fn nats(given: Option<PathBuf>) -> Result<Program, String> {
        let path = given
            .or_else(|| Some(crate::paths::in_repo("target/peers/nats-server")).filter(|p| p.is_file()))
            .or_else(|| on_path("nats-server"))
            .ok_or("nats-server is neither in target/peers/ nor on PATH (--nats-server PATH)")?;
        let out =
            Command::new(&path).arg("--version").output().map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(Program { path, version })
    }
}

/// mosquitto with its defaults but the listener: anonymous clients allowed, persistence off
/// (so QoS 1 is acknowledged from memory), no connection limit; config and log in `dir`;
/// its one URL is its MQTT address, `127.0.0.1:PORT`.
pub fn mosquitto(program: &Program, dir: &Path) -> anyhow::Result<PeerServer> {
    let port = free_port()?;
    let config = format!("listener {port} 127.0.0.1\nallow_anonymous true\nlog_dest stderr\n");
    PeerServer::configured((&program.path, None), dir, "mosquitto", &config, (port, format!("127.0.0.1:{port}")))
}

/// nats-server with JetStream (its store in `dir/store`, default sync: every 2 minutes, not
/// before an acknowledgement) and the MQTT listener, which needs both JetStream and a server
/// name.
pub fn nats_mqtt(program: &Program, dir: &Path) -> anyhow::Result<PeerServer> {
    let (client, port) = (free_port()?, free_port()?);
    let store = dir.join("store").display().to_string();
    let config = format!(
        "server_name: bench\nlisten: 127.0.0.1:{client}\njetstream {{\n  store_dir: {store:?}\n}}\n\
         mqtt {{\n  listen: 127.0.0.1:{port}\n}}\n"
    );
    PeerServer::configured((&program.path, None), dir, "nats-mqtt", &config, (port, format!("127.0.0.1:{port}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_mosquitto_is_named_with_the_way_to_install_it() {
        let err = Program::mosquitto(Some(PathBuf::from("/nonexistent/mosquitto"))).unwrap_err();
        assert!(err.contains("/nonexistent/mosquitto"), "{err}");
    }
}
