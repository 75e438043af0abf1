//! Ports for a network's brokers, outside the kernel's ephemeral range.
//!
//! A broker of `net up` must get its ports back when `net fault restart` starts it again: its
//! peers redial them and its clients reconnect to them. A port the kernel picked for
//! `127.0.0.1:0` comes from the ephemeral range, which the kernel also hands to every outgoing
//! connection on the machine; while the broker is down, any client may get its port as a
//! local port, and the restart fails with "address in use" (nemesis chain-3 seed 68). Ports
//! below that range are never handed out implicitly, so only another explicit bind can take
//! one. No library picks a port with this constraint, hence these few lines.

use std::net::{TcpListener, UdpSocket};

/// Where the kernel's ephemeral range is read from (Linux).
const RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The lowest port tried: above the registered services most machines run.
const LOWEST: u16 = 10_000;

/// How many random ports are tried before falling back to one the kernel picks.
const TRIES: usize = 64;

/// A loopback address whose port is free for TCP and UDP and lies below the ephemeral range,
/// or `127.0.0.1:0` (a port the kernel picks) when no such port is found or the range is
/// unknown. Two `net up` runs may still pick the same free port at the same instant; the second
/// broker then fails to start with that error, as any bind would.
/// `n` distinct such addresses (a broker's TCP, UDP, admin and cluster listeners).
pub(super) fn distinct(seed: u64, n: usize) -> Vec<String> {
    let mut picked: Vec<String> = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let mut addr = below_ephemeral(seed.wrapping_add(i));
        let mut retry = 0;
        while picked.contains(&addr) && addr != "127.0.0.1:0" {
            retry += 1;
            addr = below_ephemeral(seed.wrapping_add(i).wrapping_add(retry << 32));
        }
        picked.push(addr);
    }
    picked
}

fn below_ephemeral(seed: u64) -> String {
    let Some(low) = ephemeral_low() else { return "127.0.0.1:0".into() };
    if low <= LOWEST + 1 {
        return "127.0.0.1:0".into();
    }
    let mut rng = tidings_wire::hash::SplitMix64::new(seed);
    let span = u64::from(low - LOWEST);
    for _ in 0..TRIES {
        let port = LOWEST + u16::try_from(rng.next_u64() % span).unwrap_or(0);
        let free = TcpListener::bind(("127.0.0.1", port)).is_ok() && UdpSocket::bind(("127.0.0.1", port)).is_ok();
        if free {
            return format!("127.0.0.1:{port}");
        }
    }
    "127.0.0.1:0".into()
}

/// The first port of the ephemeral range, if the kernel says.
fn ephemeral_low() -> Option<u16> {
    let text = std::fs::read_to_string(RANGE_FILE).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_below_the_ephemeral_range_and_bindable() {
        let Some(low) = ephemeral_low() else { return };
        let addrs = distinct(7, 4);
        for addr in &addrs {
            let port: u16 = addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
            assert!(port >= LOWEST && port < low, "{addr} (ephemeral range from {low})");
            assert!(TcpListener::bind(("127.0.0.1", port)).is_ok(), "{addr} is not free");
        }
        let mut unique = addrs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 4, "{addrs:?}");
    }
}
