//! Rendezvous (highest random weight) hashing, with hash functions fixed in
//! `tidings_wire::hash` rather than taken from `std`: brokers built by different compilers must
//! still pick the same link for a pubend, and `std`'s hasher is allowed to change between releases.

use crate::names::{BrokerName, PubendId};

pub(crate) use tidings_wire::hash::{fnv1a, mix};

/// A bundle target together with the hash of its name, computed once when routes are rebuilt so
/// that the per-message work is one `mix` per target.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) broker: BrokerName,
    name_hash: u64,
}

impl Target {
    pub(crate) fn new(broker: BrokerName) -> Self {
        let name_hash = fnv1a(broker.as_str().as_bytes());
        Self { broker, name_hash }
    }

    fn weight(&self, pubend: PubendId) -> u64 {
        mix(self.name_hash ^ mix(pubend.0))
    }
}

/// The index of the target with the highest weight for this pubend; equal weights go to the
/// lower name so the choice never depends on the order of `targets`.
pub(crate) fn choose(pubend: PubendId, targets: &[Target]) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (index, target) in targets.iter().enumerate() {
        let weight = target.weight(pubend);
        let better = match best {
            None => true,
            Some((held, held_weight)) => {
                weight > held_weight || (weight == held_weight && target.broker < targets[held].broker)
            }
        };
        if better {
            best = Some((index, weight));
        }
    }
    best.map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(names: &[&str]) -> Vec<Target> {
        names.iter().map(|n| Target::new(BrokerName::new(n))).collect()
    }

    fn pick(pubend: u64, targets: &[Target]) -> Option<BrokerName> {
        choose(PubendId(pubend), targets).map(|index| targets[index].broker.clone())
    }

    #[test]
    fn the_hash_functions_are_pinned_to_known_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix(1), 0x910a_2dec_8902_5cc1);
        assert_eq!(mix(u64::MAX), 0xe4d9_7177_1b65_2c20);
        assert_eq!(fnv1a(b"tidings"), 0xf6cf_e9e6_52b1_3c23);
    }

    #[test]
    fn the_choice_does_not_depend_on_the_order_of_targets() {
        let forward = targets(&["b1", "b2", "b3", "b4"]);
        let backward = targets(&["b4", "b3", "b2", "b1"]);
        for pubend in 0..200 {
            assert_eq!(pick(pubend, &forward), pick(pubend, &backward));
        }
    }

    #[test]
    fn removing_a_target_moves_only_the_pubends_that_chose_it() {
        let all = targets(&["b1", "b2", "b3"]);
        let without_b2 = targets(&["b1", "b3"]);
        let mut moved = 0;
        for pubend in 0..300 {
            let before = pick(pubend, &all);
            let after = pick(pubend, &without_b2);
            if before.as_ref().map(BrokerName::as_str) == Some("b2") {
                moved += 1;
            } else {
                assert_eq!(before, after);
            }
        }
        assert!(moved > 50 && moved < 150, "b2 took {moved} of 300 pubends");
    }

    #[test]
    fn no_targets_means_no_choice() {
        assert!(choose(PubendId(1), &[]).is_none());
    }
}
