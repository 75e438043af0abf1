#![allow(clippy::unwrap_used)]

use super::*;
use tidings_wire::mqtt::{ProtocolVersion, Publish};

use tidings_auth::rfc7677::{CLIENT_FINAL, CLIENT_FIRST, SERVER_FINAL, SERVER_FIRST, SERVER_NONCE};

/// `user` with RFC 7677's credential (password `pencil`); `nocred` with none. With the RFC's
/// server nonce, the client's final message is the RFC's at each exchange.
fn users() -> Arc<Users> {
    let scram = tidings_auth::rfc7677::credential();
    let text = format!("[[user]]\nname = \"user\"\nscram = \"{scram}\"\n[[user]]\nname = \"nocred\"\n");
    Arc::new(Users::parse(&text).unwrap())
}

fn inputs(users: Option<Arc<Users>>) -> Inputs {
    Inputs { users, now: Instant::now(), timeout: Duration::from_secs(10), nonce: SERVER_NONCE.into(), secret: [9; 32] }
}

fn connect(method: &str, data: &str) -> Packet {
    let mut connect = Connect {
        version: ProtocolVersion::V5,
        clean_start: true,
        keep_alive: 30,
        properties: Properties::default(),
        client_id: "c".into(),
        will: None,
        username: None,
        password: None,
    };
    connect.properties.authentication_method = Some(method.into());
    connect.properties.authentication_data = Some(Bytes::from(data.to_string()));
    Packet::Connect(Box::new(connect))
}

fn auth(reason: MqttReason, method: &str, data: &str) -> Packet {
    let properties = Properties {
        authentication_method: Some(method.into()),
        authentication_data: Some(Bytes::from(data.to_string())),
        ..Properties::default()
    };
    Packet::Auth(Auth { reason, properties })
}

fn reason_of(packet: &Packet) -> (&'static str, MqttReason) {
    match packet {
        Packet::Connack(connack) => ("CONNACK", connack.reason),
        Packet::Disconnect(disconnect) => ("DISCONNECT", disconnect.reason),
        Packet::Auth(auth) => ("AUTH", auth.reason),
        other => panic!("not a reply: {other:?}"),
    }
}

fn closed_with(verdict: Verdict) -> (&'static str, MqttReason) {
    match verdict {
        Verdict::Close(Some(packet)) | Verdict::Failed(packet) => reason_of(&packet),
        other => panic!("not a refusal: {other:?}"),
    }
}

fn sent_data(verdict: Verdict, want: MqttReason) -> String {
    let Verdict::Send(Packet::Auth(auth)) = verdict else { panic!("not an AUTH: {verdict:?}") };
    assert_eq!(auth.reason, want);
    assert_eq!(auth.properties.authentication_method.as_deref(), Some(SCRAM_SHA_256));
    String::from_utf8(auth.properties.authentication_data.unwrap().to_vec()).unwrap()
}

/// A gate past CONNECT's exchange for `user`.
fn logged_in() -> Gate {
    let mut gate = Gate::default();
    let _ = gate.handle(connect(SCRAM_SHA_256, CLIENT_FIRST), false, inputs(Some(users())));
    let final_step = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, CLIENT_FINAL);
    assert!(matches!(gate.handle(final_step, false, inputs(Some(users()))), Verdict::Proven { .. }));
    gate
}

#[test]
fn the_connect_exchange_proves_the_user_and_signs_the_connack() {
    let mut gate = Gate::default();
    let packet = connect(SCRAM_SHA_256, CLIENT_FIRST);
    assert!(gate.wants(&packet));
    let server_first = sent_data(gate.handle(packet, false, inputs(Some(users()))), MqttReason::ContinueAuthentication);
    assert_eq!(server_first, SERVER_FIRST);
    assert!(gate.deadline().is_some(), "an exchange under way has a deadline");
    let final_step = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, CLIENT_FINAL);
    let Verdict::Proven { connect, user, data } = gate.handle(final_step, false, inputs(Some(users()))) else {
        panic!("not proven")
    };
    assert_eq!((user.name.as_str(), &data[..]), ("user", SERVER_FINAL.as_bytes()));
    assert_eq!(connect.client_id, "c");
    assert_eq!(gate.deadline(), None);
    let mut connack = [super::connack(MqttReason::Success)];
    sign(&mut connack, &data);
    let Packet::Connack(connack) = &connack[0] else { panic!() };
    assert_eq!(connack.properties.authentication_data.as_deref(), Some(SERVER_FINAL.as_bytes()));
    assert!(!gate.wants(&Packet::Pingreq), "once connected, other packets are the session's");
}

#[test]
fn a_wrong_proof_an_unknown_user_or_one_without_a_credential_is_not_authorized() {
    let wrong_proof = CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
    for (first, last) in [
        (CLIENT_FIRST.to_string(), wrong_proof.as_str()),
        (CLIENT_FIRST.replace("n=user", "n=mallory"), CLIENT_FINAL),
        (CLIENT_FIRST.replace("n=user", "n=nocred"), CLIENT_FINAL),
    ] {
        let mut gate = Gate::default();
        let server_first = sent_data(
            gate.handle(connect(SCRAM_SHA_256, &first), false, inputs(Some(users()))),
            MqttReason::ContinueAuthentication,
        );
        assert!(server_first.contains(",s=") && server_first.ends_with(",i=4096"), "{server_first}");
        let final_step = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, last);
        let verdict = gate.handle(final_step, false, inputs(Some(users())));
        assert!(matches!(verdict, Verdict::Failed(_)), "{first}: {verdict:?}");
        assert_eq!(closed_with(verdict), ("CONNACK", MqttReason::NotAuthorized), "{first}");
    }
}

