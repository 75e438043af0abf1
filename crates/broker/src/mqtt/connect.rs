//! A packet's way to the session before CONNACK, and while enhanced authentication (5.0 AUTH)
//! wants it: the redirection, the exchange, and for CONNECT the login, the keep alive, the
//! takeover of the client's session and the cancel of a will waiting for its delay.
//!
//! All of it is one future, boxed by the connection as it is made (issue 42): a connection's
//! task then keeps its packet across a single wait, so the compiler lays the packet over the
//! idle connection's wait instead of beside it, and these steps, taken once, take no room in
//! every connection's task for its whole life.

use std::sync::Arc;

use tidings_wire::mqtt::{Packet, ProtocolVersion};

use super::admit::{self, Admitted};
use super::link::Link;
use super::registry::Registry;
use super::session::{self, MqttSession};
use super::{enhanced, keep_alive_of, redirect, send, wills, Writer};
use crate::context::Context;

/// What the connection keeps of a CONNECT once it passed: set here, read by its loop.
#[derive(Default)]
pub(super) struct Kept {
    /// The silence after which the connection ends (`None`: none).
    pub keep_alive: Option<std::time::Duration>,
    /// The generation of the session this connection holds, once CONNECT took it over.
    pub hold: Option<u64>,
    /// Boxed, and only with a login: see `crate::login::revocation`.
    pub revocation: Option<crate::login::Revocation>,
}

/// The connection's parts [`prepare`] reads and sets.
pub(super) struct Parts<'a> {
    pub gate: &'a mut enhanced::Gate,
    pub session: &'a mut MqttSession,
    pub kept: &'a mut Kept,
    pub shared: &'a Arc<Context>,
    pub registry: &'a Arc<Registry>,
    pub writer: &'a Writer,
    pub link: &'a Arc<Link>,
    pub redirect: Option<redirect::Redirect>,
    pub websocket: bool,
}

/// Takes `packet` (left in place for the session) through the steps above.
pub(super) async fn prepare(packet: &mut Packet, parts: Parts<'_>) -> Admitted {
    let Parts { gate, session, kept, shared, registry, writer, link, redirect, websocket } = parts;
    let proven = match admit::admit(packet, (gate, session), (shared, writer), redirect).await {
        Admitted::Handle(user) => user,
        other => return other,
    };
    let (Packet::Connect(connect), None) = (&*packet, session.version()) else { return Admitted::Handle(proven) };
    let longest = shared.config.mqtt.max_keep_alive;
    kept.keep_alive = keep_alive_of(
        match connect.version {
            // Told in CONNACK; 3.1.1 has no way to tell, so its client keeps its own.
            ProtocolVersion::V5 => session::server_keep_alive(connect.keep_alive, longest),
            ProtocolVersion::V311 => None,
        }
        .unwrap_or(connect.keep_alive),
    );
    let login = match proven.as_deref() {
        Some((user, _)) => {
            session.native().login_proven(Arc::clone(user));
            Ok(())
        }
        None => session.native().login(crate::security::mqtt_credentials(connect)).await,
    };
    if let Err(reason) = login {
        send(writer, &[crate::security::mqtt_refusal(reason)], connect.version).await;
        return Admitted::Close;
    }
    kept.revocation = crate::login::revocation(session.native());
    let v5 = connect.version == ProtocolVersion::V5;
    session.native().set_protocol(crate::connz::Protocol::mqtt(websocket, v5));
    let client = session::client_id_of(connect);
    let taken = registry.take_over(&client.0, link).await;
    // A will waiting for its delay is not sent: the client came back (MQTT-3.1.3-9).
    if let Some(seq) = registry.wills.cancel(&client.0) {
        wills::forget(&registry.inflight, &client.0, seq).await;
    }
    link.state.lock().inbound = taken.inbound;
    kept.hold = Some(taken.generation);
    session.set_client(client);
    Admitted::Handle(proven)
}
