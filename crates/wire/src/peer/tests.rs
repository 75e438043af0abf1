use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::frame::{needed, Message, HEADER_LEN};
use crate::value::Property;

const MAX: usize = 1 << 20;

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.-]{0,8}"
}

fn message() -> impl Strategy<Value = Message> {
    ("[a-z]{1,6}(\\.[a-z]{1,6}){0,2}", any::<i64>(), prop::collection::vec(any::<u8>(), 0..32), any::<u64>()).prop_map(
        |(topic, k, payload, sent)| Message::new(&topic, &[Property::new("k", k)], Bytes::from(payload), sent).unwrap(),
    )
}

fn ranges() -> impl Strategy<Value = Vec<TickRange>> {
    prop::collection::vec((0u64..1000, 0u64..1000), 0..5).prop_map(|pairs| {
        let mut next = 0u64;
        pairs
            .into_iter()
            .map(|(gap, len)| {
                let first = next + gap;
                next = first + len + 1;
                TickRange { first: Tick(first), last: Tick(first + len) }
            })
            .collect()
    })
}

fn filter() -> impl Strategy<Value = FilterText> {
    ("[a-z*>.]{1,10}", proptest::option::of("[a-z0-9 =<>']{1,12}"), proptest::option::of("[a-z.]{1,8}"))
        .prop_map(|(pattern, selector, group)| FilterText { pattern, selector, group })
}

