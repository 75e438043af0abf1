//! Between the route core's messages and the peer frames of `tidings_wire::peer`.
//!
//! The route core keeps its own types (reference-counted names, filters it can match); the
//! wire crate keeps the byte layout. This module is the only place that knows both, so a new
//! routing message is one frame in `wire::peer` and one arm here. Filters cross as text and are
//! parsed again on receipt: a peer that sends one that does not parse gets its link closed.

use bytes::{Bytes, BytesMut};
use tidings_route::{
    AdvertisedLink, BarrierId, BrokerName, CellName, DataHeader, Hop, Incarnation, LinkStateAdvert, LocalDelivery,
    PeerMessage, PubendId, Scope, SummaryDelta, Tick, TreeId,
};
use tidings_wire::peer::{self, Close, HopRef, PeerFrame, RouteHeader, Routed};
use tidings_wire::WireError;

use super::filter::{FilterText, RouteFilter};

/// The frame that carries a routing control message.
pub(super) fn control_frame(message: &PeerMessage<RouteFilter>) -> PeerFrame {
    match message {
        PeerMessage::Heartbeat => PeerFrame::Heartbeat,
        PeerMessage::Adverts(adverts) => PeerFrame::Adverts(adverts.iter().map(advert_to_wire).collect()),
        PeerMessage::Summary(deltas) => PeerFrame::Summary(deltas.iter().map(delta_to_wire).collect()),
        PeerMessage::Synced(trees) => PeerFrame::Synced(
            trees
                .iter()
                .map(|(root, tree)| peer::SyncedTree { root: root.to_string(), tree: peer::TreeId(tree.0) })
                .collect(),
        ),
        PeerMessage::Barrier { id, root, relay_to_mates } => PeerFrame::Barrier(peer::Barrier {
            origin: id.origin.to_string(),
            id: peer::BarrierId(id.number),
            root: root.to_string(),
            relay_to_mates: *relay_to_mates,
        }),
        PeerMessage::BarrierAck { id, ticks } => PeerFrame::BarrierAck(peer::BarrierAck {
            origin: id.origin.to_string(),
            id: peer::BarrierId(id.number),
            starts: ticks
                .iter()
                .map(|(pubend, tick)| peer::PubendStart {
                    pubend: peer::PubendId(pubend.0),
                    next_tick: peer::Tick(tick.0),
                })
                .collect(),
        }),
    }
}

/// The routing control message a frame carries: `Ok(None)` for frames that are not routing
/// control, an error for a filter that does not parse.
pub(super) fn control_message(frame: PeerFrame) -> Result<Option<PeerMessage<RouteFilter>>, String> {
    Ok(Some(match frame {
        PeerFrame::Heartbeat => PeerMessage::Heartbeat,
        PeerFrame::Adverts(adverts) => PeerMessage::Adverts(adverts.into_iter().map(advert_from_wire).collect()),
        PeerFrame::Summary(deltas) => {
            PeerMessage::Summary(deltas.into_iter().map(delta_from_wire).collect::<Result<_, _>>()?)
        }
        PeerFrame::Synced(trees) => {
            PeerMessage::Synced(trees.into_iter().map(|t| (CellName::from(t.root), TreeId(t.tree.0))).collect())
        }
        PeerFrame::Barrier(b) => PeerMessage::Barrier {
            id: BarrierId { origin: BrokerName::from(b.origin), number: b.id.0 },
            root: CellName::from(b.root),
            relay_to_mates: b.relay_to_mates,
        },
        PeerFrame::BarrierAck(a) => PeerMessage::BarrierAck {
            id: BarrierId { origin: BrokerName::from(a.origin), number: a.id.0 },
            ticks: a.starts.into_iter().map(|s| (PubendId(s.pubend.0), Tick(s.next_tick.0))).collect(),
        },
        _ => return Ok(None),
    }))
}

/// A CLOSE frame's bytes (a reason too long is cut, so this cannot fail).
pub(super) fn close_bytes(reason: &str) -> Bytes {
    PeerFrame::Close(Close::new(reason)).to_bytes().unwrap_or_default()
}

