//! What a packet goes through before the MQTT session sees it: the server redirection
//! ([`super::redirect`]) at CONNECT, and enhanced authentication ([`super::enhanced`]). The
//! shell's side: it sends what those pure steps say, and waits a failed proof's delay. Run
//! boxed by the connection, so that the packets it holds take no room in an idle connection's
//! task (issue 42: at most 5 KB per idle connection).

use std::sync::Arc;

use bytes::Bytes;
use tidings_auth::User;
use tidings_wire::mqtt::{Packet, ProtocolVersion};

use super::enhanced::{self, Gate, Verdict};
use super::redirect::{self, Redirect};
use super::session::MqttSession;
use super::{send, Writer};
use crate::context::Context;

/// Where a packet goes next.
pub(super) enum Admitted {
    /// To the session; a CONNECT whose exchange proved its user comes with the user and the
    /// server's final message, for its CONNACK.
    Handle(Option<Box<(Arc<User>, Bytes)>>),
    /// Answered here: read the next one.
    Answered,
    /// Answered here, and the connection ends.
    Close,
}

/// Whether `packet` needs [`admit`]: anything before CONNACK, and what the gate takes after.
pub(super) fn needed(packet: &Packet, gate: &Gate, session: &MqttSession) -> bool {
    session.version().is_none() || gate.wants(packet)
}

/// Takes `packet` through the redirection and the gate; what goes on to the session is left
/// in `slot` (in place: the connection's task keeps no second packet's room for it).
pub(super) async fn admit(
    slot: &mut Packet,
    (gate, session): (&mut Gate, &mut MqttSession),
    (shared, writer): (&Context, &Writer),
    redirect: Option<Redirect>,
) -> Admitted {
    if let (Packet::Connect(connect), None) = (&*slot, session.version()) {
        if let Some(refusal) = redirect::at_connect(&shared.config.mqtt, redirect, connect.version) {
            send(writer, &[refusal], connect.version).await;
            return Admitted::Close;
        }
    }
    if !gate.wants(slot) {
        return Admitted::Handle(None);
    }
    let Some(inputs) = enhanced::inputs(shared) else { return Admitted::Close };
    let packet = std::mem::replace(slot, Packet::Pingreq);
    match gate.handle(packet, session.version().is_some(), inputs) {
        Verdict::Pass(packet) => {
            *slot = packet;
            Admitted::Handle(None)
        }
        Verdict::Send(packet) => match send(writer, &[packet], ProtocolVersion::V5).await {
            true => Admitted::Answered,
            false => Admitted::Close,
        },
        Verdict::Close(packet) => {
            send(writer, packet.as_slice(), ProtocolVersion::V5).await;
            Admitted::Close
        }
        Verdict::Failed(packet) => {
            session.native().proof_failed().await;
            send(writer, &[packet], ProtocolVersion::V5).await;
            Admitted::Close
        }
        Verdict::Proven { connect, user, data } => {
            *slot = Packet::Connect(connect);
            Admitted::Handle(Some(Box::new((user, data))))
        }
    }
}
