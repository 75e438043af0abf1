//! The data representations of MQTT (OASIS MQTT 5.0, section 1.5): two- and four-byte integers,
//! variable byte integers, UTF-8 strings with MQTT's rules, binary data, string pairs. Shared by
//! every packet so the rules are checked in one place.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::MqttError;

/// The largest value a variable byte integer holds (four bytes of seven bits).
pub const MAX_VAR_INT: u32 = 268_435_455;

/// Longest string or binary field: a two-byte length prefix.
const MAX_FIELD: usize = u16::MAX as usize;

/// Outcome of reading a variable byte integer from a buffer that may be incomplete.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum VarInt {
    /// The value and the number of bytes it took.
    Value(u32, usize),
    /// The buffer ends inside the integer.
    Incomplete,
}

/// Reads a variable byte integer at the start of `data`, rejecting a fifth byte and encodings
/// longer than necessary (MQTT-1.5.5-1).
pub(crate) fn read_var_int(data: &[u8], field: &'static str) -> Result<VarInt, MqttError> {
    let mut value: u32 = 0;
    for (index, byte) in data.iter().enumerate().take(4) {
        value |= u32::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            if index > 0 && *byte == 0 {
                return Err(MqttError::MalformedVarInt { field });
            }
            return Ok(VarInt::Value(value, index + 1));
        }
    }
    if data.len() >= 4 {
        return Err(MqttError::MalformedVarInt { field });
    }
    Ok(VarInt::Incomplete)
}

/// Writes `value` as a variable byte integer.
pub(crate) fn put_var_int(out: &mut BytesMut, field: &'static str, value: u32) -> Result<(), MqttError> {
    if value > MAX_VAR_INT {
        return Err(MqttError::TooLong { field, len: value as usize, max: MAX_VAR_INT as usize });
    }
    let mut rest = value;
    loop {
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.put_u8(byte);
            return Ok(());
        }
        out.put_u8(byte | 0x80);
    }
}

/// How many bytes `value` takes as a variable byte integer.
pub(crate) fn var_int_len(value: usize) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes a UTF-8 string field with its two-byte length, refusing U+0000 so that this encoder
/// never writes what a conforming receiver must reject.
pub(crate) fn put_string(
    out: &mut BytesMut,
    packet: &'static str,
    field: &'static str,
    text: &str,
) -> Result<(), MqttError> {
    if text.contains('\0') {
        return Err(MqttError::NulInString { packet, field });
    }
    put_binary(out, field, text.as_bytes())
}

/// Writes a binary data field with its two-byte length.
pub(crate) fn put_binary(out: &mut BytesMut, field: &'static str, data: &[u8]) -> Result<(), MqttError> {
    let len = u16::try_from(data.len()).map_err(|_| MqttError::TooLong { field, len: data.len(), max: MAX_FIELD })?;
    out.put_u16(len);
    out.put_slice(data);
    Ok(())
}

/// Reads fields from one packet's bytes after the fixed header; every read is bounds-checked and
/// names the field, so no input can make decoding panic.
pub(crate) struct Reader {
    packet: &'static str,
    data: Bytes,
    at: usize,
}

impl Reader {
    /// A reader over the variable header and payload of `packet`.
    pub(crate) fn new(packet: &'static str, data: Bytes) -> Reader {
        Reader { packet, data, at: 0 }
    }

    /// The packet name, for errors raised by callers.
    pub(crate) fn packet(&self) -> &'static str {
        self.packet
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.at
    }

    fn take(&mut self, field: &'static str, len: usize) -> Result<Bytes, MqttError> {
        if self.remaining() < len {
            return Err(MqttError::Truncated { packet: self.packet, field });
        }
        let bytes = self.data.slice(self.at..self.at + len);
        self.at += len;
        Ok(bytes)
    }

    /// One byte.
    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, MqttError> {
        let bytes = self.take(field, 1)?;
        Ok(bytes[0])
    }

    /// A big-endian two-byte integer.
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, MqttError> {
        let bytes = self.take(field, 2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    /// A big-endian four-byte integer.
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, MqttError> {
        let bytes = self.take(field, 4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// A variable byte integer that must lie wholly inside the packet.
    pub(crate) fn var_int(&mut self, field: &'static str) -> Result<u32, MqttError> {
        match read_var_int(&self.data[self.at..], field)? {
            VarInt::Value(value, used) => {
                self.at += used;
                Ok(value)
            }
            VarInt::Incomplete => Err(MqttError::Truncated { packet: self.packet, field }),
        }
    }

    /// Binary data: a two-byte length and that many bytes.
    pub(crate) fn binary(&mut self, field: &'static str) -> Result<Bytes, MqttError> {
        let len = self.u16(field)?;
        self.take(field, usize::from(len))
    }

    /// A UTF-8 string: well-formed (so no surrogates) and without U+0000.
    pub(crate) fn string(&mut self, field: &'static str) -> Result<String, MqttError> {
        let bytes = self.binary(field)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| MqttError::InvalidUtf8 { packet: self.packet, field })?;
        if text.contains('\0') {
            return Err(MqttError::NulInString { packet: self.packet, field });
        }
        Ok(text.to_string())
    }

    /// A sub-reader over the next `len` bytes (a property list), advancing past them.
    pub(crate) fn section(&mut self, field: &'static str, len: usize) -> Result<Reader, MqttError> {
        let data = self.take(field, len)?;
        Ok(Reader { packet: self.packet, data, at: 0 })
    }

    /// Everything left (a PUBLISH payload, a will payload is length-prefixed instead).
    pub(crate) fn rest(&mut self) -> Bytes {
        let bytes = self.data.slice(self.at..);
        self.at = self.data.len();
        bytes
    }

    /// Fails if any byte is left, so a packet has exactly one decoding.
    pub(crate) fn finish(&self) -> Result<(), MqttError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(MqttError::TrailingBytes { packet: self.packet, extra }),
        }
    }
}