/// Appends everything of a ROUTED frame before the message section, straight from the
/// router's header (no copy of its cell names).
pub(super) fn routed_prefix(header: &DataHeader, section_len: usize, out: &mut BytesMut) -> Result<(), WireError> {
    let hop = match &header.hop {
        Hop::Down => HopRef::Down,
        Hop::Within { deliver, across } => {
            HopRef::Within { deliver: *deliver == LocalDelivery::Deliver, across: across.as_slice() }
        }
    };
    let (pubend, tree) = (peer::PubendId(header.pubend.0), peer::TreeId(header.tree.0));
    Routed::encode_prefix((pubend, tree, header.root.as_str()), hop, &header.groups, section_len, out)
}

/// The router's header of a received ROUTED frame.
pub(super) fn data_header(header: RouteHeader) -> DataHeader {
    let hop = match header.hop {
        peer::Hop::Down => Hop::Down,
        peer::Hop::Within { deliver, across } => Hop::Within {
            deliver: if deliver { LocalDelivery::Deliver } else { LocalDelivery::Skip },
            across: across.into_iter().map(CellName::from).collect(),
        },
    };
    DataHeader {
        pubend: PubendId(header.pubend.0),
        root: CellName::from(header.root),
        tree: TreeId(header.tree.0),
        hop,
        groups: header.groups,
    }
}

fn advert_to_wire(advert: &LinkStateAdvert) -> peer::Advert {
    peer::Advert {
        origin: advert.origin.to_string(),
        cell: advert.cell.to_string(),
        incarnation: peer::Incarnation(advert.incarnation.0),
        sequence: advert.sequence,
        links: advert
            .links
            .iter()
            .map(|l| peer::AdvertLink { peer: l.peer.to_string(), peer_cell: l.peer_cell.to_string() })
            .collect(),
        pubends: advert.pubends.iter().map(|p| tidings_wire::PubendId(p.0)).collect(),
    }
}

fn advert_from_wire(advert: peer::Advert) -> LinkStateAdvert {
    LinkStateAdvert {
        origin: BrokerName::from(advert.origin),
        cell: CellName::from(advert.cell),
        incarnation: Incarnation(advert.incarnation.0),
        sequence: advert.sequence,
        links: advert
            .links
            .into_iter()
            .map(|l| AdvertisedLink { peer: BrokerName::from(l.peer), peer_cell: CellName::from(l.peer_cell) })
            .collect(),
        pubends: advert.pubends.iter().map(|p| PubendId(p.0)).collect(),
    }
}

fn delta_to_wire(delta: &SummaryDelta<RouteFilter>) -> peer::SummaryDelta {
    let filter = |f: &RouteFilter| {
        let text = f.text();
        peer::FilterText { pattern: text.pattern.clone(), selector: text.selector.clone(), group: text.group.clone() }
    };
    peer::SummaryDelta {
        scopes: delta
            .scopes
            .iter()
            .map(|scope| match scope {
                Scope::Local => peer::Scope::Local,
                Scope::Tree(root) => peer::Scope::Tree(root.to_string()),
            })
            .collect(),
        added: delta.added.iter().map(filter).collect(),
        removed: delta.removed.iter().map(filter).collect(),
    }
}

