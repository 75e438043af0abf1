//! The peer frame decoder against arbitrary and mutated input: a peer may send anything, and
//! the only acceptable outcomes are a frame, "need more bytes", or an error that closes that
//! one link. `check_decoder` is also the oracle of `fuzz/fuzz_targets/peer_frame_decode.rs`.

#![allow(clippy::unwrap_used)] // a test harness

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tidings_broker::cluster::frame::{check_decoder, close, control, data_prefix, hello};
use tidings_broker::cluster::{Handshake, PeerFrame, PEER_PROTOCOL};
use tidings_route::{CellName, DataHeader, Hop, LocalDelivery, PeerMessage, PubendId, TreeId};
use tidings_wire::{Message, Property};

/// Well-formed frames of every type, so mutations start from something the decoder accepts.
fn valid_frames(seed: u64, cells: &[String], topic_level: &str) -> Vec<Bytes> {
    let handshake = Handshake { protocol: PEER_PROTOCOL, name: "b1".into(), cell: "c1".into(), incarnation: seed };
    let message = Message::new(
        &format!("t.{topic_level}"),
        &[Property::new("k", seed as i64), Property::new("s", topic_level)],
        Bytes::from(seed.to_be_bytes().to_vec()),
        seed,
    )
    .unwrap();
    let hop = if seed.is_multiple_of(2) {
        Hop::Down
    } else {
        Hop::Within { deliver: LocalDelivery::Deliver, across: cells.iter().map(CellName::new).collect() }
    };
    let header = DataHeader { pubend: PubendId(seed), root: CellName::new("root"), tree: TreeId(seed), hop };
    let mut data = BytesMut::new();
    data_prefix(&header, message.as_bytes().len(), &mut data);
    data.extend_from_slice(message.as_bytes());
    let synced = PeerMessage::Synced(vec![(CellName::new("root"), TreeId(seed))]);
    vec![hello(&handshake), control(&synced), control(&PeerMessage::Heartbeat), data.freeze(), close("bye")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_decoder(&data);
    }

    #[test]
    fn mutated_frames_never_panic_and_valid_ones_round_trip(
        seed in any::<u64>(),
        cells in proptest::collection::vec("[a-z]{1,6}", 0..4),
        level in "[a-z0-9]{1,8}",
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        let frames = valid_frames(seed, &cells, &level);
        let stream: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        // Unmutated: every frame decodes, in order, and re-encodes to its own bytes.
        let mut buf = BytesMut::from(&stream[..]);
        for frame in &frames {
            let decoded = PeerFrame::decode(&mut buf, 1 << 20).unwrap().unwrap();
            prop_assert_eq!(&decoded.encode(), frame);
        }
        prop_assert!(buf.is_empty());
        // Mutated and truncated: anything may come out but a panic.
        let mut mutated = stream.clone();
        for (at, byte) in flips {
            let at = at % mutated.len();
            mutated[at] ^= byte;
        }
        mutated.truncate(cut % (mutated.len() + 1));
        check_decoder(&mutated);
    }
}