fn control() -> impl Strategy<Value = PeerFrame> {
    let link = (name(), name()).prop_map(|(peer, peer_cell)| AdvertLink { peer, peer_cell });
    let pubends = prop::collection::vec(any::<u64>().prop_map(crate::PubendId), 0..3);
    let advert = (name(), name(), any::<u64>(), any::<u64>(), prop::collection::vec(link, 0..3), pubends).prop_map(
        |(origin, cell, inc, sequence, links, pubends)| Advert {
            origin,
            cell,
            incarnation: Incarnation(inc),
            sequence,
            links,
            pubends,
        },
    );
    let scope = prop_oneof![Just(Scope::Local), name().prop_map(Scope::Tree)];
    let delta = (
        prop::collection::vec(scope, 0..3),
        prop::collection::vec(filter(), 0..3),
        prop::collection::vec(filter(), 0..3),
    )
        .prop_map(|(scopes, added, removed)| SummaryDelta { scopes, added, removed });
    let synced = (name(), any::<u64>()).prop_map(|(root, tree)| SyncedTree { root, tree: TreeId(tree) });
    let stat = (name(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(peer, out_centi, in_centi, queued_messages, queued_bytes)| LinkStat {
            peer,
            out_centi,
            in_centi,
            queued_messages,
            queued_bytes,
        },
    );
    let stats = (name(), any::<u64>(), any::<u64>(), any::<bool>(), prop::collection::vec(stat, 0..3)).prop_map(
        |(origin, inc, sequence, wanted, links)| {
            PeerFrame::LinkStats(LinkStats { origin, incarnation: Incarnation(inc), sequence, wanted, links })
        },
    );
    prop_oneof![
        (any::<u16>(), any::<u16>(), any::<bool>(), any::<[u8; 32]>(), name(), name(), any::<u64>()).prop_map(
            |(min_version, max_version, key, nonce, name, cell, inc)| PeerFrame::Hello(Hello {
                min_version,
                max_version,
                auth: if key { AuthMode::SharedKey } else { AuthMode::Insecure },
                nonce,
                name,
                cell,
                incarnation: Incarnation(inc),
            })
        ),
        any::<[u8; 32]>().prop_map(|proof| PeerFrame::Auth(Auth { proof })),
        ".{0,20}".prop_map(|reason| PeerFrame::Close(Close { reason })),
        Just(PeerFrame::Heartbeat),
        prop::collection::vec("[a-z0-9.:]{0,12}", 0..4).prop_map(|addresses| PeerFrame::Servers(Servers { addresses })),
        prop::collection::vec(advert, 0..3).prop_map(PeerFrame::Adverts),
        prop::collection::vec(delta, 0..3).prop_map(PeerFrame::Summary),
        prop::collection::vec(synced, 0..3).prop_map(PeerFrame::Synced),
        stats,
    ]
}

fn routed() -> impl Strategy<Value = PeerFrame> {
    let hop = prop_oneof![
        Just(Hop::Down),
        (any::<bool>(), prop::collection::vec(name(), 0..3))
            .prop_map(|(deliver, across)| Hop::Within { deliver, across })
    ];
    let groups = prop::collection::vec(name(), 0..3);
    (any::<u64>(), name(), any::<u64>(), hop, groups, message()).prop_map(
        |(pubend, root, tree, hop, groups, message)| {
            PeerFrame::Routed(Routed {
                header: RouteHeader { pubend: PubendId(pubend), root, tree: TreeId(tree), hop, groups },
                message,
            })
        },
    )
}

fn guaranteed() -> impl Strategy<Value = PeerFrame> {
    let pubend = any::<u64>().prop_map(PubendId);
    let kind = prop_oneof![Just(SilenceKind::Final), Just(SilenceKind::Lost)];
    let start = (any::<u64>(), any::<u64>()).prop_map(|(p, t)| PubendStart { pubend: PubendId(p), next_tick: Tick(t) });
    prop_oneof![
        (pubend.clone(), 0u64..1 << 40, 0u64..1000, 0u64..1000, any::<bool>(), any::<u64>(), message()).prop_map(
            |(pubend, tick, before, after, requested_only, tree, message)| PeerFrame::Data(Data {
                pubend,
                tick: Tick(tick),
                final_from: Tick(tick.saturating_sub(before)),
                final_to: Tick(tick + after),
                requested_only,
                tree: TreeId(tree),
                message,
            })
        ),
        (pubend.clone(), kind, any::<bool>(), any::<u64>(), ranges()).prop_map(
            |(pubend, kind, requested_only, tree, ranges)| {
                PeerFrame::Silence(Silence { pubend, kind, requested_only, tree: TreeId(tree), ranges })
            }
        ),
        (pubend.clone(), any::<u64>(), any::<u64>()).prop_map(|(pubend, a, r)| PeerFrame::Ack(Ack {
            pubend,
            ack_prefix: Tick(a),
            release_prefix: Tick(r)
        })),
        (pubend.clone(), ranges()).prop_map(|(pubend, ranges)| PeerFrame::Nack(Nack { pubend, ranges })),
        (pubend, any::<u64>()).prop_map(|(pubend, t)| PeerFrame::AckExpected(AckExpected { pubend, tick: Tick(t) })),
        (name(), any::<u64>(), name(), any::<bool>()).prop_map(|(origin, id, root, relay_to_mates)| {
            PeerFrame::Barrier(Barrier { origin, id: BarrierId(id), root, relay_to_mates })
        }),
        (name(), any::<u64>(), prop::collection::vec(start, 0..4)).prop_map(|(origin, id, starts)| {
            PeerFrame::BarrierAck(BarrierAck { origin, id: BarrierId(id), starts })
        }),
    ]
}

/// A stream frame handed through a cell mate (only stream frames may be carried).
fn sideways() -> impl Strategy<Value = PeerFrame> {
    let stream =
        guaranteed().prop_filter("a stream frame", |f| !matches!(f, PeerFrame::Barrier(_) | PeerFrame::BarrierAck(_)));
    (name(), name(), stream)
        .prop_map(|(origin, to, frame)| PeerFrame::Sideways(Sideways { origin, to, frame: Box::new(frame) }))
}

/// A message of a pubend's Raft group (its raft bytes are opaque here).
pub(super) fn replica() -> impl Strategy<Value = PeerFrame> {
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| ReplicaBody::Raft(Bytes::from(b))),
        Just(ReplicaBody::TermQuery),
        (
            any::<u64>(),
            proptest::collection::vec(any::<u64>(), 0..4),
            prop_oneof![Just((0u64, 0u64)), (any::<u64>(), 1..u64::MAX)]
        )
            .prop_map(|(term, voters, last)| ReplicaBody::TermReply { term, voters, last }),
        (
            prop::collection::vec(any::<u8>(), 0..32),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(m, offset, total, d)| ReplicaBody::SnapshotChunk {
                message: Bytes::from(m),
                offset,
                total,
                data: Bytes::from(d)
            }),
        (any::<u64>(), any::<u64>()).prop_map(|(index, end)| ReplicaBody::ChunkAck { index, end }),
    ];
    (any::<u64>(), prop::collection::vec(any::<u64>(), 0..4), body)
        .prop_map(|(pubend, voters, body)| PeerFrame::Replica(Replica { pubend: PubendId(pubend), voters, body }))
}

