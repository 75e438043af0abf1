//! The link handshake: HELLO both ways (versions, auth mode, nonce, claimed identity), then,
//! with a network key, AUTH both ways (see [`super::auth`]). Only a peer that passes is handed
//! to [`super::Cluster::establish`]; until then its name and incarnation are just claims.
//!
//! The listener reads the dialler's HELLO before it sends its own, so that it can refuse a
//! broker its cell forgot ([`super::forgotten`]) before anything of the link is agreed: the
//! dialler then reads a CLOSE where it waits for the HELLO and no link comes up on either side.
//! A dialler that finds it dialled a forgotten broker refuses after the HELLOs, before AUTH.

use bytes::BytesMut;
use tidings_wire::peer::{Auth, AuthMode, Hello, PeerFrame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::tls::{BoxRead, BoxWrite};

use super::auth::{Role, Transcript};
use super::{Cluster, Direction};

/// A peer that proved what it claims (or, on an insecure network, simply claimed it).
pub(super) struct Verified {
    /// Its HELLO.
    pub(super) hello: Hello,
    /// The peer protocol version the link speaks.
    pub(super) version: u16,
}

/// Why a handshake failed: the text for the log and the CLOSE frame, and for an authentication
/// failure the metric label.
pub(super) struct Refused {
    pub(super) reason: String,
    pub(super) auth_failure: Option<&'static str>,
    /// The peer is a broker forgotten in this cell: its name, so the dial loop stops dialling it.
    pub(super) forgotten_peer: Option<String>,
    /// The peer's CLOSE says this broker is forgotten in its cell: the peer's text.
    pub(super) forgotten_here: Option<String>,
}

impl Refused {
    /// The peer did not finish the handshake in time.
    pub(super) fn timeout() -> Refused {
        Refused::plain("no complete handshake within 5 s")
    }

    /// Refused for `reason`, nothing more to it.
    pub(super) fn plain(reason: impl Into<String>) -> Refused {
        Refused { reason: reason.into(), auth_failure: None, forgotten_peer: None, forgotten_here: None }
    }

    fn auth(why: &'static str, reason: impl Into<String>) -> Refused {
        Refused { auth_failure: Some(why), ..Refused::plain(reason) }
    }

    /// The peer `name` is forgotten in this cell, for `reason`.
    fn forgotten(name: &str, reason: String) -> Refused {
        Refused { forgotten_peer: Some(name.to_string()), ..Refused::plain(reason) }
    }
}

/// Only a broker this one dialled may tell it that its cell forgot it: an inbound connection's
/// frames are anyone's, and one CLOSE would otherwise stop a healthy broker's guaranteed
/// publishes (`Cluster::refused_as_forgotten`).
fn dialled_only(refused: Refused, direction: Direction) -> Refused {
    match direction {
        Direction::Outbound => refused,
        Direction::Inbound => Refused { forgotten_here: None, ..refused },
    }
}

/// Refuses the sender of `theirs` if it is a broker forgotten in this cell.
fn not_forgotten(cluster: &Cluster, theirs: &Hello) -> Result<(), Refused> {
    match cluster.refuse_forgotten(theirs) {
        Some(reason) => Err(Refused::forgotten(&theirs.name, reason)),
        None => Ok(()),
    }
}

/// Runs the handshake on a fresh connection. The caller bounds it in time.
pub(super) async fn handshake(
    reader: &mut BoxRead,
    writer: &mut BoxWrite,
    buf: &mut BytesMut,
    direction: Direction,
    cluster: &Cluster,
    max_frame: usize,
) -> Result<Verified, Refused> {
    let nonce = super::auth::nonce().map_err(|e| Refused::plain(format!("no randomness for a nonce: {e}")))?;
    let ours = cluster.hello(nonce);
    if direction == Direction::Outbound {
        send(writer, &PeerFrame::Hello(ours.clone())).await?;
    }
    let theirs = match next_frame(reader, buf, max_frame).await.map_err(|r| dialled_only(r, direction))? {
        PeerFrame::Hello(hello) => hello,
        _ => return Err(Refused::plain("the first frame on a link must be HELLO")),
    };
    not_forgotten(cluster, &theirs)?;
    if direction == Direction::Inbound {
        send(writer, &PeerFrame::Hello(ours.clone())).await?;
    }
    let version = agree(&ours, &theirs)?;
    let Some(key) = cluster.key() else {
        return Ok(Verified { hello: theirs, version });
    };
    let (me, them, transcript) = match direction {
        Direction::Outbound => {
            (Role::Dialler, Role::Listener, Transcript { dialler: &ours, listener: &theirs, version })
        }
        Direction::Inbound => {
            (Role::Listener, Role::Dialler, Transcript { dialler: &theirs, listener: &ours, version })
        }
    };
    send(writer, &PeerFrame::Auth(Auth { proof: transcript.proof(key, me) })).await?;
    let proof = match next_frame(reader, buf, max_frame).await.map_err(|r| dialled_only(r, direction))? {
        PeerFrame::Auth(auth) => auth.proof,
        _ => return Err(Refused::auth("no_proof", "the frame after HELLO must be AUTH")),
    };
    if !transcript.verify(key, them, &proof) {
        return Err(Refused::auth(
            "wrong_key",
            "authentication failed: the peer's proof does not match this network's key",
        ));
    }
    Ok(Verified { hello: theirs, version })
}

/// The version both speak and a matching auth mode, or why not.
fn agree(ours: &Hello, theirs: &Hello) -> Result<u16, Refused> {
    let version = ours.negotiate(theirs).ok_or_else(|| {
        Refused::plain(format!(
            "peer protocol versions {}..={} are not supported; this broker speaks {}..={}",
            theirs.min_version, theirs.max_version, ours.min_version, ours.max_version
        ))
    })?;
    match (ours.auth, theirs.auth) {
        (AuthMode::SharedKey, AuthMode::Insecure) => {
            Err(Refused::auth("no_key", "authentication required: the peer has no network key (it is insecure)"))
        }
        (AuthMode::Insecure, AuthMode::SharedKey) => Err(Refused::auth(
            "no_key",
            "this broker is insecure (no network key) and the peer uses one; give both the same key",
        )),
        _ => Ok(version),
    }
}

async fn send(writer: &mut BoxWrite, frame: &PeerFrame) -> Result<(), Refused> {
    let bytes = frame.to_bytes().map_err(|e| Refused::plain(format!("cannot encode the handshake: {e}")))?;
    let closed = |_| Refused::plain("connection closed during the handshake");
    writer.write_all(&bytes).await.map_err(closed)?;
    writer.flush().await.map_err(closed)
}

/// The next frame of the handshake; a CLOSE from the peer ends it with the peer's reason.
async fn next_frame(reader: &mut BoxRead, buf: &mut BytesMut, max_frame: usize) -> Result<PeerFrame, Refused> {
    loop {
        match PeerFrame::decode(buf, max_frame) {
            Ok(Some(PeerFrame::Close(close))) => {
                let forgotten_here = close.reason.starts_with(super::FORGOTTEN).then(|| close.reason.clone());
                let reason = format!("peer closed during the handshake: {}", close.reason);
                return Err(Refused { forgotten_here, ..Refused::plain(reason) });
            }
            Ok(Some(frame)) => return Ok(frame),
            Ok(None) => {}
            Err(e) => return Err(Refused::plain(format!("malformed handshake: {e}"))),
        }
        match reader.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(Refused::plain("connection closed during the handshake")),
            Ok(_) => {}
        }
    }
}
