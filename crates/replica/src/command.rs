//! The commands a pubend's Raft log carries, and their bytes inside a Raft entry.
//!
//! The encoding is private to this crate and versioned by its first byte, so a log written by one
//! build is read by the next or refused as [`DecodeError`] (never misread): every field is a
//! fixed-width little-endian integer except the payload, which is length-prefixed.

use std::fmt;

/// Who published: the shell's id for a publisher session that survives reconnects (the client
/// names itself), so a retry after a takeover is recognised by the new leader.
pub type PublisherId = u64;

/// One change to a pubend's replicated state. Every replica applies the same commands in the same
/// order, so whatever a leader promised, its successor can keep.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Command {
    /// A guaranteed publish: `(publisher, seq)` identifies it across retries, `tick` is the
    /// leader's proposal for its position (apply may move it later, never earlier, see
    /// [`crate::PubendReplica`]).
    Publish {
        /// The publishing session.
        publisher: PublisherId,
        /// The publisher's own sequence number for this message.
        seq: u64,
        /// The tick the leader proposed.
        tick: u64,
        /// The message body.
        payload: Vec<u8>,
    },
    /// The lease made true: every tick up to `up_to` that holds no record is silence (F), so a
    /// successor can never log a record there.
    Silence {
        /// The last silent tick.
        up_to: u64,
    },
    /// Every subscriber has what lies up to `up_to`: the records there may be dropped (L).
    Release {
        /// The release point.
        up_to: u64,
    },
}

/// A Raft entry whose bytes are not a command of this build: a corrupt or foreign log, reported
/// rather than applied as something else.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DecodeError(pub(crate) &'static str);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable replica command: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

const VERSION: u8 = 1;
const PUBLISH: u8 = 1;
const SILENCE: u8 = 2;
const RELEASE: u8 = 3;

impl Command {
    /// The bytes stored in a Raft entry's `data`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        match self {
            Command::Publish { publisher, seq, tick, payload } => {
                out.push(PUBLISH);
                for word in [*publisher, *seq, *tick, payload.len() as u64] {
                    out.extend_from_slice(&word.to_le_bytes());
                }
                out.extend_from_slice(payload);
            }
            Command::Silence { up_to } => {
                out.push(SILENCE);
                out.extend_from_slice(&up_to.to_le_bytes());
            }
            Command::Release { up_to } => {
                out.push(RELEASE);
                out.extend_from_slice(&up_to.to_le_bytes());
            }
        }
        out
    }

    /// Reads what [`Command::encode`] wrote; anything else is a [`DecodeError`].
    pub fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
        let mut reader = Reader(bytes);
        if reader.byte()? != VERSION {
            return Err(DecodeError("unknown version"));
        }
        let command = match reader.byte()? {
            PUBLISH => {
                let (publisher, seq, tick) = (reader.word()?, reader.word()?, reader.word()?);
                let len = usize::try_from(reader.word()?).map_err(|_| DecodeError("payload length"))?;
                let payload = reader.take(len)?.to_vec();
                Command::Publish { publisher, seq, tick, payload }
            }
            SILENCE => Command::Silence { up_to: reader.word()? },
            RELEASE => Command::Release { up_to: reader.word()? },
            _ => return Err(DecodeError("unknown command")),
        };
        if reader.0.is_empty() {
            Ok(command)
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}

/// A cursor over stored bytes that fails instead of reading past the end.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn word(&mut self) -> Result<u64, DecodeError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }
}

#[cfg(test)]
mod tests {
    use super::{Command, DecodeError};

    /// A command must come back from its bytes unchanged, or a replica would apply something
    /// other than what the leader logged.
    #[test]
    fn every_command_round_trips() {
        let commands = [
            Command::Publish { publisher: 7, seq: 3, tick: 1_000, payload: b"hello".to_vec() },
            Command::Publish { publisher: u64::MAX, seq: 0, tick: 0, payload: Vec::new() },
            Command::Silence { up_to: 42 },
            Command::Release { up_to: 41 },
        ];
        for command in commands {
            assert_eq!(Command::decode(&command.encode()), Ok(command));
        }
    }

    /// A corrupt entry is refused, never read as a shorter or different command.
    #[test]
    fn damaged_bytes_are_refused() {
        let bytes = Command::Publish { publisher: 1, seq: 2, tick: 3, payload: b"abc".to_vec() }.encode();
        assert_eq!(Command::decode(&bytes[..bytes.len() - 1]), Err(DecodeError("truncated")));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Command::decode(&longer), Err(DecodeError("trailing bytes")));
        assert_eq!(Command::decode(&[9, 1]), Err(DecodeError("unknown version")));
        assert_eq!(Command::decode(&[1, 9]), Err(DecodeError("unknown command")));
        assert_eq!(Command::decode(&[]), Err(DecodeError("truncated")));
    }
}