/// A guaranteed queue group's member traffic, every kind.
fn group() -> impl Strategy<Value = PeerFrame> {
    let text = || proptest::option::of("[a-z.=' ]{1,8}");
    let body = prop_oneof![
        (name(), "[a-z.*>]{1,8}", text(), text()).prop_map(|(group, pattern, selector, key)| GroupBody::Join {
            group,
            pattern,
            selector,
            key
        }),
        Just(GroupBody::Joined),
        (any::<u16>(), "[a-z ]{0,12}").prop_map(|(code, reason)| GroupBody::Refused { code, reason }),
        Just(GroupBody::Leave),
        (any::<u64>(), any::<u64>(), any::<bool>(), message()).prop_map(|(p, t, redelivered, message)| {
            GroupBody::Lease { pubend: PubendId(p), tick: Tick(t), redelivered, message }
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(p, t)| GroupBody::Ack { pubend: PubendId(p), tick: Tick(t) }),
        Just(GroupBody::Reset),
    ];
    (name(), name(), any::<u64>(), body)
        .prop_map(|(origin, dest, member, body)| PeerFrame::Group(Group { origin, dest, member, body }))
}

fn frame() -> impl Strategy<Value = PeerFrame> {
    prop_oneof![control(), routed(), guaranteed(), sideways(), replica(), group()]
}

proptest! {
    #[test]
    fn every_peer_frame_round_trips(f in frame()) {
        let bytes = f.to_bytes().unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        prop_assert_eq!(PeerFrame::decode(&mut buf, MAX).unwrap().unwrap(), f);
        prop_assert!(buf.is_empty());
        check_decoder(&bytes);
    }

    #[test]
    fn every_truncated_prefix_of_a_peer_frame_asks_for_more(f in frame()) {
        let bytes = f.to_bytes().unwrap();
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            prop_assert_eq!(PeerFrame::decode(&mut buf, MAX), Ok(None));
            prop_assert_eq!(buf.len(), cut, "nothing is consumed while incomplete");
            prop_assert!(needed(&bytes[..cut]).unwrap() > 0);
        }
    }

    #[test]
    fn a_body_cut_short_inside_its_frame_is_an_error_not_a_panic(f in frame(), cut in any::<usize>()) {
        let bytes = f.to_bytes().unwrap();
        let body_len = bytes.len() - HEADER_LEN;
        let keep = cut % (body_len + 1);
        if keep < body_len {
            let mut short = BytesMut::new();
            short.extend_from_slice(&((keep + 1) as u32).to_be_bytes());
            short.extend_from_slice(&bytes[4..HEADER_LEN + keep]);
            let decoded = PeerFrame::decode(&mut short, MAX);
            // A shorter body may still be a valid frame (a shorter list); it must not be this one.
            prop_assert!(decoded.as_ref().map_or(true, |d| d.as_ref() != Some(&f)));
        }
    }

    #[test]
    fn peer_frames_back_to_back_decode_in_order(fs in prop::collection::vec(frame(), 1..6)) {
        let mut buf = BytesMut::new();
        for f in &fs { f.encode(&mut buf).unwrap(); }
        for f in &fs {
            prop_assert_eq!(&PeerFrame::decode(&mut buf, MAX).unwrap().unwrap(), f);
        }
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn the_routed_prefix_and_the_whole_frame_encode_the_same_bytes(f in routed()) {
        let PeerFrame::Routed(r) = &f else { unreachable!() };
        let h = &r.header;
        let hop = match &h.hop {
            Hop::Down => HopRef::Down,
            Hop::Within { deliver, across } => HopRef::Within { deliver: *deliver, across: across.as_slice() },
        };
        let mut out = BytesMut::new();
        let ids = (h.pubend, h.tree, h.root.as_str());
        Routed::encode_prefix(ids, hop, &h.groups, r.message.encoded_len(), &mut out).unwrap();
        out.extend_from_slice(r.message.as_bytes());
        prop_assert_eq!(&out[..], &f.to_bytes().unwrap()[..]);
    }
}

fn golden(f: PeerFrame, expected: &[u8]) {
    assert_eq!(&f.to_bytes().unwrap()[..], expected, "{f:?}");
    let mut buf = BytesMut::from(expected);
    assert_eq!(PeerFrame::decode(&mut buf, MAX).unwrap(), Some(f));
    assert!(buf.is_empty());
}

/// The message section of the golden DATA and ROUTED frames: topic `t`, payload `p`, sent 2.
fn section() -> (Message, Vec<u8>) {
    let m = Message::new("t", &[], Bytes::from_static(b"p"), 2).unwrap();
    let bytes = vec![0, 0, 0, 0, 0, 0, 0, 2, 0, 1, b't', 0, 0, 0, 0, 0, 1, b'p'];
    assert_eq!(&m.as_bytes()[..], &bytes[..]);
    (m, bytes)
}

#[test]
fn hello_golden_bytes() {
    let mut nonce = [0u8; 32];
    nonce[0] = 0xAA;
    nonce[31] = 0xBB;
    let hello = Hello {
        min_version: 3,
        max_version: 3,
        auth: AuthMode::SharedKey,
        nonce,
        name: "b1".into(),
        cell: "c".into(),
        incarnation: Incarnation(7),
    };
    let mut expected = vec![0, 0, 0, 53, 0x01, 0, 3, 0, 3, 1];
    expected.extend_from_slice(&nonce);
    expected.extend_from_slice(&[0, 2, b'b', b'1', 0, 1, b'c', 0, 0, 0, 0, 0, 0, 0, 7]);
    golden(PeerFrame::Hello(hello), &expected);
}

#[test]
fn servers_golden_bytes() {
    // The client frame's body under the peer type byte 0x0A.
    let servers = Servers { addresses: vec!["h:1".into()] };
    golden(PeerFrame::Servers(servers), &[0, 0, 0, 8, 0x0A, 0, 1, 0, 3, b'h', b':', b'1']);
}

#[test]
fn auth_golden_bytes() {
    let proof: [u8; 32] = std::array::from_fn(|i| i as u8);
    let mut expected = vec![0, 0, 0, 33, 0x02];
    expected.extend(0u8..32);
    golden(PeerFrame::Auth(Auth { proof }), &expected);
}

#[test]
fn close_and_heartbeat_golden_bytes() {
    golden(PeerFrame::Close(Close::new("bye")), &[0, 0, 0, 6, 0x03, 0, 3, b'b', b'y', b'e']);
    golden(PeerFrame::Heartbeat, &[0, 0, 0, 1, 0x04]);
}

#[test]
fn adverts_golden_bytes() {
    let advert = Advert {
        origin: "a".into(),
        cell: "c".into(),
        incarnation: Incarnation(3),
        sequence: 4,
        links: vec![AdvertLink { peer: "b".into(), peer_cell: "d".into() }],
        pubends: vec![crate::PubendId(0x0102)],
    };
    #[rustfmt::skip]
    let expected = [
        0, 0, 0, 49, 0x05,
        0, 0, 0, 1,                 // one advert
        0, 1, b'a', 0, 1, b'c',     // origin, cell
        0, 0, 0, 0, 0, 0, 0, 3,     // incarnation
        0, 0, 0, 0, 0, 0, 0, 4,     // sequence
        0, 0, 0, 1, 0, 1, b'b', 0, 1, b'd', // one link: peer b in cell d
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, // one hosted pubend: 0x0102
    ];
    golden(PeerFrame::Adverts(vec![advert]), &expected);
}

#[test]
fn summary_golden_bytes() {
    let delta = SummaryDelta {
        scopes: vec![Scope::Local, Scope::Tree("r".into())],
        added: vec![FilterText { pattern: "a.>".into(), selector: Some("k=1".into()), group: None }],
        removed: vec![FilterText { pattern: "b".into(), selector: None, group: None }],
    };
    #[rustfmt::skip]
    let expected = [
        0, 0, 0, 37, 0x06,
        0, 0, 0, 1,                           // one delta
        0, 0, 0, 2, 0, 1, 0, 1, b'r',         // scopes: local, tree r
        0, 0, 0, 1, 0, 3, b'a', b'.', b'>', 0, 3, b'k', b'=', b'1', // added a.> with k=1
        0, 0, 0, 1, 0, 1, b'b', 0, 0,         // removed b, no selector
    ];
    golden(PeerFrame::Summary(vec![delta]), &expected);
}

#[test]
fn grouped_summary_golden_bytes() {
    let delta = SummaryDelta {
        scopes: vec![Scope::Local],
        added: vec![
            FilterText { pattern: "a".into(), selector: None, group: Some("w".into()) },
            FilterText { pattern: "b".into(), selector: None, group: None },
        ],
        removed: vec![],
    };
    #[rustfmt::skip]
    let expected = [
        0, 0, 0, 33, 0x06,
        0, 0, 0, 1,                       // one delta
        0x80, 0, 0, 1, 0,                 // one scope, filters grouped: local
        0, 0, 0, 2,
        0, 1, b'a', 0, 0, 0, 1, b'w',     // a in group w
        0, 1, b'b', 0, 0, 0, 0,           // b, no group
        0, 0, 0, 0,                       // nothing removed
    ];
    golden(PeerFrame::Summary(vec![delta]), &expected);
}

#[test]
fn synced_golden_bytes() {
    golden(
        PeerFrame::Synced(vec![SyncedTree { root: "r".into(), tree: TreeId(258) }]),
        &[0, 0, 0, 16, 0x07, 0, 0, 0, 1, 0, 1, b'r', 0, 0, 0, 0, 0, 0, 1, 2],
    );
}

#[test]
fn routed_golden_bytes() {
    let (message, bytes) = section();
    let header = RouteHeader {
        pubend: PubendId(9),
        root: "r".into(),
        tree: TreeId(5),
        hop: Hop::Within { deliver: true, across: vec!["x".into()] },
        groups: vec![],
    };
    #[rustfmt::skip]
    let mut expected = vec![
        0, 0, 0, 47, 0x08,
        0, 0, 0, 0, 0, 0, 0, 9,     // pubend
        0, 0, 0, 0, 0, 0, 0, 5,     // tree
        0, 1, b'r',                 // root
        1, 1, 0, 0, 0, 1, 0, 1, b'x', // within, deliver, across [x]
    ];
    expected.extend_from_slice(&bytes);
    golden(PeerFrame::Routed(Routed { header, message }), &expected);
    let down =
        RouteHeader { pubend: PubendId(1), root: String::new(), tree: TreeId(2), hop: Hop::Down, groups: vec![] };
    let (message, section) = section();
    let mut expected = vec![0, 0, 0, 38, 0x08, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0];
    expected.extend_from_slice(&section);
    golden(PeerFrame::Routed(Routed { header: down, message }), &expected);
}

#[test]
fn routed_with_queue_groups_golden_bytes() {
    let header = RouteHeader {
        pubend: PubendId(1),
        root: String::new(),
        tree: TreeId(2),
        hop: Hop::Down,
        groups: vec!["w".into(), "v".into()],
    };
    let (message, section) = section();
    #[rustfmt::skip]
    let mut expected = vec![
        0, 0, 0, 48, 0x08,
        0, 0, 0, 0, 0, 0, 0, 1,     // pubend
        0, 0, 0, 0, 0, 0, 0, 2,     // tree
        0, 0,                       // root
        0x80,                       // down, groups follow
        0, 0, 0, 2, 0, 1, b'w', 0, 1, b'v', // groups [w, v]
    ];
    expected.extend_from_slice(&section);
    golden(PeerFrame::Routed(Routed { header, message }), &expected);
}

#[test]
fn data_golden_bytes() {
    let (message, section) = section();
    let data = Data {
        pubend: PubendId(1),
        tick: Tick(10),
        final_from: Tick(8),
        final_to: Tick(12),
        requested_only: true,
        tree: TreeId(0x0102),
        message,
    };
    #[rustfmt::skip]
    let mut expected = vec![
        0, 0, 0, 60, 0x10,
        0, 0, 0, 0, 0, 0, 0, 1,     // pubend
        0, 0, 0, 0, 0, 0, 0, 10,    // tick
        0, 0, 0, 0, 0, 0, 0, 8,     // final_from
        0, 0, 0, 0, 0, 0, 0, 12,    // final_to
        1,                          // requested_only
        0, 0, 0, 0, 0, 0, 1, 2,     // tree
    ];
    expected.extend_from_slice(&section);
    golden(PeerFrame::Data(data), &expected);
}

#[test]
fn silence_golden_bytes() {
    let silence = Silence {
        pubend: PubendId(1),
        kind: SilenceKind::Lost,
        requested_only: false,
        tree: TreeId(7),
        ranges: vec![TickRange { first: Tick(3), last: Tick(4) }],
    };
    #[rustfmt::skip]
    let expected = [
        0, 0, 0, 39, 0x11,
        0, 0, 0, 0, 0, 0, 0, 1,     // pubend
        1, 0,                       // lost, not requested-only
        0, 0, 0, 0, 0, 0, 0, 7,     // tree
        0, 0, 0, 1,                 // one range
        0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4,
    ];
    golden(PeerFrame::Silence(silence), &expected);
}

#[test]
fn ack_golden_bytes() {
    let ack = Ack { pubend: PubendId(1), ack_prefix: Tick(5), release_prefix: Tick(3) };
    golden(
        PeerFrame::Ack(ack),
        &[0, 0, 0, 25, 0x12, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 3],
    );
}

/// The NACK of the golden examples (pubend 2, tick 1) and its bytes.
fn nack_example() -> (Nack, Vec<u8>) {
    let nack = Nack { pubend: PubendId(2), ranges: vec![TickRange { first: Tick(1), last: Tick(1) }] };
    #[rustfmt::skip]
    let bytes = vec![
        0, 0, 0, 29, 0x13,
        0, 0, 0, 0, 0, 0, 0, 2,
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1,
    ];
    (nack, bytes)
}

#[test]
fn nack_golden_bytes() {
    let (nack, expected) = nack_example();
    golden(PeerFrame::Nack(nack), &expected);
}

#[test]
fn sideways_golden_bytes() {
    let (nack, inner) = nack_example();
    let sideways = Sideways { origin: "e".into(), to: "d".into(), frame: Box::new(PeerFrame::Nack(nack)) };
    let mut expected = vec![0, 0, 0, 40, 0x17, 0, 1, b'e', 0, 1, b'd'];
    expected.extend_from_slice(&inner);
    golden(PeerFrame::Sideways(sideways), &expected);
}

#[test]
fn sideways_carries_only_one_whole_stream_frame() {
    let inner = |frame: &PeerFrame| frame.to_bytes().unwrap().to_vec();
    let nack = PeerFrame::Nack(Nack { pubend: PubendId(2), ranges: vec![] });
    let barrier =
        PeerFrame::Barrier(Barrier { origin: "s".into(), id: BarrierId(7), root: "r".into(), relay_to_mates: true });
    let wrap = |body: Vec<u8>| {
        let mut frame = ((body.len() + 7) as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&[0x17, 0, 1, b'e', 0, 1, b'd']);
        frame.extend_from_slice(&body);
        BytesMut::from(&frame[..])
    };
    let decode = |mut buf: BytesMut| PeerFrame::decode(&mut buf, MAX);
    assert!(decode(wrap(inner(&nack))).unwrap().is_some());
    let not_stream = decode(wrap(inner(&barrier))).unwrap_err();
    assert!(matches!(not_stream, WireError::InvalidField { frame: "SIDEWAYS", .. }), "{not_stream}");
    let mut twice = inner(&nack);
    twice.extend_from_slice(&inner(&nack));
    assert!(matches!(decode(wrap(twice)).unwrap_err(), WireError::TrailingBytes { frame: "SIDEWAYS", .. }));
    let mut short = inner(&nack);
    short.pop();
    assert!(matches!(decode(wrap(short)).unwrap_err(), WireError::UnexpectedEof { frame: "SIDEWAYS", .. }));
    let nested = Sideways { origin: "e".into(), to: "d".into(), frame: Box::new(nack) };
    let twice_sideways = Sideways { origin: "e".into(), to: "d".into(), frame: Box::new(PeerFrame::Sideways(nested)) };
    assert!(PeerFrame::Sideways(twice_sideways).to_bytes().is_err(), "a SIDEWAYS never carries a SIDEWAYS");
}

#[test]
fn ack_expected_golden_bytes() {
    golden(
        PeerFrame::AckExpected(AckExpected { pubend: PubendId(1), tick: Tick(9) }),
        &[0, 0, 0, 17, 0x14, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9],
    );
}

#[test]
fn barrier_golden_bytes() {
    let barrier = Barrier { origin: "s".into(), id: BarrierId(7), root: "r".into(), relay_to_mates: true };
    golden(PeerFrame::Barrier(barrier), &[0, 0, 0, 16, 0x15, 0, 1, b's', 0, 0, 0, 0, 0, 0, 0, 7, 0, 1, b'r', 1]);
}

#[test]
fn barrier_ack_golden_bytes() {
    let ack = BarrierAck {
        origin: "s".into(),
        id: BarrierId(7),
        starts: vec![PubendStart { pubend: PubendId(1), next_tick: Tick(100) }],
    };
    #[rustfmt::skip]
    let expected = [
        0, 0, 0, 32, 0x16,
        0, 1, b's', 0, 0, 0, 0, 0, 0, 0, 7, // origin, id
        0, 0, 0, 1,                          // one pubend
        0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 100,
    ];
    golden(PeerFrame::BarrierAck(ack), &expected);
}

#[test]
fn overlapping_or_backward_ranges_are_refused() {
    let nack = |ranges: &[(u64, u64)]| {
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0x13, 0, 0, 0, 0, 0, 0, 0, 1]);
        b.extend_from_slice(&(ranges.len() as u32).to_be_bytes());
        for (f, l) in ranges {
            b.extend_from_slice(&f.to_be_bytes());
            b.extend_from_slice(&l.to_be_bytes());
        }
        let mut framed = BytesMut::new();
        framed.extend_from_slice(&(b.len() as u32).to_be_bytes());
        framed.extend_from_slice(&b);
        PeerFrame::decode(&mut framed, MAX)
    };
    assert!(nack(&[(1, 2), (4, 5)]).is_ok());
    assert!(matches!(nack(&[(3, 2)]), Err(WireError::InvalidField { field: "range last", .. })));
    assert!(matches!(nack(&[(1, 4), (4, 5)]), Err(WireError::InvalidField { field: "range first", .. })));
    assert!(matches!(nack(&[(4, 5), (1, 2)]), Err(WireError::InvalidField { field: "range first", .. })));
}

