//! Hash and pseudo-random functions whose outputs are part of the network's contract: brokers
//! built by different compilers must pick the same link for a pubend (rendezvous hashing), and a
//! simulator or nemesis seed must replay the same run. `std`'s hasher may change between
//! releases and a random-number crate between versions, so these are fixed here, once, for
//! every crate (the broker, the route core, the client's backoff, the simulator).

/// SplitMix64's increment (the golden ratio in 64 bits): added to the state at every step.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (Stafford's variant 13): spreads every input bit over the whole
/// output, so consecutive inputs give unrelated outputs. `finalise(0)` is 0: callers that need a
/// non-trivial image of 0 use [`mix`].
pub fn finalise(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One SplitMix64 step from `value` as the state: the hash the route core builds link weights
/// and pubend ids from. Equal to the first output of [`SplitMix64::new`]`(value)`.
pub fn mix(value: u64) -> u64 {
    finalise(value.wrapping_add(GOLDEN_GAMMA))
}

/// FNV-1a over bytes: stable and simple, the input of [`mix`] for names.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny seeded sequence, good enough for jitter and for
/// drawing simulated faults; not for secrets.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The sequence of this seed: the same seed gives the same outputs on every build.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        finalise(self.0)
    }

    /// Uniform in `[0, 1)`: the top 53 bits as a double's mantissa.
    pub fn next_fraction(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed from the four copies this module replaced (route's `mix` and `fnv1a`,
    /// the broker's finaliser, the simulator's and the client's generators) before they went:
    /// a change here would split a network's link choices or break every recorded seed.
    #[test]
    fn outputs_are_pinned_to_the_values_of_the_copies_they_replaced() {
        assert_eq!(mix(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix(1), 0x910a_2dec_8902_5cc1);
        assert_eq!(mix(42), 0xbdd7_3226_2feb_6e95);
        assert_eq!(mix(u64::MAX), 0xe4d9_7177_1b65_2c20);
        assert_eq!(finalise(0), 0);
        assert_eq!(finalise(1), 0x5692_161d_100b_05e5);
        assert_eq!(finalise(42), 0xa759_ea27_d472_7622);
        assert_eq!(finalise(u64::MAX), 0xb4d0_55fc_f2cb_bd7b);
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"tidings"), 0xf6cf_e9e6_52b1_3c23);
        let mut zero = SplitMix64::new(0);
        assert_eq!(
            [zero.next_u64(), zero.next_u64(), zero.next_u64()],
            [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f]
        );
        let mut seven = SplitMix64::new(7);
        assert_eq!(seven.next_u64(), 0x63cb_e1e4_5932_0dd7);
        assert_eq!(seven.next_fraction(), 0.016_788_294_528_156_11);
    }

    #[test]
    fn mix_is_the_first_output_of_the_sequence_it_seeds() {
        for seed in [0, 1, 7, 1 << 40, u64::MAX] {
            assert_eq!(mix(seed), SplitMix64::new(seed).next_u64());
        }
    }
}
