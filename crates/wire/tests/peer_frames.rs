//! The peer frame decoder against arbitrary and mutated input: a peer may send anything, and
//! the only acceptable outcomes are a frame, "need more bytes", or an error that closes that
//! one link. `check_decoder` is also the oracle of `fuzz/fuzz_targets/peer_frame_decode.rs`.

#![allow(clippy::unwrap_used)] // a test harness

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tidings_wire::peer::{
    check_decoder, Ack, AuthMode, Close, Data, FilterText, Hello, Hop, Incarnation, LinkStat, LinkStats, Nack,
    PeerFrame, PubendId, RouteHeader, Routed, Scope, Silence, SilenceKind, SummaryDelta, SyncedTree, Tick, TickRange,
    TreeId, PEER_PROTOCOL_VERSION,
};
use tidings_wire::{Message, Property};

/// Well-formed frames of many types, so mutations start from something the decoder accepts.
fn valid_frames(seed: u64, cells: &[String], topic_level: &str) -> Vec<Bytes> {
    let hello = Hello {
        min_version: PEER_PROTOCOL_VERSION,
        max_version: PEER_PROTOCOL_VERSION,
        auth: AuthMode::SharedKey,
        nonce: [seed as u8; 32],
        name: "b1".into(),
        cell: "c1".into(),
        incarnation: Incarnation(seed),
    };
    let message = Message::new(
        &format!("t.{topic_level}"),
        &[Property::new("k", seed as i64), Property::new("s", topic_level)],
        Bytes::from(seed.to_be_bytes().to_vec()),
        seed,
    )
    .unwrap();
    let hop = if seed.is_multiple_of(2) { Hop::Down } else { Hop::Within { deliver: true, across: cells.to_vec() } };
    let groups = if seed.is_multiple_of(3) { vec!["workers".to_string()] } else { vec![] };
    let header = RouteHeader { pubend: PubendId(seed), root: "root".into(), tree: TreeId(seed), hop, groups };
    let tick = Tick(seed >> 1);
    let ranges = vec![TickRange { first: Tick(seed % 7), last: Tick(seed % 7 + 3) }];
    let filter = FilterText { pattern: format!("t.{topic_level}"), selector: Some("k > 1".into()), group: None };
    let frames = [
        PeerFrame::Hello(hello),
        PeerFrame::Synced(vec![SyncedTree { root: "root".into(), tree: TreeId(seed) }]),
        PeerFrame::Summary(vec![SummaryDelta { scopes: vec![Scope::Local], added: vec![filter], removed: vec![] }]),
        PeerFrame::Heartbeat,
        PeerFrame::Routed(Routed { header, message: message.clone() }),
        PeerFrame::Data(Data {
            pubend: PubendId(seed),
            tick,
            final_from: tick,
            final_to: tick,
            requested_only: false,
            tree: TreeId(seed ^ 1),
            message,
        }),
        PeerFrame::Silence(Silence {
            pubend: PubendId(seed),
            kind: SilenceKind::Final,
            requested_only: true,
            tree: TreeId(seed ^ 2),
            ranges: ranges.clone(),
        }),
        PeerFrame::Nack(Nack { pubend: PubendId(seed), ranges }),
        PeerFrame::Ack(Ack { pubend: PubendId(seed), ack_prefix: tick, release_prefix: tick }),
        PeerFrame::Close(Close::new("bye")),
        PeerFrame::LinkStats(LinkStats {
            origin: "b1".into(),
            incarnation: Incarnation(seed),
            sequence: seed >> 3,
            wanted: seed.is_multiple_of(2),
            links: cells
                .iter()
                .map(|peer| LinkStat {
                    peer: peer.clone(),
                    out_centi: seed as u32,
                    in_centi: (seed >> 32) as u32,
                    queued_messages: 1,
                    queued_bytes: 2,
                })
                .collect(),
        }),
    ];
    frames.iter().map(|f| f.to_bytes().unwrap()).collect()
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
            prop_assert_eq!(&decoded.to_bytes().unwrap(), frame);
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