#[test]
fn data_whose_final_range_does_not_contain_its_tick_is_refused() {
    let (message, _) = section();
    let data = Data {
        pubend: PubendId(1),
        tick: Tick(5),
        final_from: Tick(6),
        final_to: Tick(7),
        requested_only: false,
        tree: TreeId(1),
        message,
    };
    let mut bytes = BytesMut::from(&PeerFrame::Data(data.clone()).to_bytes().unwrap()[..]);
    assert!(matches!(PeerFrame::decode(&mut bytes, MAX), Err(WireError::InvalidField { field: "final_from", .. })));
    let data = Data { final_from: Tick(1), final_to: Tick(4), ..data };
    let mut bytes = BytesMut::from(&PeerFrame::Data(data).to_bytes().unwrap()[..]);
    assert!(matches!(PeerFrame::decode(&mut bytes, MAX), Err(WireError::InvalidField { field: "final_to", .. })));
}

#[test]
fn a_forged_count_fails_without_reserving_memory_for_it() {
    let mut b = BytesMut::from(&[0u8, 0, 0, 5, 0x05, 0xFF, 0xFF, 0xFF, 0xFF][..]);
    assert!(matches!(PeerFrame::decode(&mut b, MAX), Err(WireError::UnexpectedEof { field: "adverts", .. })));
}

