//! The clients' own fault points (`--client-faults`): every publisher and subscriber of a
//! schedule dials its broker through a [`FaultProxy`] of its own (a publisher with several
//! servers, its first), so a client's connection can be stalled or cut as an outside checker
//! would first try, without touching the broker or its links. The same proxy `net up --faults`
//! puts on every broker link, run here in the nemesis's process: `net` knows nothing of the
//! clients, and a client fault is one client's, not a link's.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use tidings_admin::FaultProxy;

use crate::pause::pause;
use crate::schedule::{Fault, Kind};

/// The fault points of a schedule's clients, by client name; each closes (resetting its
/// connections) on drop, so they must outlive the clients.
#[derive(Default)]
pub struct Proxies {
    list: Vec<(String, FaultProxy)>,
}

impl Proxies {
    /// Starts the fault point of `client` in front of `broker` (a client TCP address); the
    /// address the client dials instead.
    pub fn add(&mut self, client: &str, broker: &str) -> anyhow::Result<String> {
        let upstream: SocketAddr = broker.parse().with_context(|| format!("{client}'s broker address {broker}"))?;
        let proxy = FaultProxy::start(upstream).with_context(|| format!("cannot start {client}'s fault point"))?;
        let addr = proxy.addr().to_string();
        self.list.push((client.to_string(), proxy));
        Ok(addr)
    }

    /// Makes a client fault (blocking): stalls or cuts the client's proxy, waits
    /// [`Fault::lasting`] (less once `stop` is set), heals it, and appends the begin and the end
    /// to `dir/faults.jsonl` as `net fault` does its own.
    pub fn make(&self, fault: &Fault, dir: &Path, stop: &AtomicBool) -> anyhow::Result<()> {
        let client = fault.targets.first().and_then(|t| t.first()).context("a client fault without a client")?;
        let (_, proxy) = self
            .list
            .iter()
            .find(|(name, _)| name == client)
            .with_context(|| format!("no fault point for client {client} (run without --client-faults?)"))?;
        match fault.kind {
            Kind::ClientStall => proxy.stall(),
            Kind::ClientCut => proxy.cut(),
            other => anyhow::bail!("{} is not a client fault", other.name()),
        }
        log(dir, fault.kind, client, "begin")?;
        pause(stop, fault.lasting);
        proxy.heal();
        log(dir, fault.kind, client, "end")
    }
}

/// One line of the fault log, beside `net fault`'s own.
fn log(dir: &Path, kind: Kind, client: &str, event: &str) -> anyhow::Result<()> {
    tidings_admin::append_fault_event(dir, kind.name(), client, event)
        .with_context(|| format!("cannot write {}", dir.join(tidings_admin::FAULT_LOG).display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    #[test]
    fn a_client_cut_resets_its_connection_and_is_logged() {
        let broker = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut proxies = Proxies::default();
        let addr = proxies.add("pub0", &broker.local_addr().unwrap().to_string()).unwrap();
        let mut client = TcpStream::connect(&addr).unwrap();
        let _upstream = broker.accept().unwrap();
        let dir = std::env::temp_dir().join(format!("tidings-client-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fault = Fault {
            kind: Kind::ClientCut,
            targets: vec![vec!["pub0".into()]],
            at: Duration::ZERO,
            lasting: Duration::from_millis(100),
        };
        proxies.make(&fault, &dir, &AtomicBool::new(false)).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(client.read(&mut [0u8; 8]), Ok(0) | Err(_)), "the cut connection is closed");
        let log = std::fs::read_to_string(dir.join("faults.jsonl")).unwrap();
        assert_eq!(log.lines().count(), 2, "{log}");
        assert!(log.contains("\"client-cut\"") && log.contains("\"pub0\""), "{log}");
        let other = Fault { targets: vec![vec!["durable".into()]], ..fault };
        assert!(proxies.make(&other, &dir, &AtomicBool::new(false)).is_err(), "an unknown client");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
