//! Server redirection (MQTT 5.0 Server Reference, spec 4.11; issue 42): with `[mqtt]
//! server_reference`, a 5.0 client this broker cannot serve is told where to go instead of
//! only being shut out. `moved = true`: every CONNECT gets CONNACK 0x9D Server moved. Else a
//! CONNECT past the connection limit gets CONNACK 0x9C Use another server, and at a graceful
//! shutdown each 5.0 client gets DISCONNECT 0x9C rather than 0x8B Server shutting down. 3.1.1
//! has no Server Reference: its clients get what they got before (CONNACK 0x03 Server
//! unavailable; a close at shutdown).
//!
//! Pure: the packets for a configuration and a connection; the shell sends them.

use tidings_wire::mqtt::{Connack, Disconnect, MqttReason, Packet, Properties, ProtocolVersion};

use crate::config::Mqtt;

/// How many connections past the limit may be read for their CONNECT at once, to be told
/// where to go: the limit protects the broker, so what a refused connection costs is bounded
/// too, and beyond these a refused connection is closed at once, as without a reference.
pub(super) const MAX_REDIRECTING: usize = 64;

/// Why a connection is answered with the server reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirect {
    /// The broker holds its most MQTT connections.
    Full,
}

/// The refusal of a CONNECT of `version` on a connection admitted as `redirect`, if it is to
/// be refused: the broker moved (every connection), or it was full when this one came.
pub(super) fn at_connect(config: &Mqtt, redirect: Option<Redirect>, version: ProtocolVersion) -> Option<Packet> {
    let reason = match (config.moved, redirect) {
        (true, _) => MqttReason::ServerMoved,
        (false, Some(Redirect::Full)) => MqttReason::UseAnotherServer,
        (false, None) => return None,
    };
    let (reason, properties) = match version {
        ProtocolVersion::V5 => (reason, reference(config)),
        ProtocolVersion::V311 => (MqttReason::ServerUnavailable, Properties::default()),
    };
    Some(Packet::Connack(Connack { session_present: false, reason, properties }))
}

/// What a connection of `version` is told as the broker shuts down: DISCONNECT 0x9C with the
/// reference when one is set, else 0x8B; nothing in 3.1.1, which has no DISCONNECT from the
/// server.
pub(super) fn at_shutdown(config: &Mqtt, version: ProtocolVersion) -> Option<Packet> {
    let (reason, properties) = match config.server_reference.is_empty() {
        true => (MqttReason::ServerShuttingDown, Properties::default()),
        false => (MqttReason::UseAnotherServer, reference(config)),
    };
    (version == ProtocolVersion::V5).then_some(Packet::Disconnect(Disconnect { reason, properties }))
}

fn reference(config: &Mqtt) -> Properties {
    Properties { server_reference: Some(config.server_reference.clone()), ..Properties::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(reference: &str, moved: bool) -> Mqtt {
        Mqtt { server_reference: reference.into(), moved, ..Mqtt::default() }
    }

    fn said(packet: Option<Packet>) -> Option<(MqttReason, Option<String>)> {
        match packet? {
            Packet::Connack(connack) => Some((connack.reason, connack.properties.server_reference)),
            Packet::Disconnect(disconnect) => Some((disconnect.reason, disconnect.properties.server_reference)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_moved_broker_refuses_every_connect_with_where_it_went() {
        let moved = config("b.example:1883", true);
        let to = Some("b.example:1883".to_string());
        for redirect in [None, Some(Redirect::Full)] {
            assert_eq!(
                said(at_connect(&moved, redirect, ProtocolVersion::V5)),
                Some((MqttReason::ServerMoved, to.clone()))
            );
            let v311 = said(at_connect(&moved, redirect, ProtocolVersion::V311));
            assert_eq!(v311, Some((MqttReason::ServerUnavailable, None)), "3.1.1 cannot say where");
        }
    }

    #[test]
    fn a_full_broker_sends_5_0_clients_elsewhere_and_serves_the_rest() {
        let other = config("10.0.0.2:1883", false);
        let to = Some("10.0.0.2:1883".to_string());
        let full = at_connect(&other, Some(Redirect::Full), ProtocolVersion::V5);
        assert_eq!(said(full), Some((MqttReason::UseAnotherServer, to)));
        let v311 = at_connect(&other, Some(Redirect::Full), ProtocolVersion::V311);
        assert_eq!(said(v311), Some((MqttReason::ServerUnavailable, None)));
        assert_eq!(at_connect(&other, None, ProtocolVersion::V5), None, "a connection with a place is served");
    }

    #[test]
    fn at_shutdown_5_0_clients_are_sent_to_the_reference_if_there_is_one() {
        let to = Some("10.0.0.2:1883".to_string());
        let with = config("10.0.0.2:1883", false);
        assert_eq!(said(at_shutdown(&with, ProtocolVersion::V5)), Some((MqttReason::UseAnotherServer, to)));
        let without = Mqtt::default();
        assert_eq!(said(at_shutdown(&without, ProtocolVersion::V5)), Some((MqttReason::ServerShuttingDown, None)));
        assert_eq!(at_shutdown(&with, ProtocolVersion::V311), None);
    }

    #[test]
    fn a_reference_must_be_host_port_and_moved_needs_one() {
        use crate::config::Config;
        for good in ["b.example:1883", "10.0.0.2:1883", "[::1]:8883", "localhost:1"] {
            let toml = format!("[mqtt]\nserver_reference = {good:?}\n");
            assert!(Config::from_toml(&toml).is_ok(), "{good}");
        }
        for bad in ["b.example", "b.example:0", "b..example:1883", "::1:1883", "a b:1", ":1883", "h:99999"] {
            let err = Config::from_toml(&format!("[mqtt]\nserver_reference = {bad:?}\n")).unwrap_err().to_string();
            assert!(err.contains("mqtt.server_reference"), "{bad}: {err}");
        }
        let err = Config::from_toml("[mqtt]\nmoved = true\n").unwrap_err().to_string();
        assert!(err.contains("mqtt.moved"), "{err}");
        let err = Config::from_toml("[mqtt]\nserver_refrence = \"a:1\"\n").unwrap_err().to_string();
        assert!(err.contains("unknown field"), "{err}");
    }
}
