//! Admission of client TCP connections: a global bound and a bound per source address, so
//! that idle or abusive connections cannot take every file descriptor and shut out new clients
//! and the admin port.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

/// Descriptors kept back from clients: listeners, the admin port, links, the data directory.
const RESERVED_FDS: usize = 128;

/// Unless configured, one source address may hold at most this fraction (1/8) of the global
/// bound in force. A fixed number cannot be right for every broker: 1,000 is too few for one
/// gateway in front of a large deployment and, under a low open-file limit, still too many; an
/// eighth lets one host (a NAT gateway, a reconnect loop) hold many places while seven-eighths
/// always stay for everyone else, whatever `ulimit -n` made of `max_connections`.
const DEFAULT_ADDRESS_SHARE: usize = 8;

/// The connection counts of one listener.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    per_address: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Held by an admitted connection; gives its place back when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    address: IpAddr,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The broker holds its most connections.
    Full(usize),
    /// The source address holds its most connections.
    AddressFull(usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Full(max) => write!(f, "the broker holds its most client connections ({max})"),
            Refusal::AddressFull(max) => write!(f, "this address holds its most client connections ({max})"),
        }
    }
}

impl Admission {
    /// Bounds from the config, the global one capped below the open-file limit (`fd_limit`).
    /// A `per_address` of 0 means an eighth of the global bound in force
    /// ([`DEFAULT_ADDRESS_SHARE`]), computed after the cap so it stays below it.
    pub fn new(max: usize, per_address: usize, fd_limit: Option<u64>) -> Arc<Admission> {
        let cap = fd_limit.map_or(usize::MAX, |n| (n as usize).saturating_sub(RESERVED_FDS).max(1));
        let max = max.min(cap);
        let per_address = if per_address == 0 { (max / DEFAULT_ADDRESS_SHARE).max(1) } else { per_address };
        Arc::new(Admission { max, per_address, counts: Mutex::new(Counts::default()) })
    }

    /// The global bound in force (after the cap).
    pub fn max(&self) -> usize {
        self.max
    }

    /// The per-address bound in force.
    pub fn per_address(&self) -> usize {
        self.per_address
    }

    /// Takes a place for a connection from `address`, or says why not.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, Refusal> {
        let mut counts = self.counts.lock();
        if counts.total >= self.max {
            return Err(Refusal::Full(self.max));
        }
        let here = counts.by_address.entry(address).or_insert(0);
        if *here >= self.per_address {
            return Err(Refusal::AddressFull(self.per_address));
        }
        *here += 1;
        counts.total += 1;
        Ok(Admitted { admission: Arc::clone(self), address })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self.admission.counts.lock();
        counts.total -= 1;
        if let Some(here) = counts.by_address.get_mut(&self.address) {
            *here -= 1;
            if *here == 0 {
                counts.by_address.remove(&self.address);
            }
        }
    }
}

/// The process's open-file limit, first raised from its soft value to the hard one (as the Go
/// runtime does for nats-server): a broker is a program that holds many sockets.
pub fn fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_globally_and_per_address_and_given_back() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let admission = Admission::new(3, 2, None);
        let first = admission.admit(a).unwrap();
        let _second = admission.admit(a).unwrap();
        assert_eq!(admission.admit(a).unwrap_err(), Refusal::AddressFull(2));
        let _third = admission.admit(b).unwrap();
        assert_eq!(admission.admit(b).unwrap_err(), Refusal::Full(3));
        drop(first);
        assert!(admission.admit(a).is_ok(), "a closed connection gives its place back");
        assert_eq!(Admission::new(50_000, 10, Some(1000)).max(), 872, "capped below the open-file limit");
    }

    #[test]
    fn by_default_one_address_holds_at_most_an_eighth_of_the_places_in_force() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        // The attack's figures: 50,000 configured, about 19,900 in force under ulimit 20,000.
        let admission = Admission::new(50_000, 0, Some(20_000));
        assert_eq!(admission.max(), 19_872);
        assert_eq!(admission.per_address(), 19_872 / 8, "an eighth of the bound in force, not of the configured");
        let small = Admission::new(16, 0, None);
        let held: Vec<Admitted> = (0..2).map(|_| small.admit(a).unwrap()).collect();
        assert_eq!(small.admit(a).unwrap_err(), Refusal::AddressFull(2));
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(small.admit(b).is_ok(), "another address still gets in");
        drop(held);
        assert_eq!(Admission::new(50_000, 300, Some(20_000)).per_address(), 300, "a configured bound is kept");
    }
}