#[test]
fn client_frame_types_and_unknown_bytes_are_refused_at_the_header() {
    // 0x0A was unknown before SERVERS took it; 0x0B is the next free control type.
    let mut b = BytesMut::from(&[0u8, 0, 0, 9, 0x0B][..]);
    assert_eq!(PeerFrame::decode(&mut b, MAX), Err(WireError::UnknownFrameType(0x0B)));
    let mut b = BytesMut::from(&[0u8, 0, 0, 0][..]);
    assert_eq!(PeerFrame::decode(&mut b, MAX), Err(WireError::EmptyFrame));
    let mut b = BytesMut::from(&[0u8, 0x10, 0, 0][..]);
    assert_eq!(PeerFrame::decode(&mut b, 1024), Err(WireError::FrameTooLarge { len: 0x10_0000, max: 1024 }));
    let mut b = BytesMut::from(&[0u8, 0, 0, 2, 0x04, 0][..]);
    assert_eq!(PeerFrame::decode(&mut b, MAX), Err(WireError::TrailingBytes { frame: "HEARTBEAT", extra: 1 }));
}

#[test]
fn versions_negotiate_to_the_highest_both_speak() {
    let hello = |min_version, max_version| Hello {
        min_version,
        max_version,
        auth: AuthMode::Insecure,
        nonce: [0; 32],
        name: String::new(),
        cell: String::new(),
        incarnation: Incarnation(0),
    };
    assert_eq!(hello(2, 4).negotiate(&hello(1, 3)), Some(3));
    assert_eq!(hello(2, 2).negotiate(&hello(2, 2)), Some(2));
    assert_eq!(hello(3, 4).negotiate(&hello(1, 2)), None);
}

