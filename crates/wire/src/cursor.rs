//! Field readers and writers shared by every frame: big-endian integers, length-prefixed
//! text and bytes. Written by hand because the layout is ours and tiny; a serialization
//! framework would hide the byte layout that `docs/protocol.md` promises.

use bytes::{BufMut, Bytes};

use crate::error::WireError;

/// Reads fields from one frame body, tracking the offset for error reports.
pub(crate) struct Reader<'a> {
    frame: &'static str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(frame: &'static str, buf: &'a [u8]) -> Reader<'a> {
        Reader { frame, buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet: bounds the capacity a decoder reserves for a count it was sent.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fixed-size bytes (a nonce, a MAC).
    pub(crate) fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    /// A `u32` element count, checked against the bytes left: each element takes at least
    /// `min_size` bytes, so a forged count cannot make the decoder reserve more than the frame.
    pub(crate) fn count(&mut self, field: &'static str, min_size: usize) -> Result<usize, WireError> {
        let offset = self.pos;
        let count = self.u32(field)? as usize;
        let need = count.saturating_mul(min_size.max(1));
        if need > self.remaining() {
            return Err(WireError::UnexpectedEof { frame: self.frame, field, offset, need, have: self.remaining() });
        }
        Ok(count)
    }

    fn take(&mut self, field: &'static str, need: usize) -> Result<&'a [u8], WireError> {
        let have = self.buf.len() - self.pos;
        if have < need {
            return Err(WireError::UnexpectedEof { frame: self.frame, field, offset: self.pos, need, have });
        }
        let out = &self.buf[self.pos..self.pos + need];
        self.pos += need;
        Ok(out)
    }

    /// Steps over `count` bytes.
    pub(crate) fn skip(&mut self, field: &'static str, count: usize) -> Result<(), WireError> {
        self.take(field, count).map(|_| ())
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.take(field, 1)?[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        let b = self.take(field, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        let b = self.take(field, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        let b = self.take(field, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A `u16` length followed by that many bytes of UTF-8.
    pub(crate) fn str16(&mut self, field: &'static str) -> Result<&'a str, WireError> {
        let len = usize::from(self.u16(field)?);
        let offset = self.pos;
        let bytes = self.take(field, len)?;
        std::str::from_utf8(bytes).map_err(|_| WireError::InvalidUtf8 { frame: self.frame, field, offset })
    }

    /// A `u32` length followed by that many bytes; returns the range within the body.
    pub(crate) fn bytes32(&mut self, field: &'static str) -> Result<std::ops::Range<usize>, WireError> {
        let len = self.u32(field)? as usize;
        let start = self.pos;
        self.take(field, len)?;
        Ok(start..start + len)
    }

    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::InvalidField { frame: self.frame, field, value: u64::from(v) }),
        }
    }

    /// Fails unless every byte of the body was consumed.
    pub(crate) fn finish(&self) -> Result<(), WireError> {
        let extra = self.buf.len() - self.pos;
        if extra == 0 {
            Ok(())
        } else {
            Err(WireError::TrailingBytes { frame: self.frame, extra })
        }
    }
}

/// Writes a `u16`-length-prefixed string, refusing what does not fit.
pub(crate) fn put_str16(out: &mut impl BufMut, field: &'static str, s: &str) -> Result<(), WireError> {
    let len =
        u16::try_from(s.len()).map_err(|_| WireError::TooLong { field, len: s.len(), max: usize::from(u16::MAX) })?;
    out.put_u16(len);
    out.put_slice(s.as_bytes());
    Ok(())
}

/// Writes a `u32`-length-prefixed byte string.
pub(crate) fn put_bytes32(out: &mut impl BufMut, field: &'static str, b: &Bytes) -> Result<(), WireError> {
    let len = u32::try_from(b.len()).map_err(|_| WireError::TooLong { field, len: b.len(), max: u32::MAX as usize })?;
    out.put_u32(len);
    out.put_slice(b);
    Ok(())
}

/// Writes a `u32` element count, refusing a list too long to describe.
pub(crate) fn put_count(out: &mut impl BufMut, field: &'static str, count: usize) -> Result<(), WireError> {
    let n = u32::try_from(count).map_err(|_| WireError::TooLong { field, len: count, max: u32::MAX as usize })?;
    out.put_u32(n);
    Ok(())
}