fn delta_from_wire(delta: peer::SummaryDelta) -> Result<SummaryDelta<RouteFilter>, String> {
    let filters = |list: Vec<peer::FilterText>| {
        list.into_iter()
            .map(|f| RouteFilter::try_from(FilterText { pattern: f.pattern, selector: f.selector, group: f.group }))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(SummaryDelta {
        scopes: delta
            .scopes
            .into_iter()
            .map(|scope| match scope {
                peer::Scope::Local => Scope::Local,
                peer::Scope::Tree(root) => Scope::Tree(CellName::from(root)),
            })
            .collect(),
        added: filters(delta.added)?,
        removed: filters(delta.removed)?,
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use tidings_wire::Message;

    use super::*;

    fn filter(pattern: &str, selector: Option<&str>) -> RouteFilter {
        RouteFilter::try_from(FilterText { pattern: pattern.into(), selector: selector.map(Into::into), group: None })
            .unwrap()
    }

    fn through_the_wire(message: &PeerMessage<RouteFilter>) -> PeerMessage<RouteFilter> {
        let bytes = control_frame(message).to_bytes().unwrap();
        let frame = PeerFrame::decode(&mut BytesMut::from(&bytes[..]), 1 << 20).unwrap().unwrap();
        control_message(frame).unwrap().unwrap()
    }

    #[test]
    fn every_routing_message_survives_the_wire() {
        let advert = LinkStateAdvert {
            origin: BrokerName::new("a"),
            cell: CellName::new("c1"),
            incarnation: Incarnation(4),
            sequence: 9,
            links: vec![AdvertisedLink { peer: BrokerName::new("b"), peer_cell: CellName::new("c2") }],
            pubends: vec![PubendId(77)],
        };
        let delta = SummaryDelta {
            scopes: vec![Scope::Local, Scope::Tree(CellName::new("r"))],
            added: vec![filter("a.>", Some("k < 10"))],
            removed: vec![filter("b.*", None)],
        };
        for message in [
            PeerMessage::Heartbeat,
            PeerMessage::Adverts(vec![advert]),
            PeerMessage::Summary(vec![delta]),
            PeerMessage::Synced(vec![(CellName::new("r"), TreeId(77))]),
            PeerMessage::Barrier {
                id: BarrierId { origin: BrokerName::new("s"), number: 3 },
                root: CellName::new("r"),
                relay_to_mates: true,
            },
            PeerMessage::BarrierAck {
                id: BarrierId { origin: BrokerName::new("s"), number: 3 },
                ticks: vec![(PubendId(5), Tick(1000))],
            },
        ] {
            assert_eq!(through_the_wire(&message), message);
        }
    }

    #[test]
    fn a_filter_that_does_not_parse_is_refused() {
        let frame = PeerFrame::Summary(vec![peer::SummaryDelta {
            scopes: vec![peer::Scope::Local],
            added: vec![peer::FilterText { pattern: "a..b".into(), selector: None, group: None }],
            removed: vec![],
        }]);
        assert!(control_message(frame).unwrap_err().contains("a..b"));
    }

    #[test]
    fn a_queue_groups_filter_keeps_its_group_and_a_bad_group_is_refused() {
        let pattern = tidings_matching::Pattern::parse("jobs.>").unwrap();
        let grouped = RouteFilter::grouped(pattern, None, Some("workers".into()));
        let message = PeerMessage::Summary(vec![SummaryDelta {
            scopes: vec![Scope::Local],
            added: vec![grouped.clone(), filter("jobs.>", None)],
            removed: vec![],
        }]);
        let back = through_the_wire(&message);
        assert_eq!(back, message);
        let PeerMessage::Summary(deltas) = back else { panic!("{back:?}") };
        assert_eq!(deltas[0].added[0].text().group.as_deref(), Some("workers"));
        assert_eq!(deltas[0].added[1].text().group, None);
        let frame = PeerFrame::Summary(vec![peer::SummaryDelta {
            scopes: vec![peer::Scope::Local],
            added: vec![peer::FilterText { pattern: "a".into(), selector: None, group: Some("w*".into()) }],
            removed: vec![],
        }]);
        assert!(control_message(frame).unwrap_err().contains("wildcard"));
    }

    #[test]
    fn data_headers_survive_the_wire_with_the_message_bytes_verbatim() {
        let message = Message::new("a.b", &[], bytes::Bytes::from_static(b"payload"), 42).unwrap();
        for hop in [
            Hop::Down,
            Hop::Within { deliver: LocalDelivery::Skip, across: vec![CellName::new("s1"), CellName::new("s2")] },
        ] {
            for groups in [vec![], vec!["workers".to_string(), "audit".to_string()]] {
                let hop = hop.clone();
                let header =
                    DataHeader { pubend: PubendId(9), root: CellName::new("PHB"), tree: TreeId(77), hop, groups };
                let mut out = BytesMut::new();
                routed_prefix(&header, message.encoded_len(), &mut out).unwrap();
                out.extend_from_slice(message.as_bytes());
                match PeerFrame::decode(&mut out, 1 << 20).unwrap().unwrap() {
                    PeerFrame::Routed(routed) => {
                        assert_eq!(routed.message.as_bytes(), message.as_bytes());
                        assert_eq!(data_header(routed.header), header);
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}
