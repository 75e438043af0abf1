//! MQTT 5.0 enhanced authentication (AUTH, spec 4.12) with SCRAM-SHA-256 (issue 42): the
//! CONNECT's exchange and later re-authentications, as a pure state machine over the packets
//! (input, the users and `now` -> the packets to send). The SCRAM arithmetic is
//! [`tidings_auth::ScramExchange`]; the connection's shell (`super::connection`) sends what this
//! says, delays a failure's answer as for a wrong password, and times an exchange out.
//!
//! A user with no SCRAM credential in the users file, and a name no user has, get the exchange
//! of a decoy credential and fail at the proof with CONNACK 0x87 Not authorized, as a wrong
//! password does: which names exist, and which have a credential, is not told. Any other
//! method is 0x8C Bad authentication method, and so is SCRAM on a broker without a users file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidings_auth::{ClientFirst, ScramCredential, ScramExchange, User, Users, SCRAM_SHA_256};
use tidings_wire::mqtt::{Auth, Connack, Connect, Disconnect, MqttReason, Packet, Properties};

/// What the shell gives a step that needs it (only packets [`Gate::wants`] take).
pub(super) struct Inputs {
    /// The users file in force; `None` without one.
    pub(super) users: Option<Arc<Users>>,
    pub(super) now: Instant,
    /// How long an exchange may take: the connection's handshake timeout.
    pub(super) timeout: Duration,
    /// A fresh nonce from a CSPRNG: printable, no comma.
    pub(super) nonce: String,
    /// The process's secret for decoy credentials.
    pub(super) secret: [u8; 32],
}

/// What to do with a packet.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Not enhanced authentication's: handle it as usual.
    Pass(Packet),
    /// Send this and carry on.
    Send(Packet),
    /// Send this (a refusal, or nothing) and close.
    Close(Option<Packet>),
    /// The CONNECT's exchange proved `user`: handle the CONNECT as logged in, its CONNACK to
    /// carry the method and `data` (the server's final message).
    Proven { connect: Box<Connect>, user: Arc<User>, data: Bytes },
    /// The proof failed: answer with this after the failure delay, and close.
    Failed(Packet),
}

/// One connection's enhanced authentication: none for most, so a pointer's room when idle.
#[derive(Debug, Default)]
pub(super) struct Gate(Option<Box<State>>);

#[derive(Debug)]
enum State {
    /// CONNECT's exchange, waiting for the client's final message; the CONNECT waits with it.
    Connecting { connect: Box<Connect>, pending: Pending },
    /// Logged in by SCRAM as this user: the client may re-authenticate as it.
    Authenticated { name: String },
    /// A re-authentication, waiting for the client's final message.
    Reauthenticating { name: String, pending: Pending },
}

#[derive(Debug)]
struct Pending {
    exchange: ScramExchange,
    /// The user whose credential the exchange holds; `None` for a decoy.
    user: Option<Arc<User>>,
    deadline: Instant,
}

impl Gate {
    /// Whether `packet` is for the gate: a CONNECT with an Authentication Method, an AUTH, or
    /// anything during CONNECT's exchange (which is all refused but AUTH and DISCONNECT).
    pub(super) fn wants(&self, packet: &Packet) -> bool {
        match packet {
            Packet::Auth(_) => true,
            _ if matches!(self.0.as_deref(), Some(State::Connecting { .. })) => true,
            Packet::Connect(connect) => connect.properties.authentication_method.is_some(),
            _ => false,
        }
    }

