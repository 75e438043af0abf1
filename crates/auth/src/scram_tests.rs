use super::*;

use super::rfc7677::{credential as pencil, CLIENT_FINAL, CLIENT_FIRST, SERVER_FINAL, SERVER_FIRST, SERVER_NONCE};

fn started(credential: ScramCredential) -> (ScramExchange, Vec<u8>) {
    let first = ClientFirst::parse(CLIENT_FIRST.as_bytes()).unwrap();
    assert_eq!(first.username(), "user");
    ScramExchange::start(first, credential, SERVER_NONCE)
}

/// The client's side of RFC 5802, to test with other passwords than the RFC's.
fn client_final(password: &str, server_first: &str) -> String {
    let fields: Vec<&str> = server_first.split(',').collect();
    let salt = B64.decode(&fields[1][2..]).unwrap();
    let iterations = fields[2][2..].parse().unwrap();
    let credential = ScramCredential::derive(password, &salt, iterations);
    let without_proof = format!("c=biws,{}", fields[0]);
    let auth_message = format!("{},{server_first},{without_proof}", &CLIENT_FIRST[3..]);
    let mut salted = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), &salt, iterations, &mut salted);
    let client_key = hmac(&salted, b"Client Key");
    let signature = hmac(&credential.stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(signature).map(|(k, s)| k ^ s).collect();
    format!("{without_proof},p={}", B64.encode(proof))
}

#[test]
fn the_rfc_7677_exchange_gives_its_server_messages() {
    let (exchange, server_first) = started(pencil());
    assert_eq!(String::from_utf8(server_first).unwrap(), SERVER_FIRST);
    let server_final = exchange.finish(CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(server_final).unwrap(), SERVER_FINAL);
}

#[test]
fn a_wrong_password_or_a_decoy_fails_at_the_proof() {
    let (exchange, server_first) = started(pencil());
    let wrong = client_final("pencil2", std::str::from_utf8(&server_first).unwrap());
    assert_eq!(exchange.finish(wrong.as_bytes()), Err(ScramError::Proof));
    let right = client_final("pencil", std::str::from_utf8(&server_first).unwrap());
    assert_eq!(exchange.finish(right.as_bytes()).unwrap(), SERVER_FINAL.as_bytes());
    let (decoy, _) = started(ScramCredential::decoy("user", &[7; 32]));
    assert_eq!(decoy.finish(CLIENT_FINAL.as_bytes()), Err(ScramError::Proof));
}

#[test]
fn a_decoy_looks_the_same_at_each_try_and_differs_by_name() {
    let secret = [3; 32];
    assert_eq!(ScramCredential::decoy("bob", &secret), ScramCredential::decoy("bob", &secret));
    assert_ne!(ScramCredential::decoy("bob", &secret).salt, ScramCredential::decoy("eve", &secret).salt);
}

#[test]
fn a_final_message_with_another_nonce_or_binding_is_refused() {
    let (exchange, _) = started(pencil());
    let other_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
    assert_eq!(exchange.finish(other_nonce.as_bytes()), Err(ScramError::Mismatch));
    let other_binding = CLIENT_FINAL.replace("c=biws", "c=eSws");
    assert_eq!(exchange.finish(other_binding.as_bytes()), Err(ScramError::Mismatch));
    assert!(matches!(exchange.finish(b"c=biws"), Err(ScramError::Malformed(_))));
    assert!(matches!(
        exchange.finish(&CLIENT_FINAL.as_bytes()[..CLIENT_FINAL.len() - 4]),
        Err(ScramError::Malformed(_))
    ));
}

#[test]
fn client_first_messages_are_checked() {
    let user = |text: &str| ClientFirst::parse(text.as_bytes()).map(|first| first.username().to_string());
    assert_eq!(user("n,,n=a=2Cb=3Dc,r=xyz"), Ok("a,b=c".to_string()));
    assert_eq!(user("y,,n=u,r=x"), Ok("u".to_string()));
    assert_eq!(user("n,a=u,n=u,r=x"), Ok("u".to_string()));
    assert!(matches!(user("n,a=root,n=u,r=x"), Err(ScramError::Malformed(_))));
    assert_eq!(user("p=tls-unique,,n=u,r=x"), Err(ScramError::ChannelBinding));
    assert!(matches!(user("n,,n=u=2,r=x"), Err(ScramError::Malformed(_))));
    assert!(matches!(user("n,,n=u,r=x,m=ext"), Err(ScramError::Malformed(_))));
    assert!(matches!(user("n,,r=x,n=u"), Err(ScramError::Malformed(_))));
    assert!(matches!(user("n,,n=u,r=a b"), Err(ScramError::Malformed(_))));
    assert!(matches!(user("n,,n=u"), Err(ScramError::Malformed(_))));
    assert!(matches!(user("x,,n=u,r=x"), Err(ScramError::Malformed(_))));
    assert!(matches!(ClientFirst::parse(&[0xff, b',', b',']), Err(ScramError::Malformed(_))));
    let long = format!("n,,n=u,r={}", "x".repeat(MAX_MESSAGE));
    assert_eq!(user(&long), Err(ScramError::TooLong));
}

#[test]
fn the_stored_form_round_trips_and_is_checked() {
    let credential = pencil();
    let text = credential.to_string();
    assert!(text.starts_with("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"), "{text}");
    assert_eq!(ScramCredential::parse(&text), Some(credential));
    let generated = ScramCredential::generate("pencil");
    assert_ne!(generated.salt, pencil().salt, "a fresh salt");
    assert_eq!(ScramCredential::parse(&generated.to_string()), Some(generated));
    for bad in [
        "SCRAM-SHA-1$4096:c2FsdA==$AAAA:AAAA",
        &text.replace("$4096:", "$1000:"),
        &text.replace("$4096:", "$x:"),
        &text.replace("W22Z", "!!!!"),
        &text[..text.len() - 4],
        "",
    ] {
        assert_eq!(ScramCredential::parse(bad), None, "{bad}");
    }
}
