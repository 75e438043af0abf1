//! The users file: logins by password (argon2id and bcrypt), token and certificate, and the
//! file errors that must stop a broker from starting with a typo in force.

use tidings_auth::{hash_password, token_entry, Credentials, Failure, Role, ScramCredential, Users};

fn file() -> String {
    let Ok(argon) = hash_password("alice-pw") else { panic!("hash") };
    format!(
        r#"
[[user]]
name = "alice"
password = "{argon}"
tokens = ["{}"]
certificate = "alice.example"
admin = "read"
publish = {{ allow = ["orders.>"], deny = ["orders.audit"] }}
subscribe = {{ allow = [">"], deny = ["secret.>"] }}

[[user]]
name = "bob"
password = "$2b$04$ZcS4c5hGzX1gZ0fT3dqzUe1dC4kqN3n0pW1YQ3Q5o6pJY9dHc7Z1S"
"#,
        token_entry("tok-123")
    )
}

#[test]
fn a_password_token_or_certificate_finds_the_user() {
    let Ok(users) = Users::parse(&file()) else { panic!("parse") };
    let login = |user: &str, password: &str| {
        users.authenticate(&Credentials::Password { user: user.into(), password: password.into() })
    };
    let Ok(alice) = login("alice", "alice-pw") else { panic!("alice refused") };
    assert_eq!(alice.role, Some(Role::Read));
    assert!(alice.permissions.may_publish("orders.new"));
    assert!(!alice.permissions.may_publish("orders.audit"), "deny wins over orders.>");
    assert_eq!(login("alice", "wrong"), Err(Failure::BadSecret));
    assert_eq!(login("mallory", "x"), Err(Failure::UnknownUser));
    assert_eq!(users.authenticate(&Credentials::None), Err(Failure::Missing));
    assert_eq!(users.authenticate(&Credentials::Token("tok-123".into())).map(|u| u.name.clone()), Ok("alice".into()));
    assert_eq!(users.authenticate(&Credentials::Token("tok-124".into())), Err(Failure::BadSecret));
    let cert = users.authenticate(&Credentials::Certificate(vec!["alice.example".into()]));
    assert_eq!(cert.map(|u| u.name.clone()), Ok("alice".into()));
    // Any of the certificate's names may be the listed one; none listed is its own failure.
    let names = vec!["laptop-7".to_string(), "alice.example".to_string()];
    assert_eq!(users.authenticate(&Credentials::Certificate(names)).map(|u| u.name.clone()), Ok("alice".into()));
    let unknown = users.authenticate(&Credentials::Certificate(vec!["mallory.example".into()]));
    assert_eq!(unknown, Err(Failure::UnknownCertificate));
    assert_eq!(users.authenticate(&Credentials::Certificate(Vec::new())), Err(Failure::UnknownCertificate));
    // bob has a (garbled-salt) bcrypt hash and no rules: whatever it proves, it may do nothing.
    let bob = users.get("bob").cloned();
    assert!(bob.is_some_and(|b| !b.permissions.may_publish("x") && b.role.is_none()));
}

#[test]
fn a_broken_file_is_refused_with_where() {
    for (text, want) in [
        ("[[user]]\nname = \"a\"\npassword = \"plain\"\n", "not an argon2 or bcrypt hash"),
        ("[[user]]\nname = \"a\"\ntokens = [\"abc\"]\n", "sha256:"),
        ("[[user]]\nname = \"a\"\npublish = { allow = [\"a..b\"] }\n", "rule"),
        ("[[user]]\nname = \"a\"\n[[user]]\nname = \"a\"\n", "twice"),
        ("[[user]]\nname = \"a\"\ncertificate = \"c\"\n[[user]]\nname = \"b\"\ncertificate = \"c\"\n", "both list"),
        ("[[user]]\nname = \"a\"\nrole = \"x\"\n", "unknown field"),
        ("[[user]]\nname = \"a\"\nscram = \"SCRAM-SHA-256$10:c2FsdA==$AA:AA\"\n", "scram must be"),
    ] {
        match Users::parse(text) {
            Ok(_) => panic!("accepted {text:?}"),
            Err(e) => assert!(e.to_string().contains(want), "{e} lacks {want:?}"),
        }
    }
}

#[test]
fn a_scram_credential_is_found_by_name_and_only_where_listed() {
    let credential = ScramCredential::generate("carol-pw");
    let text = format!("{}\n[[user]]\nname = \"carol\"\nscram = \"{credential}\"\n", file());
    let Ok(users) = Users::parse(&text) else { panic!("parse") };
    let found = users.scram("carol").map(|(user, scram)| (user.name.clone(), scram.clone()));
    assert_eq!(found, Some(("carol".to_string(), credential)));
    assert!(users.scram("alice").is_none(), "alice has a password but no SCRAM credential");
    assert!(users.scram("mallory").is_none());
}