    /// When the exchange under way must be done by, if one is.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.0.as_deref()? {
            State::Connecting { pending, .. } | State::Reauthenticating { pending, .. } => Some(pending.deadline),
            State::Authenticated { .. } => None,
        }
    }

    /// Takes one packet [`Gate::wants`]; `connected` says whether CONNACK was sent (until
    /// then a refusal is a CONNACK, never a DISCONNECT: MQTT-3.14.0-1).
    pub(super) fn handle(&mut self, packet: Packet, connected: bool, inputs: Inputs) -> Verdict {
        let refuse = |reason| match connected {
            false => Verdict::Close(Some(connack(reason))),
            true => Verdict::Close(Some(disconnect(reason))),
        };
        match (self.0.take().map(|state| *state), packet) {
            (None, Packet::Connect(connect)) if !connected => self.connect(connect, inputs),
            // The first packet must be CONNECT (MQTT-3.1.0-1): closed, unanswered.
            (None, Packet::Auth(_)) if !connected => Verdict::Close(None),
            (Some(State::Connecting { connect, pending }), Packet::Auth(auth)) => {
                if auth.reason != MqttReason::ContinueAuthentication || !same_method(&auth) {
                    return refuse(MqttReason::ProtocolError);
                }
                let proven = auth.properties.authentication_data.as_deref().map(|data| pending.exchange.finish(data));
                match (proven, pending.user) {
                    (Some(Ok(data)), Some(user)) => {
                        self.0 = Some(Box::new(State::Authenticated { name: user.name.clone() }));
                        Verdict::Proven { connect, user, data: Bytes::from(data) }
                    }
                    (outcome, _) => Verdict::Failed(connack_saying(MqttReason::NotAuthorized, why(outcome))),
                }
            }
            (Some(State::Connecting { .. }), Packet::Disconnect(_)) => Verdict::Close(None),
            (Some(State::Connecting { .. }), _) => refuse(MqttReason::ProtocolError),
            (Some(State::Authenticated { name }), Packet::Auth(auth))
                if auth.reason == MqttReason::ReAuthenticate && same_method(&auth) =>
            {
                let first = auth.properties.authentication_data.as_deref().map(ClientFirst::parse);
                let Some(Ok(first)) = first else {
                    return Verdict::Failed(disconnect(MqttReason::NotAuthorized));
                };
                // Another user's name gets a decoy: a session keeps the user it logged in as.
                let users = inputs.users.as_deref().filter(|_| first.username() == name);
                let (auth, pending) = start(first, users, &inputs);
                self.0 = Some(Box::new(State::Reauthenticating { name, pending }));
                Verdict::Send(auth)
            }
            (Some(State::Reauthenticating { name, pending }), Packet::Auth(auth))
                if auth.reason == MqttReason::ContinueAuthentication && same_method(&auth) =>
            {
                let proven = auth.properties.authentication_data.as_deref().map(|data| pending.exchange.finish(data));
                match (proven, pending.user) {
                    (Some(Ok(data)), Some(_)) => {
                        self.0 = Some(Box::new(State::Authenticated { name }));
                        Verdict::Send(auth_packet(MqttReason::Success, data))
                    }
                    _ => Verdict::Failed(disconnect(MqttReason::NotAuthorized)),
                }
            }
            // AUTH out of order: none was asked for, a step skipped, or another method.
            (_, Packet::Auth(_)) => refuse(MqttReason::ProtocolError),
            (state, packet) => {
                self.0 = state.map(Box::new);
                Verdict::Pass(packet)
            }
        }
    }

    fn connect(&mut self, connect: Box<Connect>, inputs: Inputs) -> Verdict {
        let method = connect.properties.authentication_method.as_deref();
        let Some(users) = inputs.users.as_deref().filter(|_| method == Some(SCRAM_SHA_256)) else {
            return Verdict::Close(Some(connack(MqttReason::BadAuthenticationMethod)));
        };
        let first = match connect.properties.authentication_data.as_deref().map(ClientFirst::parse) {
            Some(Ok(first)) => first,
            Some(Err(error)) => return Verdict::Failed(connack_saying(MqttReason::NotAuthorized, error.to_string())),
            None => {
                return Verdict::Failed(connack_saying(MqttReason::NotAuthorized, "no client-first-message".into()))
            }
        };
        let (auth, pending) = start(first, Some(users), &inputs);
        self.0 = Some(Box::new(State::Connecting { connect, pending }));
        Verdict::Send(auth)
    }
}

