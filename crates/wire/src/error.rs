//! Decoding errors. Each says where in the frame it went wrong so a client author can find it.

use thiserror::Error;

/// Why a byte sequence is not a valid frame. A truncated frame is *not* an error: decoders
/// report it as "need more" instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The length prefix announces more than the negotiated maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// The announced frame length (type byte and body).
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A length prefix of zero: every frame has at least its type byte.
    #[error("empty frame (length prefix is 0)")]
    EmptyFrame,
    /// The type byte names no frame of this protocol version.
    #[error("unknown frame type 0x{0:02x}")]
    UnknownFrameType(u8),
    /// A field runs past the end of its frame.
    #[error("{frame} frame truncated at offset {offset}: {field} needs {need} bytes, {have} left")]
    UnexpectedEof {
        /// The frame being decoded.
        frame: &'static str,
        /// The field being read.
        field: &'static str,
        /// Offset of the field within the frame body.
        offset: usize,
        /// Bytes the field needs.
        need: usize,
        /// Bytes that were left.
        have: usize,
    },
    /// The frame has bytes after its last field.
    #[error("{frame} frame has {extra} trailing bytes")]
    TrailingBytes {
        /// The frame being decoded.
        frame: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
    /// A text field is not UTF-8.
    #[error("{frame} frame: field {field} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// The frame being decoded.
        frame: &'static str,
        /// The text field.
        field: &'static str,
        /// Offset of the field within the frame body.
        offset: usize,
    },
    /// A property carries a type code this version does not know.
    #[error("property {index} has unknown type code {code}")]
    UnknownValueType {
        /// Index of the property in the message's list.
        index: usize,
        /// The type code found.
        code: u8,
    },
    /// A field holds a value outside its domain (a boolean byte of 7, a delivery mode of 9).
    #[error("{frame} frame: field {field} has invalid value {value}")]
    InvalidField {
        /// The frame being decoded.
        frame: &'static str,
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A value too large to encode (a topic over 65535 bytes, say).
    #[error("cannot encode {field}: {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The largest length the encoding allows.
        max: usize,
    },
}
