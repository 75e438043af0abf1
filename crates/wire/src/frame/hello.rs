//! HELLO, the client's first frame.
//!
//! Version 1: `version:u16 | client_name:str16`. Version 2 (issue 43) adds the client's
//! credentials: `| auth:u8` then, for `auth` 1 (password), `user:str16 | password:str16`, and
//! for `auth` 2 (bearer token), `token:str16`; `auth` 0 offers none. A version 1 HELLO keeps
//! its exact bytes, so older clients still connect to a broker that requires no login.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Reader};
use crate::error::WireError;

/// The first HELLO version that carries credentials.
pub const HELLO_AUTH_VERSION: u16 = 2;

/// Opens a session: names the client (for logs and metrics) and the protocol version it
/// speaks, so the broker can refuse a version it does not know instead of misreading it, and
/// from version 2 says who the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version the client speaks.
    pub version: u16,
    /// A free-form client name.
    pub client_name: String,
    /// Who the client claims to be (version 2 and later; always [`HelloAuth::None`] before).
    pub auth: HelloAuth,
}

/// The credentials a HELLO carries. In clear: send them over TLS.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HelloAuth {
    /// No credentials (a broker with a users file refuses the session, unless a TLS client
    /// certificate names the user).
    #[default]
    None,
    /// A user name and its password.
    Password {
        /// The user's name.
        user: String,
        /// The password.
        password: String,
    },
    /// A bearer token.
    Token(String),
}

impl Hello {
    /// A HELLO of the current version without credentials.
    pub fn new(client_name: impl Into<String>) -> Hello {
        Hello { version: super::PROTOCOL_VERSION, client_name: client_name.into(), auth: HelloAuth::None }
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), WireError> {
        out.put_u16(self.version);
        put_str16(out, "client_name", &self.client_name)?;
        if self.version < HELLO_AUTH_VERSION {
            if self.auth != HelloAuth::None {
                // Credentials need version 2: a version 1 HELLO has no place for them.
                return Err(WireError::InvalidField {
                    frame: "HELLO",
                    field: "version",
                    value: u64::from(self.version),
                });
            }
            return Ok(());
        }
        match &self.auth {
            HelloAuth::None => out.put_u8(0),
            HelloAuth::Password { user, password } => {
                out.put_u8(1);
                put_str16(out, "user", user)?;
                put_str16(out, "password", password)?;
            }
            HelloAuth::Token(token) => {
                out.put_u8(2);
                put_str16(out, "token", token)?;
            }
        }
        Ok(())
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Hello, WireError> {
        let mut r = Reader::new("HELLO", body);
        let version = r.u16("version")?;
        let client_name = r.str16("client_name")?.to_string();
        let auth = if version < HELLO_AUTH_VERSION {
            HelloAuth::None
        } else {
            match r.u8("auth")? {
                0 => HelloAuth::None,
                1 => HelloAuth::Password {
                    user: r.str16("user")?.to_string(),
                    password: r.str16("password")?.to_string(),
                },
                2 => HelloAuth::Token(r.str16("token")?.to_string()),
                other => {
                    return Err(WireError::InvalidField { frame: "HELLO", field: "auth", value: u64::from(other) })
                }
            }
        };
        r.finish()?;
        Ok(Hello { version, client_name, auth })
    }
}
