//! What a broker tells its clients about its cell (issue 40, `docs/replication.md`,
//! "Clients"): its own client addresses and those its linked cell mates sent it (peer frame
//! SERVERS), so a client given one address can fail over to a mate when its broker dies.
//!
//! The list is the broker's own addresses first, then those of each mate that linked to it
//! since it started, in name order, deduplicated and bounded by [`MAX_SERVERS`]; it is empty
//! while no mate has sent an address (a lone broker has nothing to tell, and its clients see no
//! SERVERS frame). A mate whose link drops stays in the list: cut off from this broker, it may
//! be the one that took its clients' pubends over, and a client that cannot reach it loses only
//! a connection attempt. Clients hear the list again when a mate sends a new address.

use std::net::{IpAddr, SocketAddr};

use tidings_wire::MAX_SERVERS;

/// Where this broker says its clients connect, as `[cluster] client_advertise` and the bound
/// client listener decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Advertise {
    /// Fixed addresses: `client_advertise`, or a listener bound to one IP.
    Fixed(Vec<String>),
    /// A wildcard listener on this port: each link is told the IP of this broker's end of it.
    Wildcard(u16),
    /// Nothing (no client TCP listener, or `client_advertise = "none"`).
    Nothing,
}

impl Advertise {
    /// From the `client_advertise` setting and the client listener's bound address.
    pub(super) fn new(setting: &str, bound: Option<SocketAddr>) -> Advertise {
        match setting.trim() {
            "none" => Advertise::Nothing,
            "" => match bound {
                None => Advertise::Nothing,
                Some(addr) if addr.ip().is_unspecified() => Advertise::Wildcard(addr.port()),
                Some(addr) => Advertise::Fixed(vec![addr.to_string()]),
            },
            list => {
                Advertise::Fixed(list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect())
            }
        }
    }

    /// The addresses to send a mate over a link whose local end is `local`.
    pub(super) fn for_link(&self, local: Option<IpAddr>) -> Vec<String> {
        match (self, local) {
            (Advertise::Fixed(list), _) => list.clone(),
            (Advertise::Wildcard(port), Some(ip)) if !ip.is_unspecified() => {
                vec![SocketAddr::new(ip, *port).to_string()]
            }
            _ => Vec::new(),
        }
    }

    /// This broker's own addresses at the head of what its clients are told: only fixed ones
    /// (a wildcard listener's address depends on the path, and the client already has the one
    /// it used).
    pub(super) fn own(&self) -> &[String] {
        match self {
            Advertise::Fixed(list) => list,
            _ => &[],
        }
    }
}

/// The list clients are told: `own` first, then each mate's, without repeats, at most
/// [`MAX_SERVERS`]; empty without a mate's address.
pub(super) fn told<'a>(own: &'a [String], mates: impl Iterator<Item = &'a [String]>) -> Vec<String> {
    let mates: Vec<&String> = mates.flatten().collect();
    if mates.is_empty() {
        return Vec::new();
    }
    let mut list: Vec<String> = Vec::new();
    for address in own.iter().chain(mates) {
        if list.len() == MAX_SERVERS {
            break;
        }
        if !list.contains(address) {
            list.push(address.clone());
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_wins_then_the_bound_address_then_each_links_end() {
        let bound: SocketAddr = "127.0.0.1:4222".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:4222".parse().unwrap();
        assert_eq!(Advertise::new("", Some(bound)).for_link(None), ["127.0.0.1:4222"]);
        assert_eq!(Advertise::new("b1.example:4222, b1b:1", Some(any)).own(), ["b1.example:4222", "b1b:1"]);
        let wildcard = Advertise::new("", Some(any));
        assert_eq!(wildcard, Advertise::Wildcard(4222));
        assert!(wildcard.own().is_empty());
        assert_eq!(wildcard.for_link(Some("10.1.2.3".parse().unwrap())), ["10.1.2.3:4222"]);
        assert!(wildcard.for_link(None).is_empty());
        assert_eq!(Advertise::new("none", Some(bound)), Advertise::Nothing);
        assert_eq!(Advertise::new("", None), Advertise::Nothing);
    }

    #[test]
    fn the_told_list_is_own_first_then_mates_without_repeats_and_bounded() {
        let own = vec!["a:1".to_string()];
        let m1 = ["b:2".to_string(), "a:1".to_string()];
        let m2 = ["c:3".to_string()];
        assert_eq!(told(&own, [&m1[..], &m2[..]].into_iter()), ["a:1", "b:2", "c:3"]);
        let many: Vec<String> = (0..100).map(|i| format!("h:{i}")).collect();
        assert_eq!(told(&[], std::iter::once(&many[..])).len(), MAX_SERVERS);
        assert!(told(&own, std::iter::empty()).is_empty(), "a lone broker tells nothing");
    }
}