/// A sender never puts on the wire a range list the receiver would refuse: out of order or
/// overlapping, the frame does not encode (issue 38, failure B).
#[test]
fn a_nack_or_silence_with_unsorted_or_overlapping_ranges_does_not_encode() {
    let r = |first, last| TickRange::new(Tick(first), Tick(last)).unwrap();
    for ranges in [vec![r(10, 20), r(5, 6)], vec![r(1, 10), r(10, 12)]] {
        let nack = PeerFrame::Nack(Nack { pubend: PubendId(7), ranges: ranges.clone() });
        assert!(nack.to_bytes().is_err(), "{ranges:?}");
    }
    let fine = PeerFrame::Nack(Nack { pubend: PubendId(7), ranges: vec![r(1, 10), r(11, 12)] });
    assert!(fine.to_bytes().is_ok());
}

/// GROUP's ends: `origin` s3, `dest` p1, before the kind.
const ENDS: [u8; 8] = [0, 2, b's', b'3', 0, 2, b'p', b'1'];

fn group_frame(member: u64, body: GroupBody) -> PeerFrame {
    PeerFrame::Group(Group { origin: "s3".into(), dest: "p1".into(), member, body })
}

/// A GROUP frame's expected bytes: length, type 0x19, [`ENDS`], then `rest`.
fn group_bytes(rest: &[u8]) -> Vec<u8> {
    let mut bytes = ((1 + ENDS.len() + rest.len()) as u32).to_be_bytes().to_vec();
    bytes.push(0x19);
    bytes.extend_from_slice(&ENDS);
    bytes.extend_from_slice(rest);
    bytes
}

