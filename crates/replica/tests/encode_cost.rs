//! What a snapshot of a large unreleased state costs at once (issue 40, "The tail" in
//! `docs/replication.md`): a measurement, not a check, run with
//! `cargo test --release -p tidings-replica --test encode_cost -- --ignored --nocapture`.

use tidings_replica::{Command, PubendReplica};

/// 350,000 records of 256 B (about 100 MB, what `bench acked --replicas 3` holds after 5 s with
/// no subscriber): the time to encode the state whole, and to copy the result once.
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn encoding_a_large_state_at_once() {
    let mut state = PubendReplica::default();
    for seq in 1..=350_000u64 {
        state.apply(Some(Command::Publish { publisher: 1, seq, tick: seq, payload: vec![7; 256] }));
    }
    let started = std::time::Instant::now();
    let encoded = state.encode();
    let encode = started.elapsed();
    let started = std::time::Instant::now();
    let copy = encoded.to_vec();
    let copied = started.elapsed();
    assert_eq!(copy.len(), encoded.len());
    println!("{} bytes: encode {encode:?}, one copy {copied:?}", encoded.len());
}
