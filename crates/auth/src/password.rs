//! Password hashes: argon2id for every new one; bcrypt (`$2b$`, `$2a$`, `$2y$`) verified so
//! that users moved from mosquitto or NATS keep their passwords until they set new ones.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::AuthError;

/// Hashes `password` with argon2id and a fresh salt, as a PHC string (`$argon2id$v=19$...`),
/// the form the users file stores: the parameters travel with the hash, so they can be raised
/// later without invalidating older entries.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt =
        SaltString::encode_b64(&rand::random::<[u8; 16]>()).map_err(|e| AuthError::File(format!("salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| AuthError::File(format!("hashing failed: {e}")))
}

/// Whether `password` matches the stored `hash` (argon2 PHC or bcrypt). A hash that does not
/// parse matches nothing: a broken entry locks its user out rather than letting anyone in.
pub fn verify_password(password: &str, hash: &str) -> bool {
    if hash.starts_with("$2b$") || hash.starts_with("$2a$") || hash.starts_with("$2y$") {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    }
}

/// Whether `hash` is a form [`verify_password`] understands, to refuse a users file with a
/// typo at load time instead of at a login.
pub fn is_known_hash(hash: &str) -> bool {
    hash.starts_with("$2b$") || hash.starts_with("$2a$") || hash.starts_with("$2y$") || PasswordHash::new(hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_argon2id_hash_verifies_its_password_only() {
        let Ok(hash) = hash_password("s3cret") else { panic!("hashing failed") };
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("s3cret", &hash));
        assert!(!verify_password("s3cre", &hash));
        assert!(is_known_hash(&hash));
    }

    #[test]
    fn a_bcrypt_hash_from_another_broker_verifies() {
        let Ok(hash) = bcrypt::hash("moved", 4) else { panic!("bcrypt failed") };
        assert!(hash.starts_with("$2b$"), "{hash}");
        assert!(verify_password("moved", &hash));
        assert!(!verify_password("wrong", &hash));
    }

    #[test]
    fn a_garbled_hash_matches_nothing() {
        assert!(!verify_password("", "not a hash"));
        assert!(!verify_password("x", "$argon2id$garbage"));
        assert!(!is_known_hash("plain text"));
    }
}