#[test]
fn another_method_or_no_users_file_is_a_bad_method_and_garbage_not_authorized() {
    let verdict = Gate::default().handle(connect("SCRAM-SHA-1", CLIENT_FIRST), false, inputs(Some(users())));
    assert_eq!(closed_with(verdict), ("CONNACK", MqttReason::BadAuthenticationMethod));
    let verdict = Gate::default().handle(connect(SCRAM_SHA_256, CLIENT_FIRST), false, inputs(None));
    assert_eq!(closed_with(verdict), ("CONNACK", MqttReason::BadAuthenticationMethod));
    let verdict = Gate::default().handle(connect(SCRAM_SHA_256, "n,,r=x"), false, inputs(Some(users())));
    assert_eq!(closed_with(verdict), ("CONNACK", MqttReason::NotAuthorized));
}

#[test]
fn anything_but_the_next_auth_during_the_exchange_is_a_protocol_error_before_connack() {
    let ping = Packet::Pingreq;
    let publish = Packet::Publish(Publish::at_most_once("t", Bytes::new()));
    let reauth = auth(MqttReason::ReAuthenticate, SCRAM_SHA_256, CLIENT_FIRST);
    let other_method = auth(MqttReason::ContinueAuthentication, "PLAIN", CLIENT_FINAL);
    for packet in [ping, publish, reauth, other_method, connect(SCRAM_SHA_256, CLIENT_FIRST)] {
        let mut gate = Gate::default();
        let _ = gate.handle(connect(SCRAM_SHA_256, CLIENT_FIRST), false, inputs(Some(users())));
        assert!(gate.wants(&packet));
        let verdict = gate.handle(packet, false, inputs(Some(users())));
        assert_eq!(closed_with(verdict), ("CONNACK", MqttReason::ProtocolError));
    }
}

#[test]
fn a_scram_session_re_authenticates_and_keeps_serving_meanwhile() {
    let mut gate = logged_in();
    let reauth = auth(MqttReason::ReAuthenticate, SCRAM_SHA_256, CLIENT_FIRST);
    let server_first = sent_data(gate.handle(reauth, true, inputs(Some(users()))), MqttReason::ContinueAuthentication);
    assert_eq!(server_first, SERVER_FIRST);
    assert!(gate.deadline().is_some());
    assert!(!gate.wants(&Packet::Pingreq), "the session serves the client during a re-authentication");
    let final_step = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, CLIENT_FINAL);
    let server_final = sent_data(gate.handle(final_step, true, inputs(Some(users()))), MqttReason::Success);
    assert_eq!(server_final, SERVER_FINAL);
    assert_eq!(gate.deadline(), None);
    // And again, now with a wrong proof: DISCONNECT 0x87.
    let reauth = auth(MqttReason::ReAuthenticate, SCRAM_SHA_256, CLIENT_FIRST);
    let _ = gate.handle(reauth, true, inputs(Some(users())));
    let wrong = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, &CLIENT_FINAL.replace("p=dHzb", "p=dHzc"));
    assert_eq!(closed_with(gate.handle(wrong, true, inputs(Some(users())))), ("DISCONNECT", MqttReason::NotAuthorized));
}

#[test]
fn re_authenticating_as_another_user_fails_and_out_of_order_auth_is_a_protocol_error() {
    let mut gate = logged_in();
    let as_other = auth(MqttReason::ReAuthenticate, SCRAM_SHA_256, &CLIENT_FIRST.replace("n=user", "n=nocred"));
    let _ = sent_data(gate.handle(as_other, true, inputs(Some(users()))), MqttReason::ContinueAuthentication);
    let final_step = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, CLIENT_FINAL);
    let verdict = gate.handle(final_step, true, inputs(Some(users())));
    assert_eq!(closed_with(verdict), ("DISCONNECT", MqttReason::NotAuthorized));

    let protocol_error = ("DISCONNECT", MqttReason::ProtocolError);
    let other_method = auth(MqttReason::ReAuthenticate, "SCRAM-SHA-512", CLIENT_FIRST);
    assert_eq!(closed_with(logged_in().handle(other_method, true, inputs(Some(users())))), protocol_error);
    let skipped = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, CLIENT_FINAL);
    assert_eq!(closed_with(logged_in().handle(skipped, true, inputs(Some(users())))), protocol_error);
    let success = auth(MqttReason::Success, SCRAM_SHA_256, "");
    assert_eq!(closed_with(logged_in().handle(success, true, inputs(Some(users())))), protocol_error);
    // AUTH before CONNECT: closed unanswered, as any first packet but CONNECT.
    let first = auth(MqttReason::ContinueAuthentication, SCRAM_SHA_256, CLIENT_FIRST);
    assert!(matches!(Gate::default().handle(first, false, inputs(Some(users()))), Verdict::Close(None)));
    // A connection that logged in with a password has no method to re-authenticate with.
    let reauth = auth(MqttReason::ReAuthenticate, SCRAM_SHA_256, CLIENT_FIRST);
    assert_eq!(closed_with(Gate::default().handle(reauth, true, inputs(Some(users())))), protocol_error);
}
