//! REPLICA's bytes: golden layouts (docs/protocol.md gives the same), the size limit on both
//! sides, and refusal of unknown kinds, so two builds of the broker agree on a group's traffic.

use bytes::{Bytes, BytesMut};

use super::*;

const MAX: usize = 8 << 20;

fn golden(f: PeerFrame, expected: &[u8]) {
    assert_eq!(&f.to_bytes().unwrap()[..], expected, "{f:?}");
    let mut buf = BytesMut::from(expected);
    assert_eq!(PeerFrame::decode(&mut buf, MAX).unwrap(), Some(f));
    assert!(buf.is_empty());
}

fn frame(body: ReplicaBody) -> PeerFrame {
    PeerFrame::Replica(Replica { pubend: PubendId(0x0102), voters: vec![5, 6], body })
}

#[test]
fn replica_golden_bytes() {
    // The pubend, then two voters.
    let pubend = [0, 0, 0, 0, 0, 0, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6];
    let mut raft = vec![0, 0, 0, 33, 0x18];
    raft.extend_from_slice(&pubend);
    raft.extend_from_slice(&[1, 0, 0, 0, 2, 0xAB, 0xCD]);
    golden(frame(ReplicaBody::Raft(Bytes::from_static(&[0xAB, 0xCD]))), &raft);

    let mut query = vec![0, 0, 0, 27, 0x18];
    query.extend_from_slice(&pubend);
    query.push(2);
    golden(frame(ReplicaBody::TermQuery), &query);

    let mut reply = vec![0, 0, 0, 35, 0x18];
    reply.extend_from_slice(&pubend);
    reply.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 7]);
    golden(frame(ReplicaBody::TermReply { term: 7, voters: vec![], last: (0, 0) }), &reply);
    // With the sender's voters: their count and ids after the term.
    let mut named = vec![0, 0, 0, 44, 0x18];
    named.extend_from_slice(&pubend);
    named.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 7, 1, 0, 0, 0, 0, 0, 0, 0, 9]);
    golden(frame(ReplicaBody::TermReply { term: 7, voters: vec![9], last: (0, 0) }), &named);
    // With the sender's last log entry: its term and index after the voters (a count of 0 if
    // none).
    let mut last = vec![0, 0, 0, 52, 0x18];
    last.extend_from_slice(&pubend);
    last.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 42]);
    golden(frame(ReplicaBody::TermReply { term: 7, voters: vec![], last: (6, 42) }), &last);

    // FORGET: pubend 0, no voters, the broker's id.
    let forget =
        PeerFrame::Replica(Replica { pubend: PubendId(0), voters: vec![], body: ReplicaBody::Forget { broker: 9 } });
    let mut bytes = vec![0, 0, 0, 19, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    bytes.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0, 9]);
    golden(forget, &bytes);

    let mut chunk = vec![0, 0, 0, 54, 0x18];
    chunk.extend_from_slice(&pubend);
    chunk.extend_from_slice(&[4, 0, 0, 0, 1, 0xAB, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 1, 2]);
    let body = ReplicaBody::SnapshotChunk {
        message: Bytes::from_static(&[0xAB]),
        offset: 2,
        total: 5,
        data: Bytes::from_static(&[1, 2]),
    };
    golden(frame(body), &chunk);

    // CHUNK_ACK: the snapshot's raft index, then the end of the chunk received.
    let mut ack = vec![0, 0, 0, 43, 0x18];
    ack.extend_from_slice(&pubend);
    ack.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 4, 0]);
    golden(frame(ReplicaBody::ChunkAck { index: 3, end: 1024 }), &ack);
}