/// What a step needs from outside: the users in force, the time, a nonce from the operating
/// system's CSPRNG, and the process's decoy secret (drawn once); `None` if the system gives
/// no randomness (the connection is then closed). The one impure part.
pub(super) fn inputs(shared: &crate::context::Context) -> Option<Inputs> {
    use base64::Engine;
    static SECRET: std::sync::OnceLock<Option<[u8; 32]>> = std::sync::OnceLock::new();
    let secret = SECRET.get_or_init(|| {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).ok().map(|()| secret)
    });
    let mut nonce = [0u8; 18];
    // Without the operating system's randomness no exchange starts: a guessable nonce would
    // let a recorded proof be replayed.
    let (Some(secret), Ok(())) = (*secret, getrandom::fill(&mut nonce)) else {
        tracing::error!("no randomness from the operating system: MQTT enhanced authentication refused");
        return None;
    };
    Some(Inputs {
        users: shared.security.as_ref().map(|guard| guard.users()),
        now: Instant::now(),
        timeout: shared.config.limits.handshake_timeout,
        nonce: base64::engine::general_purpose::STANDARD.encode(nonce),
        secret,
    })
}

/// Starts an exchange for `first` with its user's credential in `users`, or a decoy.
fn start(first: ClientFirst, users: Option<&Users>, inputs: &Inputs) -> (Packet, Pending) {
    let found = users.and_then(|users| users.scram(first.username()));
    let (user, credential) = match found {
        Some((user, credential)) => (Some(Arc::clone(user)), credential.clone()),
        None => (None, ScramCredential::decoy(first.username(), &inputs.secret)),
    };
    let (exchange, server_first) = ScramExchange::start(first, credential, &inputs.nonce);
    let pending = Pending { exchange, user, deadline: inputs.now + inputs.timeout };
    (auth_packet(MqttReason::ContinueAuthentication, server_first), pending)
}

fn same_method(auth: &Auth) -> bool {
    auth.properties.authentication_method.as_deref() == Some(SCRAM_SHA_256)
}

/// What a failed CONNECT exchange's CONNACK says: the SCRAM error, or that the proof failed.
fn why(outcome: Option<Result<Vec<u8>, tidings_auth::ScramError>>) -> String {
    match outcome {
        Some(Err(error)) => error.to_string(),
        Some(Ok(_)) => tidings_auth::ScramError::Proof.to_string(),
        None => "no client-final-message".to_string(),
    }
}

fn auth_packet(reason: MqttReason, data: Vec<u8>) -> Packet {
    let properties = Properties {
        authentication_method: Some(SCRAM_SHA_256.to_string()),
        authentication_data: Some(Bytes::from(data)),
        ..Properties::default()
    };
    Packet::Auth(Auth { reason, properties })
}

fn connack(reason: MqttReason) -> Packet {
    Packet::Connack(Connack { session_present: false, reason, properties: Properties::default() })
}

fn connack_saying(reason: MqttReason, why: String) -> Packet {
    let properties = Properties { reason_string: Some(why), ..Properties::default() };
    Packet::Connack(Connack { session_present: false, reason, properties })
}

fn disconnect(reason: MqttReason) -> Packet {
    Packet::Disconnect(Disconnect { reason, properties: Properties::default() })
}

/// Gives the CONNACK of a SCRAM login the method and the server's final message.
pub(super) fn sign(packets: &mut [Packet], data: &Bytes) {
    for packet in packets {
        if let Packet::Connack(connack) = packet {
            if connack.reason == MqttReason::Success {
                connack.properties.authentication_method = Some(SCRAM_SHA_256.to_string());
                connack.properties.authentication_data = Some(data.clone());
            }
        }
    }
}

#[cfg(test)]
#[path = "enhanced_tests.rs"]
mod tests;