#[test]
fn group_golden_bytes() {
    let join = GroupBody::Join { group: "g".into(), pattern: "a.*".into(), selector: None, key: Some("k".into()) };
    #[rustfmt::skip]
    let expected = group_bytes(&[
        1, 0, 0, 0, 0, 0, 0, 0, 7,
        0, 1, b'g', 0, 3, b'a', b'.', b'*', 0, 0, 0, 1, b'k',
    ]);
    assert_eq!(expected[..4], [0, 0, 0, 31]);
    golden(group_frame(7, join), &expected);
    let ack = GroupBody::Ack { pubend: PubendId(2), tick: Tick(9) };
    #[rustfmt::skip]
    let expected = group_bytes(&[
        6, 0, 0, 0, 0, 0, 0, 0, 7,
        0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9,
    ]);
    golden(group_frame(7, ack), &expected);
    golden(group_frame(1, GroupBody::Leave), &group_bytes(&[4, 0, 0, 0, 0, 0, 0, 0, 1]));
    golden(group_frame(0, GroupBody::Reset), &group_bytes(&[7, 0, 0, 0, 0, 0, 0, 0, 0]));
    let (message, section) = section();
    let lease = GroupBody::Lease { pubend: PubendId(2), tick: Tick(9), redelivered: true, message };
    let mut rest = vec![5, 0, 0, 0, 0, 0, 0, 0, 7];
    rest.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9, 1]);
    rest.extend_from_slice(&section);
    golden(group_frame(7, lease), &group_bytes(&rest));
}

#[test]
fn group_refuses_an_unknown_kind_and_trailing_bytes() {
    let frame = |body: &[u8]| {
        let mut bytes = ((body.len() + 1) as u32).to_be_bytes().to_vec();
        bytes.push(0x19);
        bytes.extend_from_slice(body);
        PeerFrame::decode(&mut BytesMut::from(&bytes[..]), MAX)
    };
    let ends = |rest: &[u8]| [&ENDS[..], rest].concat();
    assert!(frame(&[4, 0, 0, 0, 0, 0, 0, 0, 1]).is_err(), "version 5's layout, without ends");
    assert!(frame(&ends(&[9, 0, 0, 0, 0, 0, 0, 0, 1])).is_err(), "kind 9 is no kind");
    assert!(frame(&ends(&[4, 0, 0, 0, 0, 0, 0, 0, 1, 0])).is_err(), "a LEAVE has no body");
    assert!(frame(&ends(&[7, 0, 0, 0, 0, 0, 0, 0, 0, 0])).is_err(), "nor has a RESET");
    assert!(frame(&ends(&[4, 0, 0, 0, 0, 0, 0, 0, 1])).is_ok());
}