/// A chunk's message and data together must fit the limit a whole raft message has.
#[test]
fn a_snapshot_chunk_over_the_limit_is_refused_both_ways() {
    let chunk = |data: usize| {
        frame(ReplicaBody::SnapshotChunk {
            message: Bytes::from_static(&[1, 2, 3]),
            offset: 0,
            total: 1 << 30,
            data: Bytes::from(vec![0u8; data]),
        })
    };
    assert!(matches!(chunk(MAX_REPLICA_MESSAGE - 2).to_bytes(), Err(WireError::TooLong { field: "message", .. })));
    assert!(chunk(MAX_REPLICA_MESSAGE - 3).to_bytes().is_ok());
    let mut body = BytesMut::new();
    body.extend_from_slice(&[0u8, 0, 0, 0, 0, 0, 1, 2, 0, 4, 0, 0, 0, 3, 1, 2, 3]);
    body.extend_from_slice(&[0u8; 16]);
    body.extend_from_slice(&((MAX_REPLICA_MESSAGE - 2) as u32).to_be_bytes());
    body.extend_from_slice(&vec![0u8; MAX_REPLICA_MESSAGE - 2]);
    let decoded = PeerFrame::decode_body(PeerFrameType::Replica, body.freeze());
    assert!(matches!(decoded, Err(WireError::InvalidField { frame: "REPLICA", field: "message", .. })), "{decoded:?}");
}

/// A raft message over the limit is neither sent nor accepted, whatever the link's frame limit.
#[test]
fn a_raft_message_over_the_limit_is_refused_both_ways() {
    let big = Bytes::from(vec![0u8; MAX_REPLICA_MESSAGE + 1]);
    assert!(matches!(
        frame(ReplicaBody::Raft(big.clone())).to_bytes(),
        Err(WireError::TooLong { field: "message", .. })
    ));
    let mut body = BytesMut::new();
    body.extend_from_slice(&[0u8, 0, 0, 0, 0, 0, 1, 2, 0, 1]);
    body.extend_from_slice(&((MAX_REPLICA_MESSAGE + 1) as u32).to_be_bytes());
    body.extend_from_slice(&big);
    let decoded = PeerFrame::decode_body(PeerFrameType::Replica, body.freeze());
    assert!(matches!(decoded, Err(WireError::InvalidField { frame: "REPLICA", field: "message", .. })), "{decoded:?}");
    let at_limit = Bytes::from(vec![0u8; MAX_REPLICA_MESSAGE]);
    assert!(frame(ReplicaBody::Raft(at_limit)).to_bytes().is_ok());
}

#[test]
fn an_unknown_kind_or_trailing_bytes_are_refused() {
    let body = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 2, 0, 9]);
    assert_eq!(
        PeerFrame::decode_body(PeerFrameType::Replica, body),
        Err(WireError::InvalidField { frame: "REPLICA", field: "kind", value: 9 })
    );
    let body = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 2, 0, 2, 0]);
    assert_eq!(
        PeerFrame::decode_body(PeerFrameType::Replica, body),
        Err(WireError::TrailingBytes { frame: "REPLICA", extra: 1 })
    );
    let body = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 2, 200, 2]);
    assert_eq!(
        PeerFrame::decode_body(PeerFrameType::Replica, body),
        Err(WireError::InvalidField { frame: "REPLICA", field: "voters", value: 200 })
    );
}

/// A term reply has one encoding: an empty count only before a last entry, and no last entry
/// at index 0.
#[test]
fn a_term_reply_with_an_empty_count_and_no_last_entry_or_a_last_index_of_0_is_refused() {
    let refused = Err(WireError::InvalidField { frame: "REPLICA", field: "term reply", value: 0 });
    let head = [0, 0, 0, 0, 0, 0, 1, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0, 7];
    let empty_count = [&head[..], &[0]].concat();
    assert_eq!(PeerFrame::decode_body(PeerFrameType::Replica, Bytes::from(empty_count)), refused);
    let index_0 = [&head[..], &[0], &[0, 0, 0, 0, 0, 0, 0, 6], &[0; 8]].concat();
    assert_eq!(PeerFrame::decode_body(PeerFrameType::Replica, Bytes::from(index_0)), refused);
}

/// Raft resends what is lost, so one bad REPLICA frame is dropped alone and the link stays up.
#[test]
fn replica_frames_are_repeated_by_the_protocol() {
    assert!(PeerFrameType::Replica.is_repeated_by_protocol());
    assert_eq!(PeerFrameType::from_u8(0x18), Some(PeerFrameType::Replica));
}
